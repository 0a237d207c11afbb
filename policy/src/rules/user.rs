//! When the policy names a `uid:gid`, every process runs as it, with no
//! supplementary groups (`-u 0` and `--group-add` are overridden).

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::object_at;

const RULE: &str = "user";

pub fn apply(process: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some((uid, gid)) = cx.policy.process.forced_user() else {
        return Ok(());
    };
    let user = object_at(process, "user");
    for (key, value) in [("uid", uid), ("gid", gid)] {
        let after = Value::from(value);
        let before = crate::lang::json::set(user, key, after.clone());
        rec.change(
            RULE,
            format!("{}/user/{key}", cx.process_field),
            before,
            after,
        );
    }
    // username is Windows-only in OCI, but drop it so nothing can map a name.
    for key in ["additionalGids", "username"] {
        if let Some(before) = user.remove(key) {
            rec.change(
                RULE,
                format!("{}/user/{key}", cx.process_field),
                before,
                Value::Null,
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::host::FakeHost;
    use serde_json::json;

    fn run(process: &mut Value, user: Option<&str>) -> Record {
        let mut policy = Policy::default();
        policy.process.user = user.map(str::to_string);
        let host = FakeHost::new();
        let cx = RuleContext {
            policy: &policy,
            host: &host,
            create: None,
            process_field: "",
        };
        let mut rec = Record::default();
        apply(process, &cx, &mut rec).unwrap();
        rec
    }

    #[test]
    fn root_exec_becomes_the_policy_user() {
        let mut exec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/process-exec-privileged-root-secret.json"
        ))
        .unwrap();
        let rec = run(&mut exec, Some("1000:1001"));
        assert_eq!(exec["user"], json!({"uid": 1000, "gid": 1001}));
        let fields: Vec<&str> = rec.changes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["/user/uid", "/user/gid", "/user/additionalGids"]);
    }

    #[test]
    fn username_removed_and_missing_user_created() {
        let mut process = json!({"user": {"uid": 5, "gid": 5, "username": "x", "umask": 18}});
        run(&mut process, Some("1000:1000"));
        assert_eq!(
            process["user"],
            json!({"uid": 1000, "gid": 1000, "umask": 18})
        );
        let mut process = json!({});
        run(&mut process, Some("1:2"));
        assert_eq!(process["user"], json!({"uid": 1, "gid": 2}));
    }

    #[test]
    fn no_forced_user_leaves_it() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-user0.json"
        ))
        .unwrap();
        let before = spec.clone();
        assert!(run(&mut spec["process"], None).changes.is_empty());
        assert_eq!(spec, before);
    }
}
