//! The real [`HostView`]: what the pure policy engine needs to know about
//! this machine, read lazily (mountinfo only when a bind asks for it).

use std::cell::OnceCell;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use vibe_policy::host::{proc_ns_name, HostView, NamespaceId};

#[derive(Default)]
pub struct RealHost {
    mount_points: OnceCell<Vec<PathBuf>>,
}

impl RealHost {
    pub fn new() -> Self {
        Self::default()
    }

    fn mount_points(&self) -> &[PathBuf] {
        self.mount_points.get_or_init(|| {
            std::fs::read("/proc/self/mountinfo")
                .map(|text| parse_mount_points(&text))
                .unwrap_or_default()
        })
    }
}

/// Mount points (field 5) of every line of a mountinfo file.
pub fn parse_mount_points(text: &[u8]) -> Vec<PathBuf> {
    text.split(|&b| b == b'\n')
        .filter_map(|line| line.split(|&b| b == b' ').nth(4))
        .map(|field| PathBuf::from(std::ffi::OsStr::from_bytes(&unescape_octal(field))))
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let digits = field.get(i + 1..i + 4);
        let octal = digits.filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (field[i], octal) {
            (b'\\', Some(d)) => {
                let value = d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                out.push(value as u8);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// The longest mount point that contains `path` (component-wise).
pub fn longest_mount_point(mounts: &[PathBuf], path: &Path) -> Option<PathBuf> {
    mounts
        .iter()
        .filter(|m| path.starts_with(m))
        .max_by_key(|m| m.as_os_str().len())
        .cloned()
}

fn stat_id(path: &Path) -> Option<NamespaceId> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl HostView for RealHost {
    fn canonicalize(&self, path: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(path).ok()
    }

    fn mount_point_of(&self, path: &Path) -> Option<PathBuf> {
        longest_mount_point(self.mount_points(), path)
    }

    fn namespace_id(&self, path: &Path) -> Option<NamespaceId> {
        stat_id(path)
    }

    /// The host's namespace is pid 1's. Where pid 1's ns links are not
    /// readable even for root (some sandboxes and VMs), fall back to our own:
    /// the shim runs in the engine's namespaces, which are exactly the ones a
    /// "host" namespace request would share.
    fn host_namespace_id(&self, kind: &str) -> Option<NamespaceId> {
        let name = proc_ns_name(kind);
        stat_id(&Path::new("/proc/1/ns").join(name))
            .or_else(|| stat_id(&Path::new("/proc/self/ns").join(name)))
    }

    fn syscall_known(&self, name: &str) -> bool {
        libseccomp::ScmpSyscall::from_name(name).is_ok()
    }

    /// v1: the memsw files exist (`swapaccount=1`). v2: a child cgroup
    /// has `memory.swap.max` (the root cgroup never does).
    fn swap_limit_supported(&self) -> bool {
        let root = Path::new("/sys/fs/cgroup");
        if root.join("memory/memory.memsw.limit_in_bytes").exists() {
            return true;
        }
        if !root.join("cgroup.controllers").exists() {
            return false;
        }
        std::fs::read_dir(root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .find(|dir| dir.join("memory.max").exists())
            .is_some_and(|dir| dir.join("memory.swap.max").exists())
    }

    fn memory_total(&self) -> Option<u64> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        parse_mem_total(&text)
    }

    /// Our own limits: vibe-shim execs runc, which keeps them.
    fn inherited_rlimit(&self, name: &str) -> Option<(u64, u64)> {
        let text = std::fs::read_to_string("/proc/self/limits").ok()?;
        parse_limit(&text, name)
    }
}

/// The `/proc/<pid>/limits` row names, by rlimit.
const LIMIT_ROWS: &[(&str, &str)] = &[
    ("RLIMIT_CPU", "Max cpu time"),
    ("RLIMIT_FSIZE", "Max file size"),
    ("RLIMIT_DATA", "Max data size"),
    ("RLIMIT_STACK", "Max stack size"),
    ("RLIMIT_CORE", "Max core file size"),
    ("RLIMIT_RSS", "Max resident set"),
    ("RLIMIT_NPROC", "Max processes"),
    ("RLIMIT_NOFILE", "Max open files"),
    ("RLIMIT_MEMLOCK", "Max locked memory"),
    ("RLIMIT_AS", "Max address space"),
    ("RLIMIT_LOCKS", "Max file locks"),
    ("RLIMIT_SIGPENDING", "Max pending signals"),
    ("RLIMIT_MSGQUEUE", "Max msgqueue size"),
    ("RLIMIT_NICE", "Max nice priority"),
    ("RLIMIT_RTPRIO", "Max realtime priority"),
    ("RLIMIT_RTTIME", "Max realtime timeout"),
];

/// `(soft, hard)` of one rlimit from `/proc/<pid>/limits` text.
pub fn parse_limit(text: &str, name: &str) -> Option<(u64, u64)> {
    let (_, row) = LIMIT_ROWS.iter().find(|(n, _)| *n == name)?;
    let line = text.lines().find(|l| l.starts_with(row))?;
    let mut values = line[row.len()..].split_whitespace().map(|v| match v {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    });
    Some((values.next()??, values.next()??))
}

/// `MemTotal:  24000000 kB` in bytes.
pub fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &[u8] = b"22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n\
        30 22 0:25 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n\
        40 22 254:1 /srv/a\\040b /mnt/with\\040space rw - ext4 /dev/vda1 rw\n\
        41 22 0:40 / /var/lib/docker/volumes/x/_data rw - ext4 /dev/vda2 rw\n";

    #[test]
    fn parses_and_unescapes_mount_points() {
        let mounts = parse_mount_points(MOUNTINFO);
        assert_eq!(mounts.len(), 4);
        assert_eq!(mounts[2], PathBuf::from("/mnt/with space"));
    }

    #[test]
    fn longest_prefix_wins_component_wise() {
        let mounts = parse_mount_points(MOUNTINFO);
        let of = |p: &str| longest_mount_point(&mounts, Path::new(p)).unwrap();
        assert_eq!(of("/sys/fs"), PathBuf::from("/sys"));
        assert_eq!(of("/system"), PathBuf::from("/"));
        assert_eq!(of("/mnt/with space/x"), PathBuf::from("/mnt/with space"));
        assert_eq!(
            of("/var/lib/docker/volumes/x/_data"),
            PathBuf::from("/var/lib/docker/volumes/x/_data")
        );
    }

    #[test]
    fn mem_total_is_parsed_in_bytes() {
        assert_eq!(
            parse_mem_total("MemFree: 1 kB\nMemTotal:       24000 kB\n"),
            Some(24_576_000)
        );
        assert_eq!(parse_mem_total("MemTotal: lots\n"), None);
        assert!(RealHost::new().memory_total().unwrap() > 1 << 20);
    }

    #[test]
    fn limits_are_parsed() {
        let text = "Limit Soft Limit Hard Limit Units\n\
                    Max open files            1024                 unlimited            files\n\
                    Max nice priority         0                    0\n";
        assert_eq!(parse_limit(text, "RLIMIT_NOFILE"), Some((1024, u64::MAX)));
        assert_eq!(parse_limit(text, "RLIMIT_NICE"), Some((0, 0)));
        assert_eq!(parse_limit(text, "RLIMIT_CORE"), None);
        assert!(RealHost::new().inherited_rlimit("RLIMIT_NOFILE").is_some());
    }

    #[test]
    fn real_host_basics() {
        let host = RealHost::new();
        assert!(host.syscall_known("read"));
        assert!(!host.syscall_known("no_such_syscall_xyz"));
        assert_eq!(
            host.mount_point_of(Path::new("/")),
            Some(PathBuf::from("/"))
        );
        let me = host.namespace_id(Path::new("/proc/self/ns/net"));
        assert!(me.is_some());
        assert_eq!(
            host.canonicalize(Path::new("/proc/../proc/self/..")),
            Some(PathBuf::from("/proc"))
        );
    }
}
