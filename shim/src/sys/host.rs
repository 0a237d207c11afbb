//! The real [`HostView`]: what the pure policy engine needs to know about
//! this machine, read lazily (mountinfo only when a bind asks for it).

use std::cell::OnceCell;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use vibe_policy::host::{proc_ns_name, HostView, NamespaceId, NetnsTable};
use vibe_policy::host::{FileFacts, HookFile, RuntimeFeatures};

/// Each file is read once per verb: every question about the mount table
/// is answered from one snapshot (a create asked up to four times), and
/// our own limits do not change before we exec runc.
#[derive(Default)]
pub struct RealHost {
    mountinfo: OnceCell<Option<Vec<u8>>>,
    mount_points: OnceCell<Vec<PathBuf>>,
    limits: OnceCell<Option<String>>,
    features: OnceCell<Option<RuntimeFeatures>>,
}

impl RealHost {
    pub fn new() -> Self {
        Self::default()
    }

    fn mountinfo(&self) -> Option<&[u8]> {
        self.mountinfo
            .get_or_init(|| std::fs::read("/proc/self/mountinfo").ok())
            .as_deref()
    }

    fn mount_points(&self) -> &[PathBuf] {
        self.mount_points
            .get_or_init(|| self.mountinfo().map(parse_mount_points).unwrap_or_default())
    }
}

/// Mount points (field 5) of every line of a mountinfo file.
pub fn parse_mount_points(text: &[u8]) -> Vec<PathBuf> {
    text.split(|&b| b == b'\n')
        .filter_map(|line| line.split(|&b| b == b' ').nth(4))
        .map(|field| PathBuf::from(std::ffi::OsStr::from_bytes(&unescape_octal(field))))
        .collect()
}

/// mountinfo's `\ooo` escapes (one home: vibe-policy, which judges mountinfo too).
pub(crate) use vibe_policy::lang::text::unescape_octal;

/// The longest mount point that contains `path` (component-wise).
pub fn longest_mount_point(mounts: &[PathBuf], path: &Path) -> Option<PathBuf> {
    mounts
        .iter()
        .filter(|m| path.starts_with(m))
        .max_by_key(|m| m.as_os_str().len())
        .cloned()
}

/// Where `path` is in each of this process's cgroup hierarchies (see
/// [`cgroup_dirs`]); `None` when that cannot be read.
fn hierarchy_dirs(path: &Path) -> Option<Vec<PathBuf>> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let v2_root = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let dirs = cgroup_dirs(&own, v2_root, path);
    (!dirs.is_empty()).then_some(dirs)
}

/// Every process's pid and `/proc/<pid>` directory; `None` without /proc.
fn processes() -> Option<impl Iterator<Item = (u32, PathBuf)>> {
    let entries = std::fs::read_dir("/proc").ok()?;
    Some(entries.flatten().filter_map(|entry| {
        let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
        Some((pid, entry.path()))
    }))
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

    fn runtime_features(&self, path: &Path) -> Option<RuntimeFeatures> {
        *self.features.get_or_init(|| runtime_features(path))
    }

    fn kernel_release(&self) -> Option<(u32, u32)> {
        let uname = nix::sys::utsname::uname().ok()?;
        let release = uname.release().to_str()?;
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    }

    fn owner(&self, path: &Path) -> Option<(u32, u32)> {
        std::fs::metadata(path).ok().map(|m| (m.uid(), m.gid()))
    }

    fn oci_hook_files(&self, dir: &Path) -> Vec<HookFile> {
        read_hook_files(dir)
    }

    fn container_id_in_use(&self, runc_root: &Path, id: &str) -> bool {
        crate::sys::stage::container_id_in_use(runc_root, id)
    }

    fn mount_fs_type(&self, path: &Path) -> Option<String> {
        mount_fs_type_in(self.mountinfo()?, path)
    }

    fn netns_policy_table(&self, path: &Path, tag: &str) -> Option<NetnsTable> {
        Some(match vibe_hooks::netns_policy_table(path, tag).ok()? {
            Some(true) => NetnsTable::Ours,
            Some(false) => NetnsTable::Foreign,
            None => NetnsTable::Absent,
        })
    }

    /// Compares with `/proc/<pid>/ns/net` of every process outside this
    /// process's mount namespace. Another container's process is always in
    /// a mount namespace of its own; an engine's is not, and podman's main
    /// thread stays in the namespace it made (a Go thread locked to unshare
    /// is wedged, not ended, when it is the main one).
    fn netns_in_use(&self, path: &Path) -> Option<bool> {
        let target = stat_id(path)?;
        let own_mnt = stat_id(Path::new("/proc/self/ns/mnt"))?;
        Some(processes()?.any(|(_, dir)| {
            stat_id(&dir.join("ns/net")) == Some(target)
                && stat_id(&dir.join("ns/mnt")).is_some_and(|mnt| mnt != own_mnt)
        }))
    }

    /// Compares with `/proc/<pid>/root` of every other process; an exact
    /// match wins over a process merely rooted on the same filesystem.
    fn live_root_on(&self, path: &Path) -> Option<(u32, bool)> {
        let (dev, ino) = stat_id(path)?;
        let own = std::process::id();
        let mut same_fs = None;
        for (pid, dir) in processes()?.filter(|(pid, _)| *pid != own) {
            match stat_id(&dir.join("root")) {
                Some(id) if id == (dev, ino) => return Some((pid, true)),
                Some((d, _)) if d == dev && same_fs.is_none() => same_fs = Some((pid, false)),
                _ => {}
            }
        }
        same_fs
    }

    fn mount_views(&self, path: &Path) -> usize {
        self.mountinfo()
            .map(|text| mount_views_in(text, path))
            .unwrap_or(0)
    }

    fn apparmor_enforced(&self) -> Option<Vec<String>> {
        let enabled = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled").ok()?;
        if !enabled.trim().starts_with('Y') {
            return None;
        }
        // Enabled but unreadable (securityfs not mounted): nothing is loaded
        // as far as we can tell, so an unconfined request is refused.
        let text =
            std::fs::read_to_string("/sys/kernel/security/apparmor/profiles").unwrap_or_default();
        Some(enforced_profiles(&text))
    }

    fn regular_id_min(&self) -> (u32, u32) {
        let text = std::fs::read_to_string("/etc/login.defs").unwrap_or_default();
        login_defs_id_min(&text)
    }

    fn cgroup_exists(&self, path: &Path) -> Option<bool> {
        Some(hierarchy_dirs(path)?.iter().any(|d| d.exists()))
    }

    fn cgroup_has_processes(&self, path: &Path) -> Option<bool> {
        let mut busy = false;
        for dir in hierarchy_dirs(path)? {
            match std::fs::read(dir.join("cgroup.procs")) {
                Ok(procs) => busy |= procs.iter().any(|b| !b.is_ascii_whitespace()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => return None,
            }
        }
        Some(busy)
    }

    fn runc_rootfses(&self, pattern: &Path) -> Vec<(PathBuf, PathBuf)> {
        expand_glob(pattern)
            .into_iter()
            .filter_map(|dir| {
                let text = std::fs::read(dir.join("state.json")).ok()?;
                let state: RuncState = serde_json::from_slice(&text).ok()?;
                Some((dir, state.config.rootfs))
            })
            .collect()
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
        let text = self
            .limits
            .get_or_init(|| std::fs::read_to_string("/proc/self/limits").ok());
        parse_limit(text.as_deref()?, name)
    }
}

/// The `/proc/<pid>/limits` row names, by rlimit (one home: vibe-policy,
/// which reads the init's limits at start too).
use vibe_policy::assurance::LIMIT_ROWS;

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

// -- namespaces, root and cgroups: what the rules compare a spec against --

/// The part of runc's `state.json` that names the container's rootfs.
#[derive(serde::Deserialize)]
struct RuncState {
    config: RuncStateConfig,
}

#[derive(serde::Deserialize)]
struct RuncStateConfig {
    rootfs: PathBuf,
}

/// The filesystem type of the topmost mount at exactly `path`.
pub fn mount_fs_type_in(text: &[u8], path: &Path) -> Option<String> {
    // The last line for a point is the mount on top.
    text.split(|&b| b == b'\n').rev().find_map(|line| {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let point = fields.get(4)?;
        let dash = fields.iter().position(|f| *f == b"-")?;
        let kind = fields.get(dash + 1)?;
        (Path::new(std::ffi::OsStr::from_bytes(&unescape_octal(point))) == path)
            .then(|| String::from_utf8_lossy(kind).into_owned())
    })
}

/// Where `path` would be in each hierarchy listed in `own` (the text of
/// /proc/self/cgroup): under the hierarchy's root when absolute, under this
/// process's cgroup when relative (runc's cgroupfs driver). v1 hierarchies
/// are mounted at /sys/fs/cgroup/<controllers>; v2 at /sys/fs/cgroup when
/// `v2_root`, else at /sys/fs/cgroup/unified (hybrid).
pub fn cgroup_dirs(own: &str, v2_root: bool, path: &Path) -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    let rel = path.strip_prefix("/").unwrap_or(path);
    own.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, own_path) = (parts.next()?, parts.next()?, parts.next()?);
            let mount = match controllers {
                "" if v2_root => base.to_path_buf(),
                "" => base.join("unified"),
                c => base.join(c.strip_prefix("name=").unwrap_or(c)),
            };
            let start = if path.is_absolute() {
                mount
            } else {
                mount.join(own_path.trim_start_matches('/'))
            };
            Some(start.join(rel))
        })
        .collect()
}

/// The directories matching `pattern`, where a component `*` or `prefix*`
/// matches any one directory entry starting with the prefix.
fn expand_glob(pattern: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from("/")];
    for component in pattern.components().skip(1) {
        let part = component.as_os_str().to_string_lossy();
        let Some(prefix) = part.strip_suffix('*') else {
            found.iter_mut().for_each(|d| d.push(&*part));
            continue;
        };
        found = found
            .iter()
            .filter_map(|dir| std::fs::read_dir(dir).ok())
            .flatten()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
            .map(|e| e.path())
            .collect();
    }
    found.retain(|d| d.is_dir());
    found
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

/// How many mountinfo lines show the same device and root as the topmost
/// mount at `path`.
pub fn mount_views_in(text: &[u8], path: &Path) -> usize {
    let lines: Vec<Vec<&[u8]>> = text
        .split(|&b| b == b'\n')
        .map(|line| line.split(|&b| b == b' ').collect::<Vec<_>>())
        .filter(|fields| fields.len() > 4)
        .collect();
    let at = |fields: &Vec<&[u8]>| {
        Path::new(std::ffi::OsStr::from_bytes(&unescape_octal(fields[4]))) == path
    };
    let Some(top) = lines.iter().rev().find(|f| at(f)) else {
        return 0;
    };
    let key = (top[2], top[3]);
    lines.iter().filter(|f| (f[2], f[3]) == key).count()
}

/// The names of the profiles in enforce mode, from AppArmor's `profiles`
/// file (`name (mode)` per line).
pub fn enforced_profiles(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.strip_suffix(" (enforce)"))
        .map(str::to_string)
        .collect()
}

/// `UID_MIN` and `GID_MIN` of a login.defs text; 1000 each when absent or
/// unreadable (shadow's own default).
pub fn login_defs_id_min(text: &str) -> (u32, u32) {
    let value = |key: &str| {
        text.lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some(key)).then(|| words.next()?.parse::<u32>().ok())?
            })
            .next_back()
            .unwrap_or(1000)
    };
    (value("UID_MIN"), value("GID_MIN"))
}

/// `RUNTIME features` (runc >= 1.1), run only when a policy asks for user
/// namespaces. The real runc under lockdown has no execute bit: then its
/// sealed copy runs, as for every other verb.
fn runtime_features(path: &Path) -> Option<RuntimeFeatures> {
    use std::os::fd::AsRawFd;
    let run = |program: &Path| {
        std::process::Command::new(program)
            .arg("features")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .env(crate::runtime::ACTIVE_ENV, "1")
            .output()
    };
    let output = match run(path) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let memfd = crate::runtime::sealed_copy(path).ok()?;
            run(Path::new(&format!("/proc/self/fd/{}", memfd.as_raw_fd())))
        }
        other => other,
    }
    .ok()?;
    if !output.status.success() {
        return None;
    }
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    Some(RuntimeFeatures::from_json(&doc))
}

#[cfg(test)]
mod tests {
    #[test]
    fn mount_views_count_the_same_device_and_root() {
        let text = b"30 1 0:40 / /var/lib/d/overlay2/a/merged rw - overlay overlay rw\n\
            31 1 0:41 / /var/lib/d/overlay2/b/merged rw - overlay overlay rw\n\
            32 1 0:40 / /tmp/second rw - overlay overlay rw\n\
            33 1 0:40 /etc /tmp/etc rw - overlay overlay rw\n";
        let views = |p: &str| super::mount_views_in(text, std::path::Path::new(p));
        assert_eq!(views("/var/lib/d/overlay2/a/merged"), 2);
        assert_eq!(views("/var/lib/d/overlay2/b/merged"), 1);
        assert_eq!(views("/nowhere"), 0);
    }

    #[test]
    fn enforced_apparmor_profiles_are_read_by_mode() {
        let text = "docker-default (enforce)\nlax (complain)\n/usr/bin/man (enforce)\n";
        assert_eq!(
            super::enforced_profiles(text),
            ["docker-default", "/usr/bin/man"]
        );
    }

    #[test]
    fn login_defs_gives_the_first_regular_ids() {
        let text = "# UID_MIN 5\nUID_MIN\t\t 2000\nGID_MIN 3000\nSYS_UID_MIN 100\n";
        assert_eq!(super::login_defs_id_min(text), (2000, 3000));
        assert_eq!(super::login_defs_id_min(""), (1000, 1000));
        assert_eq!(super::login_defs_id_min("UID_MIN x\n"), (1000, 1000));
    }

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
    fn mount_type_of_the_top_mount_at_a_point() {
        let text = b"1 0 0:1 / / rw - ext4 /dev/vda1 rw\n\
            2 1 0:2 / /m\\040x rw shared:3 - overlay overlay rw,lowerdir=a\n\
            3 1 0:3 / /t rw - tmpfs tmpfs rw\n\
            4 3 0:4 / /t rw - proc proc rw\n";
        let of = |p: &str| mount_fs_type_in(text, Path::new(p));
        assert_eq!(of("/m x").as_deref(), Some("overlay"));
        assert_eq!(of("/t").as_deref(), Some("proc"));
        assert_eq!(of("/m"), None);
        assert_eq!(of("/").as_deref(), Some("ext4"));
    }

    #[test]
    fn cgroup_dirs_per_hierarchy() {
        let own = "9:name=systemd:/\n4:memory:/a/b\n1:cpu,cpuacct:/\n0::/u\n";
        let dirs = cgroup_dirs(own, false, Path::new("/docker/x"));
        assert_eq!(
            dirs,
            [
                "/sys/fs/cgroup/systemd/docker/x",
                "/sys/fs/cgroup/memory/docker/x",
                "/sys/fs/cgroup/cpu,cpuacct/docker/x",
                "/sys/fs/cgroup/unified/docker/x",
            ]
            .map(PathBuf::from)
        );
        let dirs = cgroup_dirs("0::/u\n", true, Path::new("id"));
        assert_eq!(dirs, [PathBuf::from("/sys/fs/cgroup/u/id")]);
        let dirs = cgroup_dirs("4:memory:/a/b\n", false, Path::new("."));
        assert_eq!(dirs, [PathBuf::from("/sys/fs/cgroup/memory/a/b/.")]);
    }

    #[test]
    fn real_cgroups_and_globs() {
        let host = RealHost::new();
        assert_eq!(host.cgroup_exists(Path::new("/")), Some(true));
        assert_eq!(
            host.cgroup_exists(Path::new("/vibe-no-such-cgroup-xyz")),
            Some(false)
        );
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("runtime-a/ns/c1");
        std::fs::create_dir_all(&c).unwrap();
        std::fs::write(
            c.join("state.json"),
            r#"{"id":"c1","config":{"rootfs":"/r/1"}}"#,
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("runtime-b/ns/c2")).unwrap();
        let found = host.runc_rootfses(&dir.path().join("runtime-*/*/*"));
        assert_eq!(found, [(c, PathBuf::from("/r/1"))]);
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

    #[test]
    fn one_snapshot_answers_every_mount_and_limit_question() {
        let host = RealHost::new();
        let fresh = std::fs::read("/proc/self/mountinfo").unwrap();
        assert_eq!(
            host.mount_fs_type(Path::new("/proc")).as_deref(),
            Some("proc")
        );
        assert_eq!(
            host.mount_fs_type(Path::new("/")),
            mount_fs_type_in(&fresh, Path::new("/"))
        );
        assert_eq!(
            host.mount_views(Path::new("/")),
            mount_views_in(&fresh, Path::new("/"))
        );
        assert!(host.mount_points().contains(&PathBuf::from("/proc")));
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        for name in ["RLIMIT_NOFILE", "RLIMIT_NPROC"] {
            assert_eq!(host.inherited_rlimit(name), parse_limit(&limits, name));
            // The second answer comes from the same read.
            assert_eq!(host.inherited_rlimit(name), parse_limit(&limits, name));
        }
    }
}
