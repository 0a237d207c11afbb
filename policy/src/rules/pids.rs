//! The container's pids limit is never above the policy's, and unlimited
//! (`-1`, `0` or absent) is never granted: on create, and on `runc update`.
//! cgroup v2's `resources.unified` is the other way to write `pids.max`;
//! this rule owns that key there and clamps it the same way.

use serde_json::{Map, Value};

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::{as_object, object_at};

const RULE: &str = "pids";

/// The limit to apply: the request if it is a positive number within `max`,
/// else `max` (absent, `<= 0` meaning unlimited, or too high).
pub fn clamp(requested: Option<i64>, max: i64) -> i64 {
    match requested {
        Some(n) if n > 0 && n <= max => n,
        _ => max,
    }
}

/// Create: `linux.resources.pids.limit` is always set.
pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let linux = object_at(spec, "linux");
    let resources = child_object(linux, "resources");
    clamp_unified(resources, "/linux/resources/unified", cx, rec);
    let pids = child_object(resources, "pids");
    set_limit(pids, "/linux/resources/pids/limit", cx, rec);
    Ok(())
}

/// The `unified` key this rule owns.
pub const UNIFIED_PIDS_MAX: &str = "pids.max";

/// `unified["pids.max"]`, if present, becomes a plain decimal within the
/// policy. The kernel also reads `max`, hex and octal; anything but a
/// decimal in 1..=limit is replaced by the limit.
fn clamp_unified(
    resources: &mut Map<String, Value>,
    field: &str,
    cx: &RuleContext,
    rec: &mut Record,
) {
    let Some(unified) = resources.get_mut("unified").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(value) = unified.get_mut(UNIFIED_PIDS_MAX) else {
        return;
    };
    let max = cx.policy.process.pids_limit;
    let requested = value
        .as_str()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<i64>().ok());
    let after = Value::from(clamp(requested, max).to_string());
    if *value != after {
        let before = std::mem::replace(value, after.clone());
        rec.change(RULE, format!("{field}/{UNIFIED_PIDS_MAX}"), before, after);
    }
}

/// Update (a top-level `LinuxResources`): clamped only when `pids` is sent;
/// without it runc keeps the current, already clamped, limit.
pub fn apply_update(
    resources: &mut Value,
    cx: &RuleContext,
    rec: &mut Record,
) -> Result<(), Denial> {
    let map = as_object(resources);
    clamp_unified(map, "/unified", cx, rec);
    if map.contains_key("pids") {
        set_limit(child_object(map, "pids"), "/pids/limit", cx, rec);
    }
    Ok(())
}

fn set_limit(pids: &mut Map<String, Value>, field: &str, cx: &RuleContext, rec: &mut Record) {
    let max = cx.policy.process.pids_limit;
    let before = pids.get("limit").cloned().unwrap_or(Value::Null);
    let after = Value::from(clamp(before.as_i64(), max));
    pids.insert("limit".to_string(), after.clone());
    rec.change(RULE, field, before, after);
}

/// `map[key]` as an object, created (or replaced, if not an object) when needed.
fn child_object<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    as_object(
        map.entry(key.to_string())
            .or_insert_with(|| Value::Object(Map::new())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::host::FakeHost;
    use serde_json::json;

    fn run(doc: &mut Value, update: bool) -> Record {
        let (policy, host) = (Policy::default(), FakeHost::new());
        let cx = RuleContext {
            policy: &policy,
            host: &host,
            create: None,
            process_field: "/process",
        };
        let mut rec = Record::default();
        if update {
            apply_update(doc, &cx, &mut rec).unwrap();
        } else {
            apply(doc, &cx, &mut rec).unwrap();
        }
        rec
    }

    #[test]
    fn clamp_cases() {
        assert_eq!(clamp(None, 512), 512);
        assert_eq!(clamp(Some(-1), 512), 512);
        assert_eq!(clamp(Some(0), 512), 512);
        assert_eq!(clamp(Some(100_000), 512), 512);
        assert_eq!(clamp(Some(512), 512), 512);
        assert_eq!(clamp(Some(100), 512), 100);
    }

    #[test]
    fn docker_default_gets_the_policy_limit() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-pids-unlimited.json"
        ))
        .unwrap();
        let memory = spec["linux"]["resources"]["memory"].clone();
        let rec = run(&mut spec, false);
        assert_eq!(spec["linux"]["resources"]["pids"], json!({"limit": 4096}));
        assert_eq!(spec["linux"]["resources"]["memory"], memory);
        assert_eq!(rec.changes[0].field, "/linux/resources/pids/limit");
        assert_eq!(rec.changes[0].before, Value::Null);
    }

    #[test]
    fn lower_request_is_kept_and_odd_values_clamped() {
        let mut spec = json!({"linux": {"resources": {"pids": {"limit": 64}}}});
        assert!(run(&mut spec, false).changes.is_empty());
        for odd in [json!(-1), json!(0), json!("7"), json!(1e3), json!(u64::MAX)] {
            let mut spec = json!({"linux": {"resources": {"pids": {"limit": odd}}}});
            run(&mut spec, false);
            assert_eq!(spec["linux"]["resources"]["pids"]["limit"], json!(4096));
        }
        let mut spec = json!({});
        run(&mut spec, false);
        assert_eq!(spec["linux"]["resources"]["pids"]["limit"], json!(4096));
    }

    #[test]
    fn docker_update_is_clamped() {
        for text in [
            include_str!("../../tests/fixtures/docker-20.10/update-pids-unlimited.json"),
            include_str!("../../tests/fixtures/docker-20.10/update-pids-100000.json"),
        ] {
            let mut update: Value = serde_json::from_str(text).unwrap();
            let rec = run(&mut update, true);
            assert_eq!(update["pids"], json!({"limit": 4096}));
            assert_eq!(rec.changes[0].field, "/pids/limit");
        }
    }

    #[test]
    fn unified_pids_max_is_clamped_on_create_and_update() {
        for (odd, want) in [
            (json!("max"), "4096"),
            (json!("100000"), "4096"),
            (json!("0x7fffffff"), "4096"),
            (json!(" 64"), "4096"),
            (json!("-1"), "4096"),
            (json!(7), "4096"),
            (json!("64"), "64"),
        ] {
            let mut spec = json!({"linux": {"resources": {"unified": {"pids.max": odd, "memory.high": "1G"}}}});
            run(&mut spec, false);
            let unified = &spec["linux"]["resources"]["unified"];
            assert_eq!(unified["pids.max"], want, "{odd}");
            assert_eq!(unified["memory.high"], "1G");
            let mut update = json!({"unified": {"pids.max": odd}});
            let rec = run(&mut update, true);
            assert_eq!(update["unified"]["pids.max"], want);
            assert_eq!(rec.changes.is_empty(), want == "64");
            assert!(update.get("pids").is_none());
        }
        let mut spec = json!({"linux": {"resources": {"unified": {"memory.max": "1G"}}}});
        run(&mut spec, false);
        assert!(spec["linux"]["resources"]["unified"]
            .get("pids.max")
            .is_none());
    }

    #[test]
    fn update_without_pids_is_left_alone() {
        let mut update: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/update-memory.json"
        ))
        .unwrap();
        let before = update.clone();
        assert!(run(&mut update, true).changes.is_empty());
        assert_eq!(update, before);
    }
}
