//! vibe-shim: a runc-compatible wrapper. It enforces the administrator's
//! policy on create/run/restore/exec/update/start/checkpoint, then execs the real runc
//! with every other argument byte for byte, so runc keeps our pid, fds,
//! stdio and exit code. The verbs in `args::PASS_THROUGH_VERBS` pass
//! straight through; any other verb is refused.

mod args;
mod audit;
mod cli;
mod host;
mod install;
mod log;
mod policy_file;
mod private_file;
mod profile;
mod runtime;
mod stage;
mod state_dir;
mod verbs;

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use vibe_policy::config::DEFAULT_CONFIG_PATH;
use vibe_policy::Denial;

use crate::args::{Invocation, ENFORCED_VERBS, PASS_THROUGH_VERBS};
use crate::audit::AuditRecord;
use crate::host::RealHost;
use crate::verbs::{Ctx, Outcome};

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
    if let Some(denial) = as_runc_denial(std::env::args_os().next().as_deref(), &inv, &verb) {
        return fail(&inv, &denial);
    }
    if let Some(code) = cli::dispatch(&verb, inv.config.as_deref(), inv.verb_args()) {
        return code;
    }
    if let Err(e) = runtime::check_not_reentered(std::env::var_os(runtime::ACTIVE_ENV).as_deref()) {
        return fail(
            &inv,
            &Denial::new("runtime", "runc", "vibe-shim", e.to_string()),
        );
    }
    match check_argv(&inv, &verb) {
        Ok(Route::PassThrough) => {
            if verb == "delete" && !inv.no_action {
                verbs::delete::cleanup(inv.root.as_deref(), inv.verb_args(), &config_path);
            }
            pass_through(&inv, &config_path)
        }
        Ok(Route::Enforce) => enforce(&inv, &verb, config_path),
        Err(denial) => fail(&inv, &denial),
    }
}

/// Where a command line goes once its argv is classified.
#[derive(Debug, PartialEq)]
enum Route {
    PassThrough,
    Enforce,
}

/// Run as `runc` (lockdown's link, or an engine's PATH), vibe-shim takes only
/// runc's grammar: whoever reaches runc's argv (a wrapper forwarding "$@")
/// must not reach a root-only vibe-shim verb such as `hook tmpfs-modes`, nor
/// pick the policy with `--config`.
fn as_runc_denial(argv0: Option<&std::ffi::OsStr>, inv: &Invocation, verb: &str) -> Option<Denial> {
    let as_runc = argv0.is_some_and(|a| Path::new(a).file_name() == Some("runc".as_ref()));
    if !as_runc {
        return None;
    }
    if cli::OWN_VERBS.contains(&verb) {
        return Some(argv_denial(
            verb.to_string(),
            "not a runc verb: vibe-shim's own verbs are refused when it runs as runc".into(),
        ));
    }
    if inv.config.is_some() {
        return Some(argv_denial(
            "--config".into(),
            "run as runc, vibe-shim uses the default policy; --config is refused".into(),
        ));
    }
    None
}

fn argv_denial(value: String, reason: String) -> Denial {
    Denial::new("argv", "argv", value, reason)
}

/// Classifies argv as runc will read it: enforced verbs are judged, verbs
/// that can neither start a process nor change its limits (and calls where
/// runc runs no verb: `--help`, `--version`, none) pass through, anything
/// else, or anything runc's parser could read another way, is refused.
fn check_argv(inv: &Invocation, verb: &str) -> Result<Route, Denial> {
    // The verb, not the whole argv: argv may carry secrets (`-e TOKEN=…`).
    let joined = || verb_lossy(inv);
    if let Some(e) = &inv.error {
        // runc 1.1-1.3 refuse this too; a later runc might read the flag
        // as taking a value and reach a verb this scan cannot see.
        let hides_verb = inv
            .runc_args
            .iter()
            .any(|a| a.to_str().is_some_and(|a| ENFORCED_VERBS.contains(&a)));
        return match hides_verb {
            false => Ok(Route::PassThrough),
            true => Err(argv_denial(
                "global flags".into(),
                format!("{e}; refused before an enforced verb"),
            )),
        };
    }
    if inv.criu && matches!(verb, "checkpoint" | "restore") {
        return Err(argv_denial(
            format!("--criu {verb}"),
            "--criu picks the binary runc 1.1 runs as root; not allowed".into(),
        ));
    }
    if inv.no_action || inv.verb_index.is_none() || PASS_THROUGH_VERBS.contains(&verb) {
        return Ok(Route::PassThrough);
    }
    if !ENFORCED_VERBS.contains(&verb) {
        return Err(argv_denial(
            verb_lossy(inv),
            "unknown verb: vibe-shim passes through only verbs that can neither start a process nor change its limits".into(),
        ));
    }
    let items = args::classify_verb(verb, inv.verb_args())
        .map_err(|e| argv_denial(joined(), format!("{verb}: {e}")))?;
    if args::flag_bool(&items, "help") == Some(true) {
        // runc prints the verb's help and runs nothing.
        return Ok(Route::PassThrough);
    }
    let operands = args::positionals(&items).len();
    let has_process = args::flag_value(&items, "process").is_some_and(|p| !p.is_empty());
    let wanted = match verb {
        "exec" if has_process => (1, usize::MAX),
        "exec" => (2, usize::MAX),
        _ => (1, 1),
    };
    if operands < wanted.0 || operands > wanted.1 {
        return Err(argv_denial(
            joined(),
            format!(
                "{verb}: expected a container id{} ({operands} operands given)",
                match verb {
                    "exec" if !has_process => " and a command",
                    _ => "",
                }
            ),
        ));
    }
    Ok(Route::Enforce)
}

fn verb_lossy(inv: &Invocation) -> String {
    inv.verb_index
        .and_then(|i| inv.runc_args.get(i))
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Reports a refusal on stderr and in the `--log` file; the exit code is 1.
fn fail(inv: &Invocation, denial: &Denial) -> i32 {
    let log_path = inv.log.as_ref().map(PathBuf::from);
    log::report(&denial.to_string(), log_path.as_deref(), inv.log_is_json());
    1
}

/// The real runtime, and whether it is lockdown's recorded runc, which has
/// no execute bit and runs through a sealed memfd copy.
fn find_runtime(configured: Option<&Path>) -> Result<(PathBuf, bool), runtime::RuntimeError> {
    // Under lockdown `runc` in PATH is vibe-shim: the record names the real one.
    if configured.is_none() {
        let recorded = install::lockdown::recorded_real_runc()
            .map_err(|e| runtime::RuntimeError::Lockdown(e.to_string()))?;
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

/// `delete`: open mode's host-namespace table goes with the container
/// (vibe-hooks owns the how). A failure is reported; the delete goes on.
fn pass_through(inv: &Invocation, config_path: &Path) -> i32 {
    let configured = policy_file::runtime_path_only(config_path);
    match find_runtime(configured.as_deref()) {
        Ok((runc, sealed)) => exec_runc(inv, &runc, sealed, inv.runc_args.clone()),
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
    let chosen = match profile::choose(
        verb,
        inv.verb_args(),
        inv.root.as_deref(),
        config_path,
        policy,
    ) {
        Ok(chosen) => chosen,
        Err(e) => return fail(inv, &e.denial()),
    };
    let (config_path, policy, profile_name) = (chosen.config_path, chosen.policy, chosen.profile);
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
    let outcome: Outcome = match verb {
        "restore" if !ctx.policy.runtime.allow_restore => restore_refused(args),
        "exec" => verbs::exec::prepare(&ctx, args),
        "update" => verbs::update::prepare(&ctx, args),
        "start" => verbs::start::prepare(&ctx, args),
        "checkpoint" => verbs::checkpoint::prepare(&ctx, args),
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
                if let Err(e) = profile::record(
                    inv.root.as_deref(),
                    &outcome.container_id,
                    name,
                    &ctx.config_path,
                ) {
                    return fail(inv, &e.denial());
                }
            }
            let verb_end = inv.verb_index.map_or(0, |i| i + 1);
            let mut runc_args = inv.runc_args[..verb_end].to_vec();
            runc_args.extend(new_args);
            exec_runc(inv, &ctx.runtime, sealed, runc_args)
        }
    }
}

/// `restore` without `[runtime] allow_restore`: the restored process takes
/// its credentials, capabilities and seccomp from the checkpoint image.
fn restore_refused(args: &[OsString]) -> Outcome {
    let id = args::classify_verb("restore", args)
        .ok()
        .and_then(|items| {
            args::first_positional(&items).map(|id| id.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    Outcome::refused(
        id,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn route(argv: &[&str]) -> Result<Route, String> {
        let inv = args::scan_globals(argv.iter().map(OsString::from).collect()).unwrap();
        check_argv(&inv, inv.verb()).map_err(|d| d.to_string())
    }

    #[test]
    fn verbs_are_routed_and_unclassifiable_argv_refused() {
        assert_eq!(
            route(&["--root", "/r", "state", "c"]),
            Ok(Route::PassThrough)
        );
        assert_eq!(route(&["--version"]), Ok(Route::PassThrough));
        assert_eq!(route(&[]), Ok(Route::PassThrough));
        assert_eq!(route(&["--help", "create", "c"]), Ok(Route::PassThrough));
        assert_eq!(route(&["create", "--help", "c"]), Ok(Route::PassThrough));
        assert_eq!(route(&["--", "create", "c"]), Ok(Route::Enforce));
        assert_eq!(route(&["exec", "-p", "/f", "c"]), Ok(Route::Enforce));
        assert_eq!(route(&["exec", "c", "sh"]), Ok(Route::Enforce));
        // A future verb, or one runc runs no action for, is not passed blind.
        assert!(route(&["init"]).unwrap_err().contains("unknown verb"));
        assert!(route(&["--debug", "false", "create", "c"]).is_err());
        // An unknown global flag: harmless unless an enforced verb follows.
        assert_eq!(
            route(&["--future", "v", "state", "c"]),
            Ok(Route::PassThrough)
        );
        let err = route(&["--future", "v", "create", "c"]).unwrap_err();
        assert!(err.contains("future"), "{err}");
        // Operand counts as runc checks them.
        assert!(route(&["exec", "c"]).unwrap_err().contains("and a command"));
        assert!(route(&["create", "a", "b"]).is_err());
        assert!(route(&["update", "--pids-limit", "010", "c"]).is_err());
        assert!(route(&["--criu", "/x", "checkpoint", "c"]).is_err());
        // checkpoint makes runc write host paths: judged, not passed through.
        assert_eq!(route(&["checkpoint", "c"]), Ok(Route::Enforce));
        assert!(route(&["checkpoint", "c", "d"]).is_err());
        assert_eq!(
            route(&["--criu", "/x", "kill", "c"]),
            Ok(Route::PassThrough)
        );
        // The refusal does not echo argv (an -e value may be a secret).
        let err = route(&["exec", "-e", "T=secret", "--nope", "c", "x"]).unwrap_err();
        assert!(!err.contains("secret"), "{err}");
    }
}
