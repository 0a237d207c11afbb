//! Per-interface sysctls dockerd sets itself, inside the container's
//! network namespace, where the runtime's sysctl rule never sees them:
//! the endpoint driver option `com.docker.network.endpoint.sysctls`
//! (`--network name=n,driver-opt=...`, `docker network connect
//! --driver-opt`), and `HostConfig.Sysctls` keys `net.ipv4.conf.*` /
//! `net.ipv6.conf.*`, which dockerd moves into that option for API < 1.48.
//! None is on the runtime's safe list, so all are refused here.
//!
//! `docker network create` makes dockerd change the host's own networking:
//! a client-chosen subnet becomes a host route (hijacking that range for
//! the host), `com.docker.network.bridge.name` takes over an existing host
//! bridge and rewrites its addresses, macvlan/ipvlan put containers on a
//! host interface's segment (ARP for any address the client picks). Only
//! the bridge driver is allowed, on the daemon's own address pools, with
//! options that change nothing outside the new bridge.

use serde_json::Value;

use super::{parse_body, schema, RULE_BODY};
use crate::decision::Denial;
use crate::lang::text::one_line;

pub const RULE_SYSCTLS: &str = "authz-sysctls";
pub const RULE_NETWORK: &str = "authz-network";
/// Bridge driver options that touch nothing but the new bridge.
const BRIDGE_OPTIONS: &[&str] = &[
    "com.docker.network.driver.mtu",
    "com.docker.network.bridge.enable_icc",
    "com.docker.network.container_iface_prefix",
];
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

/// `POST /networks/create`.
pub fn judge_create(body: &[u8]) -> Result<(), Denial> {
    let doc = parse_body(body, &schema::NETWORK_CREATE_KIND)?;
    let Value::Object(map) = &doc else {
        return Err(not("/", "an object"));
    };
    let refuse = |field: &str, value: String, reason: &str| {
        Err(Denial::new(
            RULE_NETWORK,
            field,
            one_line(&value, 256),
            reason,
        ))
    };
    for key in map.keys() {
        if !schema::NETWORK_CREATE.iter().any(|f| f.0 == key) {
            return refuse(
                &format!("/{}", crate::lang::json::pointer_segment(key)),
                key.clone(),
                "unknown network create field",
            );
        }
    }
    let text = |key: &str| -> Result<String, Denial> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(not(&format!("/{key}"), "a string")),
        }
    };
    let set = |key: &str| !matches!(map.get(key), None | Some(Value::Null | Value::Bool(false)));
    let driver = text("Driver")?;
    if !matches!(driver.as_str(), "" | "bridge") {
        return refuse(
            "/Driver",
            driver,
            "only the bridge driver is allowed: macvlan, ipvlan and others attach \
             containers to host interfaces",
        );
    }
    let scope = text("Scope")?;
    if !matches!(scope.as_str(), "" | "local") {
        return refuse("/Scope", scope, "only local networks are allowed");
    }
    for key in ["Ingress", "ConfigOnly"] {
        if set(key) {
            return refuse(
                &format!("/{key}"),
                key.into(),
                "swarm and config-only networks are refused",
            );
        }
    }
    if set("ConfigFrom") {
        return refuse(
            "/ConfigFrom",
            "ConfigFrom".into(),
            "ConfigFrom copies another network's driver and addresses, unjudged",
        );
    }
    match map.get("IPAM") {
        None | Some(Value::Null) => {}
        Some(Value::Object(ipam)) => {
            match ipam.get("Driver") {
                None | Some(Value::Null) => {}
                Some(Value::String(d)) if d.is_empty() || d == "default" => {}
                Some(other) => {
                    return refuse(
                        "/IPAM/Driver",
                        other.to_string(),
                        "only the default IPAM driver is allowed",
                    )
                }
            }
            for key in ["Config", "Options"] {
                let empty = match ipam.get(key) {
                    None | Some(Value::Null) => true,
                    Some(Value::Array(a)) => a.is_empty(),
                    Some(Value::Object(o)) => o.is_empty(),
                    Some(_) => false,
                };
                if !empty {
                    return refuse(
                        &format!("/IPAM/{key}"),
                        ipam[key].to_string(),
                        "client-chosen subnets, ranges and gateways are refused: dockerd \
                         adds them to the host as addresses and routes (the daemon's \
                         default-address-pools apply)",
                    );
                }
            }
        }
        Some(_) => return Err(not("/IPAM", "an object")),
    }
    match map.get("Options") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(opts)) => {
            match opts.keys().find(|k| !BRIDGE_OPTIONS.contains(&k.as_str())) {
                Some(key) => refuse(
                    &format!("/Options/{}", crate::lang::json::pointer_segment(key)),
                    key.clone(),
                    "network driver option refused: it can name a host bridge or interface, \
                     or change the host's forwarding and NAT (allowed: \
                     com.docker.network.driver.mtu, com.docker.network.bridge.enable_icc, \
                     com.docker.network.container_iface_prefix)",
                ),
                None => Ok(()),
            }
        }
        Some(_) => Err(not("/Options", "an object")),
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
