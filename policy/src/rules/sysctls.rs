//! TODO(stub): sysctls rule.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::RuleContext;

pub fn apply(_doc: &mut Value, _cx: &RuleContext, _rec: &mut Record) -> Result<(), Denial> {
    Ok(())
}
