//! What the policy needs to know about the host, behind a trait so the engine
//! itself does no I/O. The shim implements it for real; tests use [`FakeHost`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::config::NetworkSection;

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

    // -- namespaces, root and cgroups (issue 8 item 6) --

    /// The filesystem type of the mount whose mount point is exactly `path`
    /// (canonical input), or `None` when no mount sits there.
    fn mount_fs_type(&self, path: &Path) -> Option<String>;
    /// Whether the network namespace file at `path` holds vibe-shim's table
    /// for this network policy (`Ours`), another policy's (`Foreign`) or
    /// none; `None` when it cannot be read.
    fn netns_policy_table(&self, path: &Path, net: &NetworkSection) -> Option<NetnsTable>;
    /// Whether any process is in the network namespace the file at `path` names.
    fn netns_in_use(&self, path: &Path) -> Option<bool>;
    /// Whether a cgroup exists at `path` in any hierarchy: an absolute path
    /// from each hierarchy's root, a relative one from this process's own
    /// cgroup (as runc's cgroupfs driver resolves them). `None`: cannot tell.
    fn cgroup_exists(&self, path: &Path) -> Option<bool>;
    /// `(state dir, config.rootfs)` of every runc container whose state dir
    /// matches `pattern` (components `*` or `prefix*` match one directory
    /// level) and holds a readable `state.json`.
    fn runc_rootfses(&self, pattern: &Path) -> Vec<(PathBuf, PathBuf)>;
}

/// What a network namespace holds, as far as joining it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsTable {
    Ours,
    Foreign,
    Absent,
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
    /// runc containers: (state dir, rootfs).
    pub runc_states: Vec<(PathBuf, PathBuf)>,
}

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

    fn netns_policy_table(&self, path: &Path, _net: &NetworkSection) -> Option<NetnsTable> {
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

    fn runc_rootfses(&self, pattern: &Path) -> Vec<(PathBuf, PathBuf)> {
        self.runc_states
            .iter()
            .filter(|(dir, _)| glob_match(pattern, dir))
            .cloned()
            .collect()
    }
}

/// Whether `path` matches `pattern` component by component, where a
/// pattern component `*` or `prefix*` matches one component.
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
