//! What the engine decided: every change it made, or the denial that stopped it.

use serde::Serialize;
use serde_json::Value;

/// One change to the spec: which rule, which field, the value before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    pub rule: &'static str,
    /// A JSON-pointer-like path, e.g. `/process/capabilities/bounding`.
    pub field: String,
    pub before: Value,
    pub after: Value,
}

/// Why the spec cannot be run under the policy.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[error("{rule}: {reason} ({field}: {value})")]
pub struct Denial {
    pub rule: &'static str,
    pub field: String,
    /// The offending value, as text (a mount source, a namespace path, ...).
    pub value: String,
    pub reason: String,
}

impl Denial {
    pub fn new(
        rule: &'static str,
        field: impl Into<String>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Denial {
            rule,
            field: field.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }
}

/// The running list of changes a rule chain made.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Record {
    pub changes: Vec<Change>,
}

impl Record {
    /// Notes a change; a no-op when `before == after`, so rules may call it freely.
    pub fn change(
        &mut self,
        rule: &'static str,
        field: impl Into<String>,
        before: Value,
        after: Value,
    ) {
        if before != after {
            self.changes.push(Change {
                rule,
                field: field.into(),
                before,
                after,
            });
        }
    }
}

/// A refusal, with the changes made before the denial (for the audit log).
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[error("{denial}")]
pub struct Refusal {
    pub denial: Denial,
    pub changes: Vec<Change>,
}
