//! `vibe-shim hook kernel-tcp <marker> <bytes>`: the createRuntime hook the
//! `resources` rule adds when there is no network hook to carry the bound
//! (`--kernel-tcp <bytes>`, [`run_carried`]). cgroup v1 does not charge TCP socket buffers to
//! `memory.limit_in_bytes` and leaves them unbounded until a limit is
//! written to `memory.kmem.tcp.limit_in_bytes`; runc ignores `kernelTCP`.
//! runc runs this hook in the runtime namespaces after placing the
//! container's init in its cgroups and before the container's program
//! starts (sockets are charged only when made after the limit). It writes
//! the judged bound into the v1 memory cgroup of the state's pid, and reads
//! it back. Any doubt is an error, and runc's create fails. On cgroup v2
//! (no v1 memory line) socket memory is charged to `memory.max`: nothing
//! to do.

use std::path::{Path, PathBuf};

use serde_json::Value;
use vibe_policy::rules::resources::{kernel_tcp_flag, parse_kernel_tcp_args};

const LIMIT_FILE: &str = "memory.kmem.tcp.limit_in_bytes";

#[derive(Debug, thiserror::Error)]
pub enum KernelTcpHookError {
    #[error("arguments: {0}")]
    Args(String),
    #[error("the OCI state carries no pid")]
    NoPid,
    #[error("the OCI state is not JSON: {0}")]
    State(#[source] serde_json::Error),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}; cannot bound TCP socket memory")]
    Cgroup(String),
    #[error("cannot bound TCP socket memory: {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} reads {got:?} after writing {want}; TCP socket memory is not bounded")]
    ReadBack {
        path: PathBuf,
        want: u64,
        got: String,
    },
}

/// `args` are the tokens after `kernel-tcp`; `state` is runc's OCI state.
pub fn run(args: &[String], state: &[u8]) -> Result<(), KernelTcpHookError> {
    let bytes = parse_kernel_tcp_args(args).map_err(KernelTcpHookError::Args)?;
    bound(bytes, state)
}

/// The network hook's share: the `--kernel-tcp <bytes>` among its
/// arguments, when it carries one.
pub fn run_carried(args: &[String], state: &[u8]) -> Result<(), KernelTcpHookError> {
    match kernel_tcp_flag(args).map_err(KernelTcpHookError::Args)? {
        Some(bytes) => bound(bytes, state),
        None => Ok(()),
    }
}

/// Writes `bytes` as the bound of the state's pid's v1 memory cgroup.
fn bound(bytes: u64, state: &[u8]) -> Result<(), KernelTcpHookError> {
    let state: Value = serde_json::from_slice(state).map_err(KernelTcpHookError::State)?;
    let pid = state
        .get("pid")
        .and_then(Value::as_i64)
        .filter(|p| *p > 0)
        .ok_or(KernelTcpHookError::NoPid)?;
    let cgroup_file = PathBuf::from(format!("/proc/{pid}/cgroup"));
    let cgroup = read(&cgroup_file)?;
    let Some(path) = v1_memory_path(&cgroup) else {
        return Ok(());
    };
    let mountinfo = read(Path::new("/proc/self/mountinfo"))?;
    let dir = v1_memory_dir(&mountinfo, path).map_err(KernelTcpHookError::Cgroup)?;
    let file = dir.join(LIMIT_FILE);
    std::fs::write(&file, bytes.to_string()).map_err(|source| KernelTcpHookError::Write {
        path: file.clone(),
        source,
    })?;
    // The kernel rounds down to a page; anything else is not our bound.
    let got = read(&file)?;
    match got.trim().parse::<u64>() {
        Ok(n) if n > 0 && n <= bytes => Ok(()),
        _ => Err(KernelTcpHookError::ReadBack {
            path: file,
            want: bytes,
            got: got.trim().to_string(),
        }),
    }
}

fn read(path: &Path) -> Result<String, KernelTcpHookError> {
    std::fs::read_to_string(path).map_err(|source| KernelTcpHookError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The v1 memory cgroup in a `/proc/<pid>/cgroup` text
/// (`ID:controller,...:/path`); `None` when memory is not on v1.
fn v1_memory_path(cgroup: &str) -> Option<&str> {
    cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    })
}

/// The directory of cgroup `path` in the v1 memory hierarchy mounted in
/// `mountinfo`. The root cgroup (the host's own) is refused: a bound there
/// is not the container's.
fn v1_memory_dir(mountinfo: &str, path: &str) -> Result<PathBuf, String> {
    if !path.starts_with('/') || path.split('/').any(|c| c == "..") {
        return Err(format!("unexpected memory cgroup path {path:?}"));
    }
    let (root, point) = mountinfo
        .lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut fields = left.split(' ');
            let root = fields.nth(3)?;
            let point = fields.next()?;
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let _source = right.next()?;
            let options = right.next()?;
            (fstype == "cgroup" && options.split(',').any(|o| o == "memory"))
                .then(|| (unescape(root), unescape(point)))
        })
        .ok_or("no cgroup v1 memory hierarchy is mounted")?;
    let rel = if root == "/" {
        Some(path)
    } else {
        path.strip_prefix(root.as_str())
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
    }
    .ok_or_else(|| format!("memory cgroup {path} is outside the mounted {root}"))?;
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        return Err(format!(
            "the container is in the root memory cgroup ({path})"
        ));
    }
    Ok(Path::new(&point).join(rel))
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    String::from_utf8_lossy(&crate::sys::host::unescape_octal(field.as_bytes())).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
25 30 0:22 / /sys rw,nosuid - sysfs sysfs rw
33 25 0:28 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
40 33 0:35 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
41 33 0:36 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
42 33 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_the_v1_memory_cgroup() {
        let v1 = "12:pids:/docker/abc\n4:memory:/docker/abc\n0::/docker/abc\n";
        assert_eq!(v1_memory_path(v1), Some("/docker/abc"));
        assert_eq!(v1_memory_path("3:memory,hugetlb:/x\n"), Some("/x"));
        assert_eq!(v1_memory_path("0::/system.slice/x.scope\n"), None);
        assert_eq!(v1_memory_path("2:cpu,cpuacct:/x\n"), None);
    }

    #[test]
    fn maps_the_cgroup_to_its_directory() {
        assert_eq!(
            v1_memory_dir(MOUNTINFO, "/docker/abc"),
            Ok(PathBuf::from("/sys/fs/cgroup/memory/docker/abc"))
        );
        let nested =
            MOUNTINFO.replace(" / /sys/fs/cgroup/memory", " /docker /sys/fs/cgroup/memory");
        assert_eq!(
            v1_memory_dir(&nested, "/docker/abc"),
            Ok(PathBuf::from("/sys/fs/cgroup/memory/abc"))
        );
        assert!(v1_memory_dir(&nested, "/dockerx/abc").is_err());
        assert!(v1_memory_dir(MOUNTINFO, "/").is_err());
        assert!(v1_memory_dir(MOUNTINFO, "/a/../..").is_err());
        assert!(v1_memory_dir(MOUNTINFO, "x").is_err());
        let no_memory = MOUNTINFO.replace("rw,memory", "rw,pids");
        assert!(v1_memory_dir(&no_memory, "/docker/abc").is_err());
        let spaced = MOUNTINFO.replace("/sys/fs/cgroup/memory", "/sys/fs/cgroup/mem\\040ory");
        assert_eq!(
            v1_memory_dir(&spaced, "/c"),
            Ok(PathBuf::from("/sys/fs/cgroup/mem ory/c"))
        );
    }

    #[test]
    fn bad_arguments_and_state_are_errors() {
        let marker = vibe_policy::KERNEL_TCP_HOOK_MARKER.to_string();
        let args = [marker.clone(), "1048576".to_string()];
        assert!(matches!(run(&args, b"{}"), Err(KernelTcpHookError::NoPid)));
        assert!(matches!(
            run(&args, b"{\"pid\": -1}"),
            Err(KernelTcpHookError::NoPid)
        ));
        assert!(matches!(
            run(&args, b"x"),
            Err(KernelTcpHookError::State(_))
        ));
        assert!(matches!(
            run(&[marker], b"{\"pid\": 1}"),
            Err(KernelTcpHookError::Args(_))
        ));
        // Carried by the network hook: the same bytes, the same checks.
        let flag = vibe_policy::rules::resources::KERNEL_TCP_FLAG.to_string();
        let carried = [flag.clone(), "1048576".to_string(), "m".to_string()];
        assert!(matches!(
            run_carried(&carried, b"{}"),
            Err(KernelTcpHookError::NoPid)
        ));
        assert!(matches!(
            run_carried(&[flag, "m".to_string()], b"{\"pid\": 1}"),
            Err(KernelTcpHookError::Args(_))
        ));
        assert!(run_carried(&["m".to_string()], b"x").is_ok());
    }
}
