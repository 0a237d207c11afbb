//! Only allowlisted environment variables reach the process, so a client's
//! `-e GITHUB_TOKEN=...` never does. The audit record lists variable names
//! only: values may be secrets.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;

const RULE: &str = "env";
/// Stands for an entry that is not `NAME=VALUE`; its text may be a secret.
pub(crate) const MALFORMED: &str = "<malformed entry>";

/// An env entry split at its first `=`: the name (the whole text when there
/// is no `=`) and the value, if any; `None` when the entry is not a string.
pub(crate) fn split_entry(entry: &Value) -> Option<(&str, Option<&str>)> {
    let text = entry.as_str()?;
    Some(match text.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (text, None),
    })
}

/// The variable name of a well-formed `NAME=VALUE` entry (a name, an `=`).
fn entry_name(entry: &Value) -> Option<&str> {
    match split_entry(entry)? {
        (name, Some(_)) if !name.is_empty() => Some(name),
        _ => None,
    }
}

pub fn apply(process: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some(Value::Array(entries)) = process.get_mut("env") else {
        return Ok(());
    };
    let allowed =
        |entry: &Value| entry_name(entry).is_some_and(|n| cx.policy.process.env_allowed(n));
    // Nothing to drop, so nothing to record: skip building the name lists.
    if entries.iter().all(allowed) {
        return Ok(());
    }
    let mut names_before = Vec::with_capacity(entries.len());
    let mut names_after = Vec::with_capacity(entries.len());
    entries.retain(|entry| {
        let name = entry_name(entry);
        let keep = allowed(entry);
        let label = Value::String(name.unwrap_or(MALFORMED).to_string());
        if keep {
            names_after.push(label.clone());
        }
        names_before.push(label);
        keep
    });
    rec.change(
        RULE,
        format!("{}/env", cx.process_field),
        Value::Array(names_before),
        Value::Array(names_after),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use serde_json::json;

    fn run(process: &mut Value) -> Record {
        crate::rules::run_rule(apply, process, &Policy::default()).unwrap()
    }

    #[test]
    fn secrets_are_dropped_and_not_logged() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-user0.json"
        ))
        .unwrap();
        let rec = run(&mut spec["process"]);
        let env = crate::lang::json::strings(spec["process"].get("env"));
        assert_eq!(env.len(), 3);
        assert!(env[0].starts_with("PATH=") && env[1].starts_with("HOSTNAME="));
        assert_eq!(env[2], "LANG=C.UTF-8");
        assert_eq!(rec.changes.len(), 1);
        let change = &rec.changes[0];
        assert_eq!(change.field, "/process/env");
        assert_eq!(
            change.before,
            json!([
                "PATH",
                "HOSTNAME",
                "GITHUB_TOKEN",
                "AWS_SECRET_ACCESS_KEY",
                "LANG"
            ])
        );
        assert_eq!(change.after, json!(["PATH", "HOSTNAME", "LANG"]));
        let logged = serde_json::to_string(&rec).unwrap();
        assert!(!logged.contains("=x") && !logged.contains("=y") && !logged.contains("/usr/bin"));
    }

    #[test]
    fn malformed_entries_dropped_without_their_text() {
        let mut process = json!({"env": ["ghp_secret", "=v", 7, "TERM=xterm", "PATHX=1"]});
        let rec = run(&mut process);
        assert_eq!(process["env"], json!(["TERM=xterm"]));
        let logged = serde_json::to_string(&rec).unwrap();
        assert!(!logged.contains("ghp_secret"));
        assert!(logged.contains(MALFORMED) && logged.contains("PATHX"));
    }

    #[test]
    fn allowed_env_is_no_change() {
        let mut process = json!({"env": ["PATH=/bin", "LC_ALL=C"]});
        assert!(run(&mut process).changes.is_empty());
        let mut process = json!({"args": ["sh"]});
        assert!(run(&mut process).changes.is_empty());
        assert_eq!(process, json!({"args": ["sh"]}));
    }
}
