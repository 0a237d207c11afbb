//! The container never shares the host's pid, ipc, uts, mount, network or
//! cgroup namespace, judged by namespace inode, never by the engine's flags.
//! A missing entry means "stay in the runtime's (the host's) namespace".
//!
//! A client's user namespace and id mappings (of the container or of a
//! mount) are refused: a mapping decides which host uid the policy's forced
//! uid really is (1000 mapped onto host 0). With `userns.mode = "private"`
//! the userns rule, after this one, adds vibe-shim's own.
//! Another container's network namespace may be joined only when it
//! already holds this policy's table.

use std::path::Path;

use serde_json::{json, Value};

use crate::config::policy_tag;
use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::host::NetnsTable;
use crate::lang::json::{str_field, str_items};

const RULE: &str = "namespaces";
/// Kinds that must be present; a missing entry is the host's namespace.
const REQUIRED: [&str; 5] = ["pid", "ipc", "uts", "mount", "network"];
/// Kinds whose path may not be joined even when it is not the host's:
/// sharing them with another container breaks that container's isolation.
const NEVER_JOINED: [&str; 3] = ["pid", "ipc", "mount"];

/// Mount options that ask runc for an id-mapped mount.
const IDMAP_OPTIONS: [&str; 2] = ["idmap", "ridmap"];

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    refuse_id_mappings(spec)?;
    let entries: &[Value] = spec
        .pointer("/linux/namespaces")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for kind in REQUIRED {
        if !entries.iter().any(|e| str_field(e, "type") == kind) {
            return Err(Denial::new(
                RULE,
                "/linux/namespaces",
                kind,
                format!("no {kind} namespace entry: the container would share the host's {kind} namespace"),
            ));
        }
    }
    let mut has_cgroup = false;
    for (i, entry) in entries.iter().enumerate() {
        let kind = str_field(entry, "type");
        if kind == "user" {
            return Err(Denial::new(
                RULE,
                format!("/linux/namespaces/{i}"),
                entry.to_string(),
                "user namespaces are not granted by the policy",
            ));
        }
        has_cgroup |= kind == "cgroup";
        let path = str_field(entry, "path");
        // An empty path is a new namespace, as in runc.
        if path.is_empty() || !(REQUIRED.contains(&kind) || kind == "cgroup") {
            continue;
        }
        judge_path(kind, path, &format!("/linux/namespaces/{i}/path"), cx)?;
    }
    if !has_cgroup {
        // Docker on cgroup v1 never asks for one; a private one works with runc.
        if let Some(Value::Array(list)) = spec.pointer_mut("/linux/namespaces") {
            let entry = json!({"type": "cgroup"});
            list.push(entry.clone());
            rec.change(
                RULE,
                format!("/linux/namespaces/{}", list.len() - 1),
                Value::Null,
                entry,
            );
        }
    }
    Ok(())
}

fn judge_path(kind: &str, path: &str, field: &str, cx: &RuleContext) -> Result<(), Denial> {
    let refuse = |reason: String| Err(Denial::new(RULE, field, path, reason));
    let Some(id) = cx.host.namespace_id(Path::new(path)) else {
        return refuse(format!(
            "cannot verify the {kind} namespace path: it is not a readable namespace file"
        ));
    };
    let Some(host_id) = cx.host.host_namespace_id(kind) else {
        return refuse(format!(
            "cannot read the host's {kind} namespace to compare against"
        ));
    };
    if id == host_id {
        return refuse(format!("this is the host's {kind} namespace"));
    }
    if NEVER_JOINED.contains(&kind) {
        return refuse(format!(
            "joining another container's {kind} namespace is not allowed"
        ));
    }
    if kind == "network" {
        return judge_netns(path, cx)
            .map_err(|reason| Denial::new(RULE, field, path, reason.to_string()));
    }
    Ok(())
}

/// Why joining a network namespace is refused; the text is the reason.
#[derive(Debug, thiserror::Error)]
enum NetnsRefusal {
    #[error("this network namespace holds another policy's vibe_shim table")]
    Foreign,
    #[error("another container's network namespace without this policy's vibe_shim table")]
    InUse,
    #[error("cannot tell whether this network namespace is in use")]
    UseUnknown,
    #[error("cannot read this network namespace's table")]
    Unreadable,
}

/// Another container's network namespace only when it already holds this
/// policy's table. A namespace without any table that no other container's
/// process is in is one the engine made for this container (podman, CNI)
/// and is fine.
fn judge_netns(path: &str, cx: &RuleContext) -> Result<(), NetnsRefusal> {
    let path = Path::new(path);
    let table = cx
        .host
        .netns_policy_table(path, &policy_tag(&cx.policy.network));
    match table {
        Some(NetnsTable::Ours) => Ok(()),
        Some(NetnsTable::Foreign) => Err(NetnsRefusal::Foreign),
        Some(NetnsTable::Absent) => match cx.host.netns_in_use(path) {
            Some(false) => Ok(()),
            Some(true) => Err(NetnsRefusal::InUse),
            None => Err(NetnsRefusal::UseUnknown),
        },
        None => Err(NetnsRefusal::Unreadable),
    }
}

/// Whether a mapping field asks for anything: absent, null and `[]` do not.
fn is_set(value: Option<&Value>) -> bool {
    !matches!(value, None | Some(Value::Null))
        && value
            .and_then(Value::as_array)
            .is_none_or(|a| !a.is_empty())
}

/// `linux.uidMappings`/`gidMappings`, and the id mappings of any mount.
fn refuse_id_mappings(spec: &Value) -> Result<(), Denial> {
    for key in ["uidMappings", "gidMappings"] {
        let value = spec.pointer("/linux").and_then(|l| l.get(key));
        if is_set(value) {
            return Err(Denial::new(
                RULE,
                format!("/linux/{key}"),
                value.map(Value::to_string).unwrap_or_default(),
                "uid/gid mappings are not granted by the policy",
            ));
        }
    }
    let mounts = spec.get("mounts").and_then(Value::as_array);
    for (i, mount) in mounts.into_iter().flatten().enumerate() {
        for key in ["uidMappings", "gidMappings"] {
            if is_set(mount.get(key)) {
                return Err(Denial::new(
                    RULE,
                    format!("/mounts/{i}/{key}"),
                    str_field(mount, "destination"),
                    "id-mapped mounts are not granted by the policy",
                ));
            }
        }
        let idmap = str_items(mount.get("options")).find(|o| IDMAP_OPTIONS.contains(o));
        if let Some(option) = idmap {
            return Err(Denial::new(
                RULE,
                format!("/mounts/{i}/options"),
                format!("{option} at {}", str_field(mount, "destination")),
                "id-mapped mounts are not granted by the policy",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::host::{FakeHost, HostView};
    use std::path::PathBuf;

    fn fixture(name: &str) -> Value {
        let text = match name {
            "default" => include_str!("../../tests/fixtures/docker-20.10/config-default.json"),
            "pid-host" => include_str!("../../tests/fixtures/docker-20.10/config-pid-host.json"),
            "ipc-host" => include_str!("../../tests/fixtures/docker-20.10/config-ipc-host.json"),
            "uts-host" => include_str!("../../tests/fixtures/docker-20.10/config-uts-host.json"),
            "net-host" => include_str!("../../tests/fixtures/docker-20.10/config-net-host.json"),
            _ => unreachable!(),
        };
        serde_json::from_str(text).unwrap()
    }

    const NET_HOST_PATH: &str = "/run/vs-dev/exec/netns/default";

    fn host() -> FakeHost {
        let mut host = FakeHost::new();
        let net = host.host_namespace_id("network").unwrap();
        host.namespaces.insert(PathBuf::from(NET_HOST_PATH), net);
        host.namespaces
            .insert(PathBuf::from("/run/netns/other"), (1, 9_000));
        host.namespaces
            .insert(PathBuf::from("/run/netns/walled"), (1, 9_003));
        host.walled_netns.insert(PathBuf::from("/run/netns/walled"));
        host.namespaces
            .insert(PathBuf::from("/proc/77/ns/pid"), (1, 9_001));
        host.namespaces
            .insert(PathBuf::from("/proc/77/ns/cgroup"), (1, 9_002));
        host
    }

    fn run(spec: &mut Value, host: &FakeHost) -> Result<Record, Denial> {
        crate::rules::run_rule_with(apply, spec, &Policy::default(), host, None)
    }

    #[test]
    fn default_gets_a_private_cgroup_namespace() {
        let mut spec = fixture("default");
        let rec = run(&mut spec, &host()).unwrap();
        let list = spec["linux"]["namespaces"].as_array().unwrap();
        assert_eq!(list.len(), 6);
        assert_eq!(list[5], json!({"type": "cgroup"}));
        assert_eq!(rec.changes[0].field, "/linux/namespaces/5");
        // Idempotent.
        assert!(run(&mut spec, &host()).unwrap().changes.is_empty());
    }

    #[test]
    fn host_namespaces_from_docker_are_refused() {
        for (name, kind) in [
            ("pid-host", "pid"),
            ("ipc-host", "ipc"),
            ("uts-host", "uts"),
        ] {
            let err = run(&mut fixture(name), &host()).unwrap_err();
            assert_eq!(err.value, kind);
            assert!(
                err.reason
                    .contains(&format!("share the host's {kind} namespace")),
                "{err}"
            );
        }
        let err = run(&mut fixture("net-host"), &host()).unwrap_err();
        assert_eq!(err.value, NET_HOST_PATH);
        assert_eq!(err.field, "/linux/namespaces/1/path");
        assert!(err.reason.contains("host's network namespace"));
    }

    #[test]
    fn unverifiable_path_is_refused() {
        let mut spec = fixture("default");
        spec["linux"]["namespaces"][1]["path"] = json!("/run/netns/missing");
        let err = run(&mut spec, &host()).unwrap_err();
        assert!(err.reason.contains("cannot verify"), "{err}");
    }

    #[test]
    fn other_containers_network_only_with_our_table_and_never_pid() {
        let mut spec = fixture("default");
        spec["linux"]["namespaces"][1]["path"] = json!("/run/netns/other");
        let err = run(&mut spec, &host()).unwrap_err();
        assert_eq!(err.value, "/run/netns/other");
        assert!(err.reason.contains("policy's vibe_shim table"), "{err}");
        spec["linux"]["namespaces"][1]["path"] = json!("/run/netns/walled");
        assert!(run(&mut spec, &host()).is_ok());
        // An empty namespace the engine made (podman, CNI) is fine.
        let mut fresh = host();
        fresh
            .empty_namespaces
            .insert(PathBuf::from("/run/netns/other"));
        spec["linux"]["namespaces"][1]["path"] = json!("/run/netns/other");
        assert!(run(&mut spec, &fresh).is_ok());
        spec["linux"]["namespaces"][1]["path"] = json!("/run/netns/walled");
        spec["linux"]["namespaces"][3]["path"] = json!("/proc/77/ns/pid");
        let err = run(&mut spec, &host()).unwrap_err();
        assert!(err.reason.contains("another container's pid"), "{err}");
    }

    #[test]
    fn host_namespace_by_any_path_is_refused() {
        let mut spec = fixture("default");
        spec["linux"]["namespaces"][2]["path"] = json!("/proc/1/ns/uts");
        let err = run(&mut spec, &host()).unwrap_err();
        assert!(err.reason.contains("host's uts"), "{err}");
    }

    #[test]
    fn cgroup_paths_are_judged() {
        let mut spec = fixture("default");
        let list = spec["linux"]["namespaces"].as_array_mut().unwrap();
        list.push(json!({"type": "cgroup", "path": "/proc/1/ns/cgroup"}));
        let err = run(&mut spec, &host()).unwrap_err();
        assert!(err.reason.contains("host's cgroup"), "{err}");
        spec["linux"]["namespaces"][5]["path"] = json!("/proc/77/ns/cgroup");
        let rec = run(&mut spec, &host()).unwrap();
        assert!(rec.changes.is_empty());
    }

    #[test]
    fn missing_namespaces_list_is_refused() {
        let mut spec = json!({"linux": {}});
        assert!(run(&mut spec, &host()).is_err());
    }

    #[test]
    fn user_namespaces_are_refused_with_or_without_path() {
        for entry in [
            json!({"type": "user"}),
            json!({"type": "user", "path": "/proc/1/ns/user"}),
        ] {
            let mut spec = fixture("default");
            spec["linux"]["namespaces"]
                .as_array_mut()
                .unwrap()
                .push(entry);
            let err = run(&mut spec, &host()).unwrap_err();
            assert_eq!(err.field, "/linux/namespaces/5");
            assert!(err.reason.contains("user namespaces"), "{err}");
        }
    }

    #[test]
    fn id_mappings_are_refused() {
        let map = json!([{"containerID": 1000, "hostID": 0, "size": 1}]);
        for key in ["uidMappings", "gidMappings"] {
            let mut spec = fixture("default");
            spec["linux"][key] = map.clone();
            let err = run(&mut spec, &host()).unwrap_err();
            assert_eq!(err.field, format!("/linux/{key}"));
            // Empty or null lists ask for nothing.
            for nothing in [json!([]), Value::Null] {
                spec["linux"][key] = nothing;
                assert!(run(&mut spec, &host()).is_ok());
            }
            spec["linux"][key] = json!("x");
            assert!(run(&mut spec, &host()).is_err());
        }
    }

    #[test]
    fn id_mapped_mounts_are_refused() {
        let map = json!([{"containerID": 0, "hostID": 0, "size": 65536}]);
        for key in ["uidMappings", "gidMappings"] {
            let mut spec = fixture("default");
            spec["mounts"][0][key] = map.clone();
            let err = run(&mut spec, &host()).unwrap_err();
            assert_eq!(err.field, format!("/mounts/0/{key}"));
        }
        for option in ["idmap", "ridmap"] {
            let mut spec = fixture("default");
            spec["mounts"][0]["options"] = json!(["rbind", option]);
            let err = run(&mut spec, &host()).unwrap_err();
            assert_eq!(err.field, "/mounts/0/options");
            assert!(err.value.starts_with(option), "{err}");
        }
    }
}
