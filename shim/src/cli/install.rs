//! `vibe-shim install <target>` / `vibe-shim uninstall <target>`: one arm
//! per target, each in its own module.

use std::ffi::OsString;

use crate::install::lockdown;

/// Runs `install`/`uninstall`; prints what was done, or one line naming
/// vibe-shim on failure. (Run as `runc`, main.rs refuses these verbs.)
pub fn run(verb: &str, args: &[OsString]) -> i32 {
    let target = args.first().and_then(|t| t.to_str()).unwrap_or("");
    let rest = args.get(1..).unwrap_or(&[]);
    let result = match (verb, target) {
        ("install", "lockdown") => lockdown::install(rest).map_err(|e| e.to_string()),
        ("uninstall", "lockdown") => lockdown::uninstall(rest).map_err(|e| e.to_string()),
        ("install", "docker" | "containerd" | "podman") => {
            crate::install::cmd::install(target, rest).map_err(|e| e.to_string())
        }
        ("uninstall", "docker" | "containerd" | "podman" | "all") => {
            crate::install::cmd::uninstall(target, rest).map_err(|e| e.to_string())
        }
        _ => {
            eprintln!(
                "vibe-shim: {verb}: unknown target {target:?}\n{}\n       vibe-shim {{install|uninstall}} lockdown [--root DIR]",
                crate::install::cmd::USAGE.trim_end()
            );
            return 2;
        }
    };
    match result {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("vibe-shim: {verb} {target}: {e}");
            1
        }
    }
}
