//! Forces `noNewPrivileges` so setuid binaries and file capabilities cannot
//! raise a process above what the capability rule left it.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::as_object;

const RULE: &str = "no_new_privileges";

pub fn apply(process: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    if !cx.policy.process.no_new_privileges {
        return Ok(());
    }
    let before = as_object(process).insert("noNewPrivileges".to_string(), Value::Bool(true));
    rec.change(
        RULE,
        format!("{}/noNewPrivileges", cx.process_field),
        before.unwrap_or(Value::Null),
        Value::Bool(true),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use serde_json::json;

    fn run(process: &mut Value, policy: &Policy) -> Record {
        crate::rules::run_rule(apply, process, policy).unwrap()
    }

    #[test]
    fn forced_on_docker_default() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-default.json"
        ))
        .unwrap();
        let rec = run(&mut spec["process"], &Policy::default());
        assert_eq!(spec["process"]["noNewPrivileges"], json!(true));
        assert_eq!(rec.changes[0].field, "/process/noNewPrivileges");
        assert_eq!(rec.changes[0].before, Value::Null);
    }

    #[test]
    fn false_is_overridden_and_true_is_no_change() {
        let mut process = json!({"noNewPrivileges": false});
        assert_eq!(run(&mut process, &Policy::default()).changes.len(), 1);
        assert_eq!(process["noNewPrivileges"], json!(true));
        assert!(run(&mut process, &Policy::default()).changes.is_empty());
    }

    #[test]
    fn left_alone_when_policy_allows() {
        let mut policy = Policy::default();
        policy.process.no_new_privileges = false;
        let mut process = json!({"noNewPrivileges": false});
        run(&mut process, &policy);
        assert_eq!(process["noNewPrivileges"], json!(false));
    }
}
