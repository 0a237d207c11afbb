//! `linux.cgroupsPath` never names a cgroup that already exists: runc joins
//! an existing cgroup (or systemd unit) instead of failing, which puts the
//! container under another container's limits, or none. Both of runc's
//! readings of the path are judged, since the driver (`--systemd-cgroup`)
//! is not part of the spec: the cgroupfs path (absolute from each
//! hierarchy's root, relative from runc's own cgroup, `..` clamped as
//! runc's `CleanPath` does) and, for `slice:prefix:name`, the systemd unit.
//!
//! Nor does it nest under another container: an existing ancestor that holds
//! processes of its own is some container's cgroup (Docker's
//! `--cgroup-parent /docker/<victim>`), and everything forked below it would
//! count against that container's pids and memory. With
//! `[resources] cgroup_parents`, the path must also lie below one of the
//! admin's parents, so no client places a container outside them.

use std::path::PathBuf;

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::clean_path;

const RULE: &str = "cgroups";
const FIELD: &str = "/linux/cgroupsPath";

/// systemd's default parent slice for runc's units.
const DEFAULT_SLICE: &str = "system.slice";
/// runc's default scope prefix when the spec has no cgroupsPath.
const DEFAULT_PREFIX: &str = "runc";

pub fn apply(spec: &mut Value, cx: &RuleContext, _rec: &mut Record) -> Result<(), Denial> {
    let Some(create) = cx.create else {
        return Ok(());
    };
    let raw = match spec.pointer(FIELD) {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(Denial::new(RULE, FIELD, other.to_string(), "not a string"));
        }
    };
    let refuse = |reason: String| Err(Denial::new(RULE, FIELD, raw, reason));
    let mut candidates = vec![cgroupfs_path(raw, &create.container_id)];
    match systemd_path(raw, &create.container_id) {
        Systemd::Path(path) => candidates.push(path),
        Systemd::NoReading => {}
        Systemd::Invalid => {
            return refuse("not a valid systemd slice:prefix:name cgroup path".into());
        }
    }
    for path in &candidates {
        if let Some(reason) = nests_in_a_busy_cgroup(path, cx) {
            return refuse(reason);
        }
    }
    if let Some(parents) = &cx.policy.resources.cgroup_parents {
        // The reading runc will use (by --systemd-cgroup); an empty path is
        // judged as the default it becomes.
        let reading = match (raw.is_empty(), create.systemd_cgroup) {
            (false, _) => raw.to_string(),
            (true, true) => format!("{DEFAULT_SLICE}:{DEFAULT_PREFIX}:{}", create.container_id),
            (true, false) => create.container_id.clone(),
        };
        if !below_a_parent(&reading, create.systemd_cgroup, parents) {
            return refuse(format!(
                "not below any of [resources] cgroup_parents ({})",
                parents.join(", ")
            ));
        }
    }
    for path in candidates {
        match cx.host.cgroup_exists(&path) {
            Some(false) => {}
            Some(true) => {
                return refuse(format!(
                    "cgroup {} already exists: joining an existing cgroup is not allowed",
                    path.display()
                ))
            }
            None => return refuse("cannot read this host's cgroup hierarchies".into()),
        }
    }
    Ok(())
}

/// The first existing proper ancestor of `path` with processes of its own.
fn nests_in_a_busy_cgroup(path: &std::path::Path, cx: &RuleContext) -> Option<String> {
    let ancestors = path
        .ancestors()
        .skip(1)
        .filter(|a| !matches!(a.to_str(), Some("" | "/" | ".")));
    for ancestor in ancestors {
        match cx.host.cgroup_has_processes(ancestor) {
            Some(false) => {}
            Some(true) => {
                return Some(format!(
                    "cgroup {} holds processes of its own (another container's): \
                     a cgroup below it would share its limits",
                    ancestor.display()
                ))
            }
            None => return Some("cannot read this host's cgroup hierarchies".into()),
        }
    }
    None
}

/// Whether `raw` lies strictly below one of the admin's parents, in the
/// reading runc uses: under `--systemd-cgroup` a `slice:prefix:name` by its
/// slice (a listed slice or one nested in it), otherwise the cgroupfs path,
/// component by component (a `a:b:c` is then a relative directory name).
fn below_a_parent(raw: &str, systemd: bool, parents: &[String]) -> bool {
    if systemd {
        let [slice, _, _] = raw.split(':').collect::<Vec<_>>()[..] else {
            return false;
        };
        let slice = if slice.is_empty() {
            DEFAULT_SLICE
        } else {
            slice
        };
        let Some(expanded) = expand_slice(slice) else {
            return false;
        };
        return parents.iter().any(|p| {
            expand_slice(p).is_some_and(|listed| {
                std::path::Path::new(&expanded).starts_with(&listed) && !listed.is_empty()
            })
        });
    }
    let path = cgroupfs_path(raw, "");
    parents.iter().any(|p| {
        let parent = cgroupfs_path(p, "");
        let root = matches!(parent.to_str(), Some("/"));
        path != parent && (path.starts_with(&parent) || (root && path.is_absolute()))
    })
}

/// The cgroupfs driver's reading: runc's `CleanPath`, or the container id
/// (relative) when the spec has no path.
pub fn cgroupfs_path(raw: &str, container_id: &str) -> PathBuf {
    let raw = if raw.is_empty() { container_id } else { raw };
    if raw.starts_with('/') {
        return PathBuf::from(&*clean_path(raw));
    }
    let rel = clean_path(&format!("/{raw}"))
        .trim_start_matches('/')
        .to_string();
    PathBuf::from(if rel.is_empty() { "." } else { &rel })
}

#[derive(Debug, PartialEq)]
pub enum Systemd {
    Path(PathBuf),
    /// Not a path in the systemd driver's `slice:prefix:name` form.
    NoReading,
    Invalid,
}

/// The systemd driver's reading: `<expanded parent slice>/<unit>`, from the
/// root of each hierarchy.
pub fn systemd_path(raw: &str, container_id: &str) -> Systemd {
    let (parent, prefix, name) = if raw.is_empty() {
        ("", DEFAULT_PREFIX, container_id)
    } else {
        match raw.split(':').collect::<Vec<_>>()[..] {
            [parent, prefix, name] => (parent, prefix, name),
            _ => return Systemd::NoReading,
        }
    };
    let parent = if parent.is_empty() {
        DEFAULT_SLICE
    } else {
        parent
    };
    let unit = if name.ends_with(".slice") {
        name.to_string()
    } else if prefix.is_empty() {
        format!("{name}.scope")
    } else {
        format!("{prefix}-{name}.scope")
    };
    match expand_slice(parent) {
        Some(dir) if !unit.contains('/') && !name.is_empty() => {
            Systemd::Path(PathBuf::from(format!("{dir}/{unit}")))
        }
        _ => Systemd::Invalid,
    }
}

/// systemd's slice expansion: `a-b.slice` is `/a.slice/a-b.slice`, `-.slice`
/// the root (as runc's `ExpandSlice`).
fn expand_slice(slice: &str) -> Option<String> {
    let stem = slice.strip_suffix(".slice")?;
    if slice.contains('/') {
        return None;
    }
    if stem == "-" {
        return Some(String::new());
    }
    let mut path = String::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        if part.is_empty() {
            return None;
        }
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        path.push('/');
        path.push_str(&prefix);
        path.push_str(".slice");
    }
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::engine::CreateContext;
    use crate::host::FakeHost;
    use serde_json::json;

    fn run(spec: &mut Value, host: &FakeHost) -> Result<(), Denial> {
        let policy = Policy::default();
        let create = CreateContext {
            container_id: "c1".into(),
            ..CreateContext::default()
        };
        crate::rules::run_rule_with(apply, spec, &policy, host, Some(&create)).map(drop)
    }

    fn spec(path: &str) -> Value {
        json!({"linux": {"cgroupsPath": path}})
    }

    #[test]
    fn cgroupfs_paths_as_runc_cleans_them() {
        let p = |raw| cgroupfs_path(raw, "c1");
        assert_eq!(p("/docker/x"), PathBuf::from("/docker/x"));
        assert_eq!(p("/docker/../../x/"), PathBuf::from("/x"));
        assert_eq!(p("/"), PathBuf::from("/"));
        assert_eq!(p("a/../../b"), PathBuf::from("b"));
        assert_eq!(p(".."), PathBuf::from("."));
        assert_eq!(p(""), PathBuf::from("c1"));
    }

    #[test]
    fn systemd_paths_as_runc_expands_them() {
        let p = |raw| systemd_path(raw, "c1");
        let path = |s: &str| Systemd::Path(PathBuf::from(s));
        assert_eq!(
            p("system.slice:docker:abc"),
            path("/system.slice/docker-abc.scope")
        );
        assert_eq!(p(":docker:abc"), path("/system.slice/docker-abc.scope"));
        assert_eq!(p("a-b.slice::x"), path("/a.slice/a-b.slice/x.scope"));
        assert_eq!(p("-.slice:p:user.slice"), path("/user.slice"));
        assert_eq!(p(""), path("/system.slice/runc-c1.scope"));
        assert_eq!(p("/docker/abc"), Systemd::NoReading);
        assert_eq!(p("a--b.slice:p:n"), Systemd::Invalid);
        assert_eq!(p("nope:p:n"), Systemd::Invalid);
        assert_eq!(p("system.slice:p:a/b"), Systemd::Invalid);
    }

    #[test]
    fn nesting_under_a_busy_cgroup_is_refused() {
        let mut host = FakeHost::new();
        host.cgroups.insert(PathBuf::from("/docker/victim"));
        host.busy_cgroups.insert(PathBuf::from("/docker/victim"));
        for path in [
            "/docker/victim/c1",
            "/docker/victim/new/deeper",
            "/docker/../docker/victim/x",
        ] {
            let err = run(&mut spec(path), &host).unwrap_err();
            assert!(
                err.reason.contains("/docker/victim holds processes"),
                "{path}: {err}"
            );
        }
        // A parent that only holds other cgroups is not a container's.
        assert!(run(&mut spec("/docker/c1"), &host).is_ok());
        assert!(run(&mut spec("/new/c1"), &host).is_ok());
    }

    #[test]
    fn cgroup_parents_bound_where_a_container_may_go() {
        let mut policy = Policy::default();
        policy.resources.cgroup_parents = Some(
            ["/docker", "vibe-test", "system.slice", "kubepods.slice"]
                .map(String::from)
                .to_vec(),
        );
        let cgroupfs = CreateContext {
            container_id: "c1".into(),
            ..CreateContext::default()
        };
        let systemd = CreateContext {
            systemd_cgroup: true,
            ..cgroupfs.clone()
        };
        let host = FakeHost::new();
        let judge_in = |create: &CreateContext, policy: &Policy, path: &str| {
            crate::rules::run_rule_with(apply, &mut spec(path), policy, &host, Some(create))
        };
        let judge_with = |policy: &Policy, path: &str| judge_in(&cgroupfs, policy, path);
        let judge = |path: &str| judge_with(&policy, path);
        for ok in ["/docker/c1", "/docker/sub/c1", "vibe-test/c1"] {
            assert!(judge(ok).is_ok(), "{ok}: {:?}", judge(ok));
        }
        let judge_systemd = |path: &str| judge_in(&systemd, &policy, path);
        for ok in [
            "system.slice:docker:c1",
            ":runc:c1",
            "kubepods-burstable.slice:cri:c1",
            "",
        ] {
            assert!(judge_systemd(ok).is_ok(), "{ok}: {:?}", judge_systemd(ok));
        }
        // Under cgroupfs a slice:prefix:name is a relative directory name,
        // and an empty path is runc's <own cgroup>/<id>: both outside.
        for bad in ["system.slice:docker:c1", ""] {
            assert!(judge(bad).is_err(), "{bad}");
        }
        for bad in ["machine.slice:libpod:c1", "/docker/c1"] {
            assert!(judge_systemd(bad).is_err(), "{bad}");
        }
        for bad in [
            "/anything/new",
            "/docker",
            "/dockerx/c1",
            "/docker/../x/c1",
            "c1",
        ] {
            let err = judge(bad).unwrap_err();
            assert!(
                err.reason.contains("cgroup_parents") || err.reason.contains("systemd"),
                "{bad}: {err}"
            );
        }
        // "/" admits any absolute path below the root, never a relative one.
        let mut root = Policy::default();
        root.resources.cgroup_parents = Some(vec!["/".into()]);
        assert!(judge_with(&root, "/x/c1").is_ok());
        assert!(judge_with(&root, "x/c1").is_err());
    }

    #[test]
    fn new_cgroups_pass_existing_ones_are_refused() {
        let mut host = FakeHost::new();
        assert!(run(&mut spec("/docker/c1"), &host).is_ok());
        assert!(run(&mut json!({"linux": {}}), &host).is_ok());
        host.cgroups.insert(PathBuf::from("/docker/victim"));
        host.cgroups.insert(PathBuf::from("/"));
        host.cgroups.insert(PathBuf::from("."));
        host.cgroups
            .insert(PathBuf::from("/system.slice/docker-victim.scope"));
        for path in [
            "/docker/victim",
            "/docker/../docker/victim/",
            "/",
            "..",
            "system.slice:docker:victim",
        ] {
            let err = run(&mut spec(path), &host).unwrap_err();
            assert_eq!(err.rule, RULE);
            assert!(err.reason.contains("already exists"), "{path}: {err}");
        }
    }

    #[test]
    fn odd_values_are_refused() {
        assert!(run(&mut json!({"linux": {"cgroupsPath": 7}}), &FakeHost::new()).is_err());
        assert!(run(&mut spec("x:y:z"), &FakeHost::new()).is_err());
    }
}
