//! One judgement of the proxy: what was asked, what was decided and the
//! rule that decided it. The 403 body and the log line both come from here.

use serde::Serialize;

/// What the proxy did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Allow,
    Deny,
    /// Report mode (`enforce = false`): allowed, but an enforcing policy
    /// would have refused it.
    WouldDeny,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
            Verdict::WouldDeny => "would-deny",
        }
    }

    /// Whether the connection goes ahead.
    pub fn passes(self) -> bool {
        self != Verdict::Deny
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub verdict: Verdict,
    pub host: String,
    pub port: u16,
    /// The rule that allowed it, or why it is refused.
    pub rule: String,
}

impl Decision {
    pub fn allow(host: &str, port: u16, rule: impl Into<String>) -> Decision {
        Decision {
            verdict: Verdict::Allow,
            host: host.to_string(),
            port,
            rule: rule.into(),
        }
    }

    /// A hard refusal, whatever `enforce` says.
    pub fn deny(host: &str, port: u16, rule: impl Into<String>) -> Decision {
        Decision {
            verdict: Verdict::Deny,
            host: host.to_string(),
            port,
            rule: rule.into(),
        }
    }

    /// A policy refusal: a denial when enforcing, a would-deny in report
    /// mode.
    pub fn refuse(enforce: bool, host: &str, port: u16, rule: impl Into<String>) -> Decision {
        let mut d = Decision::deny(host, port, rule);
        if !enforce {
            d.verdict = Verdict::WouldDeny;
        }
        d
    }

    /// The first line of the 403 body.
    pub fn refusal_line(&self) -> String {
        format!(
            "vibe-shim egress: denied {} ({})",
            authority(&self.host, self.port),
            self.rule
        )
    }
}

/// `host:port`, with an IPv6 literal in brackets.
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_names_vibe_shim_host_port_and_rule() {
        let d = Decision::refuse(true, "evil.example", 443, "not in [network] hosts");
        assert_eq!(d.verdict, Verdict::Deny);
        assert_eq!(
            d.refusal_line(),
            "vibe-shim egress: denied evil.example:443 (not in [network] hosts)"
        );
        let d = Decision::refuse(false, "2001:db8::1", 443, "x");
        assert_eq!(d.verdict, Verdict::WouldDeny);
        assert!(d.verdict.passes());
        assert!(d.refusal_line().contains("[2001:db8::1]:443"));
        assert!(!Decision::deny("a", 1, "x").verdict.passes());
        assert_eq!(
            serde_json::to_string(&Verdict::WouldDeny).unwrap(),
            "\"would-deny\""
        );
    }
}
