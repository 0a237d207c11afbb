//! Mode "proxy": every process is pointed at the egress proxy on
//! its own loopback. The proxy variables are set by the policy, whatever the
//! client passed: any case variant of their names is removed first, so a
//! client's `http_proxy=http://elsewhere` (or `Http_Proxy`, which some tools
//! read) cannot pick another way out. Private ranges stay out of NO_PROXY:
//! they must reach the proxy and be refused there. The audit record lists
//! names only, as the env rule does: a client's proxy URL may hold a password.

use serde_json::Value;

use crate::config::NetworkMode;
use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::rules::env::{split_entry, MALFORMED};

const RULE: &str = "proxy_env";

/// The port `vibe-shim egress` listens on inside each container's loopback.
pub const PROXY_PORT: u16 = 3128;
/// The proxy URL every process gets.
pub const PROXY_URL: &str = "http://127.0.0.1:3128";
/// Destinations that bypass the proxy: only the container's own loopback.
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// The variables mode "proxy" sets, in the order they are appended.
pub const PROXY_ENV: [(&str, &str); 7] = [
    ("HTTP_PROXY", PROXY_URL),
    ("HTTPS_PROXY", PROXY_URL),
    ("http_proxy", PROXY_URL),
    ("https_proxy", PROXY_URL),
    ("NO_PROXY", NO_PROXY),
    ("no_proxy", NO_PROXY),
    // Node.js (22.14+/23.8+) honours the proxy variables only with this.
    ("NODE_USE_ENV_PROXY", "1"),
];

/// The name part of an env entry: the whole text when it has no `=`, so a
/// bare `HTTP_PROXY` goes too.
fn name_part(entry: &Value) -> Option<&str> {
    split_entry(entry).map(|(name, _)| name)
}

fn is_proxy_name(name: &str) -> bool {
    PROXY_ENV
        .iter()
        .any(|(forced, _)| forced.eq_ignore_ascii_case(name))
}

pub fn apply(process: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    if cx.policy.network.mode != NetworkMode::Proxy {
        return Ok(());
    }
    let label = |entry: &Value| Value::String(name_part(entry).unwrap_or(MALFORMED).into());
    let entries = crate::lang::json::array_at(process, "env");
    let original = entries.clone();
    entries.retain(|entry| !name_part(entry).is_some_and(is_proxy_name));
    entries.extend(
        PROXY_ENV
            .iter()
            .map(|(name, value)| Value::String(format!("{name}={value}"))),
    );
    // An exec of a container created under this policy already carries
    // exactly these: nothing to record then.
    if original != *entries {
        rec.change(
            RULE,
            format!("{}/env", cx.process_field),
            Value::Array(original.iter().map(label).collect()),
            Value::Array(entries.iter().map(label).collect()),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use serde_json::json;

    fn proxy_policy() -> Policy {
        let mut policy = Policy::default();
        policy.network.mode = NetworkMode::Proxy;
        policy
    }

    fn env_of(process: &Value) -> Vec<String> {
        crate::lang::json::strings(process.get("env"))
    }

    fn value_of<'a>(env: &'a [String], name: &str) -> Vec<&'a str> {
        env.iter()
            .filter_map(|e| e.split_once('='))
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
            .collect()
    }

    #[test]
    fn sets_every_variable() {
        let mut process = json!({"env": ["PATH=/bin", "TERM=xterm"]});
        let rec = crate::rules::run_rule(apply, &mut process, &proxy_policy()).unwrap();
        let env = env_of(&process);
        assert_eq!(&env[..2], ["PATH=/bin", "TERM=xterm"]);
        for (name, value) in PROXY_ENV {
            assert!(env.contains(&format!("{name}={value}")), "{name}: {env:?}");
        }
        assert!(env.contains(&"NO_PROXY=localhost,127.0.0.1,::1".to_string()));
        assert!(env.contains(&"HTTPS_PROXY=http://127.0.0.1:3128".to_string()));
        assert_eq!(rec.changes.len(), 1);
        assert_eq!(rec.changes[0].field, "/process/env");
    }

    #[test]
    fn client_values_in_any_case_are_replaced_and_not_logged() {
        let mut process = json!({"env": [
            "HTTP_PROXY=http://user:hunter2@evil.example:8080",
            "Http_Proxy=http://evil.example",
            "hTTPs_pRoxy=http://evil.example",
            "no_proxy=*",
            "NO_PROXY=10.0.0.0/8",
            "node_use_env_proxy=0",
            "HTTP_PROXY_EXTRA=kept",
            "PATH=/bin"
        ]});
        let rec = crate::rules::run_rule(apply, &mut process, &proxy_policy()).unwrap();
        let env = env_of(&process);
        for (name, value) in PROXY_ENV {
            // Exactly one entry per case variant, and it is ours.
            let found = value_of(&env, name);
            assert_eq!(found.len(), 2 - usize::from(name == "NODE_USE_ENV_PROXY"));
            assert!(found.iter().all(|v| *v == value), "{name}: {env:?}");
        }
        assert!(env.contains(&"HTTP_PROXY_EXTRA=kept".to_string()));
        assert!(env.contains(&"PATH=/bin".to_string()));
        assert_eq!(env.len(), 2 + PROXY_ENV.len());
        let logged = serde_json::to_string(&rec).unwrap();
        assert!(
            !logged.contains("hunter2") && !logged.contains("evil"),
            "{logged}"
        );
        assert!(logged.contains("Http_Proxy"), "{logged}");
    }

    #[test]
    fn missing_env_is_created() {
        let mut process = json!({"args": ["sh"]});
        crate::rules::run_rule(apply, &mut process, &proxy_policy()).unwrap();
        assert_eq!(env_of(&process).len(), PROXY_ENV.len());
        let mut process = json!({"env": "not an array"});
        crate::rules::run_rule(apply, &mut process, &proxy_policy()).unwrap();
        assert_eq!(env_of(&process).len(), PROXY_ENV.len());
    }

    #[test]
    fn already_set_is_no_change() {
        let mut process = json!({"env": ["PATH=/bin"]});
        crate::rules::run_rule(apply, &mut process, &proxy_policy()).unwrap();
        let first = process.clone();
        let rec = crate::rules::run_rule(apply, &mut process, &proxy_policy()).unwrap();
        assert!(rec.changes.is_empty());
        assert_eq!(process, first);
    }

    #[test]
    fn url_names_the_port() {
        assert_eq!(PROXY_URL, format!("http://127.0.0.1:{PROXY_PORT}"));
    }

    #[test]
    fn other_modes_are_untouched() {
        for mode in [NetworkMode::None, NetworkMode::Allowlist, NetworkMode::Open] {
            let mut policy = Policy::default();
            policy.network.mode = mode;
            let mut process = json!({"env": ["HTTP_PROXY=http://x:1"]});
            let rec = crate::rules::run_rule(apply, &mut process, &policy).unwrap();
            assert!(rec.changes.is_empty());
            assert_eq!(process, json!({"env": ["HTTP_PROXY=http://x:1"]}));
        }
    }

    #[test]
    fn the_chain_sets_them_for_exec_too() {
        let policy = proxy_policy();
        let host = crate::FakeHost::new();
        let process =
            json!({"args": ["sh"], "env": ["PATH=/bin", "https_proxy=http://evil:1"], "cwd": "/"});
        let rewrite = crate::enforce_process(&process, &policy, &host).unwrap();
        let env = env_of(&rewrite.document);
        assert_eq!(value_of(&env, "https_proxy"), [PROXY_URL, PROXY_URL]);
    }
}
