//! vibe-shim: a runc-compatible wrapper. It enforces the administrator's
//! policy on create/run/restore/exec/update/start, then execs the real runc
//! with every other argument byte for byte, so runc keeps our pid, fds,
//! stdio and exit code. Every other verb passes straight through.

mod args;
mod audit;
mod host;
mod log;
mod policy_file;
mod private_file;
mod runtime;
mod state_dir;
mod verbs;

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use vibe_policy::config::DEFAULT_CONFIG_PATH;
use vibe_policy::Denial;

use crate::args::Invocation;
use crate::audit::AuditRecord;
use crate::host::RealHost;
use crate::verbs::{Ctx, Outcome};

const ENFORCED_VERBS: &[&str] = &["create", "run", "restore", "exec", "update", "start"];

fn main() {
    std::process::exit(run());
}

fn run() -> i32 {
    let inv = match args::scan_globals(std::env::args_os().skip(1).collect()) {
        Ok(inv) => inv,
        Err(e) => {
            log::report(&format!("args: {e}"), None, false);
            return 1;
        }
    };
    let config_path = inv
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH));
    let verb = inv.verb().to_string();
    match verb.as_str() {
        "hook" => return run_hook(&config_path, &inv),
        "policy" => return run_policy_cmd(&config_path, &inv),
        _ => {}
    }
    if let Err(e) = runtime::check_not_reentered(std::env::var_os(runtime::ACTIVE_ENV).as_deref()) {
        return fail(
            &inv,
            &Denial::new("runtime", "runc", "vibe-shim", e.to_string()),
        );
    }
    if verb == "delete" {
        verbs::delete::cleanup(inv.root.as_deref(), inv.verb_args());
    }
    if !ENFORCED_VERBS.contains(&verb.as_str()) {
        return pass_through(&inv, &config_path);
    }
    enforce(&inv, &verb, config_path)
}

/// Reports a refusal on stderr and in the `--log` file; the exit code is 1.
fn fail(inv: &Invocation, denial: &Denial) -> i32 {
    let log_path = inv.log.as_ref().map(PathBuf::from);
    log::report(&denial.to_string(), log_path.as_deref(), inv.log_is_json());
    1
}

fn find_runtime(configured: Option<&Path>) -> Result<PathBuf, runtime::RuntimeError> {
    runtime::find(
        configured,
        std::env::var_os("PATH").as_deref(),
        runtime::own_exe().as_ref(),
    )
}

fn pass_through(inv: &Invocation, config_path: &Path) -> i32 {
    let configured = policy_file::runtime_path_only(config_path);
    match find_runtime(configured.as_deref()) {
        Ok(runc) => exec_runc(inv, &runc, inv.runc_args.clone()),
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

fn enforce(inv: &Invocation, verb: &str, config_path: PathBuf) -> i32 {
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
    let runtime = match find_runtime(policy.runtime.path.as_deref()) {
        Ok(runtime) => runtime,
        Err(e) => {
            let hint = runtime_hint(&policy.runtime.path);
            return fail(
                inv,
                &Denial::new("runtime", "[runtime] path", hint, e.to_string()),
            );
        }
    };
    let audit_path = policy.audit.path.clone();
    let ctx = Ctx {
        config_path,
        policy,
        runtime,
        root: inv.root.clone(),
        host: RealHost::new(),
    };
    let args = inv.verb_args();
    let outcome: Outcome = match verb {
        "exec" => verbs::exec::prepare(&ctx, args),
        "update" => verbs::update::prepare(&ctx, args),
        "start" => verbs::start::prepare(&ctx, args),
        _ => verbs::create::prepare(&ctx, verb, args),
    };
    let mut record = AuditRecord::new(&outcome.container_id, verb, &ctx.config_path);
    match &outcome.result {
        Ok((_, changes)) => record.changes = changes,
        Err(refusal) => {
            record.changes = &refusal.changes;
            record.denial = Some(&refusal.denial);
        }
    }
    let audited = audit::write(&audit_path, &record);
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
            let verb_end = inv.verb_index.map_or(0, |i| i + 1);
            let mut runc_args = inv.runc_args[..verb_end].to_vec();
            runc_args.extend(new_args);
            exec_runc(inv, &ctx.runtime, runc_args)
        }
    }
}

/// Replaces this process with runc. Returns only if the exec failed.
fn exec_runc(inv: &Invocation, runtime: &Path, runc_args: Vec<OsString>) -> i32 {
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
    let to_c = |s: &std::ffi::OsStr| CString::new(s.as_bytes());
    let program = to_c(runtime.as_os_str());
    let argv: Result<Vec<CString>, _> = std::iter::once(runtime.as_os_str())
        .chain(runc_args.iter().map(OsString::as_os_str))
        .map(to_c)
        .collect();
    let error = match (program, argv) {
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

fn run_hook(config_path: &Path, inv: &Invocation) -> i32 {
    match verbs::hook::run(config_path, inv.verb_args(), &mut std::io::stdin().lock()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("vibe-shim: {e}");
            1
        }
    }
}

fn run_policy_cmd(config_path: &Path, inv: &Invocation) -> i32 {
    match verbs::policy_cmd::run(config_path, inv.verb_args()) {
        Ok((text, ok)) => {
            print!("{text}");
            if ok {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("vibe-shim: {e}");
            1
        }
    }
}
