//! `process.scheduler` and `process.ioPriority` (runtime-spec 1.2) may not
//! raise a process above the host's ordinary work. runc >= 1.2 applies both
//! in its init, before it drops capabilities (standard and setns init
//! alike), so the kernel's own CAP_SYS_NICE check never sees the container:
//! `SCHED_FIFO` priority 99, a negative nice or the realtime I/O class
//! would all be granted. What is left is the ordinary classes at the
//! default priority or lower. Docker never sends either field.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::field;

const RULE: &str = "scheduling";

/// Scheduling policies that cannot preempt the host's ordinary tasks.
const ORDINARY_POLICIES: &[&str] = &["SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE"];
/// `sched_setattr` flags with no effect on priority (the deadline and
/// utilisation-clamp flags are left out).
const HARMLESS_FLAGS: &[&str] = &["SCHED_FLAG_RESET_ON_FORK"];
/// I/O classes that anyone may choose for themselves (not `IOPRIO_CLASS_RT`).
const ORDINARY_IO_CLASSES: &[&str] = &["IOPRIO_CLASS_BE", "IOPRIO_CLASS_IDLE"];

pub fn apply(process: &mut Value, cx: &RuleContext, _rec: &mut Record) -> Result<(), Denial> {
    let at = |key: &str| format!("{}/{key}", cx.process_field);
    if let Some(s) = field(process, "scheduler").filter(|v| !v.is_null()) {
        check_scheduler(s).map_err(|(what, value)| {
            Denial::new(RULE, at(&format!("scheduler/{what}")), value, SCHED_REASON)
        })?;
    }
    if let Some(io) = field(process, "ioPriority").filter(|v| !v.is_null()) {
        let class = field(io, "class");
        if !class
            .and_then(Value::as_str)
            .is_some_and(|c| ORDINARY_IO_CLASSES.contains(&c))
        {
            return Err(Denial::new(
                RULE,
                at("ioPriority/class"),
                text(class),
                "only IOPRIO_CLASS_BE and IOPRIO_CLASS_IDLE: runc sets the I/O class before it drops capabilities",
            ));
        }
    }
    Ok(())
}

const SCHED_REASON: &str = "only SCHED_OTHER, SCHED_BATCH or SCHED_IDLE at nice >= 0: runc sets the scheduler before it drops capabilities";

/// The offending key and value, if any.
fn check_scheduler(s: &Value) -> Result<(), (&'static str, String)> {
    if !s.is_object() {
        return Err(("", s.to_string()));
    }
    let policy = field(s, "policy");
    if !policy
        .and_then(Value::as_str)
        .is_some_and(|p| ORDINARY_POLICIES.contains(&p))
    {
        return Err(("policy", text(policy)));
    }
    // Go decodes null into an integer as 0; anything but an integer is
    // refused rather than guessed at.
    let int = |key| match field(s, key) {
        None | Some(Value::Null) => Some(0),
        Some(v) => v.as_i64(),
    };
    if int("nice").is_none_or(|n| n < 0) {
        return Err(("nice", text(field(s, "nice"))));
    }
    for key in ["priority", "runtime", "deadline", "period"] {
        if int(key) != Some(0) {
            return Err((key, text(field(s, key))));
        }
    }
    match field(s, "flags") {
        None | Some(Value::Null) => {}
        Some(Value::Array(flags)) => {
            if let Some(bad) = flags
                .iter()
                .find(|f| !f.as_str().is_some_and(|f| HARMLESS_FLAGS.contains(&f)))
            {
                return Err(("flags", bad.to_string()));
            }
        }
        Some(other) => return Err(("flags", other.to_string())),
    }
    Ok(())
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "(none)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use serde_json::json;

    fn run(process: Value) -> Result<Record, Denial> {
        let mut process = process;
        crate::rules::run_rule(apply, &mut process, &Policy::default())
    }

    #[test]
    fn realtime_policies_and_negative_nice_are_refused() {
        for scheduler in [
            json!({"policy": "SCHED_FIFO", "priority": 99}),
            json!({"policy": "SCHED_RR", "priority": 1}),
            json!({"policy": "SCHED_DEADLINE", "runtime": 1, "deadline": 2, "period": 2}),
            json!({"policy": "SCHED_OTHER", "nice": -20}),
            json!({"policy": "SCHED_OTHER", "nice": -1.0}),
            json!({"policy": "SCHED_OTHER", "nice": "0"}),
            json!({"policy": "SCHED_OTHER", "priority": 5}),
            json!({"policy": "SCHED_OTHER", "flags": ["SCHED_FLAG_UTIL_CLAMP_MIN"]}),
            json!({"policy": "SCHED_OTHER", "flags": "SCHED_FLAG_RESET_ON_FORK"}),
            json!({"policy": "sched_fifo"}),
            json!({"policy": ""}),
            json!({"nice": 0}),
            json!("SCHED_FIFO"),
        ] {
            let denial = run(json!({"scheduler": scheduler})).unwrap_err();
            assert_eq!(denial.rule, RULE, "{scheduler}");
            assert!(denial.field.contains("/scheduler"), "{denial:?}");
        }
    }

    #[test]
    fn ordinary_scheduling_passes_unchanged() {
        for scheduler in [
            Value::Null,
            json!({"policy": "SCHED_OTHER"}),
            json!({"policy": "SCHED_BATCH", "nice": 10, "priority": 0}),
            json!({"policy": "SCHED_IDLE", "nice": null, "flags": ["SCHED_FLAG_RESET_ON_FORK"]}),
        ] {
            let rec = run(json!({"scheduler": scheduler})).unwrap();
            assert!(rec.changes.is_empty(), "{scheduler}");
        }
    }

    #[test]
    fn only_the_ordinary_io_classes_pass() {
        for class in ["IOPRIO_CLASS_BE", "IOPRIO_CLASS_IDLE"] {
            run(json!({"ioPriority": {"class": class, "priority": 0}})).unwrap();
        }
        for io in [
            json!({"class": "IOPRIO_CLASS_RT", "priority": 0}),
            json!({"class": "ioprio_class_be"}),
            json!({"priority": 0}),
            json!({"class": 1}),
        ] {
            let denial = run(json!({"ioPriority": io})).unwrap_err();
            assert!(denial.field.ends_with("/ioPriority/class"), "{io}");
        }
        run(json!({"ioPriority": null})).unwrap();
    }

    #[test]
    fn the_exec_process_is_judged_the_same_way() {
        let policy = Policy::default();
        let host = crate::FakeHost::default();
        let process = json!({"args": ["sh"], "cwd": "/", "user": {"uid": 0, "gid": 0},
            "scheduler": {"policy": "SCHED_FIFO", "priority": 99}});
        let refusal = crate::engine::enforce_process(&process, &policy, &host).unwrap_err();
        assert!(format!("{refusal:?}").contains(RULE), "{refusal:?}");
    }
}
