//! The client's seccomp profile can only narrow the policy's.
//!
//! The result is the policy's profile (its default action, errno, listener
//! and rules), where each policy rule that lets a syscall through is kept
//! only as far as the client's profile also lets it through:
//! - the client allows the syscall outright: the policy's rule stays;
//! - the client denies it outright (a rule without conditions, or its
//!   default with no rule letting it through): the policy's rules for it go
//!   and one rule with the client's action (and errno) replaces them;
//! - the client allows it under conditions: the policy's rule becomes one
//!   rule per pair of (policy, client) alternatives, with the conjunction of
//!   both conditions (see [`super::seccomp_args`]). A pair whose
//!   conjunction is empty, or not one runc can load, lets nothing through.
//!
//! So nothing the policy's profile stops ever passes. Every client action
//! other than errno/kill/trap counts as "may let it through" (allow, log,
//! trace, notify): it never widens the policy, and the policy's action is
//! what runs. Conditional client denials are not carried over (they would
//! overlap the policy's allow rules, which libseccomp refuses); the client
//! then gets no more than the policy allows. The client's listener
//! (`listenerPath`) is dropped with it: decisions are never handed to an
//! agent the client names. Architectures are the policy's that the client
//! also lists (a syscall from any other ABI is refused by the filter), and of
//! the client's flags only SECCOMP_FILTER_FLAG_LOG is kept
//! (SECCOMP_FILTER_FLAG_SPEC_ALLOW would turn off the speculative store
//! bypass mitigation).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use serde_json::{json, Map, Value};

use super::seccomp_args::{alternatives, compiled, conjoin, is_stop, Conds, Conjunction};
use crate::lang::json::{as_object, str_field, str_items, strings};

/// The only filter flag a client may add.
const CLIENT_FLAGS: &[&str] = &["SECCOMP_FILTER_FLAG_LOG"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MergeError {
    #[error("the policy's seccomp profile does not stop syscalls by default (defaultAction {0:?}), so it cannot be narrowed")]
    PolicyNotConfining(String),
}

/// A stopping action and its errno.
type Stop = (String, Option<u64>);

/// What the client's profile does with one syscall.
#[derive(Debug, Clone, PartialEq)]
enum Verdict<'a> {
    AllowAll,
    DenyAll(&'a Stop),
    AllowWhen(&'a [Conds]),
}

#[derive(Debug, Default)]
struct ClientRules {
    /// The first unconditional stopping rule.
    stop: Option<Stop>,
    /// An unconditional rule that may let it through.
    pass_all: bool,
    /// Alternatives under which a rule may let it through.
    pass_when: Vec<Conds>,
}

/// The names the policy's rules let through, each with a slot: the client's
/// profile is read only for these (a Docker profile names some 370
/// syscalls, and this runs at every create). The keys are the policy's, so
/// a client's names cannot crowd the table; they are only looked up.
struct Slots<'p> {
    index: HashMap<&'p str, usize, BuildHasherDefault<Fnv>>,
    names: Vec<&'p str>,
}

impl<'p> Slots<'p> {
    fn new(rules: &'p [Value]) -> Slots<'p> {
        let count = rules
            .iter()
            .filter_map(|r| r.get("names").and_then(Value::as_array))
            .map(Vec::len)
            .sum();
        let mut slots = Slots {
            index: HashMap::with_capacity_and_hasher(count, BuildHasherDefault::default()),
            names: Vec::with_capacity(count),
        };
        for name in rules
            .iter()
            .filter(|r| !is_stop(str_field(r, "action")))
            .flat_map(|r| str_items(r.get("names")))
        {
            let next = slots.names.len();
            if *slots.index.entry(name).or_insert(next) == next {
                slots.names.push(name);
            }
        }
        slots
    }

    fn get(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }
}

/// FNV-1a: the table's keys are the policy's own names, short and few.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

struct Client {
    /// `None` when the client's default lets syscalls through.
    default_stop: Option<Stop>,
    /// What the client's rules say of each slot's name.
    rules: Vec<ClientRules>,
}

fn errno_ret(value: &Value, key: &str) -> Option<u64> {
    value.get(key).and_then(Value::as_u64)
}

impl Client {
    fn read(profile: &Value, slots: &Slots) -> Client {
        let default = str_field(profile, "defaultAction");
        let default_stop =
            is_stop(default).then(|| (default.to_string(), errno_ret(profile, "defaultErrnoRet")));
        let mut rules: Vec<ClientRules> = Vec::new();
        rules.resize_with(slots.names.len(), ClientRules::default);
        for rule in profile
            .get("syscalls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let action = str_field(rule, "action");
            // An unreadable condition lets nothing more through.
            let Ok(alts) = alternatives(rule.get("args")) else {
                continue;
            };
            let unconditional = alts.iter().any(Vec::is_empty);
            for slot in str_items(rule.get("names")).filter_map(|n| slots.get(n)) {
                let entry = &mut rules[slot];
                if is_stop(action) {
                    if unconditional && entry.stop.is_none() {
                        entry.stop = Some((action.to_string(), errno_ret(rule, "errnoRet")));
                    }
                } else if unconditional {
                    entry.pass_all = true;
                } else {
                    entry.pass_when.extend(alts.iter().cloned());
                }
            }
        }
        Client {
            default_stop,
            rules,
        }
    }

    fn verdict(&self, slot: usize) -> Verdict<'_> {
        let rules = self.rules.get(slot);
        if let Some(stop) = rules.and_then(|r| r.stop.as_ref()) {
            return Verdict::DenyAll(stop);
        }
        let Some(default_stop) = &self.default_stop else {
            return Verdict::AllowAll;
        };
        match rules {
            Some(r) if r.pass_all => Verdict::AllowAll,
            Some(r) if !r.pass_when.is_empty() => Verdict::AllowWhen(&r.pass_when),
            _ => Verdict::DenyAll(default_stop),
        }
    }
}

/// The policy's `profile` narrowed by the client's `client`.
pub(crate) fn merge(policy: &Value, client: &Value) -> Result<Value, MergeError> {
    let default_action = str_field(policy, "defaultAction");
    if !is_stop(default_action) {
        return Err(MergeError::PolicyNotConfining(default_action.to_string()));
    }
    let default = compiled(default_action, errno_ret(policy, "defaultErrnoRet"));
    let rules: &[Value] = policy
        .get("syscalls")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let slots = Slots::new(rules);
    let client_rules = Client::read(client, &slots);
    let verdicts: Vec<Verdict> = (0..slots.names.len())
        .map(|slot| client_rules.verdict(slot))
        .collect();
    let denied = |name: &str| {
        slots
            .get(name)
            .is_some_and(|slot| matches!(verdicts[slot], Verdict::DenyAll(_)))
    };

    let mut kept = Vec::new();
    let mut narrowed = Narrowed::default();
    for rule in rules {
        let names = str_items(rule.get("names"));
        let mut keep: Vec<&str> = Vec::new();
        if is_stop(str_field(rule, "action")) {
            keep.extend(names.filter(|n| !denied(n)));
        } else {
            // Read only when a client condition needs it.
            let policy_alts = std::cell::OnceCell::new();
            for name in names {
                match slots.get(name).map(|slot| &verdicts[slot]) {
                    Some(Verdict::AllowAll) => keep.push(name),
                    Some(Verdict::AllowWhen(client_alts)) => {
                        // A policy rule we cannot read is not widened: it goes.
                        let Ok(policy_alts) =
                            policy_alts.get_or_init(|| alternatives(rule.get("args")))
                        else {
                            continue;
                        };
                        let both = conjunctions(policy_alts, client_alts);
                        if same_set(&both, policy_alts) {
                            keep.push(name);
                        } else {
                            for conds in both {
                                narrowed.add(rule, name, &conds);
                            }
                        }
                    }
                    Some(Verdict::DenyAll(_)) | None => {}
                }
            }
        }
        if !keep.is_empty() {
            kept.push(with_names(rule, &keep));
        }
    }
    kept.extend(narrowed.rules);
    kept.extend(client_denials(&slots, &verdicts, default));

    // The policy's profile with its rules replaced: its own rules are
    // never copied only to be dropped.
    let mut map = replaced(policy, "syscalls", Value::Array(kept));
    if let Some(Value::Array(archs)) = policy.get("architectures") {
        let client_archs = strings(client.get("architectures"));
        let both: Vec<Value> = archs
            .iter()
            .filter(|a| {
                a.as_str()
                    .is_some_and(|a| client_archs.iter().any(|c| c == a))
            })
            .cloned()
            .collect();
        map.insert("architectures".to_string(), Value::Array(both));
    }
    let mut flags = strings(policy.get("flags"));
    let extra: Vec<String> = strings(client.get("flags"))
        .into_iter()
        .filter(|f| CLIENT_FLAGS.contains(&f.as_str()) && !flags.contains(f))
        .collect();
    if !extra.is_empty() {
        flags.extend(extra);
        map.insert("flags".to_string(), json!(flags));
    }
    Ok(Value::Object(map))
}

/// A copy of `rule` naming only `names`.
fn with_names(rule: &Value, names: &[&str]) -> Value {
    // Built directly: `json!` would go through serde's serializer.
    let names = names.iter().map(|n| Value::String(n.to_string())).collect();
    Value::Object(replaced(rule, "names", Value::Array(names)))
}

/// The fields of `object` with `key`'s value replaced by `value` (in its
/// place, or last when it had none); the old value is never copied.
fn replaced(object: &Value, key: &str, value: Value) -> Map<String, Value> {
    let mut value = Some(value);
    let mut map = Map::new();
    for (k, v) in object.as_object().into_iter().flatten() {
        let new = if k == key { value.take() } else { None };
        map.insert(k.clone(), new.unwrap_or_else(|| v.clone()));
    }
    if let Some(value) = value {
        map.insert(key.to_string(), value);
    }
    map
}

/// Every non-empty, loadable conjunction of a policy and a client alternative.
fn conjunctions(policy_alts: &[Conds], client_alts: &[Conds]) -> Vec<Conds> {
    let mut seen = BTreeSet::new();
    let mut out: Vec<Conds> = Vec::new();
    for p in policy_alts {
        for c in client_alts {
            if let Conjunction::Rule(conds) = conjoin(p, c) {
                if seen.insert(conds.clone()) {
                    out.push(conds);
                }
            }
        }
    }
    out
}

fn same_set(a: &[Conds], b: &[Conds]) -> bool {
    a.iter().all(|x| b.contains(x)) && b.iter().all(|x| a.contains(x))
}

/// Rules added for conditions on both sides, one per action and conditions.
#[derive(Default)]
struct Narrowed {
    rules: Vec<Value>,
    /// (action, errnoRet, args) as text -> index in `rules`.
    index: BTreeMap<String, usize>,
}

impl Narrowed {
    /// Adds `name` under `conds` with the action of `template`.
    fn add(&mut self, template: &Value, name: &str, conds: &Conds) {
        let args = Value::Array(conds.iter().map(|c| c.to_json()).collect());
        let key = format!(
            "{}\0{}\0{args}",
            str_field(template, "action"),
            template.get("errnoRet").unwrap_or(&Value::Null)
        );
        if let Some(Value::Array(names)) = self
            .index
            .get(&key)
            .and_then(|&i| self.rules.get_mut(i))
            .and_then(|r| r.get_mut("names"))
        {
            names.push(json!(name));
            return;
        }
        let mut rule = template.clone();
        let map = as_object(&mut rule);
        map.insert("names".to_string(), json!([name]));
        map.insert("args".to_string(), args);
        self.index.insert(key, self.rules.len());
        self.rules.push(rule);
    }
}

/// One rule per client stopping action for the syscalls the client denies
/// outright, except where the policy's default already does the same.
fn client_denials(slots: &Slots, verdicts: &[Verdict], default: (&str, u64)) -> Vec<Value> {
    let mut groups: Vec<(&Stop, Vec<&str>)> = Vec::new();
    // In name order, as the rules have always been written.
    let mut names: Vec<(&str, &Verdict)> = slots
        .names
        .iter()
        .zip(verdicts)
        .filter(|(_, v)| matches!(v, Verdict::DenyAll(_)))
        .map(|(n, v)| (*n, v))
        .collect();
    names.sort_unstable_by_key(|(n, _)| *n);
    for (name, verdict) in names {
        let Verdict::DenyAll(stop) = verdict else {
            continue;
        };
        if compiled(&stop.0, stop.1) == default {
            continue;
        }
        match groups.iter_mut().find(|(s, _)| s == stop) {
            Some((_, names)) => names.push(name),
            None => groups.push((stop, vec![name])),
        }
    }
    groups
        .into_iter()
        .map(|((action, errno), names)| {
            let mut rule = json!({"names": names, "action": action});
            if let Some(errno) = errno {
                rule["errnoRet"] = json!(errno);
            }
            rule
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Value {
        json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X32"],
            "syscalls": [
                {"names": ["read", "write", "unshare", "mount", "socket"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
                 "args": [{"index": 0, "value": 2114060288u64, "op": "SCMP_CMP_MASKED_EQ"}]},
                {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
                 "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]},
                {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
                 "args": [{"index": 0, "value": 8, "op": "SCMP_CMP_EQ"}]},
                {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}
            ]
        })
    }

    /// The client's verdict on `name` in the merged profile, as rules.
    fn rules_for(profile: &Value, name: &str) -> Vec<Value> {
        profile["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| strings(r.get("names")).iter().any(|n| n == name))
            .map(|r| {
                let mut r = r.clone();
                as_object(&mut r).remove("names");
                r
            })
            .collect()
    }

    fn allow_all_names(names: &[&str]) -> Value {
        json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
            "syscalls": [{"names": names, "action": "SCMP_ACT_ALLOW"}]
        })
    }

    #[test]
    fn a_client_allowing_everything_gets_the_policy() {
        let client = allow_all_names(&[
            "read",
            "write",
            "unshare",
            "mount",
            "socket",
            "clone",
            "personality",
            "clone3",
            "keyctl",
            "bpf",
        ]);
        assert_eq!(merge(&policy(), &client).unwrap(), policy());
        // Also when it says so with a default that lets everything through.
        for default in [
            "SCMP_ACT_ALLOW",
            "SCMP_ACT_LOG",
            "SCMP_ACT_TRACE",
            "SCMP_ACT_NOTIFY",
        ] {
            let client = json!({"defaultAction": default,
                "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X32"]});
            assert_eq!(merge(&policy(), &client).unwrap(), policy(), "{default}");
        }
    }

    #[test]
    fn policy_conditions_survive_an_unconditional_client_allow() {
        let client = allow_all_names(&["clone", "personality"]);
        let out = merge(&policy(), &client).unwrap();
        assert_eq!(rules_for(&out, "clone"), rules_for(&policy(), "clone"));
        assert_eq!(rules_for(&out, "personality").len(), 2);
        // Not named by the client: its default (EPERM) is the policy's.
        assert!(rules_for(&out, "unshare").is_empty());
        assert!(rules_for(&out, "keyctl").is_empty());
    }

    #[test]
    fn client_denials_are_kept_with_their_action() {
        let mut client = allow_all_names(&["read", "write", "socket", "clone", "personality"]);
        client["syscalls"].as_array_mut().unwrap().extend([
            json!({"names": ["write"], "action": "SCMP_ACT_KILL_PROCESS"}),
            json!({"names": ["socket"], "action": "SCMP_ACT_ERRNO", "errnoRet": 97}),
        ]);
        client["defaultAction"] = json!("SCMP_ACT_ERRNO");
        client["defaultErrnoRet"] = json!(38);
        let out = merge(&policy(), &client).unwrap();
        assert_eq!(
            rules_for(&out, "write"),
            [json!({"action": "SCMP_ACT_KILL_PROCESS"})]
        );
        assert_eq!(
            rules_for(&out, "socket"),
            [json!({"action": "SCMP_ACT_ERRNO", "errnoRet": 97})]
        );
        // Denied by the client's default, with the client's errno.
        assert_eq!(
            rules_for(&out, "unshare"),
            [json!({"action": "SCMP_ACT_ERRNO", "errnoRet": 38})]
        );
        assert_eq!(
            rules_for(&out, "read"),
            [json!({"action": "SCMP_ACT_ALLOW"})]
        );
        // The policy's own denial is untouched.
        assert_eq!(
            rules_for(&out, "clone3"),
            [json!({"action": "SCMP_ACT_ERRNO", "errnoRet": 38})]
        );
        assert_eq!(out["defaultAction"], json!("SCMP_ACT_ERRNO"));
        assert!(out.get("defaultErrnoRet").is_none());
    }

    #[test]
    fn a_client_denial_equal_to_the_default_needs_no_rule() {
        let client = json!({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1,
            "syscalls": [{"names": ["mount"], "action": "SCMP_ACT_ERRNO"}]});
        let out = merge(&policy(), &client).unwrap();
        assert!(rules_for(&out, "mount").is_empty());
        assert!(rules_for(&out, "read").is_empty());
    }

    #[test]
    fn conditional_on_both_sides_is_the_conjunction() {
        let client = json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "syscalls": [
                {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
                 "args": [{"index": 0, "value": 0x100, "valueTwo": 0x100, "op": "SCMP_CMP_MASKED_EQ"}]},
                {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
                 "args": [{"index": 0, "value": 8, "op": "SCMP_CMP_EQ"}, {"index": 1, "value": 3, "op": "SCMP_CMP_NE"}]},
                {"names": ["socket"], "action": "SCMP_ACT_ALLOW",
                 "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}, {"index": 0, "value": 2, "op": "SCMP_CMP_EQ"}]},
                {"names": ["read"], "action": "SCMP_ACT_LOG",
                 "args": [{"index": 0, "value": 3, "op": "SCMP_CMP_LT"}, {"index": 2, "value": 5, "op": "SCMP_CMP_GT"}]}
            ]
        });
        let out = merge(&policy(), &client).unwrap();
        assert_eq!(
            rules_for(&out, "clone"),
            [json!({"action": "SCMP_ACT_ALLOW", "args": [
                {"index": 0, "value": 0x7E020100u64, "valueTwo": 0x100, "op": "SCMP_CMP_MASKED_EQ"}]})]
        );
        assert_eq!(
            rules_for(&out, "personality"),
            [json!({"action": "SCMP_ACT_ALLOW", "args": [
                {"index": 0, "value": 8, "op": "SCMP_CMP_EQ"},
                {"index": 1, "value": 3, "op": "SCMP_CMP_NE"}]})]
        );
        // A repeated index is an OR for runc: two alternatives, two rules.
        let socket = rules_for(&out, "socket");
        assert_eq!(socket.len(), 2);
        for rule in &socket {
            assert_eq!(rule["args"].as_array().unwrap().len(), 1);
        }
        // The policy's action runs, not the client's LOG.
        assert_eq!(
            rules_for(&out, "read"),
            [json!({"action": "SCMP_ACT_ALLOW", "args": [
                {"index": 0, "value": 3, "op": "SCMP_CMP_LT"},
                {"index": 2, "value": 5, "op": "SCMP_CMP_GT"}]})]
        );
        assert!(rules_for(&out, "write").is_empty());
    }

    #[test]
    fn a_conjunction_runc_cannot_load_lets_nothing_through() {
        let mut p = policy();
        p["syscalls"][0]["args"] = json!([{"index": 0, "value": 40, "op": "SCMP_CMP_NE"}]);
        let client = json!({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
            {"names": ["read"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 41, "op": "SCMP_CMP_NE"}]},
            {"names": ["write"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 40, "op": "SCMP_CMP_EQ"}]}
        ]});
        let out = merge(&p, &client).unwrap();
        assert!(rules_for(&out, "read").is_empty());
        assert!(rules_for(&out, "write").is_empty(), "empty conjunction");
        // Only the policy's own denial (clone3) is left.
        assert_eq!(out["syscalls"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn client_conditional_denials_do_not_widen_the_policy() {
        let client = json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
            {"names": ["clone"], "action": "SCMP_ACT_ERRNO",
             "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}]},
            {"names": ["clone3"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["unshare"], "action": "SCMP_ACT_NOTIFY"}
        ]});
        let out = merge(&policy(), &client).unwrap();
        assert_eq!(rules_for(&out, "clone"), rules_for(&policy(), "clone"));
        assert_eq!(rules_for(&out, "clone3"), rules_for(&policy(), "clone3"));
        assert_eq!(
            rules_for(&out, "unshare"),
            [json!({"action": "SCMP_ACT_ALLOW"})]
        );
    }

    #[test]
    fn listener_architectures_and_flags() {
        let client = json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "listenerPath": "/run/agent.sock",
            "listenerMetadata": "x",
            "architectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X86_64"],
            "flags": ["SECCOMP_FILTER_FLAG_SPEC_ALLOW", "SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_TSYNC"],
            "syscalls": [{"names": ["read", "unshare"], "action": "SCMP_ACT_NOTIFY"}]
        });
        let out = merge(&policy(), &client).unwrap();
        assert!(out.get("listenerPath").is_none());
        assert!(out.get("listenerMetadata").is_none());
        assert_eq!(out["architectures"], json!(["SCMP_ARCH_X86_64"]));
        assert_eq!(out["flags"], json!(["SECCOMP_FILTER_FLAG_LOG"]));
        assert_eq!(
            rules_for(&out, "read"),
            [json!({"action": "SCMP_ACT_ALLOW"})]
        );
        assert!(!out.to_string().contains("NOTIFY"));
        // No architectures from the client: the native one only.
        let out = merge(&policy(), &json!({"defaultAction": "SCMP_ACT_ALLOW"})).unwrap();
        assert_eq!(out["architectures"], json!([]));
    }

    #[test]
    fn a_policy_that_does_not_stop_by_default_cannot_be_narrowed() {
        let mut p = policy();
        p["defaultAction"] = json!("SCMP_ACT_ALLOW");
        assert!(matches!(
            merge(&p, &json!({"defaultAction": "SCMP_ACT_ERRNO"})),
            Err(MergeError::PolicyNotConfining(_))
        ));
    }
}
