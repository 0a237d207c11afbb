//! Environment names that look like secrets. Only names are read into the
//! verdict; a value is never looked at nor printed.

use crate::report::Check;

/// Name parts that mark a secret (matched on the upper-cased name).
const MARKS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "CREDENTIAL",
    "SESSION_KEY",
    "COOKIE",
];

pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    MARKS.iter().any(|m| upper.contains(m))
}

/// env.secrets holds when no name (outside `allowed`) looks like a secret.
pub fn check(names: &[String], allowed: &[String]) -> Check {
    let mut found: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| looks_secret(n) && !allowed.iter().any(|a| a == n))
        .collect();
    found.sort_unstable();
    match found.is_empty() {
        true => Check::new("env.secrets", true, "no secret-looking name"),
        false => Check::new("env.secrets", false, format!("set: {}", found.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Verdict;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn secret_names_are_listed_sorted_and_others_ignored() {
        let c = check(
            &names(&[
                "PATH",
                "GITHUB_TOKEN",
                "HOME",
                "aws_secret_access_key",
                "OPENAI_API_KEY",
            ]),
            &[],
        );
        assert_eq!(c.verdict, Verdict::Fail);
        assert_eq!(
            c.observed,
            "set: GITHUB_TOKEN, OPENAI_API_KEY, aws_secret_access_key"
        );
    }

    #[test]
    fn an_author_is_not_a_secret() {
        assert!(!looks_secret("GIT_AUTHOR_NAME"));
        assert!(looks_secret("NPM_TOKEN"));
    }

    #[test]
    fn allowed_names_and_plain_ones_hold() {
        let c = check(
            &names(&["PATH", "ANTHROPIC_API_KEY"]),
            &names(&["ANTHROPIC_API_KEY"]),
        );
        assert_eq!(c.verdict, Verdict::Pass);
        assert_eq!(
            check(&names(&["PATH", "HOSTNAME", "TERM"]), &[]).verdict,
            Verdict::Pass
        );
    }
}
