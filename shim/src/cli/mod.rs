//! vibe-shim's own verbs (never runc's): one file each. main.rs runs
//! [`dispatch`] before it reads argv as runc's; run as `runc`, main.rs
//! refuses every verb `runc_argv::VERBS` marks as own first.

pub mod authz;
pub mod doctor;
pub mod egress;
pub mod hook;
pub mod install;
pub mod policy;

use std::ffi::OsString;
use std::path::Path;

/// Runs `verb` when it is one of vibe-shim's own (`runc_argv::VERBS`) and
/// returns its exit code; `None` for any other verb. `config_path` is the
/// global `--config` given before the verb, or the default; a verb's own
/// `--config` (egress) overrides it. `args` are the tokens after the verb.
pub fn dispatch(verb: &str, config_path: &Path, args: &[OsString]) -> Option<i32> {
    Some(match verb {
        "hook" => hook::run(config_path, args),
        "policy" => policy::run(config_path, args),
        "authz" => authz::run(config_path, args),
        "doctor" => doctor::run(args),
        "install" | "uninstall" => install::run(verb, args),
        "egress" => egress::run(config_path, args),
        _ => return None,
    })
}

/// Parses an own verb's arguments (`args`, after the verb) with its clap
/// struct. `--help` prints the verb's usage on stdout: `Err(0)`. A usage
/// error prints clap's message on stderr: `Err(usage_code)`, the code the
/// verb has always exited with for one (scripts and tests read it).
fn parse<T: clap::Parser>(verb: &str, args: &[OsString], usage_code: i32) -> Result<T, i32> {
    let argv = std::iter::once(OsString::from(verb)).chain(args.iter().cloned());
    T::try_parse_from(argv).map_err(|e| {
        let _ = e.print();
        match e.use_stderr() {
            true => usage_code,
            false => 0,
        }
    })
}
