//! The verbs vibe-shim enforces (create, run, restore, exec, update, start)
//! and what they share; its own verbs are in `cli`.

pub mod checkpoint;
pub mod create;
pub mod delete;
pub mod exec;
pub mod host_paths;
pub mod start;
pub mod update;

use std::ffi::OsString;
use std::path::PathBuf;

use vibe_policy::{Change, Denial, Policy, Refusal};

use crate::host::RealHost;

/// Everything an enforced verb needs.
pub struct Ctx {
    /// The policy file as given (or the default), for the audit line.
    pub config_path: PathBuf,
    pub policy: Policy,
    /// The real runc.
    pub runtime: PathBuf,
    /// `--root` (runc's default is /run/runc).
    pub root: Option<OsString>,
    /// runc's `--systemd-cgroup`.
    pub systemd_cgroup: bool,
    pub host: RealHost,
}

/// What an enforced verb decided.
pub struct Outcome {
    /// For the audit line; empty if argv had none.
    pub container_id: String,
    /// The verb's new arguments (everything after the verb) and the changes.
    pub result: Result<(Vec<OsString>, Vec<Change>), Refusal>,
}

impl Outcome {
    pub fn refused(container_id: String, denial: Denial) -> Outcome {
        Outcome {
            container_id,
            result: Err(Refusal {
                denial,
                changes: Vec::new(),
            }),
        }
    }
}

/// A refusal with no changes recorded.
pub fn refusal(denial: Denial) -> Refusal {
    Refusal {
        denial,
        changes: Vec::new(),
    }
}

/// Argv text for messages and JSON (lossy only for non-UTF-8 bytes).
pub fn lossy(value: &std::ffi::OsStr) -> String {
    value.to_string_lossy().into_owned()
}

/// The lowest fd a private memfd may use: above those runc passes through.
pub fn min_private_fd(preserve_fds: Option<&OsString>) -> i32 {
    let preserved = preserve_fds
        .and_then(|v| v.to_str())
        .and_then(|v| v.parse::<i32>().ok())
        .unwrap_or(0)
        .clamp(0, 1 << 16);
    3 + preserved
}
