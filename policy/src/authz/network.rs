//! Per-interface sysctls dockerd sets itself, inside the container's
//! network namespace, where the runtime's sysctl rule never sees them:
//! the endpoint driver option `com.docker.network.endpoint.sysctls`
//! (`--network name=n,driver-opt=...`, `docker network connect
//! --driver-opt`), and `HostConfig.Sysctls` keys `net.ipv4.conf.*` /
//! `net.ipv6.conf.*`, which dockerd moves into that option for API < 1.48.
//! None is on the runtime's safe list, so all are refused here.

use serde_json::Value;

use super::{one_line, parse_body, schema, RULE_BODY};
use crate::decision::Denial;

pub const RULE_SYSCTLS: &str = "authz-sysctls";
const ENDPOINT_SYSCTLS: &str = "com.docker.network.endpoint.sysctls";
const INTERFACE_PREFIXES: &[&str] = &["net.ipv4.conf.", "net.ipv6.conf."];

/// `HostConfig.Sysctls` at `prefix`.
pub fn judge_sysctls(hc: &Value, prefix: &str) -> Result<(), Denial> {
    let field = format!("{prefix}/Sysctls");
    match hc.get("Sysctls") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(map)) => match map
            .keys()
            .find(|k| INTERFACE_PREFIXES.iter().any(|p| k.starts_with(p)))
        {
            Some(key) => Err(refusal(field, key)),
            None => Ok(()),
        },
        Some(_) => Err(not(&field, "an object")),
    }
}

/// A create body's `NetworkingConfig.EndpointsConfig`.
pub fn judge_networking_config(doc: &Value) -> Result<(), Denial> {
    let Some(nc) = doc.get("NetworkingConfig").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    match nc.get("EndpointsConfig") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(endpoints)) => {
            for (name, settings) in endpoints {
                let field = format!("/NetworkingConfig/EndpointsConfig/{name}");
                judge_endpoint(settings, &field)?;
            }
            Ok(())
        }
        Some(_) => Err(not("/NetworkingConfig/EndpointsConfig", "an object")),
    }
}

/// `POST /networks/{id}/connect`.
pub fn judge_connect(body: &[u8]) -> Result<(), Denial> {
    let doc = parse_body(body, &schema::NETWORK_CONNECT_KIND)?;
    match doc.get("EndpointConfig") {
        None | Some(Value::Null) => Ok(()),
        Some(settings) => judge_endpoint(settings, "/EndpointConfig"),
    }
}

fn judge_endpoint(settings: &Value, field: &str) -> Result<(), Denial> {
    let field = format!("{field}/DriverOpts");
    match settings {
        Value::Null => Ok(()),
        Value::Object(_) => match settings.get("DriverOpts") {
            None | Some(Value::Null) => Ok(()),
            Some(Value::Object(opts)) if opts.contains_key(ENDPOINT_SYSCTLS) => {
                Err(refusal(field, ENDPOINT_SYSCTLS))
            }
            Some(Value::Object(_)) => Ok(()),
            Some(_) => Err(not(&field, "an object")),
        },
        _ => Err(not(&field, "an object")),
    }
}

fn refusal(field: String, key: &str) -> Denial {
    Denial::new(
        RULE_SYSCTLS,
        field,
        one_line(key, 256),
        "per-interface sysctls are refused: dockerd sets them in the container's \
         network namespace itself, where the runtime's sysctl rule cannot judge them",
    )
}

fn not(field: &str, wanted: &str) -> Denial {
    Denial::new(
        RULE_BODY,
        field,
        "",
        format!("not {wanted} as dockerd reads it"),
    )
}
