//! An exec keeps the container's LSM confinement: its `apparmorProfile` and
//! `selinuxLabel` must be the ones judged at create. An empty one would
//! leave the exec in runc's own (usually unconfined) profile or label, so it
//! is filled in; any other one (`unconfined`, `spc_t`, another container's
//! MCS categories) is refused. The container's own values are the engine's
//! choice at create: no policy key judges them yet.
//!
//! This rule needs the container's process as well as the exec's, so it is
//! not in `PROCESS_RULES`; [`crate::engine::enforce_exec`] runs it after them.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::lang::json::as_object;

const RULE: &str = "lsm";
const KEYS: [&str; 2] = ["apparmorProfile", "selinuxLabel"];

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LsmError {
    #[error("not a string")]
    NotAString,
    #[error("differs from the container's {0:?}: an exec keeps the container's confinement")]
    Differs(String),
}

/// `key` of a process as runc reads it: absent and null are "".
fn label<'a>(process: &'a Value, key: &str) -> Result<&'a str, LsmError> {
    match process.get(key) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(LsmError::NotAString),
    }
}

/// Pins `process`'s AppArmor profile and SELinux label to `container`'s
/// (the judged spec's `process`). `field` prefixes change fields.
pub fn keep_container(
    process: &mut Value,
    container: &Value,
    field: &str,
    rec: &mut Record,
) -> Result<(), Denial> {
    for key in KEYS {
        let denial = |value: &Value, e: LsmError| {
            Denial::new(
                RULE,
                format!("{field}/{key}"),
                value.to_string(),
                e.to_string(),
            )
        };
        let wanted = label(container, key)
            .map_err(|e| denial(container.get(key).unwrap_or(&Value::Null), e))?
            .to_string();
        let given =
            label(process, key).map_err(|e| denial(process.get(key).unwrap_or(&Value::Null), e))?;
        if given == wanted {
            continue;
        }
        if !given.is_empty() {
            return Err(denial(&Value::from(given), LsmError::Differs(wanted)));
        }
        let before = as_object(process).insert(key.to_string(), Value::from(wanted.clone()));
        rec.change(
            RULE,
            format!("{field}/{key}"),
            before.unwrap_or(Value::Null),
            Value::from(wanted),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(process: &mut Value, container: &Value) -> Result<Record, Denial> {
        let mut rec = Record::default();
        keep_container(process, container, "", &mut rec).map(|()| rec)
    }

    #[test]
    fn same_or_both_empty_is_no_change() {
        let container = json!({"apparmorProfile": "docker-default", "selinuxLabel": "s"});
        let mut exec = container.clone();
        assert!(run(&mut exec, &container).unwrap().changes.is_empty());
        let mut exec = json!({"args": ["sh"]});
        assert!(run(&mut exec, &json!({})).unwrap().changes.is_empty());
        assert_eq!(exec, json!({"args": ["sh"]}));
    }

    #[test]
    fn empty_is_filled_with_the_containers() {
        let container = json!({
            "apparmorProfile": "docker-default",
            "selinuxLabel": "system_u:system_r:container_t:s0:c1,c2"
        });
        let mut exec = json!({"apparmorProfile": "", "selinuxLabel": null});
        let rec = run(&mut exec, &container).unwrap();
        assert_eq!(exec, container);
        let fields: Vec<&str> = rec.changes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["/apparmorProfile", "/selinuxLabel"]);
    }

    #[test]
    fn another_profile_or_label_is_refused() {
        let container = json!({
            "apparmorProfile": "docker-default",
            "selinuxLabel": "system_u:system_r:container_t:s0:c1,c2"
        });
        for exec in [
            json!({"apparmorProfile": "unconfined"}),
            json!({"selinuxLabel": "system_u:system_r:spc_t:s0"}),
            json!({"selinuxLabel": "system_u:system_r:container_t:s0:c3,c4"}),
            json!({"apparmorProfile": 7}),
        ] {
            let mut exec = exec;
            let denial = run(&mut exec, &container).unwrap_err();
            assert_eq!(denial.rule, "lsm");
        }
        // A container without a profile: an exec may not pick one either.
        let mut exec = json!({"apparmorProfile": "unconfined"});
        assert!(run(&mut exec, &json!({})).is_err());
    }
}
