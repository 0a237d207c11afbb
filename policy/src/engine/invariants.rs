//! Invariants every rewritten spec satisfies, checked on the result alone.
//!
//! [`violations`] is deliberately independent of the rules: it looks only at
//! the output document and the policy, so a rule that forgets a case shows up
//! here (and in the proptest property) instead of in a container. It is
//! lexical: bind sources are compared with the policy's allow sources as
//! written, which matches the binds rule's output when those sources are
//! already canonical.

use std::path::Path;

use serde_json::Value;

use crate::config::{normalise_capability, BindMode, HomeMode, Policy, VolumesMode};
use crate::lang::json::{clean_path, str_field, strings};
use crate::rules::binds::ENGINE_FILES;
use crate::rules::devices::{is_safe_device, PTS_MAJOR, SAFE_DEVICES};
use crate::rules::masked_paths::{MASKED_PATHS, READONLY_PATHS};
use crate::rules::sysctls::SAFE_SYSCTLS;

/// The five capability sets of an OCI process.
const CAPABILITY_SETS: &[&str] = &[
    "bounding",
    "effective",
    "inheritable",
    "permitted",
    "ambient",
];
/// Namespaces a container must have of its own.
const REQUIRED_NAMESPACES: &[&str] = &["pid", "ipc", "uts", "mount", "network", "cgroup"];
/// Namespaces that may not be joined by path at all.
const NEVER_JOINED: &[&str] = &["pid", "ipc", "mount"];
const KERNEL_TYPES: &[&str] = &["proc", "sysfs", "cgroup", "cgroup2", "mqueue", "devpts"];
const LEAKY_PROPAGATION: &[&str] = &["shared", "rshared", "slave", "rslave"];

/// Every invariant the spec breaks under this policy, one line each; empty
/// means the spec complies.
pub fn violations(spec: &Value, policy: &Policy) -> Vec<String> {
    let mut out = Vec::new();
    let null = Value::Null;
    let process = spec.get("process").unwrap_or(&null);
    check_process(process, policy, &mut out);
    if policy.filesystem.readonly_root && spec.pointer("/root/readonly") != Some(&Value::Bool(true))
    {
        out.push("root.readonly is not true".into());
    }
    check_namespaces(spec, &mut out);
    check_mounts(spec, policy, &mut out);
    check_home(spec, process, policy, &mut out);
    check_devices(spec, &mut out);
    check_seccomp(spec, &mut out);
    check_sysctls(spec, &mut out);
    check_net_devices(spec, &mut out);
    check_annotations(spec, &mut out);
    check_intel_rdt(spec, &mut out);
    check_paths(spec, &mut out);
    check_pids(spec, policy, &mut out);
    out
}

fn check_process(process: &Value, policy: &Policy, out: &mut Vec<String>) {
    // runc leaves capabilities alone when the object is missing.
    match process.get("capabilities") {
        Some(Value::Object(caps)) => {
            for set in CAPABILITY_SETS {
                for cap in strings(caps.get(*set)) {
                    let name = normalise_capability(&cap).unwrap_or(cap.clone());
                    if !policy.process.capabilities.contains(&name) {
                        out.push(format!(
                            "process.capabilities.{set} has {cap}, not granted by the policy"
                        ));
                    }
                }
            }
        }
        _ => out.push("process.capabilities is missing".into()),
    }
    if policy.process.no_new_privileges
        && process.get("noNewPrivileges") != Some(&Value::Bool(true))
    {
        out.push("process.noNewPrivileges is not true".into());
    }
    if let Some((uid, gid)) = policy.process.forced_user() {
        let user = process.get("user").unwrap_or(&Value::Null);
        let id = |key| user.get(key).and_then(Value::as_u64);
        if id("uid") != Some(u64::from(uid)) || id("gid") != Some(u64::from(gid)) {
            out.push(format!(
                "process.user is not the forced {uid}:{gid}: {user}"
            ));
        }
        if user
            .get("additionalGids")
            .and_then(Value::as_array)
            .is_some_and(|g| !g.is_empty())
        {
            out.push("process.user.additionalGids is not empty".into());
        }
    }
    for entry in strings(process.get("env")) {
        let name = entry.split_once('=').map_or(entry.as_str(), |(n, _)| n);
        let home_rule = name == "HOME" && policy.filesystem.home == HomeMode::Tmpfs;
        if !policy.process.env_allowed(name) && !home_rule {
            out.push(format!("process.env has {name}, not in process.env_allow"));
        }
    }
    // Written out again rather than shared with rules::scheduling: this is
    // the independent check.
    let sched = process.get("scheduler").unwrap_or(&Value::Null);
    if !sched.is_null() {
        let ordinary = matches!(
            sched.get("policy").and_then(Value::as_str),
            Some("SCHED_OTHER" | "SCHED_BATCH" | "SCHED_IDLE")
        );
        let nice =
            sched
                .get("nice")
                .map_or(Some(0), |n| if n.is_null() { Some(0) } else { n.as_i64() });
        if !ordinary || nice.is_none_or(|n| n < 0) {
            out.push(format!("process.scheduler raises priority: {sched}"));
        }
    }
    if let Some(io) = process.get("ioPriority").filter(|v| !v.is_null()) {
        if !matches!(
            io.get("class").and_then(Value::as_str),
            Some("IOPRIO_CLASS_BE" | "IOPRIO_CLASS_IDLE")
        ) {
            out.push(format!("process.ioPriority is not an ordinary class: {io}"));
        }
    }
    let cwd = str_field(process, "cwd");
    if under_proc_fd(cwd) {
        out.push(format!("process.cwd {cwd} is under /proc/*/fd"));
    }
    let args = strings(process.get("args"));
    if let Some(arg0) = args.first().filter(|a| a.contains('/')) {
        let full = if arg0.starts_with('/') {
            arg0.clone()
        } else {
            format!("{cwd}/{arg0}")
        };
        if under_proc_fd(&full) {
            out.push(format!("process.args[0] {arg0} is under /proc/*/fd"));
        }
    }
}

/// `/proc/<pid>/fd/...` and `/proc/<pid>/task/<tid>/fd/...`: fds runc may
/// have leaked (CVE-2024-21626). The `root` and `cwd` magic links count too,
/// since they lead back into any of those.
fn under_proc_fd(path: &str) -> bool {
    let clean = clean_path(path);
    let parts: Vec<&str> = clean.split('/').filter(|p| !p.is_empty()).collect();
    let entry = match parts.as_slice() {
        ["proc", _, "task", _, entry, ..] => entry,
        ["proc", _, entry, ..] => entry,
        _ => return false,
    };
    matches!(*entry, "fd" | "root" | "cwd")
}

fn check_namespaces(spec: &Value, out: &mut Vec<String>) {
    let namespaces = spec
        .pointer("/linux/namespaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for kind in REQUIRED_NAMESPACES {
        let entry = namespaces.iter().find(|ns| str_field(ns, "type") == *kind);
        match entry {
            None => out.push(format!("linux.namespaces has no {kind} namespace")),
            Some(ns) if NEVER_JOINED.contains(kind) && !str_field(ns, "path").is_empty() => out
                .push(format!(
                    "linux.namespaces joins a {kind} namespace at {}",
                    str_field(ns, "path")
                )),
            Some(_) => {}
        }
    }
}

fn has(options: &[String], option: &str) -> bool {
    options.iter().any(|o| o == option)
}

fn is_bind(mount: &Value) -> bool {
    let options = strings(mount.get("options"));
    str_field(mount, "type") == "bind" || has(&options, "bind") || has(&options, "rbind")
}

fn check_mounts(spec: &Value, policy: &Policy, out: &mut Vec<String>) {
    let mounts = spec
        .get("mounts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut writable_subtree: Option<String> = None;
    for (i, mount) in mounts.iter().enumerate() {
        let options = strings(mount.get("options"));
        let kind = str_field(mount, "type");
        let dest = clean_path(str_field(mount, "destination"));
        let bind = is_bind(mount);
        let dev_tmpfs = kind == "tmpfs" && dest == "/dev";
        let mut required: Vec<(&str, &str)> = Vec::new();
        if bind || kind == "tmpfs" || KERNEL_TYPES.contains(&kind) {
            required.push(("nosuid", "every mount is nosuid"));
            if !dev_tmpfs && kind != "devpts" {
                required.push(("nodev", "only /dev and devpts hold device nodes"));
            }
        } else {
            out.push(format!(
                "mounts[{i}] has filesystem type {kind:?} at {dest}"
            ));
        }
        if ["sysfs", "cgroup", "cgroup2"].contains(&kind) && !bind {
            required.push(("ro", "sysfs and cgroup are read-only"));
        }
        for (option, why) in required {
            if !has(&options, option) {
                out.push(format!(
                    "mounts[{i}] ({kind} at {dest}) lacks {option}: {why}"
                ));
            }
        }
        for (bad, when) in [("suid", true), ("dev", !dev_tmpfs && kind != "devpts")] {
            if when && has(&options, bad) {
                out.push(format!("mounts[{i}] ({kind} at {dest}) has {bad}"));
            }
        }
        if ["sysfs", "cgroup", "cgroup2"].contains(&kind) && !bind && has(&options, "rw") {
            out.push(format!("mounts[{i}] ({kind} at {dest}) has rw"));
        }
        if let Some(p) = options
            .iter()
            .find(|o| LEAKY_PROPAGATION.contains(&o.as_str()))
        {
            out.push(format!("mounts[{i}] at {dest} has propagation {p}"));
        }
        if bind && check_bind(i, mount, &dest, &options, policy, out) {
            writable_subtree.get_or_insert(dest.into_owned());
        }
    }
    if let Some(dest) = writable_subtree {
        check_regular_ids(spec.get("process").unwrap_or(&Value::Null), &dest, out);
    }
    for entry in &policy.filesystem.tmpfs {
        let dir = clean_path(&entry.path.to_string_lossy()).into_owned();
        let present = mounts.iter().any(|m| {
            str_field(m, "type") == "tmpfs"
                && !is_bind(m)
                && clean_path(str_field(m, "destination")) == dir
        });
        if !present {
            out.push(format!("no policy tmpfs at {dir}"));
        }
    }
    if let Some(p) = spec
        .pointer("/linux/rootfsPropagation")
        .and_then(Value::as_str)
    {
        if LEAKY_PROPAGATION.contains(&p) {
            out.push(format!("linux.rootfsPropagation is {p}"));
        }
    }
}

/// The first regular host id: a process that can write a host subtree must
/// not be root or a system account there.
const REGULAR_ID_MIN: u64 = 1000;

fn check_regular_ids(process: &Value, dest: &str, out: &mut Vec<String>) {
    let user = process.get("user").unwrap_or(&Value::Null);
    let id = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let gids = user.get("additionalGids").and_then(Value::as_array);
    let ids = [id(user.get("uid")), id(user.get("gid"))]
        .into_iter()
        .chain(gids.into_iter().flatten().map(|g| id(Some(g))));
    for value in ids {
        if value < REGULAR_ID_MIN {
            out.push(format!(
                "process runs with host id {value} and can write the host subtree at {dest}"
            ));
        }
    }
}

/// Judges one bind; true when it is a writable bind of a read-write subtree.
fn check_bind(
    i: usize,
    mount: &Value,
    dest: &str,
    options: &[String],
    policy: &Policy,
    out: &mut Vec<String>,
) -> bool {
    let source = str_field(mount, "source");
    if has(options, "rbind") {
        out.push(format!("mounts[{i}] bind of {source} is recursive (rbind)"));
    }
    for weak in ["rrw", "rsuid", "rdev", "rexec", "rsymfollow"] {
        if has(options, weak) {
            out.push(format!("mounts[{i}] bind of {source} has {weak}"));
        }
    }
    let path = Path::new(source);
    let engine_file = ENGINE_FILES
        .iter()
        .any(|(d, name)| *d == dest && path.file_name().and_then(|n| n.to_str()) == Some(name));
    // `<volume dir>/<name>/_data`, allowed under volumes = "private".
    let volume = policy.filesystem.volumes == VolumesMode::Private
        && path.file_name().is_some_and(|n| n == "_data")
        && path
            .parent()
            .and_then(Path::parent)
            .is_some_and(|dir| policy.filesystem.volume_dirs.iter().any(|d| d == dir));
    let allow = policy
        .filesystem
        .bind
        .iter()
        .filter(|b| source.starts_with('/') && path.starts_with(&b.source))
        .max_by_key(|b| b.source.components().count());
    // runc applies ro/rw in order (the last one wins), then rro on top.
    let writable = !has(options, "rro")
        && options
            .iter()
            .rev()
            .find(|o| ["ro", "rw"].contains(&o.as_str()))
            .is_none_or(|o| o == "rw");
    match allow {
        Some(b) if b.mode == BindMode::Ro && (!has(options, "ro") || has(options, "rw")) => {
            out.push(format!("mounts[{i}] bind of {source} is not read-only"));
            false
        }
        Some(b) => b.mode == BindMode::Rw && writable,
        None if engine_file && source.starts_with('/') => false,
        None if volume => false,
        None => {
            out.push(format!(
                "mounts[{i}] bind of {source} is neither under filesystem.bind nor an engine file"
            ));
            false
        }
    }
}

fn check_home(spec: &Value, process: &Value, policy: &Policy, out: &mut Vec<String>) {
    if policy.filesystem.home != HomeMode::Tmpfs {
        return;
    }
    let env = strings(process.get("env"));
    let Some(home) = env.iter().find_map(|e| e.strip_prefix("HOME=")) else {
        out.push("process.env has no HOME".into());
        return;
    };
    if !home.starts_with('/') {
        out.push(format!("HOME {home} is not absolute"));
        return;
    }
    let home = clean_path(home).into_owned();
    let under_tmpfs = policy
        .filesystem
        .tmpfs
        .iter()
        .any(|d| Path::new(&home).starts_with(&*clean_path(&d.path.to_string_lossy())));
    let mounted = spec
        .get("mounts")
        .and_then(Value::as_array)
        .is_some_and(|mounts| {
            mounts.iter().any(|m| {
                clean_path(str_field(m, "destination")) == home
                    && (is_bind(m) || str_field(m, "type") == "tmpfs")
            })
        });
    if !under_tmpfs && !mounted {
        out.push(format!("HOME {home} has no tmpfs"));
    }
}

fn check_devices(spec: &Value, out: &mut Vec<String>) {
    if let Some(devices) = spec.pointer("/linux/devices").and_then(Value::as_array) {
        for device in devices.iter().filter(|d| !is_safe_device(d)) {
            out.push(format!("linux.devices has {device}"));
        }
    }
    let rules = spec
        .pointer("/linux/resources/devices")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let deny_all = rules.first().is_some_and(|r| {
        r.get("allow") == Some(&Value::Bool(false))
            && matches!(str_field(r, "type"), "" | "a")
            && r.get("major").is_none_or(Value::is_null)
            && r.get("minor").is_none_or(Value::is_null)
            && ["r", "w", "m"]
                .iter()
                .all(|a| str_field(r, "access").contains(a))
    });
    if !deny_all {
        out.push("linux.resources.devices does not start with deny-all".into());
    }
    for rule in rules
        .iter()
        .filter(|r| r.get("allow") == Some(&Value::Bool(true)))
    {
        let major = rule.get("major").and_then(Value::as_i64);
        let minor = rule.get("minor").and_then(Value::as_i64);
        let safe = str_field(rule, "type") == "c"
            && match (major, minor) {
                (Some(PTS_MAJOR), _) => true,
                (Some(major), Some(minor)) => SAFE_DEVICES.contains(&(major, minor)),
                _ => false,
            };
        if !safe {
            out.push(format!("linux.resources.devices allows {rule}"));
        }
    }
}

fn check_seccomp(spec: &Value, out: &mut Vec<String>) {
    match spec.pointer("/linux/seccomp") {
        Some(seccomp) if seccomp.is_object() => {
            let action = str_field(seccomp, "defaultAction");
            if action.is_empty() || action == "SCMP_ACT_ALLOW" || action == "SCMP_ACT_LOG" {
                out.push(format!("linux.seccomp.defaultAction is {action:?}"));
            }
        }
        _ => out.push("linux.seccomp is missing".into()),
    }
}

fn check_annotations(spec: &Value, out: &mut Vec<String>) {
    let Some(annotations) = spec.get("annotations").and_then(Value::as_object) else {
        return;
    };
    for key in annotations.keys() {
        if key.starts_with("org.systemd.property.")
            || key == "org.criu.config"
            || key == "bundle"
            || key.contains('=')
        {
            out.push(format!("annotations has {key}, which runc acts on"));
        }
    }
}

fn check_intel_rdt(spec: &Value, out: &mut Vec<String>) {
    if spec
        .pointer("/linux/intelRdt")
        .is_some_and(|v| !v.is_null())
    {
        out.push("linux.intelRdt is set".into());
    }
}

fn check_net_devices(spec: &Value, out: &mut Vec<String>) {
    match spec.pointer("/linux/netDevices") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) if m.is_empty() => {}
        Some(v) => out.push(format!("linux.netDevices moves host interfaces: {v}")),
    }
}

fn check_sysctls(spec: &Value, out: &mut Vec<String>) {
    if let Some(sysctls) = spec.pointer("/linux/sysctl").and_then(Value::as_object) {
        for name in sysctls
            .keys()
            .filter(|k| !SAFE_SYSCTLS.contains(&k.as_str()))
        {
            out.push(format!("linux.sysctl has {name}"));
        }
    }
}

fn check_paths(spec: &Value, out: &mut Vec<String>) {
    for (key, required) in [
        ("maskedPaths", MASKED_PATHS),
        ("readonlyPaths", READONLY_PATHS),
    ] {
        let paths = strings(spec.pointer(&format!("/linux/{key}")));
        for path in required.iter().filter(|p| !paths.iter().any(|q| q == *p)) {
            out.push(format!("linux.{key} lacks {path}"));
        }
    }
}

fn check_pids(spec: &Value, policy: &Policy, out: &mut Vec<String>) {
    let limit = spec
        .pointer("/linux/resources/pids/limit")
        .and_then(Value::as_i64);
    match limit {
        Some(l) if (1..=policy.process.pids_limit).contains(&l) => {}
        other => out.push(format!(
            "linux.resources.pids.limit is {other:?}, not in 1..={}",
            policy.process.pids_limit
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BindAllow;
    use crate::config::DEFAULT_PIDS_LIMIT;
    use crate::rules::devices::cgroup_device_rules;
    use serde_json::json;
    use std::path::PathBuf;

    const ID: &str = "156d3c431c92338ef3167b2311f0ab6060b9e10b5c6814ed4cb9c17205570050";

    fn policy() -> Policy {
        let mut policy = Policy::default();
        policy.process.capabilities = vec!["CAP_CHOWN".into()];
        policy.filesystem.bind = vec![BindAllow {
            source: PathBuf::from("/srv/wt"),
            mode: BindMode::Rw,
        }];
        policy
    }

    fn compliant() -> Value {
        let engine = |dest: &str, name: &str| {
            json!({"destination": dest, "type": "bind",
                   "source": format!("/var/lib/docker/containers/{ID}/{name}"),
                   "options": ["bind", "rprivate", "nosuid", "nodev"]})
        };
        json!({
            "ociVersion": "1.0.2",
            "process": {
                "user": {"uid": 1000, "gid": 1000},
                "args": ["/bin/sh"],
                "env": ["PATH=/bin", "HOME=/root", "LC_ALL=C"],
                "cwd": "/",
                "capabilities": {"bounding": ["CAP_CHOWN"], "effective": ["CAP_CHOWN"],
                                 "permitted": ["CAP_CHOWN"]},
                "noNewPrivileges": true
            },
            "root": {"path": "rootfs", "readonly": true},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
                {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "newinstance"]},
                {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "nodev", "ro"]},
                {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["ro", "nosuid", "nodev"]},
                {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "nodev"]},
                {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "nodev"]},
                engine("/etc/resolv.conf", "resolv.conf"),
                engine("/etc/hostname", "hostname"),
                engine("/etc/hosts", "hosts"),
                {"destination": "/srv/wt", "type": "bind", "source": "/srv/wt/a",
                 "options": ["bind", "rprivate", "nosuid", "nodev"]},
                {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
                {"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
                {"destination": "/root", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=0700"]},
            ],
            "linux": {
                "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
                               {"type": "network", "path": "/var/run/netns/x"}, {"type": "cgroup"}],
                "devices": [{"path": "/dev/null", "type": "c", "major": 1, "minor": 3}],
                "resources": {"devices": cgroup_device_rules(), "pids": {"limit": 512}},
                "seccomp": {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": []},
                "sysctl": {"net.ipv4.ip_unprivileged_port_start": "0"},
                "maskedPaths": MASKED_PATHS,
                "readonlyPaths": READONLY_PATHS,
                "rootfsPropagation": "rprivate"
            }
        })
    }

    /// Applies `edit` to the compliant spec and returns the violations.
    fn broken(edit: impl FnOnce(&mut Value)) -> Vec<String> {
        let mut spec = compliant();
        edit(&mut spec);
        violations(&spec, &policy())
    }

    fn assert_flags(edit: impl FnOnce(&mut Value), needle: &str) {
        let found = broken(edit);
        assert!(
            found.iter().any(|v| v.contains(needle)),
            "expected a violation containing {needle:?}, got {found:?}"
        );
    }

    #[test]
    fn hand_made_compliant_spec_has_no_violations() {
        assert_eq!(violations(&compliant(), &policy()), Vec::<String>::new());
    }

    #[test]
    fn process_violations() {
        assert_flags(
            |s| s["process"]["user"] = json!({"uid": 0, "gid": 1000}),
            "host id 0 and can write the host subtree",
        );
        assert_flags(
            |s| s["process"]["user"]["additionalGids"] = json!([6]),
            "host id 6",
        );
        assert_flags(
            |s| s["process"]["capabilities"]["ambient"] = json!(["CAP_SYS_ADMIN"]),
            "CAP_SYS_ADMIN",
        );
        assert_flags(
            |s| s["process"]["capabilities"] = json!(null),
            "capabilities is missing",
        );
        assert_flags(
            |s| s["process"]["noNewPrivileges"] = json!(false),
            "noNewPrivileges",
        );
        assert_flags(
            |s| s["process"]["env"][0] = json!("GITHUB_TOKEN=x"),
            "GITHUB_TOKEN",
        );
        assert_flags(|s| s["process"]["cwd"] = json!("/proc/self/fd/3"), "cwd");
        assert_flags(
            |s| s["process"]["cwd"] = json!("/proc/1/task/1/fd/../fd/5"),
            "cwd",
        );
        assert_flags(
            |s| s["process"]["cwd"] = json!("/proc/self/root/proc/1/fd/5"),
            "cwd",
        );
        assert_flags(
            |s| s["process"]["args"][0] = json!("/proc/self/fd/7"),
            "args[0]",
        );
        assert_flags(
            |s| {
                s["process"]["cwd"] = json!("/proc/self");
                s["process"]["args"][0] = json!("fd/7");
            },
            "args[0]",
        );
        assert_flags(|s| s["root"]["readonly"] = json!(false), "root.readonly");
    }

    #[test]
    fn forced_user_violations() {
        let mut p = policy();
        p.process.user = Some("1000:1000".into());
        let mut spec = compliant();
        spec["process"]["user"] = json!({"uid": 1001, "gid": 1001});
        assert!(violations(&spec, &p)
            .iter()
            .any(|v| v.contains("forced 1000:1000")));
        spec["process"]["user"] = json!({"uid": 1000, "gid": 1000, "additionalGids": [0]});
        assert!(violations(&spec, &p)
            .iter()
            .any(|v| v.contains("additionalGids")));
        spec["process"]["user"] = json!({"uid": 1000, "gid": 1000});
        assert!(
            violations(&spec, &p).is_empty(),
            "{:?}",
            violations(&spec, &p)
        );
    }

    #[test]
    fn namespace_violations() {
        assert_flags(
            |s| {
                s["linux"]["namespaces"].as_array_mut().unwrap().remove(0);
            },
            "no pid",
        );
        assert_flags(
            |s| {
                s["linux"]["namespaces"].as_array_mut().unwrap().remove(5);
            },
            "no cgroup",
        );
        assert_flags(
            |s| s["linux"]["namespaces"][3]["path"] = json!("/proc/1/ns/mnt"),
            "joins a mount",
        );
    }

    #[test]
    fn mount_violations() {
        assert_flags(
            |s| s["mounts"][10]["source"] = json!("/etc"),
            "neither under filesystem.bind",
        );
        assert_flags(
            |s| s["mounts"][10]["source"] = json!("/srv/wt2"),
            "neither under",
        );
        assert_flags(|s| s["mounts"][10]["options"][0] = json!("rbind"), "rbind");
        assert_flags(
            |s| s["mounts"][10]["options"][1] = json!("rslave"),
            "propagation rslave",
        );
        assert_flags(
            |s| s["mounts"][7]["source"] = json!(format!("/x/{ID}/passwd")),
            "neither under",
        );
        assert_flags(
            |s| s["mounts"][11]["options"] = json!(["exec", "suid"]),
            "lacks nosuid",
        );
        assert_flags(
            |s| s["mounts"][11]["options"] = json!(["nosuid", "nodev", "dev"]),
            "has dev",
        );
        assert_flags(
            |s| s["mounts"][3]["options"] = json!(["nosuid", "nodev"]),
            "lacks ro",
        );
        assert_flags(
            |s| s["mounts"][4]["options"] = json!(["ro", "nosuid", "nodev", "rw"]),
            "has rw",
        );
        assert_flags(
            |s| {
                s["mounts"].as_array_mut().unwrap().remove(12);
            },
            "no policy tmpfs at /run",
        );
        assert_flags(
            |s| {
                s["mounts"].as_array_mut().unwrap().remove(13);
            },
            "HOME /root has no tmpfs",
        );
        assert_flags(
            |s| s["mounts"][0]["type"] = json!("ext4"),
            "filesystem type",
        );
        assert_flags(
            |s| s["linux"]["rootfsPropagation"] = json!("shared"),
            "rootfsPropagation",
        );
    }

    #[test]
    fn read_only_allow_root_needs_ro() {
        let mut p = policy();
        p.filesystem.bind[0].mode = BindMode::Ro;
        assert!(violations(&compliant(), &p)
            .iter()
            .any(|v| v.contains("not read-only")));
    }

    #[test]
    fn linux_violations() {
        assert_flags(
            |s| s["linux"]["netDevices"] = json!({"eth0": {}}),
            "netDevices",
        );
        assert_flags(
            |s| s["annotations"] = json!({"org.systemd.property.TasksMax": "infinity"}),
            "TasksMax",
        );
        assert_flags(|s| s["annotations"] = json!({"bundle": "/x"}), "bundle");
        assert_flags(
            |s| s["linux"]["intelRdt"] = json!({"closID": "host"}),
            "intelRdt",
        );
        assert_flags(
            |s| s["process"]["scheduler"] = json!({"policy": "SCHED_RR", "priority": 1}),
            "scheduler",
        );
        assert_flags(
            |s| s["process"]["scheduler"] = json!({"policy": "SCHED_OTHER", "nice": -5}),
            "scheduler",
        );
        assert_flags(
            |s| s["process"]["ioPriority"] = json!({"class": "IOPRIO_CLASS_RT"}),
            "ioPriority",
        );
        assert_flags(
            |s| {
                s["linux"]["devices"][0] =
                    json!({"path": "/dev/vda", "type": "b", "major": 254, "minor": 0})
            },
            "/dev/vda",
        );
        assert_flags(
            |s| s["linux"]["resources"]["devices"] = json!([{"allow": true, "access": "rwm"}]),
            "deny-all",
        );
        assert_flags(
            |s| {
                s["linux"]["resources"]["devices"].as_array_mut().unwrap().push(json!({"allow": true, "type": "b", "major": 254, "minor": 0, "access": "rwm"}))
            },
            "allows",
        );
        assert_flags(
            |s| s["linux"]["seccomp"] = json!(null),
            "seccomp is missing",
        );
        assert_flags(
            |s| s["linux"]["seccomp"]["defaultAction"] = json!("SCMP_ACT_LOG"),
            "SCMP_ACT_LOG",
        );
        assert_flags(
            |s| s["linux"]["sysctl"]["kernel.core_pattern"] = json!("|/x"),
            "kernel.core_pattern",
        );
        assert_flags(
            |s| s["linux"]["maskedPaths"] = json!([]),
            "lacks /proc/kcore",
        );
        assert_flags(
            |s| s["linux"]["readonlyPaths"] = json!([]),
            "lacks /proc/sys",
        );
        assert_flags(
            |s| s["linux"]["resources"]["pids"]["limit"] = json!(-1),
            "pids.limit",
        );
        assert_flags(
            |s| s["linux"]["resources"]["pids"]["limit"] = json!(DEFAULT_PIDS_LIMIT + 1),
            "pids.limit",
        );
        assert_flags(
            |s| s["linux"]["resources"]["pids"] = json!({}),
            "pids.limit",
        );
    }
}
