//! `root.path` is this container's own root filesystem, written back as the
//! canonical absolute path runc will use. Own means one of:
//!
//! - a directory strictly inside the bundle (`<bundle>/rootfs`: containerd
//!   and ctr, where the shim mounts the snapshot there, and raw runc
//!   bundles), the bundle itself not being `/`;
//! - an overlay mount point of its own (Docker's
//!   `/var/lib/docker/overlay2/<id>/merged`, podman's
//!   `/var/lib/containers/storage/overlay/<id>/merged`): a plain host
//!   directory is never a mount point of type overlay;
//!
//! and in both cases not the rootfs of another runc container (the
//! `config.rootfs` in `state.json` under this runc root, its sibling
//! namespaces and runtimes, and the well-known runc roots). `/` is never a
//! rootfs. Other storage drivers (vfs, btrfs, zfs, devicemapper) are refused.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::{CreateContext, RuleContext};
use crate::lang::json::{clean_path, object_at, set};

const RULE: &str = "root_path";
const FIELD: &str = "/root/path";

/// runc roots of other engines, as `runc_rootfses` patterns of container
/// state dirs: plain runc and podman, containerd's per-namespace roots,
/// Docker's per-runtime, per-namespace roots.
const KNOWN_STATE_DIRS: &[&str] = &[
    "/run/runc/*",
    "/run/containerd/runc/*/*",
    "/run/docker/runtime-*/*/*",
];

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some(create) = cx.create else {
        return Ok(());
    };
    let raw = spec
        .pointer(FIELD)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let refuse = |reason: String| Err(Denial::new(RULE, FIELD, raw.clone(), reason));
    if raw.is_empty() {
        return refuse("no root filesystem path".into());
    }
    let joined = if Path::new(&raw).is_absolute() {
        PathBuf::from(&raw)
    } else if create.bundle.is_absolute() {
        create.bundle.join(&raw)
    } else {
        return refuse("a relative root path needs an absolute bundle directory".into());
    };
    // Cleaning before resolving may differ from the kernel's walk through a
    // symlink and `..`, but what is judged is written back, so runc uses it.
    let joined = PathBuf::from(&*clean_path(&joined.to_string_lossy()));
    let Some(root) = cx.host.canonicalize(&joined) else {
        return refuse("the root filesystem does not exist".into());
    };
    if root == Path::new("/") {
        return refuse("the host's / is not a container root filesystem".into());
    }
    if !inside_bundle(&root, create, cx) && !is_overlay_mount(&root, cx) {
        return refuse(format!(
            "{} is not this container's own root filesystem: neither inside the bundle \
             nor an overlay mount point",
            root.display()
        ));
    }
    if let Some(other) = other_container_with(&root, create, cx) {
        return refuse(format!(
            "{} is the root filesystem of another container ({})",
            root.display(),
            other.display()
        ));
    }
    if let Some(reason) = in_use_elsewhere(&root, inside_bundle(&root, create, cx), cx) {
        return refuse(format!("{}: {reason}", root.display()));
    }
    let canonical = root.to_string_lossy().into_owned();
    if canonical != raw {
        let after = Value::from(canonical);
        let before = set(object_at(spec, "root"), "path", after.clone());
        rec.change(RULE, FIELD, before, after);
    }
    Ok(())
}

/// Strictly inside the canonical bundle, which is not `/`.
fn inside_bundle(root: &Path, create: &CreateContext, cx: &RuleContext) -> bool {
    if !create.bundle.is_absolute() {
        return false;
    }
    match cx.host.canonicalize(&create.bundle) {
        Some(bundle) => bundle != Path::new("/") && root != bundle && root.starts_with(&bundle),
        None => false,
    }
}

/// Judged on the filesystem itself, whatever engine layout holds its state:
/// a new container's root is no live process's root (nor on the overlay
/// one is rooted in), and an overlay root outside the bundle (Docker's and
/// podman's `merged`) is mounted once, by its engine. A snapshot mounted
/// inside the bundle may show twice (BuildKit's executor does).
fn in_use_elsewhere(root: &Path, in_bundle: bool, cx: &RuleContext) -> Option<String> {
    match cx.host.live_root_on(root) {
        Some((pid, true)) => {
            return Some(format!("it is the root directory of live process {pid}"))
        }
        Some((pid, false)) if on_overlay(root, cx) => {
            return Some(format!(
                "it is on the overlay filesystem that live process {pid} has as its root"
            ))
        }
        _ => {}
    }
    let views = cx.host.mount_views(root);
    (!in_bundle && is_overlay_mount(root, cx) && views > 1).then(|| {
        format!("this overlay is mounted {views} times: another view of a root filesystem")
    })
}

/// Whether the mount that holds `path` is an overlay.
fn on_overlay(path: &Path, cx: &RuleContext) -> bool {
    cx.host
        .mount_point_of(path)
        .is_some_and(|point| cx.host.mount_fs_type(&point).as_deref() == Some("overlay"))
}

fn is_overlay_mount(root: &Path, cx: &RuleContext) -> bool {
    cx.host.mount_fs_type(root).as_deref() == Some("overlay")
}

/// The state dir of another container whose rootfs is `root`, contains it or
/// lies inside it.
fn other_container_with(root: &Path, create: &CreateContext, cx: &RuleContext) -> Option<PathBuf> {
    let own =
        (!create.container_id.is_empty()).then(|| create.runc_root.join(&create.container_id));
    state_dir_patterns(&create.runc_root)
        .iter()
        .flat_map(|pattern| cx.host.runc_rootfses(pattern))
        .filter(|(dir, _)| Some(dir) != own.as_ref())
        .find(|(_, rootfs)| {
            let other = cx
                .host
                .canonicalize(rootfs)
                .unwrap_or_else(|| rootfs.clone());
            other.starts_with(root) || root.starts_with(&other)
        })
        .map(|(dir, _)| dir)
}

/// Where other containers' state dirs are: this runc root, its sibling
/// namespaces when it is containerd's `<state>/runc/<ns>`, its sibling
/// runtimes when it is Docker's `<exec-root>/runtime-<name>/<ns>`, and the
/// well-known roots.
fn state_dir_patterns(runc_root: &Path) -> Vec<PathBuf> {
    let mut patterns = Vec::with_capacity(KNOWN_STATE_DIRS.len() + 2);
    if runc_root.is_absolute() {
        patterns.push(runc_root.join("*"));
        if let Some(parent) = runc_root.parent() {
            let name = parent.file_name().map(|n| n.to_string_lossy());
            if name.as_deref() == Some("runc") {
                patterns.push(parent.join("*/*"));
            }
            if name.is_some_and(|n| n.starts_with("runtime-")) {
                if let Some(exec_root) = parent.parent() {
                    patterns.push(exec_root.join("runtime-*/*/*"));
                }
            }
        }
    }
    for known in KNOWN_STATE_DIRS {
        let known = PathBuf::from(known);
        if !patterns.contains(&known) {
            patterns.push(known);
        }
    }
    patterns
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::host::FakeHost;
    use serde_json::json;

    const DOCKER_ROOT: &str = "/var/lib/docker/overlay2/abc/merged";

    fn ctx() -> CreateContext {
        CreateContext {
            container_id: "c1".into(),
            bundle: PathBuf::from("/run/b/c1"),
            runc_root: PathBuf::from("/run/docker/runtime-vibe/moby"),
            ..CreateContext::default()
        }
    }

    fn run(spec: &mut Value, host: &FakeHost, create: &CreateContext) -> Result<Record, Denial> {
        let policy = Policy::default();
        let cx = RuleContext {
            policy: &policy,
            host,
            create: Some(create),
            process_field: "/process",
        };
        let mut rec = Record::default();
        apply(spec, &cx, &mut rec).map(|()| rec)
    }

    fn root(path: &str) -> Value {
        json!({"root": {"path": path, "readonly": true}})
    }

    #[test]
    fn a_live_containers_root_is_refused_whatever_the_state_dirs_say() {
        // No runc state names it (an engine with its own --exec-root).
        let mut host = FakeHost::new();
        host.live_roots
            .insert(PathBuf::from(DOCKER_ROOT), (4242, true));
        let err = run(&mut root(DOCKER_ROOT), &host, &ctx()).unwrap_err();
        assert!(err.reason.contains("live process 4242"), "{err}");
        // A directory inside it, as a bundle's rootfs, is on that overlay.
        let mut host = FakeHost::new();
        host.live_roots
            .insert(PathBuf::from(DOCKER_ROOT), (4242, true));
        host.mount_types
            .insert(PathBuf::from(DOCKER_ROOT), "overlay".into());
        host.mount_points.insert(PathBuf::from(DOCKER_ROOT));
        let create = CreateContext {
            bundle: PathBuf::from(DOCKER_ROOT),
            ..ctx()
        };
        let err = run(&mut root("etc"), &host, &create).unwrap_err();
        assert!(err.reason.contains("overlay filesystem"), "{err}");
        // An overlay shown twice is another view of some root.
        let mut host = FakeHost::new();
        host.mount_views.insert(PathBuf::from(DOCKER_ROOT), 2);
        let err = run(&mut root(DOCKER_ROOT), &host, &ctx()).unwrap_err();
        assert!(err.reason.contains("mounted 2 times"), "{err}");
        // A snapshot mounted in the bundle may show twice (BuildKit).
        let mut host = FakeHost::new();
        host.mount_views
            .insert(PathBuf::from("/run/b/c1/rootfs"), 2);
        host.mount_types
            .insert(PathBuf::from("/run/b/c1/rootfs"), "overlay".into());
        assert!(run(&mut root("rootfs"), &host, &ctx()).is_ok());
        // A plain rootfs on the host's filesystem shares its device with
        // every host process: not refused for that.
        let mut host = FakeHost::new();
        host.live_roots.insert(PathBuf::from("/"), (1, true));
        assert!(run(&mut root("rootfs"), &host, &ctx()).is_ok());
    }

    #[test]
    fn relative_rootfs_in_the_bundle_becomes_absolute() {
        let mut spec = root("rootfs");
        let rec = run(&mut spec, &FakeHost::new(), &ctx()).unwrap();
        assert_eq!(spec["root"]["path"], "/run/b/c1/rootfs");
        assert_eq!(spec["root"]["readonly"], true);
        assert_eq!(rec.changes[0].field, FIELD);
        assert_eq!(rec.changes[0].before, "rootfs");
        // Already canonical: no change.
        assert!(run(&mut spec, &FakeHost::new(), &ctx())
            .unwrap()
            .changes
            .is_empty());
    }

    #[test]
    fn docker_overlay_root_is_kept() {
        let mut spec = root(DOCKER_ROOT);
        let rec = run(&mut spec, &FakeHost::new(), &ctx()).unwrap();
        assert!(rec.changes.is_empty());
        let mut host = FakeHost::new();
        host.overlay_storage = false;
        host.mount_types
            .insert(PathBuf::from("/srv/r"), "overlay".into());
        assert!(run(&mut root("/srv/r"), &host, &ctx()).is_ok());
    }

    #[test]
    fn host_root_and_host_directories_are_refused() {
        let host = FakeHost::new();
        for path in [
            "/",
            "/etc",
            "/var/lib/docker/overlay2/abc",
            "/run/b/c1",
            "../..",
            ".",
        ] {
            let err = run(&mut root(path), &host, &ctx()).unwrap_err();
            assert_eq!(err.rule, RULE);
            assert_eq!(err.value, path);
        }
        // `..` out of the bundle is resolved before judging.
        let err = run(&mut root("rootfs/../../other/rootfs"), &host, &ctx()).unwrap_err();
        assert!(err.reason.contains("/run/b/other/rootfs"), "{err}");
        // A non-overlay mount point is not a container rootfs.
        let mut host = FakeHost::new();
        host.mount_types
            .insert(PathBuf::from("/mnt/disk"), "ext4".into());
        assert!(run(&mut root("/mnt/disk"), &host, &ctx()).is_err());
    }

    #[test]
    fn symlinked_rootfs_is_judged_by_its_target() {
        let mut host = FakeHost::new();
        host.canonical
            .insert(PathBuf::from("/run/b/c1/rootfs"), PathBuf::from("/"));
        let err = run(&mut root("rootfs"), &host, &ctx()).unwrap_err();
        assert!(err.reason.contains("host's /"), "{err}");
        host.canonical
            .insert(PathBuf::from("/run/b/c1/rootfs"), PathBuf::from("/home/u"));
        assert!(run(&mut root("rootfs"), &host, &ctx()).is_err());
    }

    #[test]
    fn missing_or_bad_paths_are_refused() {
        let host = FakeHost::default();
        assert!(run(&mut root("rootfs"), &host, &ctx()).is_err());
        for mut spec in [json!({}), json!({"root": {"path": 7}}), root("")] {
            assert!(run(&mut spec, &FakeHost::new(), &ctx()).is_err());
        }
        let no_bundle = CreateContext::default();
        assert!(run(&mut root("rootfs"), &FakeHost::new(), &no_bundle).is_err());
        let root_bundle = CreateContext {
            bundle: PathBuf::from("/"),
            ..ctx()
        };
        assert!(run(&mut root("etc"), &FakeHost::new(), &root_bundle).is_err());
    }

    #[test]
    fn another_containers_rootfs_is_refused() {
        let mut host = FakeHost::new();
        // A sibling runtime's container (Docker's exec-root layout).
        host.runc_states.push((
            PathBuf::from("/run/docker/runtime-runc/moby/victim"),
            PathBuf::from(DOCKER_ROOT),
        ));
        let err = run(&mut root(DOCKER_ROOT), &host, &ctx()).unwrap_err();
        assert!(err.reason.contains("runtime-runc/moby/victim"), "{err}");
        // Our own stale state (same id, same root) is not another container.
        host.runc_states[0].0 = PathBuf::from("/run/docker/runtime-vibe/moby/c1");
        assert!(run(&mut root(DOCKER_ROOT), &host, &ctx()).is_ok());
        // A raw runc container whose rootfs is in another bundle, recorded
        // through a symlink.
        host.runc_states = vec![(PathBuf::from("/run/runc/x"), PathBuf::from("/l/rootfs"))];
        host.canonical
            .insert(PathBuf::from("/l"), PathBuf::from("/run/b/c1"));
        assert!(run(&mut root("rootfs"), &host, &ctx()).is_err());
        // Under a state dir we do not scan: not seen.
        host.runc_states[0].0 = PathBuf::from("/elsewhere/x");
        assert!(run(&mut root("rootfs"), &host, &ctx()).is_ok());
    }

    #[test]
    fn patterns_follow_the_engine_layouts() {
        let docker = state_dir_patterns(Path::new("/run/e/runtime-vibe/moby"));
        assert_eq!(docker[0], PathBuf::from("/run/e/runtime-vibe/moby/*"));
        assert_eq!(docker[1], PathBuf::from("/run/e/runtime-*/*/*"));
        let containerd = state_dir_patterns(Path::new("/run/k/runc/default"));
        assert_eq!(containerd[1], PathBuf::from("/run/k/runc/*/*"));
        let plain = state_dir_patterns(Path::new("/run/runc"));
        assert_eq!(plain.len(), KNOWN_STATE_DIRS.len());
    }

    #[test]
    fn exec_has_no_root_to_judge() {
        let mut spec = root("/");
        assert!(crate::rules::run_rule(apply, &mut spec, &Policy::default()).is_ok());
    }
}
