//! No process may leave a file owned by a privileged host id in a host
//! directory. A bind shares the host's inodes: a file that uid 0 creates in
//! a read-write worktree is owned by host root there, and `chmod 4755` needs
//! no capability from its owner. The container's `nosuid` covers only the
//! container's view, so a host user who runs that file gets `euid=0`. The
//! same holds for gid 0 and setgid, and for every system id below the host's
//! first regular id (`UID_MIN`/`GID_MIN`: `disk`, `docker`, `shadow`, …).
//!
//! So while a container can write a `filesystem.bind` subtree (the binds
//! rule lists those destinations in [`WRITABLE_BINDS_ANNOTATION`]), its
//! process and every exec must run with a regular uid, gid and
//! supplementary gids. A forced `[process] user` is never a system id at
//! all: its per-uid kernel budgets (inotify instances, `RLIMIT_NPROC`,
//! keyrings, mqueue bytes) are shared with the host account of that id.
//!
//! The engine's own per-container files (`/etc/hosts`, `/dev/shm`, …) are
//! writable binds too; they live in root-only engine directories that no
//! host user reaches, and are not judged here.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::host::HostView;
use crate::rules::kernel_mounts::{destination, is_bind};

const RULE: &str = "host_ids";

/// The annotation the binds rule writes into every judged spec: a JSON array
/// of the destinations the container can write that come from a read-write
/// `filesystem.bind` subtree. A client's own value is always replaced.
pub const WRITABLE_BINDS_ANNOTATION: &str = "org.vibe-shim.writable-binds";

/// Create: the container's process against its own writable binds, and the
/// forced user against the host's system ids.
pub fn apply(spec: &mut Value, cx: &RuleContext, _rec: &mut Record) -> Result<(), Denial> {
    forced_user_is_regular(cx)?;
    let writable = writable_binds(spec);
    let process = spec.get("process").unwrap_or(&Value::Null);
    check(process, "/process", &writable, cx.host)
}

/// Exec: the new process against the container's judged spec.
pub fn check_exec(process: &Value, container: &Value, cx: &RuleContext) -> Result<(), Denial> {
    forced_user_is_regular(cx)?;
    check(
        process,
        cx.process_field,
        &writable_binds(container),
        cx.host,
    )
}

/// The writable subtree binds of a judged spec. A spec judged before the
/// annotation existed has none: then every writable bind counts, the
/// engine's own files included, since its sources are no longer known.
fn writable_binds(spec: &Value) -> Vec<String> {
    let recorded = spec
        .pointer("/annotations")
        .and_then(|a| a.get(WRITABLE_BINDS_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str::<Vec<String>>(text).ok());
    if let Some(list) = recorded {
        return list;
    }
    spec.get("mounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| is_bind(m) && !read_only(m))
        .map(|m| destination(m).into_owned())
        .collect()
}

/// A bind's final read-only state as runc applies its options: `ro`/`rw` in
/// order, then `rro`/`rrw` (recursive, applied after the remount) on top.
pub(crate) fn read_only(mount: &Value) -> bool {
    let options = || crate::lang::json::str_items(mount.get("options"));
    let flag = options().fold(false, |ro, option| match option {
        "ro" => true,
        "rw" => false,
        _ => ro,
    });
    match options().filter(|o| *o == "rro" || *o == "rrw").last() {
        Some("rro") => true,
        Some(_) => false,
        None => flag,
    }
}

fn forced_user_is_regular(cx: &RuleContext) -> Result<(), Denial> {
    let Some((uid, gid)) = cx.policy.process.forced_user() else {
        return Ok(());
    };
    let (uid_min, gid_min) = cx.host.regular_id_min();
    if uid < uid_min || gid < gid_min {
        return Err(Denial::new(
            RULE,
            "[process] user",
            format!("{uid}:{gid}"),
            format!(
                "a host system id (regular ids start at uid {uid_min}, gid {gid_min}): \
                 containers would share that host account's per-uid kernel limits"
            ),
        ));
    }
    Ok(())
}

fn check(
    process: &Value,
    field: &str,
    writable: &[String],
    host: &dyn HostView,
) -> Result<(), Denial> {
    let Some(first) = writable.first() else {
        return Ok(());
    };
    writable_powers(process, field, first)?;
    let (uid_min, gid_min) = host.regular_id_min();
    let user = process.get("user").unwrap_or(&Value::Null);
    // runc runs a process with no user as 0:0.
    let id = |key: &str| user.get(key).and_then(Value::as_u64).unwrap_or(0);
    let mut ids = vec![
        (
            format!("{field}/user/uid"),
            id("uid"),
            uid_min,
            "owned by",
            "uid",
        ),
        (
            format!("{field}/user/gid"),
            id("gid"),
            gid_min,
            "in the group of",
            "gid",
        ),
    ];
    let extra = user.get("additionalGids").and_then(Value::as_array);
    for (i, gid) in extra.into_iter().flatten().enumerate() {
        let at = format!("{field}/user/additionalGids/{i}");
        let gid = gid.as_u64().unwrap_or(0);
        ids.push((at, gid, gid_min, "in the group of", "gid"));
    }
    for (at, value, min, relation, key) in ids {
        if value >= u64::from(min) {
            continue;
        }
        let who = if value == 0 {
            "root"
        } else {
            "a host system account"
        };
        return Err(Denial::new(
            RULE,
            at,
            value.to_string(),
            format!(
                "the container can write the host directory bound at {first}: files it \
                 leaves there would be {relation} {who} on the host (and may be set-id); \
                 run as a regular id ({key} >= {min}), e.g. [process] user = \"1000:1000\", \
                 or bind it read-only"
            ),
        ));
    }
    Ok(())
}

/// Capabilities with which a regular id still leaves host-privileged files:
/// it becomes root (SETUID/SETGID), or chowns and set-ids files it does not
/// own (CHOWN, FOWNER, FSETID, DAC_OVERRIDE).
const OWNER_POWERS: &[&str] = &[
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_CHOWN",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_DAC_OVERRIDE",
];

/// Beside a writable bind the ids must also stay what they are: no capability
/// that changes them or a file's owner, and no-new-privileges (else a
/// setuid-root binary of the image makes uid 0).
fn writable_powers(process: &Value, field: &str, dest: &str) -> Result<(), Denial> {
    let sets = process.get("capabilities").and_then(Value::as_object);
    for (set, caps) in sets.into_iter().flatten() {
        let found = crate::lang::json::str_items(Some(caps)).find(|c| OWNER_POWERS.contains(c));
        if let Some(cap) = found {
            return Err(Denial::new(
                RULE,
                format!("{field}/capabilities/{set}"),
                cap,
                format!(
                    "the container can write the host directory bound at {dest}: with {cap} \
                     it could leave files owned by a privileged host id there"
                ),
            ));
        }
    }
    if process.get("noNewPrivileges") != Some(&Value::Bool(true)) {
        return Err(Denial::new(
            RULE,
            format!("{field}/noNewPrivileges"),
            "false",
            format!(
                "the container can write the host directory bound at {dest}: without \
                 no-new-privileges a setuid-root binary of the image runs as host root"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::host::FakeHost;
    use serde_json::json;

    fn spec(user: Value, writable: &[&str]) -> Value {
        json!({
            "process": {"user": user, "noNewPrivileges": true},
            "annotations": {WRITABLE_BINDS_ANNOTATION: serde_json::to_string(writable).unwrap()},
        })
    }

    fn run(spec: &mut Value, policy: &Policy) -> Result<crate::Record, Denial> {
        crate::rules::run_rule(apply, spec, policy)
    }

    #[test]
    fn root_with_a_writable_worktree_is_refused() {
        for user in [
            json!({"uid": 0, "gid": 0}),
            json!({}),
            json!({"uid": 1000, "gid": 0}),
        ] {
            let err = run(&mut spec(user.clone(), &["/w"]), &Policy::default()).unwrap_err();
            assert_eq!(err.rule, RULE, "{user}");
            assert!(err.to_string().contains("/w"), "{err}");
        }
        let err = run(
            &mut spec(
                json!({"uid": 1000, "gid": 1000, "additionalGids": [1000, 6]}),
                &["/w"],
            ),
            &Policy::default(),
        )
        .unwrap_err();
        assert_eq!(err.field, "/process/user/additionalGids/1", "{err}");
    }

    #[test]
    fn regular_ids_or_no_writable_bind_pass() {
        let regular = json!({"uid": 1000, "gid": 1000, "additionalGids": [1001]});
        assert!(run(&mut spec(regular, &["/w"]), &Policy::default()).is_ok());
        assert!(run(
            &mut spec(json!({"uid": 0, "gid": 0}), &[]),
            &Policy::default()
        )
        .is_ok());
        // The host's own first regular id decides.
        let mut host = FakeHost::new();
        host.regular_id_min = Some((500, 500));
        let mut doc = spec(json!({"uid": 600, "gid": 600}), &["/w"]);
        assert!(
            crate::rules::run_rule_with(apply, &mut doc, &Policy::default(), &host, None).is_ok()
        );
    }

    #[test]
    fn owner_powers_or_no_nnp_beside_a_writable_bind_are_refused() {
        let regular = json!({"uid": 1000, "gid": 1000});
        let mut doc = spec(regular.clone(), &["/w"]);
        doc["process"]["capabilities"] = json!({"ambient": ["CAP_NET_BIND_SERVICE", "CAP_SETUID"]});
        let err = run(&mut doc, &Policy::default()).unwrap_err();
        assert_eq!(err.field, "/process/capabilities/ambient", "{err}");
        let mut doc = spec(regular.clone(), &["/w"]);
        doc["process"]["noNewPrivileges"] = json!(false);
        let err = run(&mut doc, &Policy::default()).unwrap_err();
        assert_eq!(err.field, "/process/noNewPrivileges", "{err}");
        // Without a writable bind neither matters here.
        let mut doc = spec(regular, &[]);
        doc["process"]["noNewPrivileges"] = json!(false);
        assert!(run(&mut doc, &Policy::default()).is_ok());
    }

    #[test]
    fn a_forced_system_user_is_refused() {
        let mut policy = Policy::default();
        policy.process.user = Some("0:0".into());
        let err = run(&mut json!({}), &policy).unwrap_err();
        assert_eq!(err.field, "[process] user", "{err}");
        policy.process.user = Some("999:1000".into());
        assert!(run(&mut json!({}), &policy).is_err());
        policy.process.user = Some("1000:1000".into());
        assert!(run(&mut json!({}), &policy).is_ok());
    }

    #[test]
    fn without_the_annotation_every_writable_bind_counts() {
        let container = json!({"mounts": [
            {"destination": "/etc/hosts", "type": "bind", "source": "/s/hosts", "options": ["rbind", "rw"]},
            {"destination": "/ro", "type": "bind", "source": "/s", "options": ["bind", "ro"]},
            {"destination": "/again", "type": "bind", "source": "/s", "options": ["ro", "rw"]},
        ]});
        assert_eq!(writable_binds(&container), ["/etc/hosts", "/again"]);
        let root = json!({"user": {"uid": 0, "gid": 0}, "noNewPrivileges": true});
        let policy = Policy::default();
        let host = FakeHost::new();
        let cx = RuleContext {
            policy: &policy,
            host: &host,
            create: None,
            process_field: "",
        };
        let err = check_exec(&root, &container, &cx).unwrap_err();
        assert_eq!(err.field, "/user/uid", "{err}");
    }
}
