//! Container create (and the pre-1.24 start that still took a HostConfig):
//! every host path a bind or mount names must be under `[[filesystem.bind]]`,
//! local volumes must not mount host paths or devices, and the runtime must
//! be one of vibe-shim's. Judged before dockerd acts, so dockerd never
//! creates a refused bind's missing source directory on the host.
//!
//! `VolumesFrom` is refused: the copy of a `--mount type=bind` loses its
//! never-create flag, so dockerd runs MkdirAll on its source at start, as
//! for `-v` (see [`super::Gate::allow_bind_create`]), and the gate cannot
//! see what the other container mounts.
//!
//! `LogConfig`: dockerd (root, in the host's network namespace) runs the
//! log driver, so `syslog`, `gelf`, `fluentd`, `splunk`... send the
//! container's output to an address the client picks, past any network
//! mode. Only drivers that write on this host are allowed, with options that
//! name no place.

use serde_json::Value;

use super::volume::{self, is_local};
use super::{host_path, parse_body, Cx, RULE_ANNOTATIONS, RULE_BINDS, RULE_DEVICES};
use crate::decision::Denial;
use crate::lang::gojson::Kind;
use crate::lang::text::one_line;

pub const RULE_RUNTIME: &str = "authz-runtime";
pub const RULE_VOLUMES_FROM: &str = "authz-volumes-from";
pub const RULE_LOG: &str = "authz-log";

/// Log drivers that write on this host, and the option groups each takes
/// (options that name no address, path or buffer): `""` is the daemon's
/// default driver (the admin's), given only options every driver reads
/// harmlessly.
const LOG_DRIVERS: &[(&str, &[&[&str]])] = &[
    ("", &[ROTATION, METADATA]),
    ("json-file", &[ROTATION, METADATA]),
    ("local", &[ROTATION]),
    ("journald", &[METADATA]),
    ("none", &[]),
];
const ROTATION: &[&str] = &["max-size", "max-file", "compress"];
const METADATA: &[&str] = &["tag", "labels", "labels-regex", "env", "env-regex"];

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
    let start = std::ptr::eq(kind, &super::schema::HOST_CONFIG_KIND);
    // The top level: the create body's deprecated embedded HostConfig
    // (read by 20.10 when `HostConfig` is absent, ignored by Docker >= 23),
    // or the start body's HostConfig itself.
    judge_host_config(&doc, "", start, cx)?;
    if !start {
        super::network::judge_networking_config(&doc)?;
    }
    // Every runtime some engine version could pick is judged.
    if let Some(rt) = doc.get("Runtime").filter(|v| !v.is_null()) {
        let Value::String(rt) = rt else {
            return Err(type_denial("/Runtime", rt, "a string"));
        };
        judge_runtime(rt, "/Runtime", cx)?;
    }
    match doc.get("HostConfig") {
        Some(inner @ Value::Object(_)) if !start => {
            judge_host_config(inner, "/HostConfig", true, cx)?;
            let runtime = match inner.get("Runtime") {
                None | Some(Value::Null) => "",
                Some(Value::String(rt)) => rt.as_str(),
                Some(other) => return Err(type_denial("/HostConfig/Runtime", other, "a string")),
            };
            judge_runtime(runtime, "/HostConfig/Runtime", cx)
        }
        // Docker >= 23 without a HostConfig: the daemon's default runtime.
        None | Some(Value::Null) if !start => judge_runtime("", "/HostConfig/Runtime", cx),
        None | Some(Value::Null) => {
            if doc.get("Runtime").is_none_or(Value::is_null) {
                judge_runtime("", "/Runtime", cx)?;
            }
            Ok(())
        }
        Some(other) => Err(type_denial("/HostConfig", other, "an object")),
    }
}

/// `strict`: `hc` is a HostConfig object itself, so a key that is not a
/// field of Docker 28.5's `container.HostConfig` (a superset of 20.10's) is
/// refused; the create body's top level also holds `container.Config`.
fn judge_host_config(hc: &Value, prefix: &str, strict: bool, cx: &Cx) -> Result<(), Denial> {
    if strict {
        known_keys(hc, HOST_CONFIG_KEYS, prefix)?;
    }
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
    super::network::judge_sysctls(hc, prefix)?;
    // See the module comment.
    if let Some(from) = strings(hc, "VolumesFrom", prefix)?.first() {
        return Err(Denial::new(
            RULE_VOLUMES_FROM,
            format!("{prefix}/VolumesFrom"),
            one_line(from, 256),
            "--volumes-from is refused: dockerd creates a copied bind's missing source \
             as root at start, following symlinks, and the gate cannot see what it copies",
        ));
    }
    judge_log_config(hc, prefix)?;
    let field = format!("{prefix}/CgroupParent");
    match hc.get("CgroupParent") {
        None | Some(Value::Null) => {}
        Some(Value::String(parent)) => super::build::judge_cgroup_parent(parent, &field, cx)?,
        Some(other) => return Err(type_denial(&field, other, "a string")),
    }
    // What a device request adds (CDI specs' devices, mounts and hooks,
    // the nvidia prestart hook) is chosen by files on the host, not by
    // anything the gate sees; the policy grants no devices.
    let field = format!("{prefix}/DeviceRequests");
    match hc.get("DeviceRequests") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) if list.is_empty() => {}
        Some(Value::Array(_)) => {
            return Err(Denial::new(
                RULE_DEVICES,
                field,
                short(&hc["DeviceRequests"]),
                "device requests (--gpus, CDI devices) are refused: what they add to the \
                 container comes from host files vibe-shim does not judge",
            ))
        }
        Some(other) => return Err(type_denial(&field, other, "a list")),
    }
    // API 1.43 annotations go into the OCI spec, where runc
    // (`org.systemd.property.*`), containerd and others read them.
    let field = format!("{prefix}/Annotations");
    match hc.get("Annotations") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) if map.is_empty() => {}
        Some(Value::Object(map)) => {
            let key = map.keys().next().map(String::as_str).unwrap_or_default();
            return Err(Denial::new(
                RULE_ANNOTATIONS,
                field,
                one_line(key, 256),
                "annotations are refused: runc and containerd act on some of them \
                 (org.systemd.property.*), and vibe-shim does not judge them",
            ));
        }
        Some(other) => return Err(type_denial(&field, other, "an object")),
    }
    Ok(())
}

/// `HostConfig.LogConfig` at `prefix`.
fn judge_log_config(hc: &Value, prefix: &str) -> Result<(), Denial> {
    let field = format!("{prefix}/LogConfig");
    let log = match hc.get("LogConfig") {
        None | Some(Value::Null) => return Ok(()),
        Some(log @ Value::Object(_)) => log,
        Some(other) => return Err(type_denial(&field, other, "an object")),
    };
    let driver = match log.get("Type") {
        None | Some(Value::Null) => "",
        Some(Value::String(t)) => t.as_str(),
        Some(other) => return Err(type_denial(&format!("{field}/Type"), other, "a string")),
    };
    let Some((_, allowed)) = LOG_DRIVERS.iter().find(|(name, _)| *name == driver) else {
        return Err(Denial::new(
            RULE_LOG,
            format!("{field}/Type"),
            one_line(driver, 256),
            "log driver refused: dockerd runs it on the host, and drivers other than \
             json-file, local, journald and none send the output where the client says",
        ));
    };
    match log.get("Config") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(opts)) => match opts
            .keys()
            .find(|k| !allowed.iter().any(|group| group.contains(&k.as_str())))
        {
            Some(key) => Err(Denial::new(
                RULE_LOG,
                format!("{field}/Config/{}", crate::lang::json::pointer_segment(key)),
                one_line(key, 256),
                format!(
                    "log option refused for driver {:?}: allowed are {}",
                    driver,
                    if allowed.is_empty() {
                        "none".to_string()
                    } else {
                        allowed.concat().join(", ")
                    }
                ),
            )),
            None => Ok(()),
        },
        Some(other) => Err(type_denial(&format!("{field}/Config"), other, "an object")),
    }
}

/// A `-v` spec, as moby's Linux parser splits it: `src:dst[:mode]`; a
/// source that is an absolute path makes it a bind (anything else is a
/// named or anonymous volume, which dockerd creates without options).
fn judge_bind_spec(spec: &str, field: &str, cx: &Cx) -> Result<(), Denial> {
    let parts: Vec<&str> = spec.split(':').collect();
    match parts.first() {
        Some(source) if parts.len() >= 2 && source.starts_with('/') => {
            host_path(source, field, RULE_BINDS, cx.policy, cx.host)?;
            refuse_created_bind(source, field, cx)
        }
        _ => Ok(()),
    }
}

/// A bind that dockerd would create if its source were missing at start
/// (see [`super::Gate::allow_bind_create`]): refused unless allowed.
fn refuse_created_bind(source: &str, field: &str, cx: &Cx) -> Result<(), Denial> {
    if cx.gate.allow_bind_create {
        return Ok(());
    }
    Err(Denial::new(
        RULE_BINDS,
        field,
        one_line(source, 256),
        "dockerd creates a missing -v source as root when the container starts, \
         following symlinks a container can plant: use --mount type=bind \
         (without bind-create-src), which never creates",
    ))
}

fn judge_mount(mount: &Value, field: &str, cx: &Cx) -> Result<(), Denial> {
    if !mount.is_object() {
        return Err(type_denial(field, mount, "an object"));
    }
    let text = |value: Option<&Value>, at: &str| -> Result<String, Denial> {
        match value {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(type_denial(&format!("{field}{at}"), other, "a string")),
        }
    };
    // Options objects: absent, null, or an object of known keys only.
    let options = |key: &str, keys: &[&str]| -> Result<Option<&Value>, Denial> {
        match mount.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v @ Value::Object(_)) => {
                known_keys(v, keys, &format!("{field}/{key}"))?;
                Ok(Some(v))
            }
            Some(other) => Err(type_denial(&format!("{field}/{key}"), other, "an object")),
        }
    };
    let kind = text(mount.get("Type"), "/Type")?;
    if !matches!(kind.as_str(), "bind" | "volume" | "tmpfs") {
        return Err(Denial::new(
            RULE_BINDS,
            format!("{field}/Type"),
            kind,
            "mount type vibe-shim does not judge (bind, volume and tmpfs only; not image, \
             cluster or npipe)",
        ));
    }
    known_keys(mount, MOUNT_KEYS, field)?;
    let bind_options = options("BindOptions", BIND_OPTION_KEYS)?;
    options("TmpfsOptions", TMPFS_OPTION_KEYS)?;
    let volume_options = options("VolumeOptions", VOLUME_OPTION_KEYS)?;
    match kind.as_str() {
        "bind" => {
            let source = text(mount.get("Source"), "/Source")?;
            let field = format!("{field}/Source");
            host_path(&source, &field, RULE_BINDS, cx.policy, cx.host)?;
            if bind_options.and_then(|o| o.get("CreateMountpoint")) == Some(&Value::Bool(true)) {
                refuse_created_bind(&source, &field, cx)?;
            }
            Ok(())
        }
        "volume" => {
            let Some(volume_options) = volume_options else {
                return Ok(());
            };
            // dockerd resolves a subpath in the volume's content, which
            // containers write; vibe-shim judges no path it cannot see.
            let subpath = text(volume_options.get("Subpath"), "/VolumeOptions/Subpath")?;
            if !subpath.is_empty() {
                return Err(Denial::new(
                    RULE_BINDS,
                    format!("{field}/VolumeOptions/Subpath"),
                    one_line(&subpath, 256),
                    "volume subpaths are refused: dockerd resolves them inside volume \
                     content a container can write",
                ));
            }
            let config_field = format!("{field}/VolumeOptions/DriverConfig");
            let config = match volume_options.get("DriverConfig") {
                None | Some(Value::Null) => return Ok(()),
                Some(v @ Value::Object(_)) => {
                    known_keys(v, DRIVER_KEYS, &config_field)?;
                    v
                }
                Some(other) => return Err(type_denial(&config_field, other, "an object")),
            };
            let name = text(config.get("Name"), "/VolumeOptions/DriverConfig/Name")?;
            match config.get("Options") {
                None | Some(Value::Null) => Ok(()),
                Some(Value::Object(options)) if is_local(&name) => volume::judge_local_options(
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
        // tmpfs; other types were refused above.
        _ => Ok(()),
    }
}

/// Refuses a key of `obj` that is not in `keys` (exact spelling), or one
/// of `MUST_BE_NULL` with a value: a field the gate does not know may carry
/// what it cannot judge (a newer API's host path), so it fails closed.
fn known_keys(obj: &Value, keys: &[&str], field: &str) -> Result<(), Denial> {
    let Value::Object(map) = obj else {
        return Ok(());
    };
    for (key, value) in map {
        if keys.contains(&key.as_str()) {
            continue;
        }
        if value.is_null() && MUST_BE_NULL.contains(&key.as_str()) {
            continue;
        }
        return Err(Denial::new(
            super::RULE_BODY,
            format!("{field}/{}", one_line(key, 64)),
            short(value),
            "a field vibe-shim does not judge (unknown to it, or for a mount type it refuses)",
        ));
    }
    Ok(())
}

/// Every field of Docker 28.5's (API 1.51) `container.HostConfig`, with
/// its embedded `Resources`, as JSON names. 20.10's are a subset.
const HOST_CONFIG_KEYS: &[&str] = &[
    "CpuShares",
    "Memory",
    "NanoCpus",
    "CgroupParent",
    "BlkioWeight",
    "BlkioWeightDevice",
    "BlkioDeviceReadBps",
    "BlkioDeviceWriteBps",
    "BlkioDeviceReadIOps",
    "BlkioDeviceWriteIOps",
    "CpuPeriod",
    "CpuQuota",
    "CpuRealtimePeriod",
    "CpuRealtimeRuntime",
    "CpusetCpus",
    "CpusetMems",
    "Devices",
    "DeviceCgroupRules",
    "DeviceRequests",
    "KernelMemory",
    "KernelMemoryTCP",
    "MemoryReservation",
    "MemorySwap",
    "MemorySwappiness",
    "OomKillDisable",
    "PidsLimit",
    "Ulimits",
    "CpuCount",
    "CpuPercent",
    "IOMaximumIOps",
    "IOMaximumBandwidth",
    "Binds",
    "ContainerIDFile",
    "LogConfig",
    "NetworkMode",
    "PortBindings",
    "RestartPolicy",
    "AutoRemove",
    "VolumeDriver",
    "VolumesFrom",
    "ConsoleSize",
    "Annotations",
    "CapAdd",
    "CapDrop",
    "CgroupnsMode",
    "Dns",
    "DnsOptions",
    "DnsSearch",
    "ExtraHosts",
    "GroupAdd",
    "IpcMode",
    "Cgroup",
    "Links",
    "OomScoreAdj",
    "PidMode",
    "Privileged",
    "PublishAllPorts",
    "ReadonlyRootfs",
    "SecurityOpt",
    "StorageOpt",
    "Tmpfs",
    "UTSMode",
    "UsernsMode",
    "ShmSize",
    "Sysctls",
    "Runtime",
    "Isolation",
    "Mounts",
    "MaskedPaths",
    "ReadonlyPaths",
    "Init",
];
/// `mount.Mount` (API 1.51) minus `ImageOptions` and `ClusterOptions`,
/// which only the refused types `image` and `cluster` use.
const MOUNT_KEYS: &[&str] = &[
    "Type",
    "Source",
    "Target",
    "ReadOnly",
    "Consistency",
    "BindOptions",
    "VolumeOptions",
    "TmpfsOptions",
];
const MUST_BE_NULL: &[&str] = &["ImageOptions", "ClusterOptions"];
const BIND_OPTION_KEYS: &[&str] = &[
    "Propagation",
    "NonRecursive",
    "CreateMountpoint",
    "ReadOnlyNonRecursive",
    "ReadOnlyForceRecursive",
];
const VOLUME_OPTION_KEYS: &[&str] = &["NoCopy", "Labels", "Subpath", "DriverConfig"];
const DRIVER_KEYS: &[&str] = &["Name", "Options"];
const TMPFS_OPTION_KEYS: &[&str] = &["SizeBytes", "Mode", "Options"];

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
