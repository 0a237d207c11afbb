//! `process.rlimits` under the policy's table (`[resources.rlimits]`), for
//! the container's process and every exec: each named limit's hard and soft
//! values become min(requested, ceiling). A named limit the process does
//! not set is inherited from runc (vibe-shim's own limits); when that is
//! above the ceiling, or unknown, it is added at the ceiling. Only lowering
//! is added: raising a hard limit needs CAP_SYS_RESOURCE, which the engine
//! may lack.
//!
//! Limits the table does not name are kept as asked: they bound one process
//! (CPU, FSIZE, DATA, STACK, AS, RSS, CORE, LOCKS) or a count the cgroups
//! already bound (NPROC under pids, SIGPENDING and MSGQUEUE memory under the
//! memory limit). An admin who wants one capped names it in the table.
//! Raising a hard limit needs only runc's own CAP_SYS_RESOURCE, so without
//! this table `--ulimit rtprio=99` would give real-time scheduling.

use serde_json::{json, Value};

use crate::config::{normalise_rlimit, RLIMIT_NAMES};
use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::{as_object, field, set, str_field};

const RULE: &str = "rlimits";

pub fn apply(process: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let table = &cx.policy.resources.rlimits;
    let field_name = format!("{}/rlimits", cx.process_field);
    let before = field(process, "rlimits").cloned().unwrap_or(Value::Null);
    let entries: &[Value] = match &before {
        Value::Null => &[],
        Value::Array(items) => items,
        other => {
            return Err(Denial::new(
                RULE,
                field_name,
                other.to_string(),
                "expected a list",
            ));
        }
    };
    let mut after = Vec::with_capacity(entries.len() + table.len());
    let mut seen = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let kind = str_field(entry, "type");
        // runc takes only these exact names; anything else is not judged.
        let Some(name) = RLIMIT_NAMES.iter().find(|n| **n == kind) else {
            return Err(Denial::new(
                RULE,
                format!("{field_name}/{index}/type"),
                kind,
                "unknown rlimit",
            ));
        };
        seen.push(*name);
        let (Some(hard), Some(soft)) = (
            field(entry, "hard").and_then(Value::as_u64),
            field(entry, "soft").and_then(Value::as_u64),
        ) else {
            return Err(Denial::new(
                RULE,
                format!("{field_name}/{index}"),
                entry.to_string(),
                "hard and soft must be numbers",
            ));
        };
        let mut entry = entry.clone();
        if let Some(max) = normalise_rlimit(name).and_then(|n| table.get(n)) {
            let hard = hard.min(*max);
            let map = as_object(&mut entry);
            set(map, "hard", hard.into());
            set(map, "soft", soft.min(hard).into());
        }
        after.push(entry);
    }
    for (name, max) in table {
        if seen.contains(&name.as_str()) {
            continue;
        }
        match cx.host.inherited_rlimit(name) {
            Some((_, hard)) if hard <= *max => {}
            Some((soft, _)) => {
                after.push(json!({"type": name, "hard": max, "soft": soft.min(*max)}));
            }
            None => after.push(json!({"type": name, "hard": max, "soft": max})),
        }
    }
    let after = Value::Array(after);
    if after != before {
        set(as_object(process), "rlimits", after.clone());
        rec.change(RULE, field_name, before, after);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;

    fn run(process: &mut Value) -> Result<Record, Denial> {
        crate::rules::run_rule(apply, process, &Policy::default())
    }

    fn limit(process: &Value, kind: &str) -> (u64, u64) {
        let entry = process["rlimits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["type"] == kind)
            .unwrap();
        (
            entry["soft"].as_u64().unwrap(),
            entry["hard"].as_u64().unwrap(),
        )
    }

    #[test]
    fn hostile_ulimits_are_clamped() {
        let mut process = json!({"rlimits": [
            {"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576},
            {"type": "RLIMIT_RTPRIO", "hard": 99, "soft": 99},
            {"type": "RLIMIT_NICE", "hard": 40, "soft": 40},
            {"type": "RLIMIT_MEMLOCK", "hard": u64::MAX, "soft": u64::MAX},
            {"type": "RLIMIT_CORE", "hard": u64::MAX, "soft": 0},
        ]});
        let rec = run(&mut process).unwrap();
        assert_eq!(limit(&process, "RLIMIT_NOFILE"), (65536, 65536));
        assert_eq!(limit(&process, "RLIMIT_RTPRIO"), (0, 0));
        assert_eq!(limit(&process, "RLIMIT_NICE"), (0, 0));
        assert_eq!(limit(&process, "RLIMIT_MEMLOCK"), (64 << 20, 64 << 20));
        assert_eq!(limit(&process, "RLIMIT_CORE"), (0, u64::MAX));
        assert_eq!(process["rlimits"].as_array().unwrap().len(), 5);
        assert_eq!(rec.changes[0].field, "/process/rlimits");
    }

    #[test]
    fn lower_requests_are_kept_and_missing_ones_added() {
        let mut process =
            json!({"rlimits": [{"type": "RLIMIT_NOFILE", "hard": 4096, "soft": 1024}]});
        run(&mut process).unwrap();
        assert_eq!(limit(&process, "RLIMIT_NOFILE"), (1024, 4096));
        assert_eq!(limit(&process, "RLIMIT_RTPRIO"), (0, 0));
        let mut process = json!({"args": ["sh"]});
        run(&mut process).unwrap();
        assert_eq!(process["rlimits"].as_array().unwrap().len(), 4);
        // Already within policy: no change recorded.
        assert!(run(&mut process).unwrap().changes.is_empty());
    }

    #[test]
    fn inherited_limits_within_the_ceiling_are_not_added() {
        let mut host = crate::FakeHost::new();
        for (name, limit) in [
            ("RLIMIT_NOFILE", (1024, u64::MAX)),
            ("RLIMIT_MEMLOCK", (8 << 20, 8 << 20)),
            ("RLIMIT_RTPRIO", (0, 0)),
            ("RLIMIT_NICE", (0, 0)),
        ] {
            host.inherited_rlimits.insert(name.to_string(), limit);
        }
        let policy = Policy::default();
        let cx = RuleContext {
            policy: &policy,
            host: &host,
            create: None,
            process_field: "",
        };
        let mut process = json!({});
        apply(&mut process, &cx, &mut Record::default()).unwrap();
        assert_eq!(
            process["rlimits"],
            json!([{"type": "RLIMIT_NOFILE", "hard": 65536, "soft": 1024}])
        );
    }

    #[test]
    fn soft_never_exceeds_the_clamped_hard() {
        let mut process =
            json!({"rlimits": [{"type": "RLIMIT_NOFILE", "hard": 100000, "soft": 70000}]});
        run(&mut process).unwrap();
        assert_eq!(limit(&process, "RLIMIT_NOFILE"), (65536, 65536));
    }

    #[test]
    fn malformed_entries_are_refused() {
        for bad in [
            json!({"rlimits": [{"type": "RLIMIT_BOGUS", "hard": 1, "soft": 1}]}),
            json!({"rlimits": [{"type": "nofile", "hard": 1, "soft": 1}]}),
            json!({"rlimits": [{"type": "RLIMIT_NOFILE", "hard": -1, "soft": 1}]}),
            json!({"rlimits": [{"type": "RLIMIT_NOFILE", "soft": 1}]}),
            json!({"rlimits": {"RLIMIT_NOFILE": 1}}),
        ] {
            let mut process = bad.clone();
            assert_eq!(run(&mut process).unwrap_err().rule, RULE, "{bad}");
        }
    }

    #[test]
    fn admin_table_caps_an_unnamed_limit() {
        let policy =
            Policy::from_toml_str("[resources.rlimits]\ncore = 0\n", "t.toml".as_ref()).unwrap();
        let mut process = json!({"rlimits": [{"type": "RLIMIT_CORE", "hard": 1000, "soft": 10}]});
        crate::rules::run_rule(apply, &mut process, &policy).unwrap();
        assert_eq!(limit(&process, "RLIMIT_CORE"), (0, 0));
    }
}
