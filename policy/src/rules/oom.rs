//! `process.oomScoreAdj` is never below 0, so under memory pressure the
//! host's OOM killer takes a container before the host's daemons (dockerd
//! and containerd run below 0). Absent, the process would inherit the
//! engine shim's score (containerd's shims run at -999), so it is set to 0.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::{as_object, field, set};

const RULE: &str = "oom";

pub fn apply(process: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let before = field(process, "oomScoreAdj")
        .cloned()
        .unwrap_or(Value::Null);
    let after = match before.as_i64() {
        Some(score) if (0..=1000).contains(&score) => return Ok(()),
        Some(score) if score > 1000 => 1000,
        _ => 0,
    };
    set(as_object(process), "oomScoreAdj", after.into());
    rec.change(
        RULE,
        format!("{}/oomScoreAdj", cx.process_field),
        before,
        after.into(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use serde_json::json;

    #[test]
    fn negative_or_missing_scores_become_zero() {
        for (before, after) in [
            (json!(-1000), json!(0)),
            (json!(-1), json!(0)),
            (json!("x"), json!(0)),
            (Value::Null, json!(0)),
            (json!(0), json!(0)),
            (json!(500), json!(500)),
            (json!(5000), json!(1000)),
        ] {
            let mut process = json!({"oomScoreAdj": before});
            if before.is_null() {
                process = json!({});
            }
            let rec = crate::rules::run_rule(apply, &mut process, &Policy::default()).unwrap();
            assert_eq!(process["oomScoreAdj"], after, "{before}");
            assert_eq!(rec.changes.len(), usize::from(before != after));
        }
    }
}
