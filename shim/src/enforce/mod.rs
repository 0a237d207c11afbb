//! The verbs vibe-shim enforces (create, run, restore, exec, update, start,
//! checkpoint), the cleanup before a passed-through `delete`, and what they
//! share: the pipeline runs them, each action rewrites its verb's argv.

pub mod checkpoint;
pub mod create;
pub mod delete;
pub mod exec;
pub mod host_paths;
pub mod pipeline;
pub mod profile;
pub mod start;
pub mod update;

use std::ffi::OsString;
use std::path::PathBuf;

use vibe_policy::{Change, Denial, Policy, Refusal};

use crate::log;
use crate::runc_argv::Invocation;
use crate::sys::host::RealHost;

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
    /// What a create changed, as the container's notice says it (for the
    /// audit line); `None` for the other verbs and a refused create.
    pub notice: Option<vibe_policy::notice::Notice>,
    /// A start's assurance record, summarised for the audit line.
    pub assurance: Option<start::AssuranceSummary>,
}

impl Outcome {
    pub fn refused(container_id: String, denial: Denial) -> Outcome {
        Outcome {
            container_id,
            result: Err(Refusal {
                denial,
                changes: Vec::new(),
            }),
            notice: None,
            assurance: None,
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

/// Reports a refusal on stderr and in the `--log` file; the exit code is 1.
pub fn fail(inv: &Invocation, denial: &Denial) -> i32 {
    crate::timing::flush(inv.verb());
    let log_path = inv.log.as_ref().map(PathBuf::from);
    log::report(&denial.to_string(), log_path.as_deref(), inv.log_is_json());
    1
}
