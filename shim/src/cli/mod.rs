//! vibe-shim's own verbs (never runc's): one file each. main.rs runs
//! [`dispatch`] before it reads argv as runc's; run as `runc`, main.rs
//! refuses every verb `runc_argv::VERBS` marks as own first.

pub mod audit;
pub mod authz;
pub mod doctor;
pub mod egress;
pub mod explain;
pub mod hook;
pub mod install;
pub mod policy;
pub mod probe;

use std::ffi::OsString;

/// `vibe-shim --help`: the own verbs, and where runc's verbs and help are.
pub const HELP: &str = "\
vibe-shim: a runc-compatible runtime that enforces the administrator's policy
(/etc/vibe-shim/config.toml) on every container, then runs the real runc.

Usage: vibe-shim [--config FILE] [runc global options] <verb> [args...]

vibe-shim's own verbs (each has --help):
  policy check|explain  Check the policy, or explain what it does to a bundle
  install <target>      Register vibe-shim with docker, containerd or podman,
                        or make every runc on the host vibe-shim (lockdown)
  uninstall <target>    Undo what install changed, and nothing else
  egress                Run the egress proxy daemon (network mode \"proxy\")
  authz                 Serve the Docker authorization plugin (the API gate)
  doctor                Try every known door around vibe-shim; 0 when all are closed
  probe                 Judge the sandbox this runs in, one verdict per rule
  explain CONTAINER-ID  Show what vibe-shim changed in a container (its notice),
                        or what the kernel showed at its start (--assurance)
  audit verify [PATH]   Walk the audit log's hash chain; report the first break
  hook <name>           The OCI hooks vibe-shim adds to a container (runc runs them)

runc's verbs (create, run, exec, update, start, checkpoint, restore, delete,
kill, state, list, ps, events, pause, resume, spec, features) pass through to
the real runc: the ones that start or change a container are judged first.
`vibe-shim <runc-verb> --help` and `vibe-shim help <runc-verb>` print runc's
help; `vibe-shim --version` prints runc's version.

Global options:
  --config FILE  The policy [default: /etc/vibe-shim/config.toml]; refused when
                 run as `runc`

Exit codes: an own verb's are in its --help; a runc verb exits as runc does,
or 1 when vibe-shim refuses it (one line naming vibe-shim and the rule).
";
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
        "doctor" => doctor::run(config_path, args),
        "install" | "uninstall" => install::run(verb, config_path, args),
        "egress" => egress::run(config_path, args),
        "explain" => explain::run(args),
        "audit" => audit::run(config_path, args),
        "probe" => probe::run(args),
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
