//! `vibe-shim probe`: the probe's checks (the vibe-shim-probe crate, their
//! one home) run in this process, judging the sandbox vibe-shim runs in.
//! Inside a container without a libc, the static `vibe-shim-probe` runs
//! the same code.

use std::ffi::OsString;

pub fn run(args: &[OsString]) -> i32 {
    match super::parse::<vibe_probe::Args>("probe", args, 2) {
        Ok(parsed) => vibe_probe::run(&parsed),
        Err(code) => code,
    }
}
