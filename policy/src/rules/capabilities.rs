//! Every capability set becomes exactly the policy's list (default: none),
//! whatever `--privileged` or `--cap-add` asked for.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::object_at;

const RULE: &str = "capabilities";
const SETS: [&str; 5] = [
    "bounding",
    "effective",
    "inheritable",
    "permitted",
    "ambient",
];

pub fn apply(process: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let granted: Vec<Value> = cx
        .policy
        .process
        .capabilities
        .iter()
        .map(|cap| Value::String(cap.clone()))
        .collect();
    let caps = object_at(process, "capabilities");
    for set in SETS {
        let after = Value::Array(granted.clone());
        let before = crate::lang::json::set(caps, set, after.clone());
        rec.change(
            RULE,
            format!("{}/capabilities/{set}", cx.process_field),
            before,
            after,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::host::FakeHost;
    use serde_json::json;

    fn run(process: &mut Value, policy: &Policy, field: &str) -> Record {
        let host = FakeHost::new();
        let cx = RuleContext {
            policy,
            host: &host,
            create: None,
            process_field: field,
        };
        let mut rec = Record::default();
        apply(process, &cx, &mut rec).unwrap();
        rec
    }

    #[test]
    fn privileged_exec_loses_everything() {
        let mut exec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/process-exec-privileged-root-secret.json"
        ))
        .unwrap();
        let rec = run(&mut exec, &Policy::default(), "");
        for set in SETS {
            assert_eq!(exec["capabilities"][set], json!([]), "{set}");
        }
        let fields: Vec<&str> = rec.changes.iter().map(|c| c.field.as_str()).collect();
        // inheritable and ambient were absent: written as [] (null -> []).
        assert_eq!(
            fields,
            [
                "/capabilities/bounding",
                "/capabilities/effective",
                "/capabilities/inheritable",
                "/capabilities/permitted",
                "/capabilities/ambient"
            ]
        );
    }

    #[test]
    fn policy_list_is_granted_in_all_sets() {
        let mut policy = Policy::default();
        policy.process.capabilities = vec!["CAP_NET_BIND_SERVICE".into()];
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-capadd-all.json"
        ))
        .unwrap();
        let rec = run(&mut spec["process"], &policy, "/process");
        for set in SETS {
            assert_eq!(
                spec["process"]["capabilities"][set],
                json!(["CAP_NET_BIND_SERVICE"])
            );
        }
        assert_eq!(rec.changes[0].field, "/process/capabilities/bounding");
    }

    #[test]
    fn missing_capabilities_object_is_created() {
        let mut process = json!({"args": ["sh"]});
        run(&mut process, &Policy::default(), "");
        assert_eq!(process["capabilities"]["ambient"], json!([]));
        assert_eq!(process["args"], json!(["sh"]));
    }
}
