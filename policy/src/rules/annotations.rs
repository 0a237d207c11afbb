//! Drops the spec annotations runc acts on itself (its `features` list them
//! as potentially unsafe). runc turns every annotation into a `key=value`
//! label and appends its own `bundle=<dir>`, then reads labels first-match:
//! - `org.systemd.property.<Name>` becomes a property of the container's
//!   systemd unit (under `--systemd-cgroup`), after the resource ones, so
//!   `TasksMax`, `MemoryMax` or `DeviceAllow` would lift the ceilings;
//! - `org.criu.config` names a CRIU config file on the host that
//!   `runc checkpoint` feeds to CRIU (`action-script` runs as root);
//! - a `bundle` key (or any key with `=`, which forges another label)
//!   would win over runc's own and point `runc exec` at another config.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;

const RULE: &str = "annotations";

const SYSTEMD_PREFIX: &str = "org.systemd.property.";
const RUNC_READS: &[&str] = &["org.criu.config", "bundle"];

fn runc_acts_on(key: &str) -> bool {
    key.starts_with(SYSTEMD_PREFIX) || RUNC_READS.contains(&key) || key.contains('=')
}

pub fn apply(spec: &mut Value, _cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some(Value::Object(annotations)) = spec.get_mut("annotations") else {
        return Ok(());
    };
    super::retain_recorded(annotations, RULE, "/annotations", rec, |key| {
        !runc_acts_on(key)
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use serde_json::json;

    fn run(spec: &mut Value) -> Record {
        crate::rules::run_rule(apply, spec, &Policy::default()).unwrap()
    }

    #[test]
    fn what_runc_acts_on_is_dropped_and_the_rest_kept() {
        let mut spec = json!({"annotations": {
            "org.systemd.property.TasksMax": "infinity",
            "org.systemd.property.MemoryMax": "infinity",
            "org.criu.config": "/var/tmp/worktree/criu.conf",
            "bundle": "/var/tmp/worktree/evil",
            "bundle=/var/tmp/worktree/evil": "",
            "io.podman.annotations.autoremove": "TRUE",
            "org.opencontainers.image.title": "x",
            "org.systemd.propertyX": "kept: not the prefix runc cuts",
        }});
        let rec = run(&mut spec);
        assert_eq!(rec.changes.len(), 5, "{:?}", rec.changes);
        let left: Vec<&String> = spec["annotations"].as_object().unwrap().keys().collect();
        assert_eq!(
            left,
            [
                "io.podman.annotations.autoremove",
                "org.opencontainers.image.title",
                "org.systemd.propertyX"
            ]
        );
    }

    #[test]
    fn no_annotations_no_change() {
        for mut spec in [
            json!({}),
            json!({"annotations": null}),
            json!({"annotations": {}}),
        ] {
            assert!(run(&mut spec).changes.is_empty());
        }
    }
}
