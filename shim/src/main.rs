//! vibe-shim: a runc-compatible wrapper. It enforces the administrator's
//! policy on create/run/restore/exec/update/start/checkpoint, then execs the real runc
//! with every other argument byte for byte, so runc keeps our pid, fds,
//! stdio and exit code. `runc_argv::VERBS` says what happens to each verb:
//! judged, passed straight through, or one of vibe-shim's own; any other
//! verb is refused.

mod audit;
mod cli;
mod enforce;
mod install;
mod log;
mod policy_file;
mod runc_argv;
mod runtime;
mod sys;
mod timing;

use std::path::{Path, PathBuf};

use vibe_policy::config::DEFAULT_CONFIG_PATH;
use vibe_policy::Denial;

use crate::enforce::pipeline::{enforce, pass_through};
use crate::enforce::{delete, fail};
use crate::runc_argv::{argv_denial, check_argv, treatment, Invocation, Route, Treatment};

fn main() {
    std::process::exit(run());
}

fn run() -> i32 {
    timing::begin();
    let inv = match runc_argv::scan_globals(std::env::args_os().skip(1).collect()) {
        Ok(inv) => inv,
        Err(e) => {
            log::report(&format!("args: {e}"), None, false);
            return 1;
        }
    };
    timing::mark("argv");
    let config_path = inv
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH));
    let verb = inv.verb().to_string();
    let argv0 = std::env::args_os().next();
    if let Some(denial) = as_runc_denial(argv0.as_deref(), &inv, &verb) {
        return fail(&inv, &denial);
    }
    if !runs_as_runc(argv0.as_deref()) && wants_own_help(&inv) {
        print!("{}", cli::HELP);
        return 0;
    }
    if treatment(&verb) == Some(Treatment::Own) {
        if let Some(code) = cli::dispatch(&verb, &config_path, inv.verb_args()) {
            return code;
        }
    }
    if let Err(e) = runtime::check_not_reentered(std::env::var_os(runtime::ACTIVE_ENV).as_deref()) {
        return fail(
            &inv,
            &Denial::new("runtime", "runc", "vibe-shim", e.to_string()),
        );
    }
    match check_argv(&inv, &verb) {
        Ok(Route::PassThrough) => {
            let settings = policy_file::pass_through_settings(&config_path);
            if verb == "delete" && !inv.no_action {
                delete::cleanup(
                    inv.root.as_deref(),
                    inv.verb_args(),
                    &settings.egress_socket,
                );
            }
            pass_through(&inv, settings.runtime)
        }
        Ok(Route::Enforce(argv)) => enforce(&inv, &verb, config_path, &argv),
        Err(denial) => fail(&inv, &denial),
    }
}

/// Run as `runc` (lockdown's link, or an engine's PATH), vibe-shim takes only
/// runc's grammar: whoever reaches runc's argv (a wrapper forwarding "$@")
/// must not reach a root-only vibe-shim verb such as `hook tmpfs-modes`, nor
/// pick the policy with `--config`.
fn as_runc_denial(argv0: Option<&std::ffi::OsStr>, inv: &Invocation, verb: &str) -> Option<Denial> {
    if !runs_as_runc(argv0) {
        return None;
    }
    if treatment(verb) == Some(Treatment::Own) {
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

fn runs_as_runc(argv0: Option<&std::ffi::OsStr>) -> bool {
    argv0.is_some_and(|a| Path::new(a).file_name() == Some("runc".as_ref()))
}

/// `vibe-shim`, `vibe-shim --help` and `vibe-shim help` print vibe-shim's
/// own help; `vibe-shim help <verb>`, `<runc-verb> --help` and `--version`
/// stay runc's. Run as `runc`, every one of them is runc's.
fn wants_own_help(inv: &Invocation) -> bool {
    if inv.error.is_some() {
        return false;
    }
    let version = inv.runc_args.iter().any(|a| {
        let a = a.to_string_lossy();
        matches!(
            a.trim_start_matches('-').split('=').next(),
            Some("version" | "v")
        )
    });
    match inv.verb() {
        "" => !version && (inv.no_action || inv.runc_args.is_empty()),
        "help" | "h" => inv.verb_args().is_empty() && !version,
        _ => false,
    }
}
