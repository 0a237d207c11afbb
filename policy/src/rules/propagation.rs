//! Mount propagation is forced private: a shared or slave mount would let
//! mounts made on the host appear in the container later (`-v /:/host:rslave`)
//! or, for shared, let the container's mounts reach the host.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::rules::kernel_mounts::{edit_options, is_bind, mounts_mut};

const RULE: &str = "propagation";

/// Propagation modes that connect the container's mounts with the host's.
pub(crate) const LEAKY: &[&str] = &["shared", "rshared", "slave", "rslave"];
const PRIVATE: &[&str] = &["private", "rprivate"];

pub fn apply(spec: &mut Value, _cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    if let Some(mounts) = mounts_mut(spec) {
        for (index, mount) in mounts.iter_mut().enumerate() {
            let bind = is_bind(mount);
            edit_options(mount, index, RULE, rec, |options| {
                let mut has_propagation = false;
                let mut kept = Vec::with_capacity(options.len());
                for option in options.drain(..) {
                    let option = if LEAKY.contains(&option) {
                        "rprivate"
                    } else {
                        option
                    };
                    // One rprivate is enough; drop the repeats we made.
                    if option == "rprivate" && kept.contains(&option) {
                        continue;
                    }
                    has_propagation |= PRIVATE.contains(&option);
                    kept.push(option);
                }
                if bind && !has_propagation {
                    kept.push("rprivate");
                }
                *options = kept;
            });
        }
    }
    // Absent is runc's default (rprivate), so a compliant spec stays unchanged.
    if let Some(linux) = spec.get_mut("linux").and_then(Value::as_object_mut) {
        if let Some(before) = linux.get("rootfsPropagation").cloned() {
            if LEAKY.contains(&before.as_str().unwrap_or("")) {
                let after = Value::from("rprivate");
                linux.insert("rootfsPropagation".into(), after.clone());
                rec.change(RULE, "/linux/rootfsPropagation", before, after);
            }
        }
    }
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
    fn rslave_root_bind_becomes_rprivate() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-bind-root.json"
        ))
        .unwrap();
        let rec = run(&mut spec);
        assert_eq!(spec["mounts"][7]["options"], json!(["rbind", "rprivate"]));
        assert_eq!(rec.changes.len(), 1);
        assert_eq!(rec.changes[0].field, "/mounts/7/options");
    }

    #[test]
    fn docker_default_is_unchanged() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-default.json"
        ))
        .unwrap();
        assert!(run(&mut spec).changes.is_empty());
    }

    #[test]
    fn binds_without_propagation_get_rprivate_others_do_not() {
        let mut spec = json!({"mounts": [
            {"destination": "/v", "type": "bind", "source": "/srv/v", "options": ["rbind"]},
            {"destination": "/t", "type": "tmpfs", "source": "tmpfs", "options": ["shared"]},
            {"destination": "/p", "type": "bind", "source": "/srv/p", "options": ["bind", "private", "rshared"]},
            {"destination": "/q", "type": "proc", "source": "proc"},
        ]});
        run(&mut spec);
        assert_eq!(spec["mounts"][0]["options"], json!(["rbind", "rprivate"]));
        assert_eq!(spec["mounts"][1]["options"], json!(["rprivate"]));
        assert_eq!(
            spec["mounts"][2]["options"],
            json!(["bind", "private", "rprivate"])
        );
        assert!(spec["mounts"][3].get("options").is_none());
    }

    #[test]
    fn rootfs_propagation_forced_private_only_when_present_and_leaky() {
        let mut spec = json!({"linux": {"rootfsPropagation": "rshared"}});
        run(&mut spec);
        assert_eq!(spec["linux"]["rootfsPropagation"], "rprivate");
        let mut spec = json!({"linux": {"rootfsPropagation": "private"}});
        assert!(run(&mut spec).changes.is_empty());
        let mut spec = json!({"linux": {}});
        run(&mut spec);
        assert_eq!(spec, json!({"linux": {}}));
    }
}
