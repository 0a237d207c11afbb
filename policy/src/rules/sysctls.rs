//! Only the Kubernetes Pod Security Standards "safe" sysctls pass; each is
//! namespaced to the container's own network or ipc namespace. Any other
//! sysctl is dropped (Docker's two defaults are on the list and stay).

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;

const RULE: &str = "sysctls";

/// Kubernetes PSS "safe" sysctls (baseline profile, as of Kubernetes 1.29).
pub const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

pub fn apply(spec: &mut Value, _cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some(Value::Object(sysctls)) = spec.pointer_mut("/linux/sysctl") else {
        return Ok(());
    };
    // Exact names only: runc also accepts `net/ipv4/...`, which is dropped
    // rather than normalised.
    super::retain_recorded(sysctls, RULE, "/linux/sysctl", rec, |name| {
        SAFE_SYSCTLS.contains(&name)
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use serde_json::json;

    fn run(spec: &mut Value) -> Record {
        crate::rules::run_rule(apply, spec, &Policy::default()).unwrap()
    }

    #[test]
    fn docker_defaults_stay() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-default.json"
        ))
        .unwrap();
        let before = spec.clone();
        assert!(run(&mut spec).changes.is_empty());
        assert_eq!(spec, before);
    }

    #[test]
    fn unsafe_sysctl_is_dropped() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-sysctl.json"
        ))
        .unwrap();
        let rec = run(&mut spec);
        assert_eq!(
            spec["linux"]["sysctl"],
            json!({
                "net.ipv4.ip_unprivileged_port_start": "0",
                "net.ipv4.ping_group_range": "0 2147483647",
                "net.ipv4.tcp_syncookies": "1"
            })
        );
        assert_eq!(rec.changes.len(), 1);
        assert_eq!(rec.changes[0].field, "/linux/sysctl/kernel.msgmax");
        assert_eq!(rec.changes[0].before, json!("65536"));
    }

    #[test]
    fn slash_form_and_host_wide_sysctls_are_dropped() {
        let mut spec = json!({"linux": {"sysctl": {
            "net/ipv4/ip_forward": "1",
            "kernel.core_pattern": "|/tmp/x",
            "net.ipv4.tcp_fin_timeout": "30"
        }}});
        let rec = run(&mut spec);
        assert_eq!(
            spec["linux"]["sysctl"],
            json!({"net.ipv4.tcp_fin_timeout": "30"})
        );
        assert_eq!(rec.changes[0].field, "/linux/sysctl/net~1ipv4~1ip_forward");
        assert_eq!(rec.changes.len(), 2);
    }
}
