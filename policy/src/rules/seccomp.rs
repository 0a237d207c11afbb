//! Every container gets a seccomp filter that denies by default. A missing
//! filter, one whose default lets syscalls through, or one that hands
//! decisions to an outside agent (`listenerPath`) is replaced with the
//! policy's profile, or the built-in one (Docker 20.10's default for this
//! machine). Syscall names the host's libseccomp does not know are then
//! dropped explicitly (runc would skip them silently), so the result is
//! deterministic.

use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::decision::{Denial, Record};
use crate::engine::RuleContext;
use crate::json::{as_object, object_at, str_field};

const RULE: &str = "seccomp";
const FIELD: &str = "/linux/seccomp";
const FIELD_KEY: &str = "seccomp";
const BUILTIN_PROFILE: &str = include_str!("seccomp_default.json");

/// Default actions that stop a syscall no rule allowed. Anything else
/// (ALLOW, LOG, TRACE, NOTIFY, unknown or missing) lets it run, or lets
/// someone other than the kernel decide.
const CONFINING_DEFAULTS: [&str; 5] = [
    "SCMP_ACT_ERRNO",
    "SCMP_ACT_KILL",
    "SCMP_ACT_KILL_THREAD",
    "SCMP_ACT_KILL_PROCESS",
    "SCMP_ACT_TRAP",
];

/// The built-in profile, parsed once.
fn builtin_profile() -> Result<&'static Value, Denial> {
    static PARSED: OnceLock<Result<Value, String>> = OnceLock::new();
    PARSED
        .get_or_init(|| serde_json::from_str(BUILTIN_PROFILE).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| {
            Denial::new(
                RULE,
                FIELD,
                "built-in default profile",
                format!("the built-in seccomp profile does not parse (a vibe-shim bug): {e}"),
            )
        })
}

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let linux = object_at(spec, "linux");
    let current = linux.get(FIELD_KEY).filter(|v| v.is_object());
    if current.is_none_or(needs_replacing) {
        let (replacement, source) = match &cx.policy.seccomp.loaded_profile {
            Some(profile) => (profile.clone(), "policy profile"),
            None => (builtin_profile()?.clone(), "built-in default"),
        };
        let before = current.map_or(Value::Null, summary);
        let mut after = summary(&replacement);
        as_object(&mut after).insert("source".to_string(), json!(source));
        linux.insert(FIELD_KEY.to_string(), replacement);
        rec.change(RULE, FIELD, before, after);
    }
    if let Some(profile) = linux.get_mut(FIELD_KEY) {
        drop_unknown_syscalls(profile, cx, rec);
    }
    Ok(())
}

fn needs_replacing(profile: &Value) -> bool {
    let default_action = str_field(profile, "defaultAction");
    !CONFINING_DEFAULTS.contains(&default_action) || profile.get("listenerPath").is_some()
}

/// What the audit log shows of a profile: not the whole thing.
fn summary(profile: &Value) -> Value {
    let rules = profile
        .get("syscalls")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let mut out = json!({
        "defaultAction": profile.get("defaultAction").cloned().unwrap_or(Value::Null),
        "syscallRules": rules,
    });
    if let Some(listener) = profile.get("listenerPath") {
        as_object(&mut out).insert("listenerPath".to_string(), listener.clone());
    }
    out
}

fn drop_unknown_syscalls(profile: &mut Value, cx: &RuleContext, rec: &mut Record) {
    let Some(Value::Array(rules)) = profile.get_mut("syscalls") else {
        return;
    };
    let mut dropped = Vec::new();
    rules.retain_mut(|rule| {
        let Some(Value::Array(names)) = rule.get_mut("names") else {
            return true;
        };
        let had_names = !names.is_empty();
        names.retain(|name| match name.as_str() {
            Some(n) if !cx.host.syscall_known(n) => {
                dropped.push(name.clone());
                false
            }
            _ => true,
        });
        !(had_names && names.is_empty())
    });
    if !dropped.is_empty() {
        rec.change(
            RULE,
            format!("{FIELD}/syscalls/names"),
            Value::Array(dropped),
            json!([]),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::host::FakeHost;

    fn fixture(name: &str) -> Value {
        let text = match name {
            "default" => include_str!("../../tests/fixtures/docker-20.10/config-default.json"),
            "privileged" => {
                include_str!("../../tests/fixtures/docker-20.10/config-privileged.json")
            }
            "unconfined" => {
                include_str!("../../tests/fixtures/docker-20.10/config-seccomp-unconfined.json")
            }
            _ => unreachable!(),
        };
        serde_json::from_str(text).unwrap()
    }

    fn run(spec: &mut Value, policy: &Policy, host: &FakeHost) -> Record {
        let cx = RuleContext {
            policy,
            host,
            create: None,
            process_field: "/process",
        };
        let mut rec = Record::default();
        apply(spec, &cx, &mut rec).unwrap();
        rec
    }

    #[test]
    fn builtin_profile_is_dockers_default() {
        let builtin = builtin_profile().unwrap();
        assert_eq!(builtin, &fixture("default")["linux"]["seccomp"]);
        assert_eq!(builtin["defaultAction"], json!("SCMP_ACT_ERRNO"));
    }

    #[test]
    fn docker_default_is_kept() {
        let mut spec = fixture("default");
        let before = spec.clone();
        let rec = run(&mut spec, &Policy::default(), &FakeHost::new());
        assert!(rec.changes.is_empty());
        assert_eq!(spec, before);
    }

    #[test]
    fn unconfined_and_privileged_get_the_default() {
        for name in ["unconfined", "privileged"] {
            let mut spec = fixture(name);
            assert!(spec["linux"].get("seccomp").is_none());
            let rec = run(&mut spec, &Policy::default(), &FakeHost::new());
            assert_eq!(
                spec["linux"]["seccomp"],
                fixture("default")["linux"]["seccomp"]
            );
            assert_eq!(rec.changes.len(), 1);
            let change = &rec.changes[0];
            assert_eq!(change.field, "/linux/seccomp");
            assert_eq!(change.before, Value::Null);
            assert_eq!(
                change.after,
                json!({"defaultAction": "SCMP_ACT_ERRNO", "syscallRules": 12, "source": "built-in default"})
            );
        }
    }

    #[test]
    fn permissive_defaults_and_listeners_are_replaced() {
        for profile in [
            json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["reboot"], "action": "SCMP_ACT_ERRNO"}]}),
            json!({"defaultAction": "SCMP_ACT_LOG"}),
            json!({"defaultAction": "SCMP_ACT_TRACE"}),
            json!({"defaultAction": "SCMP_ACT_ERRNO", "listenerPath": "/run/agent.sock"}),
            json!({"syscalls": []}),
            json!("not a profile"),
        ] {
            let mut spec = json!({"linux": {"seccomp": profile.clone()}});
            let rec = run(&mut spec, &Policy::default(), &FakeHost::new());
            assert_eq!(
                spec["linux"]["seccomp"]["defaultAction"],
                json!("SCMP_ACT_ERRNO")
            );
            assert!(spec["linux"]["seccomp"].get("listenerPath").is_none());
            assert_eq!(rec.changes.len(), 1, "{profile}");
        }
    }

    #[test]
    fn policy_profile_wins_over_builtin() {
        let mut policy = Policy::default();
        policy.seccomp.loaded_profile = Some(json!({
            "defaultAction": "SCMP_ACT_KILL_PROCESS",
            "syscalls": [{"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"}]
        }));
        let mut spec = fixture("unconfined");
        let rec = run(&mut spec, &policy, &FakeHost::new());
        assert_eq!(
            spec["linux"]["seccomp"],
            policy.seccomp.loaded_profile.unwrap()
        );
        assert_eq!(rec.changes[0].after["source"], json!("policy profile"));
    }

    #[test]
    fn unknown_syscalls_are_dropped_and_recorded() {
        let mut host = FakeHost::new();
        for name in ["clone3", "accept", "arch_prctl"] {
            host.unknown_syscalls.insert(name.to_string());
        }
        let mut spec = fixture("default");
        let rec = run(&mut spec, &Policy::default(), &host);
        let rules = spec["linux"]["seccomp"]["syscalls"].as_array().unwrap();
        // clone3 and arch_prctl were alone in their rules: those rules go.
        assert_eq!(rules.len(), 10);
        let names = crate::json::strings(rules[0].get("names"));
        assert_eq!(names.len(), 345);
        assert!(!names.contains(&"accept".to_string()));
        assert_eq!(rec.changes.len(), 1);
        assert_eq!(rec.changes[0].field, "/linux/seccomp/syscalls/names");
        assert_eq!(
            rec.changes[0].before,
            json!(["accept", "arch_prctl", "clone3"])
        );
    }
}
