//! `start`: Docker 28+ configures the network only after `runc create`, so
//! before the container's process may run, the network hook's table must
//! still be in place and the route work is completed (vibe-hooks does both).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use vibe_policy::Denial;

use super::{lossy, Ctx, Outcome};
use crate::runc_argv::StartArgs;

/// runc's state directory when `--root` is not given (as root).
pub const DEFAULT_ROOT: &str = "/run/runc";

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid container id {0:?}")]
    BadId(String),
    #[error("cannot find the container's init pid (state.json: {state}; runc state: {runc})")]
    NoPid { state: PidError, runc: PidError },
}

/// Why one of the two places gave no pid.
#[derive(Debug, thiserror::Error)]
pub enum PidError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Run(std::io::Error),
    /// `runc state` failed: what it said on stderr.
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("no positive {0}")]
    NoPositive(&'static str),
}

pub fn prepare(ctx: &Ctx, args: &[OsString], parsed: &StartArgs) -> Outcome {
    let container_id = lossy(&parsed.id);
    crate::sys::stage::release_quietly(
        &crate::sys::state_dir::runc_root(ctx.root.as_deref()),
        &container_id,
    );
    let root = ctx
        .root
        .as_ref()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT));
    crate::timing::mark("stage");
    let pid = match init_pid(&ctx.runtime, &root, &container_id) {
        Ok(pid) => pid,
        Err(e) => {
            return Outcome::refused(
                container_id.clone(),
                Denial::new("start", "container", container_id, e.to_string()),
            )
        }
    };
    crate::timing::mark("init-pid");
    let runc_root = crate::sys::state_dir::runc_root(ctx.root.as_deref());
    let checked = vibe_hooks::check_before_start(&container_id, pid, &ctx.policy.network);
    crate::timing::mark("network");
    let checked = checked
        .and_then(|()| vibe_hooks::check_egress(&ctx.policy.network, &runc_root, &container_id));
    let result = match checked {
        Ok(()) => Ok((args.to_vec(), Vec::new())),
        Err(e) => Err(super::refusal(Denial::new(
            "network",
            "init_process_pid",
            pid.to_string(),
            e.to_string(),
        ))),
    };
    Outcome {
        container_id,
        result,
        notice: None,
    }
}

/// The container's init pid: runc's `state.json` under the root directory,
/// or (for another layout) what `runc state` reports.
pub fn init_pid(runtime: &Path, root: &Path, id: &str) -> Result<i32, StartError> {
    // The one container-id rule: an id outside it could escape the root dir.
    if !vibe_policy::lang::container_id::is_valid(id) {
        return Err(StartError::BadId(id.to_string()));
    }
    let state = match pid_from_state_file(&root.join(id).join("state.json"), "init_process_pid") {
        Ok(pid) => return Ok(pid),
        Err(e) => e,
    };
    let runc = Command::new(runtime)
        .arg("--root")
        .arg(root)
        .arg("state")
        .arg(id)
        .output()
        .map_err(PidError::Run)
        .and_then(|out| {
            if out.status.success() {
                pid_from_json(&out.stdout, "pid")
            } else {
                let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
                Err(PidError::Failed(said))
            }
        });
    runc.map_err(|runc| StartError::NoPid { state, runc })
}

fn pid_from_state_file(path: &Path, key: &'static str) -> Result<i32, PidError> {
    let bytes = std::fs::read(path).map_err(|source| PidError::Read {
        path: path.display().to_string(),
        source,
    })?;
    pid_from_json(&bytes, key)
}

/// The two places a pid comes from: runc's state.json and `runc state`.
#[derive(serde::Deserialize)]
struct PidFields {
    init_process_pid: Option<i64>,
    pid: Option<i64>,
}

/// state.json carries the whole container config; serde skips every field
/// but the two pids without building values for them.
fn pid_from_json(bytes: &[u8], key: &'static str) -> Result<i32, PidError> {
    let fields: PidFields = serde_json::from_slice(bytes)?;
    let pid = if key == "pid" {
        fields.pid
    } else {
        fields.init_process_pid
    };
    pid.and_then(|pid| i32::try_from(pid).ok())
        .filter(|pid| *pid > 0)
        .ok_or(PidError::NoPositive(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn pid_comes_from_state_json() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("c1")).unwrap();
        std::fs::write(
            root.path().join("c1/state.json"),
            r#"{"id":"c1","init_process_pid":4242,"config":{}}"#,
        )
        .unwrap();
        assert_eq!(
            init_pid(Path::new("/nonexistent"), root.path(), "c1").unwrap(),
            4242
        );
    }

    #[test]
    fn falls_back_to_runc_state() {
        let root = tempfile::tempdir().unwrap();
        let fake = root.path().join("fake-runc");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho '{\"id\":\"c2\",\"pid\":77,\"status\":\"created\"}'\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A test thread forking while the script was open for writing keeps
        // it busy (ETXTBSY) until that child execs: wait that out first.
        for _ in 0..100 {
            match Command::new(&fake).output() {
                Err(e) if e.raw_os_error() == Some(nix::libc::ETXTBSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                _ => break,
            }
        }
        assert_eq!(init_pid(&fake, root.path(), "c2").unwrap(), 77);
    }

    #[test]
    fn bad_ids_and_missing_state_are_errors() {
        let root = tempfile::tempdir().unwrap();
        for bad in ["../x", "-x", ""] {
            assert!(matches!(
                init_pid(Path::new("/bin/false"), root.path(), bad),
                Err(StartError::BadId(_))
            ));
        }
        let err = init_pid(Path::new("/bin/false"), root.path(), "c3").unwrap_err();
        assert!(err.to_string().contains("state.json"), "{err}");
    }
}
