//! The real [`HostView`]: what the pure policy engine needs to know about
//! this machine, read lazily (mountinfo only when a bind asks for it).

use std::cell::OnceCell;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use vibe_policy::host::{proc_ns_name, HostView, NamespaceId};
use vibe_policy::host::{FileFacts, HookFile};

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

    // --- client hooks ---
    fn file_facts(&self, path: &Path) -> Option<FileFacts> {
        std::fs::metadata(path).ok().map(|m| facts_of(&m))
    }

    fn oci_hook_files(&self, dir: &Path) -> Vec<HookFile> {
        read_hook_files(dir)
    }

    fn container_id_in_use(&self, runc_root: &Path, id: &str) -> bool {
        crate::stage::container_id_in_use(runc_root, id)
    }
}

// --- client hooks: stat and hooks.d reading ---

/// A hooks.d definition larger than this is not read.
const MAX_HOOK_FILE: u64 = 1 << 20;

fn facts_of(m: &std::fs::Metadata) -> FileFacts {
    FileFacts {
        dev: m.dev(),
        ino: m.ino(),
        uid: m.uid(),
        mode: m.mode(),
    }
}

/// Every `*.json` in `dir`: opened without blocking (a FIFO is skipped),
/// with the facts of the file actually read, so the policy judges the
/// owner of those bytes rather than of a name.
fn read_hook_files(dir: &Path) -> Vec<HookFile> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !name.ends_with(".json") {
            continue;
        }
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
            .open(entry.path());
        let Ok(file) = opened else { continue };
        let Ok(meta) = file.metadata() else { continue };
        if !meta.is_file() || meta.len() > MAX_HOOK_FILE {
            continue;
        }
        let mut content = Vec::new();
        if file.take(MAX_HOOK_FILE).read_to_end(&mut content).is_err() {
            continue;
        }
        files.push(HookFile {
            name,
            facts: facts_of(&meta),
            content,
        });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    files
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
    fn hook_files_are_json_regular_files_with_their_facts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.json"), "{}").unwrap();
        std::fs::write(dir.path().join("a.txt"), "{}").unwrap();
        nix::unistd::mkfifo(&dir.path().join("c.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let host = RealHost::new();
        let files = host.oci_hook_files(dir.path());
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(files[0].name, "b.json");
        assert_eq!(files[0].content, b"{}");
        assert!(files[0].facts.is_regular());
        assert!(host
            .oci_hook_files(Path::new("/nonexistent/hooks.d"))
            .is_empty());
        // /proc/self/exe is the running binary itself.
        let exe = host.file_facts(Path::new("/proc/self/exe")).unwrap();
        let target = std::fs::canonicalize("/proc/self/exe").unwrap();
        assert!(exe.same_file(&host.file_facts(&target).unwrap()));
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
