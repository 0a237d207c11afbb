//! `runc update`'s flags judged as the resources document runc builds from
//! them, so a flag can lift no limit a `--resources` document could not.

use serde_json::{json, Value};

use crate::config::parse_size;
use crate::rules::pids;
use crate::{enforce_update, Change, HostView, Policy, Record, Refusal};

/// runc's memory and CPU flags: (flag, section, field, a size like `64m`).
pub const RESOURCE_FLAGS: &[(&str, &str, &str, bool)] = &[
    ("memory", "memory", "limit", true),
    ("memory-swap", "memory", "swap", true),
    ("memory-reservation", "memory", "reservation", true),
    ("cpu-quota", "cpu", "quota", false),
    ("cpu-period", "cpu", "period", false),
    ("cpu-share", "cpu", "shares", false),
    ("kernel-memory-tcp", "memory", "kernelTCP", true),
];

/// A judged value for one of [`RESOURCE_FLAGS`]: the given flag gets a new
/// value, or a flag the rules add (the period that goes with a quota).
#[derive(Debug, Clone, PartialEq)]
pub enum FlagEdit {
    Set { flag: &'static str, value: String },
    Add { flag: &'static str, value: String },
}

/// The memory and CPU flags (used by runc when `--resources` is absent) go
/// through the same update rules as a `--resources` document: `given` (the
/// last value of each flag of [`RESOURCE_FLAGS`] given, as text) is read as
/// runc reads it into that document, judged, and each changed value comes
/// back as a plain number. `--kernel-memory` is left: v1 charges kernel
/// memory to `--memory` too. runc ignores `--kernel-memory-tcp` (the create
/// hook set the bound); it is clamped all the same, so a runc that wrote it
/// writes no more.
pub fn judge_resource_flags(
    given: &[(&'static str, String)],
    policy: &Policy,
    host: &dyn HostView,
) -> Result<(Vec<FlagEdit>, Vec<Change>), Refusal> {
    let mut doc = json!({});
    for &(flag, section, field, size) in RESOURCE_FLAGS {
        let Some((_, text)) = given.iter().find(|g| g.0 == flag) else {
            continue;
        };
        let value = flag_number(text, size).ok_or_else(|| Refusal {
            denial: crate::Denial::new(
                "resources",
                format!("--{flag}"),
                text.clone(),
                "not a number vibe-shim can judge",
            ),
            changes: Vec::new(),
        })?;
        doc[section][field] = value;
    }
    if given.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let judged = enforce_update(&doc, policy, host)?.document;
    let mut edits = Vec::new();
    let mut rec = Record::default();
    for &(flag, section, field, _) in RESOURCE_FLAGS {
        let after = &judged[section][field];
        if after.is_null() {
            continue;
        }
        let value = after.to_string();
        match given.iter().find(|g| g.0 == flag) {
            Some((_, text)) => {
                if doc[section][field] != *after {
                    rec.change("resources", format!("--{flag}"), json!(text), json!(value));
                    edits.push(FlagEdit::Set { flag, value });
                }
            }
            None => {
                rec.change("resources", format!("--{flag}"), Value::Null, json!(value));
                edits.push(FlagEdit::Add { flag, value });
            }
        }
    }
    Ok((edits, rec.changes))
}

/// A flag value as runc parses it: `-1` or a size (`64m`) for memory,
/// an integer for CPU. `None` where vibe-shim's reading could differ.
fn flag_number(text: &str, size: bool) -> Option<Value> {
    let text = text.trim();
    if size && text != "-1" {
        return parse_size(text).map(Value::from);
    }
    text.parse::<i64>()
        .ok()
        .map(Value::from)
        .or_else(|| text.parse::<u64>().ok().map(Value::from))
}

/// runc treats `--pids-limit` 0 as "no change" and negative as unlimited;
/// the policy's clamp turns both (and anything above the maximum) into the
/// maximum, which is always within policy. `None`: `text` stays.
pub fn clamp_pids_flag(text: &str, max: i64, rec: &mut Record) -> Option<i64> {
    let requested = text.trim().parse::<i64>().ok();
    let clamped = pids::clamp(requested, max);
    if requested == Some(clamped) {
        return None;
    }
    rec.change("pids", "--pids-limit", json!(text), json!(clamped));
    Some(clamped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FakeHost;

    fn given(flags: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        flags.iter().map(|&(f, v)| (f, v.to_string())).collect()
    }

    #[test]
    fn flags_are_judged_as_the_document_runc_builds() {
        let policy = Policy::default();
        let host = FakeHost::default();
        let max = (4u64 << 30).to_string();
        let (edits, changes) = judge_resource_flags(
            &given(&[
                ("memory", "64g"),
                ("memory-swap", "-1"),
                ("cpu-quota", "6400000"),
            ]),
            &policy,
            &host,
        )
        .unwrap();
        assert_eq!(
            edits,
            [
                FlagEdit::Set {
                    flag: "memory",
                    value: max.clone()
                },
                FlagEdit::Set {
                    flag: "memory-swap",
                    value: max.clone()
                },
                FlagEdit::Set {
                    flag: "cpu-quota",
                    value: "200000".into()
                },
                FlagEdit::Add {
                    flag: "cpu-period",
                    value: "100000".into()
                },
            ]
        );
        assert_eq!(changes.len(), 4, "{changes:?}");
        let (edits, changes) =
            judge_resource_flags(&given(&[("memory", "64m")]), &policy, &host).unwrap();
        assert!(edits.is_empty() && changes.is_empty());
        let err = judge_resource_flags(&given(&[("memory", "1.5g")]), &policy, &host).unwrap_err();
        assert_eq!(err.denial.field, "--memory");
        assert_eq!(judge_resource_flags(&[], &policy, &host).unwrap().0, []);
    }

    #[test]
    fn pids_flag_is_clamped_to_the_maximum() {
        let mut rec = Record::default();
        assert_eq!(clamp_pids_flag("-1", 512, &mut rec), Some(512));
        assert_eq!(clamp_pids_flag("0", 512, &mut rec), Some(512));
        assert_eq!(clamp_pids_flag("100000", 512, &mut rec), Some(512));
        assert_eq!(clamp_pids_flag("100", 512, &mut rec), None);
        assert_eq!(rec.changes.len(), 3);
    }
}
