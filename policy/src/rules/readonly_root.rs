//! `filesystem.readonly_root`: the container's root filesystem is mounted
//! read-only whatever the client asked (`docker run --read-only=false` is the
//! default); writable places come from the tmpfs and home rules.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::object_at;

const RULE: &str = "readonly_root";

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    if !cx.policy.filesystem.readonly_root {
        return Ok(());
    }
    let root = object_at(spec, "root");
    let before = root.get("readonly").cloned().unwrap_or(Value::Null);
    root.insert("readonly".into(), Value::Bool(true));
    rec.change(RULE, "/root/readonly", before, Value::Bool(true));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;

    fn run(spec: &mut Value, policy: &Policy) -> Record {
        crate::rules::run_rule(apply, spec, policy).unwrap()
    }

    #[test]
    fn docker_default_root_becomes_read_only() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-readonly-false.json"
        ))
        .unwrap();
        let path = spec["root"]["path"].clone();
        let rec = run(&mut spec, &Policy::default());
        assert_eq!(spec["root"]["readonly"], true);
        assert_eq!(spec["root"]["path"], path);
        assert_eq!(rec.changes.len(), 1);
        assert_eq!(rec.changes[0].field, "/root/readonly");
    }

    #[test]
    fn already_read_only_is_no_change_and_policy_off_leaves_it() {
        let mut spec = serde_json::json!({"root": {"path": "rootfs", "readonly": true}});
        assert!(run(&mut spec, &Policy::default()).changes.is_empty());
        let mut policy = Policy::default();
        policy.filesystem.readonly_root = false;
        let mut spec = serde_json::json!({"root": {"path": "rootfs", "readonly": false}});
        assert!(run(&mut spec, &policy).changes.is_empty());
        assert_eq!(spec["root"]["readonly"], false);
    }
}
