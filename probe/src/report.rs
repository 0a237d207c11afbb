//! Verdicts and how they are printed: a table for people, JSON for CI,
//! and that JSON read back (`vibe-shim doctor --full` judges a container
//! by the probe's output from inside it).

use std::borrow::Cow;

use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The rule holds.
    Pass,
    /// The rule does not hold, or could not be observed (fail closed).
    Fail,
    /// Not asked (net.outside without `--outside`); does not count.
    Skip,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Skip => "skip",
        }
    }

    pub fn parse(s: &str) -> Option<Verdict> {
        [Verdict::Pass, Verdict::Fail, Verdict::Skip]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// One rule's verdict and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The rule's name; owned when read back from another probe's JSON.
    pub rule: Cow<'static, str>,
    pub verdict: Verdict,
    pub observed: String,
}

impl Check {
    pub fn new(rule: &'static str, holds: bool, observed: impl Into<String>) -> Check {
        let verdict = match holds {
            true => Verdict::Pass,
            false => Verdict::Fail,
        };
        Check {
            rule: Cow::Borrowed(rule),
            verdict,
            observed: observed.into(),
        }
    }

    pub fn skip(rule: &'static str, observed: impl Into<String>) -> Check {
        Check {
            rule: Cow::Borrowed(rule),
            verdict: Verdict::Skip,
            observed: observed.into(),
        }
    }
}

/// Whether every rule holds (a skipped one aside).
pub fn holds(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.verdict != Verdict::Fail)
}

/// The rules that do not hold, by name.
pub fn failing(checks: &[Check]) -> Vec<&str> {
    checks
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .map(|c| c.rule.as_ref())
        .collect()
}

pub fn table(checks: &[Check]) -> String {
    let width = checks
        .iter()
        .map(|c| c.rule.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = format!("{:width$}  VERDICT  OBSERVED\n", "RULE");
    for c in checks {
        out.push_str(&format!(
            "{:width$}  {:7}  {}\n",
            c.rule,
            c.verdict.as_str(),
            c.observed
        ));
    }
    let failing = failing(checks);
    match failing.is_empty() {
        true => out.push_str("vibe-shim probe: every rule holds"),
        false => out.push_str(&format!(
            "vibe-shim probe: {} rule(s) do not hold: {}",
            failing.len(),
            failing.join(", ")
        )),
    }
    out
}

pub fn json(checks: &[Check]) -> String {
    let rules: Vec<_> = checks
        .iter()
        .map(|c| json!({"rule": c.rule, "verdict": c.verdict.as_str(), "observed": c.observed}))
        .collect();
    let verdict = match holds(checks) {
        true => "pass",
        false => "fail",
    };
    json!({"verdict": verdict, "failing": failing(checks), "rules": rules}).to_string()
}

/// The checks of a `--json` output (one object, as [`json`] prints it),
/// in its order. `None` when `text` is not that object, or a rule in it
/// lacks its name or has a verdict this probe does not know: a verdict
/// half read proves nothing.
pub fn from_json(text: &str) -> Option<Vec<Check>> {
    let value: serde_json::Value = serde_json::from_str(text.trim()).ok()?;
    value
        .get("rules")?
        .as_array()?
        .iter()
        .map(|r| {
            Some(Check {
                rule: Cow::Owned(r.get("rule")?.as_str()?.to_string()),
                verdict: Verdict::parse(r.get("verdict")?.as_str()?)?,
                observed: r.get("observed")?.as_str()?.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Check> {
        vec![
            Check::new("caps", true, "CapEff 0"),
            Check::new("nnp", false, "NoNewPrivs 0"),
            Check::skip("net.outside", "no --outside given"),
        ]
    }

    #[test]
    fn a_fail_makes_the_whole_fail_and_a_skip_does_not() {
        assert!(!holds(&sample()));
        assert_eq!(failing(&sample()), vec!["nnp"]);
        assert!(holds(&sample()[..1]));
        assert!(holds(&[sample()[0].clone(), sample()[2].clone()]));
    }

    #[test]
    fn the_table_names_the_failing_rules_last() {
        let t = table(&sample());
        assert!(t.starts_with("RULE "), "{t}");
        assert!(t.contains("\nnnp          fail     NoNewPrivs 0\n"), "{t}");
        assert!(
            t.ends_with("vibe-shim probe: 1 rule(s) do not hold: nnp"),
            "{t}"
        );
    }

    #[test]
    fn the_json_carries_each_verdict() {
        let v: serde_json::Value = serde_json::from_str(&json(&sample())).unwrap();
        assert_eq!(v["verdict"], "fail");
        assert_eq!(v["failing"], json!(["nnp"]));
        assert_eq!(v["rules"][2]["verdict"], "skip");
        assert_eq!(v["rules"][0]["observed"], "CapEff 0");
    }

    #[test]
    fn the_json_reads_back_as_the_checks_it_was_made_of() {
        assert_eq!(from_json(&json(&sample())), Some(sample()));
        assert_eq!(from_json(&format!("  {}\n", json(&[]))), Some(vec![]));
        for broken in [
            "",
            "not json",
            r#"{"verdict": "pass"}"#,
            r#"{"rules": [{"rule": "caps", "verdict": "maybe", "observed": ""}]}"#,
            r#"{"rules": [{"verdict": "pass", "observed": ""}]}"#,
        ] {
            assert_eq!(from_json(broken), None, "{broken}");
        }
    }
}
