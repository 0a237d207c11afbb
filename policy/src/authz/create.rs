//! Container create (and the pre-1.24 start that still took a HostConfig):
//! every host path a bind or mount names must be under `[[filesystem.bind]]`,
//! local volumes must not mount host paths or devices, and the runtime must
//! be one of vibe-shim's. Judged before dockerd acts, so dockerd never
//! creates a refused bind's missing source directory on the host.
//!
//! `VolumesFrom` is allowed: it copies the mounts of an existing container,
//! which this gate judged when that container was created (and dockerd can
//! only narrow them: `:rw` never upgrades a read-only mount), and the
//! runtime judges the resulting binds again at create.

use serde_json::Value;

use super::volume::{self, is_local};
use super::{host_path, parse_body, Cx, RULE_BINDS};
use crate::decision::Denial;
use crate::gojson::Kind;

pub const RULE_RUNTIME: &str = "authz-runtime";

/// `POST /containers/create`.
pub fn judge_create(body: &[u8], cx: &Cx) -> Result<(), Denial> {
    judge_config(body, &super::schema::CREATE_KIND, cx)
}

/// The body of `POST /v<1.24/containers/{id}/start`: a whole HostConfig.
pub fn judge_start_host_config(body: &[u8], cx: &Cx) -> Result<(), Denial> {
    judge_config(body, &super::schema::HOST_CONFIG_KIND, cx)
}

fn judge_config(body: &[u8], kind: &'static Kind, cx: &Cx) -> Result<(), Denial> {
    let doc = parse_body(body, kind)?;
    if doc.is_null() {
        // Go decodes `null` into nothing: no HostConfig at all.
        return judge_runtime("", "/Runtime", cx);
    }
    if !doc.is_object() {
        return Err(Denial::new(
            super::RULE_BODY,
            "/",
            short(&doc),
            "request body is not a JSON object",
        ));
    }
    // The top level: the create body's deprecated embedded HostConfig, or
    // the start body's HostConfig itself.
    judge_host_config(&doc, "", cx)?;
    let effective = match doc.get("HostConfig") {
        None | Some(Value::Null) => &doc,
        Some(inner @ Value::Object(_)) => {
            judge_host_config(inner, "/HostConfig", cx)?;
            // moby: the inner HostConfig wins over the embedded one.
            if let Some(Value::String(rt)) = doc.get("Runtime") {
                judge_runtime(rt, "/Runtime", cx)?;
            }
            inner
        }
        Some(other) => {
            return Err(type_denial("/HostConfig", other, "an object"));
        }
    };
    let prefix = if std::ptr::eq(effective, &doc) {
        ""
    } else {
        "/HostConfig"
    };
    let runtime = match effective.get("Runtime") {
        None | Some(Value::Null) => "",
        Some(Value::String(rt)) => rt.as_str(),
        Some(other) => return Err(type_denial(&format!("{prefix}/Runtime"), other, "a string")),
    };
    judge_runtime(runtime, &format!("{prefix}/Runtime"), cx)
}

fn judge_host_config(hc: &Value, prefix: &str, cx: &Cx) -> Result<(), Denial> {
    for (i, spec) in strings(hc, "Binds", prefix)?.into_iter().enumerate() {
        judge_bind_spec(spec, &format!("{prefix}/Binds/{i}"), cx)?;
    }
    let field = format!("{prefix}/Mounts");
    match hc.get("Mounts") {
        None | Some(Value::Null) => {}
        Some(Value::Array(mounts)) => {
            for (i, mount) in mounts.iter().enumerate() {
                judge_mount(mount, &format!("{field}/{i}"), cx)?;
            }
        }
        Some(other) => return Err(type_denial(&field, other, "a list")),
    }
    // Checked for type only; see the module comment.
    strings(hc, "VolumesFrom", prefix)?;
    Ok(())
}

/// A `-v` spec, as moby's Linux parser splits it: `src:dst[:mode]`; a
/// source that is an absolute path makes it a bind (anything else is a
/// named or anonymous volume, which dockerd creates without options).
fn judge_bind_spec(spec: &str, field: &str, cx: &Cx) -> Result<(), Denial> {
    let parts: Vec<&str> = spec.split(':').collect();
    match parts.first() {
        Some(source) if parts.len() >= 2 && source.starts_with('/') => {
            host_path(source, field, RULE_BINDS, cx.policy, cx.host)
        }
        _ => Ok(()),
    }
}

fn judge_mount(mount: &Value, field: &str, cx: &Cx) -> Result<(), Denial> {
    if !mount.is_object() {
        return Err(type_denial(field, mount, "an object"));
    }
    let text = |key: &str| -> Result<&str, Denial> {
        match mount.get(key) {
            None | Some(Value::Null) => Ok(""),
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(other) => Err(type_denial(&format!("{field}/{key}"), other, "a string")),
        }
    };
    let kind = text("Type")?;
    match kind {
        "bind" => host_path(
            text("Source")?,
            &format!("{field}/Source"),
            RULE_BINDS,
            cx.policy,
            cx.host,
        ),
        "volume" => {
            let config = mount
                .get("VolumeOptions")
                .and_then(|v| v.get("DriverConfig"))
                .filter(|v| !v.is_null());
            let Some(config) = config else {
                return Ok(());
            };
            let config_field = format!("{field}/VolumeOptions/DriverConfig");
            let name = match config.get("Name") {
                None | Some(Value::Null) => "",
                Some(Value::String(s)) => s.as_str(),
                Some(other) => {
                    return Err(type_denial(
                        &format!("{config_field}/Name"),
                        other,
                        "a string",
                    ))
                }
            };
            match config.get("Options") {
                None | Some(Value::Null) => Ok(()),
                Some(Value::Object(options)) if is_local(name) => volume::judge_local_options(
                    options,
                    &format!("{config_field}/Options"),
                    cx.policy,
                    cx.host,
                ),
                // A volume plugin's own options: plugins are installed by
                // the admin only (the gate refuses plugin installs).
                Some(Value::Object(_)) => Ok(()),
                Some(other) => Err(type_denial(
                    &format!("{config_field}/Options"),
                    other,
                    "an object",
                )),
            }
        }
        "tmpfs" => Ok(()),
        other => Err(Denial::new(
            RULE_BINDS,
            format!("{field}/Type"),
            other,
            "mount type vibe-shim does not judge (bind, volume and tmpfs only)",
        )),
    }
}

/// The runtime a container gets: `""` is dockerd's default runtime.
fn judge_runtime(name: &str, field: &str, cx: &Cx) -> Result<(), Denial> {
    let effective = if name.is_empty() {
        cx.gate.default_runtime.as_str()
    } else {
        name
    };
    if cx.gate.runtimes.iter().any(|r| r == effective) {
        return Ok(());
    }
    let shown = if name.is_empty() {
        format!("(daemon default: {effective})")
    } else {
        name.to_string()
    };
    Err(Denial::new(
        RULE_RUNTIME,
        field,
        shown,
        format!(
            "runtime is not vibe-shim's (accepted: {})",
            cx.gate.runtimes.join(", ")
        ),
    ))
}

/// A list of strings at `key`, or none.
fn strings<'a>(hc: &'a Value, key: &str, prefix: &str) -> Result<Vec<&'a str>, Denial> {
    let field = || format!("{prefix}/{key}");
    match hc.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str()
                    .ok_or_else(|| type_denial(&format!("{}/{i}", field()), item, "a string"))
            })
            .collect(),
        Some(other) => Err(type_denial(&field(), other, "a list of strings")),
    }
}

/// dockerd would fail to decode this; refused rather than guessed.
fn type_denial(field: &str, value: &Value, wanted: &str) -> Denial {
    Denial::new(
        super::RULE_BODY,
        field,
        short(value),
        format!("not {wanted} as dockerd reads it"),
    )
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(64) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text,
    }
}
