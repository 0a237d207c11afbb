//! Checks that a spec is a valid OCI runtime spec, using oci-spec's types,
//! without paying for parts that cannot fail.
//!
//! Deserialising Docker's spec into `oci_spec::runtime::Spec` copies every
//! string in it, and most of them sit in lists whose oci-spec type is
//! `Vec<String>`: ~350 seccomp syscall names, mount options, env, masked
//! paths. Such a list is valid exactly when every item is a string. So the
//! typed pass runs with those lists set aside (emptied in place), and their
//! items are checked to be strings. Capability sets equal to `bounding` are
//! set aside too: they are valid exactly when it is. When this quick check
//! fails, the plain typed pass runs over the whole document, so a refusal
//! carries exactly the message it always did.

use serde_json::Value;

use crate::decision::Denial;
use crate::lang::json::field_mut;

/// Lists typed `Vec<String>` (or `Option<Vec<String>>`) in oci-spec 0.7,
/// as paths from the spec root; `*` is every item of an array. A test checks
/// that oci-spec still takes any string in each of them.
const STRING_LISTS: &[&[&str]] = &[
    &["process", "args"],
    &["process", "env"],
    &["mounts", "*", "options"],
    &["linux", "maskedPaths"],
    &["linux", "readonlyPaths"],
    &["linux", "seccomp", "syscalls", "*", "names"],
];

/// Capability sets that usually repeat `bounding` (Docker sends three equal sets).
const CAPABILITY_SETS: [&str; 4] = ["effective", "inheritable", "permitted", "ambient"];

/// Refuses a document that oci-spec's `Spec` does not accept.
pub(crate) fn validate_spec(spec: &mut Value) -> Result<(), Denial> {
    let aside = SetAside::take(spec);
    let quick_ok = deserialize_spec(spec).is_ok() && aside.items_are_strings();
    aside.restore(spec);
    if quick_ok {
        return Ok(());
    }
    deserialize_spec(spec).map_err(|e| {
        Denial::new(
            "spec",
            "/",
            "config.json",
            format!("not a valid OCI runtime spec: {e}"),
        )
    })
}

/// Deserialises from the borrowed Value: no copy of the document.
fn deserialize_spec(spec: &Value) -> Result<(), serde_json::Error> {
    <oci_spec::runtime::Spec as serde::Deserialize>::deserialize(spec).map(drop)
}

/// What [`SetAside::take`] moved out of the document, to be put back.
struct SetAside {
    /// The string lists, in [`STRING_LISTS`] and document order.
    lists: Vec<Vec<Value>>,
    /// Capability sets equal to `bounding`, by name.
    capability_sets: Vec<(&'static str, Value)>,
}

impl SetAside {
    fn take(spec: &mut Value) -> SetAside {
        let mut lists = Vec::new();
        for path in STRING_LISTS {
            lists_at(spec, path, &mut |list| lists.push(std::mem::take(list)));
        }
        let mut capability_sets = Vec::new();
        if let Some(Value::Object(caps)) = spec.pointer_mut("/process/capabilities") {
            for set in CAPABILITY_SETS {
                if caps.get(set).is_some() && caps.get(set) == caps.get("bounding") {
                    if let Some(value) = caps.get_mut(set) {
                        capability_sets.push((set, value.take()));
                    }
                }
            }
        }
        SetAside {
            lists,
            capability_sets,
        }
    }

    fn items_are_strings(&self) -> bool {
        self.lists.iter().flatten().all(Value::is_string)
    }

    /// Puts everything back where [`SetAside::take`] found it.
    fn restore(self, spec: &mut Value) {
        let mut lists = self.lists.into_iter();
        for path in STRING_LISTS {
            lists_at(spec, path, &mut |list| {
                if let Some(taken) = lists.next() {
                    *list = taken;
                }
            });
        }
        if let Some(Value::Object(caps)) = spec.pointer_mut("/process/capabilities") {
            for (set, value) in self.capability_sets {
                if let Some(slot) = caps.get_mut(set) {
                    *slot = value;
                }
            }
        }
    }
}

/// Calls `f` on every array found at `path` below `value`.
fn lists_at(value: &mut Value, path: &[&str], f: &mut impl FnMut(&mut Vec<Value>)) {
    match path.split_first() {
        None => {
            if let Value::Array(list) = value {
                f(list);
            }
        }
        Some((&"*", rest)) => {
            if let Value::Array(items) = value {
                for item in items {
                    lists_at(item, rest, f);
                }
            }
        }
        Some((key, rest)) => {
            if let Some(child) = field_mut(value, key) {
                lists_at(child, rest, f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn docker_default() -> Value {
        serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-default.json"
        ))
        .unwrap()
    }

    /// The refusal the plain typed pass gives, for comparison.
    fn plain_refusal(spec: &Value) -> String {
        let e = deserialize_spec(spec).unwrap_err();
        format!("not a valid OCI runtime spec: {e}")
    }

    #[test]
    fn docker_default_is_valid_and_left_as_it_was() {
        let mut spec = docker_default();
        let before = spec.clone();
        validate_spec(&mut spec).unwrap();
        assert_eq!(spec, before);
        // The order of keys is part of the document too.
        assert_eq!(spec.to_string(), before.to_string());
    }

    #[test]
    fn invalid_specs_get_the_plain_typed_refusal_and_are_left_as_they_were() {
        let cases: &[(&str, Value)] = &[
            ("/linux/seccomp/syscalls/0/names/3", json!(7)),
            ("/linux/seccomp/syscalls/4/names", json!("ptrace")),
            ("/linux/seccomp/syscalls/2/action", json!("SCMP_ACT_BOGUS")),
            ("/mounts/2/options/1", json!(null)),
            ("/mounts/0/options", json!({"a": 1})),
            ("/process/env/0", json!(["PATH=/bin"])),
            ("/process/args", json!("sh")),
            ("/linux/maskedPaths/2", json!(false)),
            ("/linux/readonlyPaths", json!(3)),
            ("/process/capabilities/bounding/0", json!("CAP_BOGUS")),
            ("/process/capabilities/effective/1", json!("CAP_BOGUS")),
            ("/process/capabilities/permitted", json!(["CAP_CHOWN", 9])),
            ("/process/capabilities", json!("all")),
            ("/process/user/uid", json!(-1)),
            ("/root", json!(1)),
        ];
        for (pointer, junk) in cases {
            let mut spec = docker_default();
            *spec.pointer_mut(pointer).expect(pointer) = junk.clone();
            let before = spec.clone();
            let denial = validate_spec(&mut spec).expect_err(pointer);
            assert_eq!(denial.rule, "spec");
            assert_eq!(denial.reason, plain_refusal(&before), "{pointer}");
            assert_eq!(spec.to_string(), before.to_string(), "{pointer}");
        }
    }

    #[test]
    fn oci_spec_takes_any_string_in_the_listed_lists() {
        for path in STRING_LISTS {
            let mut spec = docker_default();
            let mut seen = 0;
            lists_at(&mut spec, path, &mut |list| {
                list.push(json!("any text at all"));
                seen += 1;
            });
            assert!(seen > 0, "{path:?} is not in the fixture");
            assert!(deserialize_spec(&spec).is_ok(), "{path:?}");
        }
    }

    #[test]
    fn a_missing_names_list_is_still_refused() {
        let mut spec = docker_default();
        spec["linux"]["seccomp"]["syscalls"][1]
            .as_object_mut()
            .unwrap()
            .remove("names");
        let before = spec.clone();
        let denial = validate_spec(&mut spec).unwrap_err();
        assert!(denial.reason.contains("names"), "{denial}");
        assert_eq!(denial.reason, plain_refusal(&before));
    }

    #[test]
    fn the_engine_refuses_an_invalid_spec_before_any_rule() {
        let mut spec = docker_default();
        spec["linux"]["seccomp"]["syscalls"][0]["names"][0] = json!(1);
        let host = crate::FakeHost::new();
        let ctx = crate::CreateContext::default();
        let refusal =
            crate::enforce_create(spec, &crate::Policy::default(), &host, &ctx).unwrap_err();
        assert_eq!(refusal.denial.rule, "spec");
        assert!(refusal.changes.is_empty());
        assert!(
            refusal.denial.reason.contains("expected a string"),
            "{refusal}"
        );
    }
}
