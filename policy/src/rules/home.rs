//! TODO(stub): home rule.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::RuleContext;

pub fn apply_process(_doc: &mut Value, _cx: &RuleContext, _rec: &mut Record) -> Result<(), Denial> {
    Ok(())
}

pub fn apply_mount(_doc: &mut Value, _cx: &RuleContext, _rec: &mut Record) -> Result<(), Denial> {
    Ok(())
}
