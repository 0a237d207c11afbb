//! `linux.intelRdt` is refused. runc, as root on the host, creates or joins
//! the resctrl group named by `closID` (any existing one, such as a group
//! the host reserves for latency-critical services) and rewrites its
//! `schemata`: cache and memory-bandwidth shares of host processes, and one
//! of the few hardware CLOS ids per container. The same holds for
//! `runc update --l3-cache-schema / --mem-bw-schema` (shim/src/verbs/update.rs).

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;

pub const RULE: &str = "intel_rdt";
pub const REASON: &str = "Intel RDT (resctrl) groups are host-wide: a client never sets them";

pub fn apply(spec: &mut Value, _cx: &RuleContext, _rec: &mut Record) -> Result<(), Denial> {
    match spec.pointer("/linux/intelRdt") {
        None | Some(Value::Null) => Ok(()),
        Some(v) => Err(Denial::new(RULE, "/linux/intelRdt", v.to_string(), REASON)),
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
    fn any_intel_rdt_is_refused() {
        for rdt in [
            json!({}),
            json!({"closID": "host-critical"}),
            json!({"l3CacheSchema": "L3:0=fffff", "memBwSchema": "MB:0=100"}),
        ] {
            let denial = run(json!({"linux": {"intelRdt": rdt}})).unwrap_err();
            assert_eq!(denial.rule, RULE);
        }
        run(json!({"linux": {"intelRdt": null}})).unwrap();
        run(json!({"linux": {}})).unwrap();
    }
}
