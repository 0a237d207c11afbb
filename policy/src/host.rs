//! What the policy needs to know about the host, behind a trait so the engine
//! itself does no I/O. The shim implements it for real; tests use
//! `FakeHost` (with the `test-support` feature, or in this crate's tests).

#[cfg(any(test, feature = "test-support"))]
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A namespace's identity: (device, inode) of its nsfs file.
pub type NamespaceId = (u64, u64);

/// The namespace kinds the policy judges, named as in the OCI spec.
pub const NAMESPACE_KINDS: &[&str] = &["pid", "ipc", "uts", "mount", "network", "cgroup"];

/// The `/proc/<pid>/ns/<name>` file name for an OCI namespace type.
pub fn proc_ns_name(kind: &str) -> &str {
    match kind {
        "mount" => "mnt",
        "network" => "net",
        other => other,
    }
}

pub trait HostView {
    /// The canonical path (all symlinks resolved), or `None` if it does not exist.
    fn canonicalize(&self, path: &Path) -> Option<PathBuf>;
    /// The mount point of the mount that contains `path` (canonical input).
    fn mount_point_of(&self, path: &Path) -> Option<PathBuf>;
    /// The namespace that a namespace file (e.g. `/proc/123/ns/net`) refers to.
    fn namespace_id(&self, path: &Path) -> Option<NamespaceId>;
    /// The host's namespace of this OCI kind (from `/proc/1/ns/*`).
    fn host_namespace_id(&self, kind: &str) -> Option<NamespaceId>;
    /// Whether the memory cgroup can limit swap (v1 `memory.memsw.*`, v2
    /// `memory.swap.max`). When not, a swap limit would make runc fail.
    fn swap_limit_supported(&self) -> bool {
        true
    }
    /// The host's RAM in bytes (`MemTotal`), for tmpfs `size=N%`.
    fn memory_total(&self) -> Option<u64> {
        None
    }
    /// `(soft, hard)` of an rlimit (`RLIMIT_NOFILE`) that runc, and so a
    /// process with no such entry, inherits; `None` when unknown.
    fn inherited_rlimit(&self, _name: &str) -> Option<(u64, u64)> {
        None
    }
    /// Whether the host's libseccomp knows this syscall name.
    fn syscall_known(&self, name: &str) -> bool;
    /// The AppArmor profiles loaded in enforce mode, or `None` when the
    /// host has no AppArmor (then runc applies no profile).
    fn apparmor_enforced(&self) -> Option<Vec<String>> {
        None
    }
    /// The host's first regular `(uid, gid)` (`UID_MIN`/`GID_MIN` of
    /// login.defs): every id below is a system account's.
    fn regular_id_min(&self) -> (u32, u32) {
        (1000, 1000)
    }

    // --- client hooks (rules::client_hooks) ---
    /// stat(2) of `path`, following symlinks (so `/proc/<pid>/exe` gives the
    /// file that process runs); `None` if it does not exist.
    fn file_facts(&self, path: &Path) -> Option<FileFacts>;
    /// The `*.json` files directly in an OCI hooks directory (podman's
    /// hooks.d), by file name; empty when the directory is missing.
    fn oci_hook_files(&self, dir: &Path) -> Vec<HookFile>;
    /// Whether a container with this id already exists: under this runc
    /// root, or under any other (vibe-shim's or runc's own state). The
    /// engine-file exemption is only for a container that owns its id.
    fn container_id_in_use(&self, runc_root: &Path, id: &str) -> bool;
    // -- what joining a namespace, a root or a cgroup path may collide with --

    /// The filesystem type of the mount whose mount point is exactly `path`
    /// (canonical input), or `None` when no mount sits there.
    fn mount_fs_type(&self, path: &Path) -> Option<String>;
    /// Whether the network namespace file at `path` holds vibe-shim's table
    /// tagged `tag` (this network policy's fingerprint, `Ours`), another
    /// policy's (`Foreign`) or none; `None` when it cannot be read.
    fn netns_policy_table(&self, path: &Path, tag: &str) -> Option<NetnsTable>;
    /// Whether a process of another mount namespace (another container's)
    /// is in the network namespace the file at `path` names.
    fn netns_in_use(&self, path: &Path) -> Option<bool>;
    /// Whether a cgroup exists at `path` in any hierarchy: an absolute path
    /// from each hierarchy's root, a relative one from this process's own
    /// cgroup (as runc's cgroupfs driver resolves them). `None`: cannot tell.
    fn cgroup_exists(&self, path: &Path) -> Option<bool>;
    /// Whether the cgroup at `path` (read as for `cgroup_exists`) has
    /// processes of its own in any hierarchy. `None`: cannot tell.
    fn cgroup_has_processes(&self, path: &Path) -> Option<bool>;
    /// A live process whose root directory is on the same filesystem as
    /// `path` (same device): its pid, and whether its root is `path` itself
    /// (same inode). `None` when no process's root is there.
    fn live_root_on(&self, _path: &Path) -> Option<(u32, bool)> {
        None
    }
    /// How many mounts in this mount namespace show the same filesystem
    /// subtree as the mount whose mount point is exactly `path` (same device
    /// and root): 1 for a filesystem mounted once, 0 when none sits there.
    fn mount_views(&self, _path: &Path) -> usize {
        1
    }
    /// `(state dir, config.rootfs)` of every runc container whose state dir
    /// matches `pattern` (components `*` or `prefix*` match one directory
    /// level) and holds a readable `state.json`.
    fn runc_rootfses(&self, pattern: &Path) -> Vec<(PathBuf, PathBuf)>;

    // --- user namespaces (rules::userns) ---
    /// What the runtime at `path` says it supports (`runc features`);
    /// `None` when it says nothing it can be judged by.
    fn runtime_features(&self, _path: &Path) -> Option<RuntimeFeatures> {
        None
    }
    /// The running kernel's `(major, minor)`; `None` when unknown.
    fn kernel_release(&self) -> Option<(u32, u32)> {
        None
    }
    /// `(uid, gid)` owning `path` (following symlinks); `None` if it does
    /// not exist.
    fn owner(&self, _path: &Path) -> Option<(u32, u32)> {
        None
    }
}

/// What a runtime supports of user namespaces, from `runc features`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RuntimeFeatures {
    /// `linux.namespaces` lists `user`.
    pub user_namespaces: bool,
    /// `linux.mountExtensions.idmap.enabled`: bind mounts with their own
    /// `uidMappings`/`gidMappings` (runc >= 1.2).
    pub idmap_mounts: bool,
}

impl RuntimeFeatures {
    /// Reads `runc features` output; fields it does not have are `false`.
    pub fn from_json(doc: &serde_json::Value) -> RuntimeFeatures {
        let user_namespaces = doc
            .pointer("/linux/namespaces")
            .and_then(serde_json::Value::as_array)
            .is_some_and(|list| list.iter().any(|k| k == "user"));
        let idmap_mounts = doc
            .pointer("/linux/mountExtensions/idmap/enabled")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        RuntimeFeatures {
            user_namespaces,
            idmap_mounts,
        }
    }
}

/// What a network namespace holds, as far as joining it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsTable {
    Ours,
    Foreign,
    Absent,
}

/// An in-memory host for tests: explicit symlink resolutions, mounts and namespaces.
#[cfg(any(test, feature = "test-support"))]
#[derive(Debug, Clone, Default)]
pub struct FakeHost {
    /// Paths that exist, mapped to their canonical form. A path missing here
    /// canonicalises to itself when `all_paths_exist` is set.
    pub canonical: BTreeMap<PathBuf, PathBuf>,
    pub all_paths_exist: bool,
    /// Mount points on the host; `/` is always one.
    pub mount_points: BTreeSet<PathBuf>,
    pub namespaces: BTreeMap<PathBuf, NamespaceId>,
    pub host_namespaces: BTreeMap<String, NamespaceId>,
    /// Syscall names the fake libseccomp does not know.
    pub unknown_syscalls: BTreeSet<String>,
    /// Set: the fake host cannot limit swap.
    pub no_swap_limit: bool,
    pub memory_total: Option<u64>,
    /// rlimits runc would inherit, by name (`RLIMIT_NOFILE`).
    pub inherited_rlimits: BTreeMap<String, (u64, u64)>,
    // --- client hooks ---
    /// stat results by path; an existing path missing here is a root-owned
    /// 0755 directory (see [`HostView::file_facts`]).
    pub files: BTreeMap<PathBuf, FileFacts>,
    /// OCI hooks directories and their files.
    pub hook_dirs: BTreeMap<PathBuf, Vec<HookFile>>,
    /// Container ids some container already uses (see `container_id_in_use`).
    pub ids_in_use: BTreeSet<String>,
    /// Filesystem type by exact mount point. When `overlay_storage` is set,
    /// a `merged` directory under an `overlay2`/`overlay` storage directory
    /// is an overlay mount point too (the Docker host of the fixtures).
    pub mount_types: BTreeMap<PathBuf, String>,
    pub overlay_storage: bool,
    /// Network namespace files that hold this policy's table.
    pub walled_netns: BTreeSet<PathBuf>,
    /// Network namespace files whose namespace no process is in.
    pub empty_namespaces: BTreeSet<PathBuf>,
    /// Cgroup paths (as passed to `cgroup_exists`) that exist.
    pub cgroups: BTreeSet<PathBuf>,
    /// Existing cgroups that hold processes of their own.
    pub busy_cgroups: BTreeSet<PathBuf>,
    /// runc containers: (state dir, rootfs).
    pub runc_states: Vec<(PathBuf, PathBuf)>,
    /// The first regular (uid, gid); `None`: login.defs' default 1000.
    pub regular_id_min: Option<(u32, u32)>,
    /// Live process roots by path: (pid, exact) as `live_root_on` answers
    /// for a path that starts with the key.
    pub live_roots: BTreeMap<PathBuf, (u32, bool)>,
    /// Mount points shown more than once, with their count.
    pub mount_views: BTreeMap<PathBuf, usize>,
    /// `Some`: the host has AppArmor with these profiles in enforce mode.
    pub apparmor: Option<Vec<String>>,
    /// What `runc features` says, for every runtime path.
    pub runtime_features: Option<RuntimeFeatures>,
    pub kernel_release: Option<(u32, u32)>,
    /// Owners by path; an existing path missing here is 1000:1000's.
    pub owners: BTreeMap<PathBuf, (u32, u32)>,
}

#[cfg(any(test, feature = "test-support"))]
impl FakeHost {
    /// A host where every path exists as written and the host namespaces are
    /// `(1, 4026531835 + i)` for each kind.
    pub fn new() -> Self {
        let mut host = FakeHost {
            all_paths_exist: true,
            overlay_storage: true,
            ..FakeHost::default()
        };
        for (i, kind) in NAMESPACE_KINDS.iter().enumerate() {
            let id = (1, 4_026_531_835 + i as u64);
            host.host_namespaces.insert(kind.to_string(), id);
            host.namespaces.insert(
                PathBuf::from(format!("/proc/1/ns/{}", proc_ns_name(kind))),
                id,
            );
        }
        host.add_docker_engine();
        host
    }
}

#[cfg(any(test, feature = "test-support"))]
impl HostView for FakeHost {
    fn swap_limit_supported(&self) -> bool {
        !self.no_swap_limit
    }

    fn memory_total(&self) -> Option<u64> {
        self.memory_total
    }

    fn inherited_rlimit(&self, name: &str) -> Option<(u64, u64)> {
        self.inherited_rlimits.get(name).copied()
    }

    fn canonicalize(&self, path: &Path) -> Option<PathBuf> {
        // Resolve the longest mapped prefix, like a symlink on the way.
        for ancestor in path.ancestors() {
            if let Some(target) = self.canonical.get(ancestor) {
                let rest = path.strip_prefix(ancestor).ok()?;
                return Some(if rest.as_os_str().is_empty() {
                    target.clone()
                } else {
                    target.join(rest)
                });
            }
        }
        self.all_paths_exist.then(|| path.to_path_buf())
    }

    fn mount_point_of(&self, path: &Path) -> Option<PathBuf> {
        path.ancestors()
            .find(|a| self.mount_points.contains(*a))
            .map(Path::to_path_buf)
            .or_else(|| Some(PathBuf::from("/")))
    }

    fn namespace_id(&self, path: &Path) -> Option<NamespaceId> {
        self.namespaces.get(path).copied()
    }

    fn host_namespace_id(&self, kind: &str) -> Option<NamespaceId> {
        self.host_namespaces.get(kind).copied()
    }

    fn syscall_known(&self, name: &str) -> bool {
        !self.unknown_syscalls.contains(name)
    }

    fn regular_id_min(&self) -> (u32, u32) {
        self.regular_id_min.unwrap_or((1000, 1000))
    }

    fn apparmor_enforced(&self) -> Option<Vec<String>> {
        self.apparmor.clone()
    }

    fn live_root_on(&self, path: &Path) -> Option<(u32, bool)> {
        self.live_roots
            .iter()
            .find(|(root, _)| path.starts_with(root))
            .map(|(root, &(pid, exact))| (pid, exact && root == path))
    }

    fn mount_views(&self, path: &Path) -> usize {
        self.mount_views.get(path).copied().unwrap_or(1)
    }

    // --- client hooks ---
    fn file_facts(&self, path: &Path) -> Option<FileFacts> {
        self.fake_file_facts(path)
    }

    fn oci_hook_files(&self, dir: &Path) -> Vec<HookFile> {
        self.hook_dirs.get(dir).cloned().unwrap_or_default()
    }

    fn container_id_in_use(&self, _runc_root: &Path, id: &str) -> bool {
        self.ids_in_use.contains(id)
    }

    // --- namespaces, root and cgroups ---
    fn mount_fs_type(&self, path: &Path) -> Option<String> {
        if let Some(kind) = self.mount_types.get(path) {
            return Some(kind.clone());
        }
        let storage = path
            .parent()
            .and_then(Path::parent)
            .and_then(Path::file_name);
        let overlay = self.overlay_storage
            && path.file_name().is_some_and(|n| n == "merged")
            && storage.is_some_and(|s| s == "overlay2" || s == "overlay");
        overlay.then(|| "overlay".to_string())
    }

    fn netns_policy_table(&self, path: &Path, _tag: &str) -> Option<NetnsTable> {
        self.namespaces.contains_key(path).then(|| {
            if self.walled_netns.contains(path) {
                NetnsTable::Ours
            } else {
                NetnsTable::Absent
            }
        })
    }

    fn netns_in_use(&self, path: &Path) -> Option<bool> {
        self.namespaces
            .contains_key(path)
            .then(|| !self.empty_namespaces.contains(path))
    }

    fn cgroup_exists(&self, path: &Path) -> Option<bool> {
        Some(self.cgroups.contains(path))
    }

    fn cgroup_has_processes(&self, path: &Path) -> Option<bool> {
        Some(self.busy_cgroups.contains(path))
    }

    fn runtime_features(&self, _path: &Path) -> Option<RuntimeFeatures> {
        self.runtime_features
    }

    fn kernel_release(&self) -> Option<(u32, u32)> {
        self.kernel_release
    }

    fn owner(&self, path: &Path) -> Option<(u32, u32)> {
        let exists = self.canonicalize(path).is_some();
        self.owners
            .get(path)
            .copied()
            .or(exists.then_some((1000, 1000)))
    }

    fn runc_rootfses(&self, pattern: &Path) -> Vec<(PathBuf, PathBuf)> {
        self.runc_states
            .iter()
            .filter(|(dir, _)| glob_match(pattern, dir))
            .cloned()
            .collect()
    }
}

// --- client hooks: file facts and OCI hooks directories ---

/// What stat(2) says about a file: its identity, owner and mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileFacts {
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
    /// `st_mode`: file type and permission bits.
    pub mode: u32,
}

impl FileFacts {
    pub const TYPE_MASK: u32 = 0o170_000;
    pub const REGULAR: u32 = 0o100_000;
    pub const DIRECTORY: u32 = 0o040_000;

    /// Whether both name the same file.
    pub fn same_file(&self, other: &FileFacts) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }
    pub fn is_regular(&self) -> bool {
        self.mode & Self::TYPE_MASK == Self::REGULAR
    }
    /// Owned by root and writable by nobody else.
    pub fn root_only_writable(&self) -> bool {
        self.uid == 0 && self.mode & 0o022 == 0
    }
}

/// One file of an OCI hooks directory, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFile {
    pub name: String,
    /// Facts of the file read (after following a symlink).
    pub facts: FileFacts,
    pub content: Vec<u8>,
}

/// The fixtures' Docker engine: pid 2743 runs `/usr/sbin/dockerd`.
#[cfg(any(test, feature = "test-support"))]
pub const FAKE_DOCKERD: &str = "/usr/sbin/dockerd";
#[cfg(any(test, feature = "test-support"))]
pub const FAKE_DOCKERD_PID: u32 = 2743;

#[cfg(any(test, feature = "test-support"))]
impl FakeHost {
    /// A root-owned, 0755 regular file at `path` with a fresh identity.
    pub fn add_binary(&mut self, path: &str) -> FileFacts {
        let facts = FileFacts {
            dev: 2,
            ino: 1000 + self.files.len() as u64,
            uid: 0,
            mode: FileFacts::REGULAR | 0o755,
        };
        self.files.insert(PathBuf::from(path), facts);
        facts
    }

    /// Makes `/proc/<pid>/exe` the file at `path` (which must be added).
    pub fn add_process(&mut self, pid: u32, path: &str) {
        if let Some(facts) = self.files.get(Path::new(path)).copied() {
            self.files
                .insert(PathBuf::from(format!("/proc/{pid}/exe")), facts);
        }
    }

    fn add_docker_engine(&mut self) {
        self.add_binary(FAKE_DOCKERD);
        self.add_process(FAKE_DOCKERD_PID, FAKE_DOCKERD);
    }

    fn fake_file_facts(&self, path: &Path) -> Option<FileFacts> {
        if let Some(facts) = self.files.get(path) {
            return Some(*facts);
        }
        let canonical = self.canonicalize(path)?;
        if let Some(facts) = self.files.get(&canonical) {
            return Some(*facts);
        }
        // Any other existing path: a root-owned directory with its own identity.
        let ino = canonical
            .as_os_str()
            .as_encoded_bytes()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
            });
        Some(FileFacts {
            dev: 1,
            ino,
            uid: 0,
            mode: FileFacts::DIRECTORY | 0o755,
        })
    }
}

/// Whether `path` matches `pattern` component by component, where a
/// pattern component `*` or `prefix*` matches one component.
#[cfg(any(test, feature = "test-support"))]
pub fn glob_match(pattern: &Path, path: &Path) -> bool {
    let (mut p, mut q) = (pattern.components(), path.components());
    loop {
        match (p.next(), q.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) => {
                let (a, b) = (
                    a.as_os_str().to_string_lossy(),
                    b.as_os_str().to_string_lossy(),
                );
                let ok = match a.strip_suffix('*') {
                    Some(prefix) => b.starts_with(prefix),
                    None => a == b,
                };
                if !ok {
                    return false;
                }
            }
            _ => return false,
        }
    }
}
