//! Every container gets a seccomp filter that denies by default: the
//! policy's profile (`seccomp.profile`, or the built-in one), narrowed by the
//! client's profile when the spec has one. The client can only take syscalls
//! away (see [`super::seccomp_merge`]); no action, listener, architecture or
//! flag of its profile lets through what the policy's profile stops.
//! Syscall names the host's libseccomp does not know are then dropped
//! explicitly (runc would skip them silently), so the result is
//! deterministic.
//!
//! The built-in profile is Docker 20.10's generated default with the socket
//! surface the network wall cannot police taken out: `socket` only for
//! AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK, `socketpair` only for AF_UNIX,
//! no io_uring (IORING_OP_SOCKET makes sockets without socket(2)), and no
//! 32-bit x86 ABI: libseccomp turns a conditional `socket` rule into an
//! unconditional `socketcall(SYS_SOCKET)` rule there, and socketcall's
//! arguments sit in memory seccomp cannot read.

use std::sync::OnceLock;

use serde_json::{json, Value};

use super::seccomp_merge::merge;
use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::{as_object, object_at, str_field};

const RULE: &str = "seccomp";
const FIELD: &str = "/linux/seccomp";
const FIELD_KEY: &str = "seccomp";
const BUILTIN_PROFILE: &str = include_str!("seccomp_default.json");

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
    let (policy_profile, source) = match &cx.policy.seccomp.loaded_profile {
        Some(profile) => (profile, "policy profile"),
        None => (builtin_profile()?, "built-in default"),
    };
    let linux = object_at(spec, "linux");
    let client = linux.get(FIELD_KEY).filter(|v| is_filter(v));
    let (result, source) = match client {
        None => (policy_profile.clone(), source.to_string()),
        Some(client) => {
            let merged = merge(policy_profile, client)
                .map_err(|e| Denial::new(RULE, FIELD, source, e.to_string()))?;
            (
                merged,
                format!("{source}, narrowed by the client's profile"),
            )
        }
    };
    if client != Some(&result) {
        let before = client.map_or(Value::Null, summary);
        let mut after = summary(&result);
        as_object(&mut after).insert("source".to_string(), json!(source));
        rec.change(RULE, FIELD, before, after);
        linux.insert(FIELD_KEY.to_string(), result);
    }
    if let Some(profile) = linux.get_mut(FIELD_KEY) {
        drop_unknown_syscalls(profile, cx, rec);
    }
    Ok(())
}

/// Whether runc would install a filter for this: it skips a profile with no
/// default action and no rules.
fn is_filter(profile: &Value) -> bool {
    let rules = profile
        .get("syscalls")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty());
    profile.is_object() && (!str_field(profile, "defaultAction").is_empty() || rules)
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
    for key in ["listenerPath", "flags"] {
        if let Some(value) = profile.get(key) {
            as_object(&mut out).insert(key.to_string(), value.clone());
        }
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

    fn builtin() -> Value {
        builtin_profile().unwrap().clone()
    }

    fn names_of(rule: &Value) -> Vec<String> {
        crate::lang::json::strings(rule.get("names"))
    }

    #[test]
    fn builtin_profile_is_dockers_default_without_the_unpoliced_socket_surface() {
        let builtin = builtin();
        let docker = &fixture("default")["linux"]["seccomp"];
        assert_eq!(builtin["defaultAction"], json!("SCMP_ACT_ERRNO"));
        assert_eq!(
            builtin["architectures"],
            json!(["SCMP_ARCH_X86_64", "SCMP_ARCH_X32"])
        );
        let removed = [
            "io_uring_enter",
            "io_uring_register",
            "io_uring_setup",
            "socket",
            "socketcall",
            "socketpair",
        ];
        let mut expected = names_of(&docker["syscalls"][0]);
        expected.retain(|n| !removed.contains(&n.as_str()));
        assert_eq!(names_of(&builtin["syscalls"][0]), expected);
        let rules = builtin["syscalls"].as_array().unwrap();
        assert_eq!(&rules[1..12], &docker["syscalls"].as_array().unwrap()[1..]);
        let socket: Vec<&Value> = rules
            .iter()
            .filter(|r| names_of(r).contains(&"socket".to_string()))
            .collect();
        let families: Vec<&Value> = socket.iter().map(|r| &r["args"][0]["value"]).collect();
        // AF_UNIX, AF_INET, AF_INET6, AF_NETLINK; nothing else, so no AF_VSOCK (40).
        assert_eq!(families, [&json!(1), &json!(2), &json!(10), &json!(16)]);
        for rule in socket {
            assert_eq!(rule["args"][0]["op"], json!("SCMP_CMP_EQ"));
            assert_eq!(rule["args"].as_array().unwrap().len(), 1);
        }
        assert_eq!(
            rules.last().unwrap(),
            &json!({"names": ["socketpair"], "action": "SCMP_ACT_ALLOW",
                "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}]})
        );
    }

    #[test]
    fn docker_default_comes_out_as_the_builtin() {
        let mut spec = fixture("default");
        let rec = run(&mut spec, &Policy::default(), &FakeHost::new());
        assert_eq!(spec["linux"]["seccomp"], builtin());
        assert_eq!(rec.changes.len(), 1);
        assert_eq!(
            rec.changes[0].after,
            json!({"defaultAction": "SCMP_ACT_ERRNO", "syscallRules": 17,
                "source": "built-in default, narrowed by the client's profile"})
        );
        // Judged again, the result is kept as it is.
        let again = run(&mut spec, &Policy::default(), &FakeHost::new());
        assert!(again.changes.is_empty());
    }

    #[test]
    fn unconfined_and_privileged_get_the_default() {
        for name in ["unconfined", "privileged"] {
            let mut spec = fixture(name);
            assert!(spec["linux"].get("seccomp").is_none());
            let rec = run(&mut spec, &Policy::default(), &FakeHost::new());
            assert_eq!(spec["linux"]["seccomp"], builtin());
            assert_eq!(rec.changes.len(), 1);
            let change = &rec.changes[0];
            assert_eq!(change.field, "/linux/seccomp");
            assert_eq!(change.before, Value::Null);
            assert_eq!(
                change.after,
                json!({"defaultAction": "SCMP_ACT_ERRNO", "syscallRules": 17, "source": "built-in default"})
            );
        }
    }

    #[test]
    fn a_permissive_client_profile_gets_no_more_than_the_builtin() {
        // defaultAction errno, but every syscall allowed by name.
        let mut names: Vec<String> = builtin()["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(names_of)
            .collect();
        names.extend(
            [
                "unshare",
                "setns",
                "mount",
                "keyctl",
                "add_key",
                "bpf",
                "io_uring_setup",
                "socketcall",
            ]
            .map(String::from),
        );
        let mut spec = fixture("default");
        spec["linux"]["seccomp"] = json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
            "syscalls": [{"names": names, "action": "SCMP_ACT_ALLOW"}]
        });
        run(&mut spec, &Policy::default(), &FakeHost::new());
        assert_eq!(spec["linux"]["seccomp"], builtin());
    }

    #[test]
    fn a_client_blocking_vsock_its_own_way_keeps_the_four_families() {
        let socket_rules = |profile: &Value| -> Vec<Value> {
            profile["syscalls"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| names_of(r).contains(&"socket".to_string()))
                .cloned()
                .collect()
        };
        let expected = socket_rules(&builtin());
        let mut docker = fixture("default")["linux"]["seccomp"].clone();
        // Either "allow unless AF_VSOCK" ...
        let mut unless = docker.clone();
        let names = unless["syscalls"][0]["names"].as_array_mut().unwrap();
        names.retain(|n| n != "socket");
        unless["syscalls"]
            .as_array_mut()
            .unwrap()
            .push(json!({"names": ["socket"],
            "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 40, "op": "SCMP_CMP_NE"}]}));
        // ... or "allow, and errno for AF_VSOCK".
        docker["syscalls"]
            .as_array_mut()
            .unwrap()
            .push(json!({"names": ["socket"],
            "action": "SCMP_ACT_ERRNO", "errnoRet": 97,
            "args": [{"index": 0, "value": 40, "op": "SCMP_CMP_EQ"}]}));
        for client in [unless, docker] {
            let mut spec = json!({"linux": {"seccomp": client}});
            run(&mut spec, &Policy::default(), &FakeHost::new());
            assert_eq!(socket_rules(&spec["linux"]["seccomp"]), expected);
        }
    }

    #[test]
    fn permissive_defaults_and_listeners_are_narrowed() {
        for profile in [
            json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["reboot"], "action": "SCMP_ACT_ERRNO"}]}),
            json!({"defaultAction": "SCMP_ACT_LOG"}),
            json!({"defaultAction": "SCMP_ACT_TRACE"}),
            json!({"defaultAction": "SCMP_ACT_ERRNO", "listenerPath": "/run/agent.sock",
                "syscalls": [{"names": ["read"], "action": "SCMP_ACT_NOTIFY"}]}),
            json!({"syscalls": []}),
            json!("not a profile"),
        ] {
            let mut spec = json!({"linux": {"seccomp": profile.clone()}});
            let rec = run(&mut spec, &Policy::default(), &FakeHost::new());
            let out = &spec["linux"]["seccomp"];
            assert_eq!(out["defaultAction"], json!("SCMP_ACT_ERRNO"));
            assert!(out.get("listenerPath").is_none());
            assert!(!out.to_string().contains("NOTIFY"), "{profile}");
            assert_eq!(rec.changes.len(), 1, "{profile}");
        }
    }

    #[test]
    fn a_policy_profile_that_does_not_deny_by_default_is_refused_for_a_client_profile() {
        let mut policy = Policy::default();
        policy.seccomp.loaded_profile = Some(json!({"defaultAction": "SCMP_ACT_LOG"}));
        let mut spec = fixture("default");
        let host = FakeHost::new();
        let cx = RuleContext {
            policy: &policy,
            host: &host,
            create: None,
            process_field: "/process",
        };
        let denial = apply(&mut spec, &cx, &mut Record::default()).unwrap_err();
        assert_eq!(denial.field, "/linux/seccomp");
        assert!(denial.reason.contains("SCMP_ACT_LOG"), "{denial}");
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
        assert_eq!(rules.len(), 15);
        let names = names_of(&rules[0]);
        assert_eq!(names.len(), 339);
        assert!(!names.contains(&"accept".to_string()));
        assert_eq!(rec.changes.len(), 2);
        assert_eq!(rec.changes[1].field, "/linux/seccomp/syscalls/names");
        assert_eq!(
            rec.changes[1].before,
            json!(["accept", "arch_prctl", "clone3"])
        );
    }
}
