//! `linux.netDevices` (runtime-spec 1.2.1) moves host network interfaces
//! into the container's network namespace: a host NIC inside the container
//! is a way out that no wall rule sees, and the host loses the interface.
//! runc 1.4 implements it (1.3 ignores it), so it is refused on every runc.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;

const RULE: &str = "net_devices";

pub fn apply(spec: &mut Value, _cx: &RuleContext, _rec: &mut Record) -> Result<(), Denial> {
    match spec.pointer("/linux/netDevices") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(m)) if m.is_empty() => Ok(()),
        Some(v) => Err(Denial::new(
            RULE,
            "/linux/netDevices",
            v.to_string(),
            "host network devices are never moved into a container",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use serde_json::json;

    fn run(mut spec: Value) -> Result<Record, Denial> {
        crate::rules::run_rule(apply, &mut spec, &Policy::default())
    }

    #[test]
    fn a_host_interface_is_refused() {
        for devices in [
            json!({"eth0": {}}),
            json!({"eth0": {"name": "eth9"}}),
            json!([]),
            json!("eth0"),
        ] {
            let denial = run(json!({"linux": {"netDevices": devices}})).unwrap_err();
            assert_eq!(denial.rule, RULE);
        }
    }

    #[test]
    fn none_or_empty_passes() {
        for spec in [
            json!({}),
            json!({"linux": {}}),
            json!({"linux": {"netDevices": null}}),
            json!({"linux": {"netDevices": {}}}),
        ] {
            assert!(run(spec).unwrap().changes.is_empty());
        }
    }
}
