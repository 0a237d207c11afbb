//! Devices. Only the default safe character devices stay reachable: null,
//! zero, full, random, urandom, tty, console, ptmx and the pty slaves. Any
//! `--device` node is dropped, and the cgroup device rules are replaced by a
//! fixed list, so neither a created node nor a client rule opens a disk.
//! cgroup v2's `resources.unified` may not touch `devices.*` at all (this
//! rule owns those keys there), on create or update.

use serde_json::{json, Value};

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::{object, set, str_field};

const RULE: &str = "devices";

/// (major, minor) of the character devices a container may have.
pub const SAFE_DEVICES: &[(i64, i64)] = &[
    (1, 3), // null
    (1, 5), // zero
    (1, 7), // full
    (1, 8), // random
    (1, 9), // urandom
    (5, 0), // tty
    (5, 1), // console
    (5, 2), // ptmx
];

/// The pty slaves, `/dev/pts/*` (any minor).
pub const PTS_MAJOR: i64 = 136;

/// Whether a `linux.devices` entry is one of the safe character devices.
pub fn is_safe_device(device: &Value) -> bool {
    let number = |key| device.get(key).and_then(Value::as_i64);
    match (str_field(device, "type"), number("major"), number("minor")) {
        ("c", Some(major), Some(minor)) => SAFE_DEVICES.contains(&(major, minor)),
        _ => false,
    }
}

/// The cgroup device rules every container gets: deny all, then the safe set.
pub fn cgroup_device_rules() -> Value {
    let mut rules = Vec::with_capacity(SAFE_DEVICES.len() + 2);
    rules.push(object([("allow", false.into()), ("access", "rwm".into())]));
    for &(major, minor) in SAFE_DEVICES {
        rules.push(object([
            ("allow", true.into()),
            ("type", "c".into()),
            ("major", major.into()),
            ("minor", minor.into()),
            ("access", "rwm".into()),
        ]));
    }
    // No minor means every minor.
    rules.push(object([
        ("allow", true.into()),
        ("type", "c".into()),
        ("major", PTS_MAJOR.into()),
        ("access", "rwm".into()),
    ]));
    Value::Array(rules)
}

/// The `unified` key prefix this rule owns.
pub const UNIFIED_DEVICES_PREFIX: &str = "devices.";

/// Refuses a `devices.*` key in `resources.unified`.
fn refuse_unified_devices(resources: Option<&Value>, field: &str) -> Result<(), Denial> {
    let unified = resources
        .and_then(|r| r.get("unified"))
        .and_then(Value::as_object);
    match unified.and_then(|u| u.keys().find(|k| k.starts_with(UNIFIED_DEVICES_PREFIX))) {
        Some(key) => Err(Denial::new(
            RULE,
            format!("{field}/{key}"),
            key.as_str(),
            "cgroup device access is fixed by the policy",
        )),
        None => Ok(()),
    }
}

pub fn apply(spec: &mut Value, _cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    refuse_unified_devices(spec.pointer("/linux/resources"), "/linux/resources/unified")?;
    let linux = crate::lang::json::object_at(spec, "linux");
    if let Some(devices) = linux.get_mut("devices").and_then(Value::as_array_mut) {
        for (index, device) in std::mem::take(devices).into_iter().enumerate() {
            if is_safe_device(&device) {
                devices.push(device);
            } else {
                rec.change(RULE, format!("/linux/devices/{index}"), device, Value::Null);
            }
        }
    }
    let resources = crate::lang::json::object_at(linux_value(spec), "resources");
    let after = cgroup_device_rules();
    // The replaced list is the record's "before": moved, not copied.
    let before = set(resources, "devices", after.clone());
    rec.change(RULE, "/linux/resources/devices", before, after);
    Ok(())
}

fn linux_value(spec: &mut Value) -> &mut Value {
    crate::lang::json::as_object(spec)
        .entry("linux")
        .or_insert_with(|| json!({}))
}

/// `runc update` must never widen device access, so a `devices` key is dropped.
pub fn apply_update(
    resources: &mut Value,
    _cx: &RuleContext,
    rec: &mut Record,
) -> Result<(), Denial> {
    refuse_unified_devices(Some(resources), "/unified")?;
    if let Some(map) = resources.as_object_mut() {
        if let Some(before) = map.remove("devices") {
            rec.change(RULE, "/devices", before, Value::Null);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::host::FakeHost;

    fn with_cx<T>(f: impl FnOnce(&RuleContext) -> T) -> T {
        let policy = Policy::default();
        let host = FakeHost::new();
        let cx = RuleContext {
            policy: &policy,
            host: &host,
            create: None,
            process_field: "/process",
        };
        f(&cx)
    }

    fn run(spec: &mut Value) -> Record {
        let mut rec = Record::default();
        with_cx(|cx| apply(spec, cx, &mut rec)).unwrap();
        rec
    }

    #[test]
    fn device_flag_is_dropped_and_its_cgroup_rule_too() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-device.json"
        ))
        .unwrap();
        let rec = run(&mut spec);
        assert_eq!(spec["linux"]["devices"], json!([]));
        assert_eq!(spec["linux"]["resources"]["devices"], cgroup_device_rules());
        assert_eq!(rec.changes[0].field, "/linux/devices/0");
        assert_eq!(rec.changes[0].before["path"], "/dev/vda");
        assert_eq!(rec.changes[1].field, "/linux/resources/devices");
        // The rest of resources is kept.
        assert!(spec["linux"]["resources"].get("memory").is_some());
    }

    #[test]
    fn privileged_keeps_only_the_safe_nodes() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-privileged.json"
        ))
        .unwrap();
        run(&mut spec);
        let paths: Vec<_> = spec["linux"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            [
                "/dev/full",
                "/dev/null",
                "/dev/ptmx",
                "/dev/random",
                "/dev/tty",
                "/dev/urandom",
                "/dev/zero"
            ]
        );
        assert_eq!(
            spec["linux"]["resources"]["devices"][0],
            json!({"allow": false, "access": "rwm"})
        );
    }

    #[test]
    fn block_device_with_safe_numbers_is_not_safe() {
        assert!(!is_safe_device(
            &json!({"path": "/dev/x", "type": "b", "major": 1, "minor": 3})
        ));
        assert!(is_safe_device(
            &json!({"path": "/dev/x", "type": "c", "major": 1, "minor": 3})
        ));
    }

    #[test]
    fn spec_without_devices_gets_only_cgroup_rules() {
        let mut spec = json!({"linux": {}});
        run(&mut spec);
        assert!(spec["linux"].get("devices").is_none());
        let rules = cgroup_device_rules();
        assert_eq!(spec["linux"]["resources"]["devices"], rules);
        assert_eq!(
            rules[9],
            json!({"allow": true, "type": "c", "major": 136, "access": "rwm"})
        );
    }

    #[test]
    fn unified_device_keys_are_refused() {
        let mut spec = json!({"linux": {"resources": {"unified": {"memory.max": "1G", "devices.allow": "a *:* rwm"}}}});
        let err = with_cx(|cx| apply(&mut spec, cx, &mut Record::default())).unwrap_err();
        assert_eq!(err.field, "/linux/resources/unified/devices.allow");
        let mut update = json!({"unified": {"devices.deny": ""}});
        let err = with_cx(|cx| apply_update(&mut update, cx, &mut Record::default())).unwrap_err();
        assert_eq!(err.field, "/unified/devices.deny");
        let mut ok = json!({"unified": {"memory.max": "1G"}});
        assert!(with_cx(|cx| apply_update(&mut ok, cx, &mut Record::default())).is_ok());
    }

    #[test]
    fn update_drops_device_rules() {
        let mut update: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/update-memory.json"
        ))
        .unwrap();
        let original = update.clone();
        let mut rec = Record::default();
        with_cx(|cx| apply_update(&mut update, cx, &mut rec)).unwrap();
        assert_eq!(update, original);
        update["devices"] = json!([{"allow": true, "access": "rwm"}]);
        with_cx(|cx| apply_update(&mut update, cx, &mut rec)).unwrap();
        assert_eq!(update, original);
        assert_eq!(rec.changes[0].field, "/devices");
    }
}
