//! `vibe-shim install|uninstall <target>`: one match arm per target.

use std::ffi::OsString;

/// Runs `install` (or `uninstall`) with the arguments after the verb.
pub fn run(args: &[OsString], uninstall: bool) -> i32 {
    let target = args.first().and_then(|t| t.to_str()).unwrap_or("");
    let rest = args.get(1..).unwrap_or(&[]);
    let result = match (target, uninstall) {
        ("lockdown", _) => {
            eprintln!("vibe-shim: install lockdown is not built in this branch");
            return 1;
        }
        ("docker" | "containerd" | "podman", false) => crate::install::cmd::install(target, rest),
        ("docker" | "containerd" | "podman" | "all", true) => {
            crate::install::cmd::uninstall(target, rest)
        }
        _ => {
            eprintln!("{}", crate::install::cmd::USAGE);
            return 2;
        }
    };
    match result {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("vibe-shim: {e}");
            1
        }
    }
}
