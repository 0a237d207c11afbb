//! `start`: Docker 28+ configures the network only after `runc create`, so
//! before the container's process may run, the network hook's table must
//! still be in place and the route work is completed (vibe-hooks does both).
//! Then the assurance check: what the kernel shows of the init (stopped on
//! runc's exec fifo) is judged against the policy and the judged spec, and
//! the record is written; any contradiction kills the init and refuses.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use vibe_policy::Denial;

use super::{lossy, Ctx, Outcome};
use crate::runc_argv::StartArgs;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid container id {0:?}")]
    BadId(String),
    #[error("cannot find the container's init pid (state.json: {state}; runc state: {runc})")]
    NoPid { state: PidError, runc: PidError },
    #[error("cannot write the assurance record {path}: {source}")]
    Record {
        path: String,
        #[source]
        source: std::io::Error,
    },
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
    // The host's mounts before the staged bind sources go: the assurance
    // check resolves the judged spec's sources in them.
    let host_mounts = std::fs::read_to_string("/proc/self/mountinfo");
    crate::timing::mark("host-mounts");
    crate::sys::stage::release_quietly(
        &crate::sys::state_dir::runc_root(ctx.root.as_deref()),
        &container_id,
    );
    let runc_root = crate::sys::state_dir::runc_root(ctx.root.as_deref());
    crate::timing::mark("stage");
    let (pid, facts) = match init_state(&ctx.runtime, &runc_root, &container_id) {
        Ok(found) => found,
        Err(e) => {
            return Outcome::refused(
                container_id.clone(),
                Denial::new("start", "container", container_id, e.to_string()),
            )
        }
    };
    crate::timing::mark("init-pid");
    let checked = vibe_hooks::check_before_start(&container_id, pid, &ctx.policy.network);
    crate::timing::mark("network");
    let checked = checked
        .and_then(|()| vibe_hooks::check_egress(&ctx.policy.network, &runc_root, &container_id));
    crate::timing::mark("egress");
    if let Err(e) = checked {
        return Outcome::refused(
            container_id,
            Denial::new(
                "network",
                "init_process_pid",
                pid.to_string(),
                e.to_string(),
            ),
        );
    }
    let (summary, result) = match assure(ctx, &runc_root, &container_id, pid, &facts, &host_mounts)
    {
        Ok(summary) => (Some(summary), Ok((args.to_vec(), Vec::new()))),
        Err(failure) => {
            let AssuranceFailure { summary, denial } = *failure;
            // Nothing the container asked for may run: its init dies before
            // the fifo opens (the start time names the same process).
            kill_init(pid, &facts);
            (summary, Err(super::refusal(denial)))
        }
    };
    crate::timing::mark("assurance");
    Outcome {
        container_id,
        result,
        notice: None,
        assurance: summary,
    }
}

/// The audit line's part of the assurance record.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AssuranceSummary {
    pub record: String,
    pub verdict: &'static str,
    pub contradictions: usize,
    pub policy_sha256: String,
    pub cap_eff: String,
    pub no_new_privs: u8,
    pub seccomp: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nft_sha256: Option<String>,
}

struct AssuranceFailure {
    summary: Option<AssuranceSummary>,
    denial: Denial,
}

/// The assurance record, as written to [`crate::sys::state_dir::ASSURANCE_BASE`]
/// and into the container's copy.
#[derive(serde::Serialize)]
struct AssuranceRecord<'a> {
    version: u32,
    time: String,
    vibe_shim_version: &'static str,
    container_id: &'a str,
    runc_root: &'a Path,
    init_pid: i32,
    policy: PolicyIdentity,
    judged_spec: Option<String>,
    verdict: &'static str,
    contradictions: &'a [vibe_policy::assurance::Contradiction],
    evidence: &'a vibe_policy::assurance::Evidence,
}

#[derive(serde::Serialize)]
struct PolicyIdentity {
    path: String,
    sha256: String,
}

/// Reads the kernel's view of the init, judges it against the policy and
/// the judged spec, and writes the record (refused or not).
fn assure(
    ctx: &Ctx,
    runc_root: &Path,
    id: &str,
    pid: i32,
    facts: &crate::sys::evidence::RuncFacts,
    host_mounts: &std::io::Result<String>,
) -> Result<AssuranceSummary, Box<AssuranceFailure>> {
    let denial = |field: &str, value: String, reason: String| {
        Box::new(AssuranceFailure {
            summary: None,
            denial: Denial::new("assurance", field, value, reason),
        })
    };
    let mut evidence = crate::sys::evidence::gather(pid, facts)
        .map_err(|e| denial("/proc", pid.to_string(), e.to_string()))?;
    evidence.nft =
        vibe_hooks::table_digest(pid).map_err(|e| denial("nft", pid.to_string(), e.to_string()))?;
    let dir = crate::sys::state_dir::container_dir(runc_root, id)
        .map_err(|e| denial("state", id.to_string(), e.to_string()))?;
    let spec_path = dir.join("config.json");
    let mut judged: Option<serde_json::Value> = std::fs::read(&spec_path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    // runc resolved each destination inside the rootfs (an image symlink
    // `/tmp -> /var/tmp` moved its mount): mountinfo names that place.
    if let (Some(spec), Some(rootfs)) = (judged.as_mut(), facts.rootfs.as_deref()) {
        vibe_policy::assurance::add_placed_mounts(spec, |dest| {
            crate::sys::rootfs::placed_at(rootfs, dest)
        });
    }
    // Without the host's mounts no bind could be told from the host's own
    // files: fail closed.
    let host = match host_mounts {
        Ok(text) => vibe_policy::assurance::parse_mountinfo(text).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
    .map_err(|e| denial("/proc/self/mountinfo", pid.to_string(), e))?;
    vibe_policy::assurance::locate(&mut evidence.mounts, &host);
    let contradictions =
        vibe_policy::assurance::judge(&evidence, &ctx.policy, judged.as_ref(), &host);
    let policy_sha256 = std::fs::read(&ctx.config_path)
        .map(|bytes| vibe_hooks::digest::sha256_hex(&bytes))
        .map_err(|e| {
            denial(
                "--config",
                ctx.config_path.display().to_string(),
                e.to_string(),
            )
        })?;
    let verdict = match contradictions.is_empty() {
        true => "confined",
        false => "refused",
    };
    let record = AssuranceRecord {
        version: vibe_policy::assurance::RECORD_VERSION,
        time: crate::log::rfc3339_now(),
        vibe_shim_version: env!("CARGO_PKG_VERSION"),
        container_id: id,
        runc_root,
        init_pid: pid,
        policy: PolicyIdentity {
            path: ctx.config_path.display().to_string(),
            sha256: policy_sha256.clone(),
        },
        judged_spec: judged.as_ref().map(|_| spec_path.display().to_string()),
        verdict,
        contradictions: &contradictions,
        evidence: &evidence,
    };
    let path = crate::sys::state_dir::assurance_record(runc_root, id)
        .map_err(|e| denial("state", id.to_string(), e.to_string()))?;
    let summary = AssuranceSummary {
        record: path.display().to_string(),
        verdict,
        contradictions: contradictions.len(),
        policy_sha256,
        cap_eff: format!("{:016x}", evidence.status.cap_eff),
        no_new_privs: evidence.status.no_new_privs,
        seccomp: evidence.status.seccomp,
        nft_sha256: evidence.nft.as_ref().map(|t| t.sha256.clone()),
    };
    crate::timing::mark("assurance-judge");
    let written = write_record(&dir, &path, &record);
    crate::timing::mark("assurance-record");
    if let Some(first) = contradictions.first() {
        let more = match contradictions.len() {
            1 => String::new(),
            n => format!(" (and {} more, see {})", n - 1, path.display()),
        };
        return Err(Box::new(AssuranceFailure {
            summary: Some(summary),
            denial: Denial::new(
                "assurance",
                first.rule,
                first.evidence.clone(),
                format!(
                    "what the kernel shows of the container at start breaks the {} rule: {}{more}; \
                     its init (pid {pid}) is killed",
                    first.rule, first.reason
                ),
            ),
        }));
    }
    written.map_err(|e| {
        Box::new(AssuranceFailure {
            summary: Some(summary.clone()),
            denial: Denial::new(
                "assurance",
                "record",
                path.display().to_string(),
                e.to_string(),
            ),
        })
    })?;
    Ok(summary)
}

/// Writes the record root-only at `path` (atomically), then into the
/// container's copy in its state directory `dir`: the file create made and
/// runc bound read-only, written in place (a new file would not be the one
/// bound); nothing in the container runs before start has written it.
fn write_record(dir: &Path, path: &Path, record: &AssuranceRecord) -> Result<(), StartError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |path: &Path| {
        let path = path.display().to_string();
        move |source| StartError::Record { path, source }
    };
    let bytes = serde_json::to_vec_pretty(record).map_err(|e| fail(path)(e.into()))?;
    let parent = path.parent().unwrap_or(Path::new("/"));
    crate::sys::state_dir::ensure_private(parent)
        .map_err(|e| fail(path)(std::io::Error::other(e)))?;
    vibe_hooks::fsio::replace(path, &bytes, 0o600, None, crate::sys::state_dir::STATE)
        .map_err(fail(path))?;
    let copy = dir.join(vibe_policy::rules::notice::ASSURANCE_FILE);
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(&copy);
    match opened {
        Ok(mut file) => file.write_all(&bytes).map_err(fail(&copy)),
        // No notice either (a bind above /etc/vibe-shim, an older create).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(fail(&copy)(e)),
    }
}

/// SIGKILL to the init, if it is still the process runc started.
fn kill_init(pid: i32, facts: &crate::sys::evidence::RuncFacts) {
    let same = crate::sys::evidence::ProcDir::open(pid)
        .and_then(|p| p.start_time())
        .is_ok_and(|seen| facts.start_time.as_ref().is_none_or(|s| *s == seen));
    if same {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The container's init pid: runc's `state.json` under the root directory,
/// or (for another layout) what `runc state` reports; with what state.json
/// says of the init's start time and the seccomp filter runc loads at exec
/// (`runc state` says neither).
pub fn init_state(
    runtime: &Path,
    root: &Path,
    id: &str,
) -> Result<(i32, crate::sys::evidence::RuncFacts), StartError> {
    // The one container-id rule: an id outside it could escape the root dir.
    if !vibe_policy::lang::container_id::is_valid(id) {
        return Err(StartError::BadId(id.to_string()));
    }
    // The root as runc reads it (`filepath.Abs`: lexically clean), not as
    // the kernel would resolve the client's spelling: `L/../root` with L a
    // symlink names another directory, and another state.json, for the
    // kernel than for runc.
    let root = &crate::sys::state_dir::runc_root(Some(root.as_os_str()));
    let state = match state_file(&root.join(id).join("state.json")) {
        Ok(found) => return Ok(found),
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
                let fields: PidFields = serde_json::from_slice(&out.stdout)?;
                positive(fields.pid, "pid")
            } else {
                let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
                Err(PidError::Failed(said))
            }
        });
    runc.map(|pid| (pid, Default::default()))
        .map_err(|runc| StartError::NoPid { state, runc })
}

fn state_file(path: &Path) -> Result<(i32, crate::sys::evidence::RuncFacts), PidError> {
    let bytes = std::fs::read(path).map_err(|source| PidError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let fields: PidFields = serde_json::from_slice(&bytes)?;
    let pid = positive(fields.init_process_pid, "init_process_pid")?;
    let (seccomp, rootfs) = fields
        .config
        .map_or((None, None), |c| (c.seccomp, c.rootfs));
    let facts = crate::sys::evidence::RuncFacts {
        rootfs,
        start_time: fields.init_process_start.and_then(|v| match v {
            serde_json::Value::Number(n) => Some(n.to_string()),
            serde_json::Value::String(s) => Some(s),
            _ => None,
        }),
        seccomp: vibe_policy::assurance::RuncSeccomp {
            configured: seccomp.is_some(),
            syscall_rules: seccomp.and_then(|s| s.syscalls).map_or(0, |s| s.len()),
        },
    };
    Ok((pid, facts))
}

/// The two places a pid comes from: runc's state.json and `runc state`;
/// state.json also names the init's start time and runc's seccomp config.
#[derive(serde::Deserialize)]
struct PidFields {
    init_process_pid: Option<i64>,
    pid: Option<i64>,
    init_process_start: Option<serde_json::Value>,
    config: Option<RuncConfig>,
}

/// state.json carries the whole container config; serde skips every field
/// but these without building values for them.
#[derive(serde::Deserialize)]
struct RuncConfig {
    seccomp: Option<RuncSeccompConfig>,
    rootfs: Option<std::path::PathBuf>,
}

#[derive(serde::Deserialize)]
struct RuncSeccompConfig {
    syscalls: Option<Vec<serde::de::IgnoredAny>>,
}

fn positive(pid: Option<i64>, key: &'static str) -> Result<i32, PidError> {
    pid.and_then(|pid| i32::try_from(pid).ok())
        .filter(|pid| *pid > 0)
        .ok_or(PidError::NoPositive(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init_pid(runtime: &Path, root: &Path, id: &str) -> Result<i32, StartError> {
        init_state(runtime, root, id).map(|(pid, _)| pid)
    }
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

    /// The door: runc cleans `--root` lexically (`filepath.Abs`), the
    /// kernel resolves `..` after a symlink. A client's `--root L/../real`,
    /// with L a symlink into a directory it controls (an image's absolute
    /// symlink in a rootfs the host has mounted), must not make start read
    /// a state.json of the client's (naming another process's pid) while
    /// runc starts the container under `real`.
    #[test]
    fn the_pid_comes_from_the_state_json_runc_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        let state = |dir: &Path, pid: i32| {
            std::fs::create_dir_all(dir.join("c1")).unwrap();
            std::fs::write(
                dir.join("c1/state.json"),
                format!(r#"{{"id":"c1","init_process_pid":{pid},"config":{{}}}}"#),
            )
            .unwrap();
        };
        state(&t.join("real"), 4242);
        std::fs::create_dir_all(t.join("client/deep")).unwrap();
        state(&t.join("client/real"), 6666);
        std::os::unix::fs::symlink(t.join("client/deep"), t.join("link")).unwrap();
        let given = t.join("link/../real");
        assert_eq!(
            init_pid(Path::new("/nonexistent"), &given, "c1").unwrap(),
            4242,
            "start must read runc's own state.json, not the one the kernel finds at {}",
            given.display()
        );
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
