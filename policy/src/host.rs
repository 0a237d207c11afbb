//! What the policy needs to know about the host, behind a trait so the engine
//! itself does no I/O. The shim implements it for real; tests use [`FakeHost`].

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
    /// Whether the host's libseccomp knows this syscall name.
    fn syscall_known(&self, name: &str) -> bool;
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
}

/// An in-memory host for tests: explicit symlink resolutions, mounts and namespaces.
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
}

impl FakeHost {
    /// A host where every path exists as written and the host namespaces are
    /// `(1, 4026531835 + i)` for each kind.
    pub fn new() -> Self {
        let mut host = FakeHost {
            all_paths_exist: true,
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
        host
    }
}

impl HostView for FakeHost {
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

    fn swap_limit_supported(&self) -> bool {
        !self.no_swap_limit
    }

    fn memory_total(&self) -> Option<u64> {
        self.memory_total
    }
}
