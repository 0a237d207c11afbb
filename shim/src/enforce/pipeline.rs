//! The enforced path: load the policy, find runc, pick the profile, run
//! the verb's action, write the audit line, and exec runc with what was
//! judged; and the pass-through path, which execs runc untouched.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use vibe_policy::Denial;

use super::{fail, Ctx, Outcome};
use crate::audit::{self, AuditRecord};
use crate::runc_argv::{self as args, argv_denial, Enforced, Invocation};
use crate::sys::host::RealHost;
use crate::{policy_file, runtime};

/// The real runtime, and whether it is lockdown's recorded runc, which has
/// no execute bit and runs through a sealed memfd copy.
fn find_runtime(configured: Option<&Path>) -> Result<(PathBuf, bool), runtime::RuntimeError> {
    // Under lockdown `runc` in PATH is vibe-shim: the record names the real one.
    if configured.is_none() {
        let recorded = crate::install::lockdown::recorded_real_runc()?;
        if let Some(real) = recorded {
            return runtime::check_recorded(&real, runtime::own_exe().as_ref()).map(|p| (p, true));
        }
    }
    runtime::find(
        configured,
        std::env::var_os("PATH").as_deref(),
        runtime::own_exe().as_ref(),
    )
    .map(|p| (p, false))
}

/// Execs runc with argv untouched (a verb that needs no judging);
/// `configured` is the policy's `[runtime] path`.
pub fn pass_through(inv: &Invocation, configured: Option<PathBuf>) -> i32 {
    match find_runtime(configured.as_deref()) {
        Ok((runc, sealed)) => {
            crate::timing::mark("runtime");
            exec_runc(inv, &runc, sealed, inv.runc_args.clone())
        }
        Err(e) => fail(
            inv,
            &Denial::new(
                "runtime",
                "[runtime] path",
                runtime_hint(&configured),
                e.to_string(),
            ),
        ),
    }
}

fn runtime_hint(configured: &Option<PathBuf>) -> String {
    configured
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "runc in PATH".into())
}

pub fn enforce(inv: &Invocation, verb: &str, config_path: PathBuf, argv: &Enforced) -> i32 {
    let policy = match policy_file::load(&config_path) {
        Ok(policy) => policy,
        Err(e) => {
            let denial = Denial::new(
                "config",
                "--config",
                config_path.display().to_string(),
                e.to_string(),
            );
            return fail(inv, &denial);
        }
    };
    crate::timing::mark("policy");
    let (runtime, sealed) = match find_runtime(policy.runtime.path.as_deref()) {
        Ok(found) => found,
        Err(e) => {
            let hint = runtime_hint(&policy.runtime.path);
            return fail(
                inv,
                &Denial::new("runtime", "[runtime] path", hint, e.to_string()),
            );
        }
    };
    crate::timing::mark("runtime");
    let chosen = match super::profile::choose(argv, inv.root.as_deref(), config_path, policy) {
        Ok(chosen) => chosen,
        Err(e) => return fail(inv, &e.denial()),
    };
    let (config_path, policy, profile_name) = (chosen.config_path, chosen.policy, chosen.profile);
    crate::timing::mark("profile");
    let audit_path = policy.audit.path.clone();
    let ctx = Ctx {
        config_path,
        policy,
        runtime,
        root: inv.root.clone(),
        systemd_cgroup: inv.systemd_cgroup,
        host: RealHost::new(),
    };
    let args = inv.verb_args();
    let outcome: Outcome = match argv {
        Enforced::Create(_) if verb == "restore" && !ctx.policy.runtime.allow_restore => {
            restore_refused(argv.id())
        }
        Enforced::Create(parsed) => super::create::prepare(&ctx, args, parsed),
        Enforced::Exec(parsed) => super::exec::prepare(&ctx, args, parsed),
        Enforced::Update(parsed) => super::update::prepare(&ctx, args, parsed),
        Enforced::Start(parsed) => super::start::prepare(&ctx, args, parsed),
        Enforced::Checkpoint(parsed) => super::checkpoint::prepare(&ctx, args, parsed),
    };
    crate::timing::mark(verb_phase(verb));
    let mut record = AuditRecord::new(&outcome.container_id, verb, &ctx.config_path);
    record.notice = outcome.notice.as_ref();
    record.assurance = outcome.assurance.as_ref();
    match &outcome.result {
        Ok((_, changes)) => record.changes = changes,
        Err(refusal) => {
            record.changes = &refusal.changes;
            record.denial = Some(&refusal.denial);
        }
    }
    let audited = audit::write(&audit_path, &record);
    crate::timing::mark("audit");
    match outcome.result {
        Err(refusal) => {
            if let Err(e) = audited {
                eprintln!("vibe-shim: audit: {e}");
            }
            fail(inv, &refusal.denial)
        }
        Ok((new_args, _)) => {
            if let Err(e) = audited {
                let denial = Denial::new(
                    "audit",
                    "[audit] path",
                    audit_path.display().to_string(),
                    e.to_string(),
                );
                return fail(inv, &denial);
            }
            // What runc gets must read as what was judged: same verb, same id.
            let same_id = args::classify_verb(verb, &new_args).is_ok_and(|items| {
                args::first_positional(&items).map(|id| id.to_string_lossy().into_owned())
                    == Some(outcome.container_id.clone())
            });
            if !same_id {
                let denial = argv_denial(
                    verb.to_string(),
                    "internal: the rewritten arguments do not read as the judged ones".into(),
                );
                return fail(inv, &denial);
            }
            if let (Some(name), "create" | "run" | "restore") = (&profile_name, verb) {
                if let Err(e) = super::profile::record(
                    inv.root.as_deref(),
                    &outcome.container_id,
                    name,
                    &ctx.config_path,
                ) {
                    return fail(inv, &e.denial());
                }
            }
            crate::timing::mark("record");
            let verb_end = inv.verb_index.map_or(0, |i| i + 1);
            let mut runc_args = inv.runc_args[..verb_end].to_vec();
            runc_args.extend(new_args);
            exec_runc(inv, &ctx.runtime, sealed, runc_args)
        }
    }
}

/// The timing phase of an enforced verb's own work (marks need a static name).
fn verb_phase(verb: &str) -> &'static str {
    match verb {
        "create" | "run" | "restore" => "judge",
        "start" => "start-checks",
        "exec" => "exec-judge",
        "update" => "update-judge",
        _ => "verb",
    }
}

/// `restore` without `[runtime] allow_restore`: the restored process takes
/// its credentials, capabilities and seccomp from the checkpoint image.
fn restore_refused(id: &OsStr) -> Outcome {
    Outcome::refused(
        id.to_string_lossy().into_owned(),
        Denial::new(
            "restore",
            "[runtime] allow_restore",
            "false",
            "a restored process takes its credentials, capabilities and seccomp from the checkpoint image, which vibe-shim cannot judge",
        ),
    )
}

/// Replaces this process with runc. Returns only if the exec failed.
fn exec_runc(inv: &Invocation, runtime: &Path, sealed: bool, runc_args: Vec<OsString>) -> i32 {
    // Seen again on entry means "runc" led back here (see runtime::ACTIVE_ENV).
    std::env::set_var(runtime::ACTIVE_ENV, "1");
    // Rust's runtime ignores SIGPIPE, and an ignored signal stays ignored
    // across exec: give runc the default it gets when started directly.
    // SAFETY: single-threaded here, and SIG_DFL installs no handler code.
    unsafe {
        let _ = nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        );
    }
    crate::timing::flush(inv.verb());
    let to_c = |s: &std::ffi::OsStr| CString::new(s.as_bytes());
    let program = to_c(runtime.as_os_str());
    let argv: Result<Vec<CString>, _> = std::iter::once(runtime.as_os_str())
        .chain(runc_args.iter().map(OsString::as_os_str))
        .map(to_c)
        .collect();
    let error = match (program, argv) {
        (Ok(_), Ok(argv)) if sealed => match runtime::exec_sealed(runtime, &argv) {
            Err(e) => {
                return fail(
                    inv,
                    &Denial::new(
                        "runtime",
                        "lockdown",
                        runtime.display().to_string(),
                        e.to_string(),
                    ),
                )
            }
            Ok(never) => match never {},
        },
        (Ok(program), Ok(argv)) => match nix::unistd::execv(&program, &argv) {
            Err(errno) => errno.to_string(),
            Ok(never) => match never {},
        },
        _ => "argument contains a NUL byte".to_string(),
    };
    let denial = Denial::new(
        "runtime",
        "[runtime] path",
        runtime.display().to_string(),
        format!("cannot exec: {error}"),
    );
    fail(inv, &denial)
}
