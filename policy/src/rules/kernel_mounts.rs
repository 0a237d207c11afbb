//! The standard kernel filesystems (proc, sysfs, cgroup, mqueue, devpts and
//! the tmpfs at `/dev` and `/dev/shm`) are kept but forced `nosuid`/`nodev`,
//! and `/sys` and cgroup read-only, so `--privileged` cannot hand out a
//! writable sysfs. Any other filesystem type is refused: runc mounts as host
//! root, so a mount of type `ext4` with source `/dev/vda1` would bring the
//! host disk in without ever being a bind.
//!
//! Each kernel filesystem is allowed once, at its standard destination
//! only: `maskedPaths`/`readonlyPaths` name `/proc/...` and `/sys/...`, so a
//! second proc at `/x` would show `/x/kcore` and a writable `/x/sys`.
//!
//! Also home to the small mount-option helpers the other mount rules share.

use std::borrow::Cow;

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::{
    as_object, clean_path, field, is_string_array, set, str_field, str_items, string_array,
};

const RULE: &str = "kernel_mounts";

/// Kernel filesystem types kept in every container.
const KERNEL_TYPES: &[&str] = &["proc", "sysfs", "cgroup", "cgroup2", "mqueue", "devpts"];
/// Types forced read-only: a writable sysfs or cgroupfs reaches the host.
const READ_ONLY_TYPES: &[&str] = &["sysfs", "cgroup", "cgroup2"];

/// The one destination of each kernel filesystem (cgroup and cgroup2 share).
fn standard_destination(kind: &str) -> Option<&'static str> {
    match kind {
        "proc" => Some("/proc"),
        "sysfs" => Some("/sys"),
        "cgroup" | "cgroup2" => Some("/sys/fs/cgroup"),
        "mqueue" => Some("/dev/mqueue"),
        "devpts" => Some("/dev/pts"),
        _ => None,
    }
}

/// Whether runc bind-mounts this entry: type `bind`, or a `bind`/`rbind`
/// option (runc honours the option whatever the type says).
pub(crate) fn is_bind(mount: &Value) -> bool {
    str_field(mount, "type") == "bind"
        || str_items(field(mount, "options")).any(|o| o == "bind" || o == "rbind")
}

/// A tmpfs that is not really a bind in disguise.
pub(crate) fn is_tmpfs(mount: &Value) -> bool {
    str_field(mount, "type") == "tmpfs" && !is_bind(mount)
}

/// The mount's destination, lexically cleaned.
pub(crate) fn destination(mount: &Value) -> Cow<'_, str> {
    clean_path(str_field(mount, "destination"))
}

/// Adds `option` unless present.
pub(crate) fn add_option<'a>(options: &mut Vec<&'a str>, option: &'a str) {
    if !options.contains(&option) {
        options.push(option);
    }
}

/// Removes every occurrence of `option`.
pub(crate) fn remove_option(options: &mut Vec<&str>, option: &str) {
    options.retain(|o| *o != option);
}

/// Edits `mounts[index].options` in place and records the change. The edit
/// works on borrowed strings, so a mount that needs no change costs no copy.
pub(crate) fn edit_options(
    mount: &mut Value,
    index: usize,
    rule: &'static str,
    rec: &mut Record,
    edit: impl FnOnce(&mut Vec<&str>),
) {
    let current = field(mount, "options");
    let mut options: Vec<&str> = str_items(current).collect();
    edit(&mut options);
    let absent = current.is_none_or(Value::is_null);
    if (absent && options.is_empty()) || is_string_array(current, &options) {
        return;
    }
    let after = string_array(&options);
    let before = set(as_object(mount), "options", after.clone());
    rec.change(rule, format!("/mounts/{index}/options"), before, after);
}

/// `spec.mounts`, if present as an array.
pub(crate) fn mounts_mut(spec: &mut Value) -> Option<&mut Vec<Value>> {
    spec.get_mut("mounts").and_then(Value::as_array_mut)
}

/// Removes every mount at `dest` (a client's, an earlier create's): what
/// vibe-shim puts there is its own word. Recorded under `rule`.
pub(crate) fn remove_mounts_at(spec: &mut Value, dest: &str, rule: &'static str, rec: &mut Record) {
    let Some(mounts) = mounts_mut(spec) else {
        return;
    };
    let mut index = 0;
    mounts.retain(|mount| {
        let at = destination(mount) == dest;
        if at {
            rec.change(rule, format!("/mounts/{index}"), mount.clone(), Value::Null);
        } else {
            index += 1;
        }
        !at
    });
}

/// Appends a bind of `source` at `destination` with `options`, recorded
/// under `rule`.
pub(crate) fn push_bind(
    spec: &mut Value,
    rule: &'static str,
    destination: &str,
    source: &str,
    options: &[&str],
    rec: &mut Record,
) {
    let mount = serde_json::json!({
        "destination": destination,
        "type": "bind",
        "source": source,
        "options": options,
    });
    let mounts = crate::lang::json::array_at(spec, "mounts");
    rec.change(
        rule,
        format!("/mounts/{}", mounts.len()),
        Value::Null,
        mount.clone(),
    );
    mounts.push(mount);
}

pub fn apply(spec: &mut Value, _cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some(mounts) = mounts_mut(spec) else {
        return Ok(());
    };
    let mut seen: Vec<&'static str> = Vec::new();
    for (index, mount) in mounts.iter_mut().enumerate() {
        if is_bind(mount) {
            continue; // judged by the binds rule
        }
        let kind = str_field(mount, "type");
        let dest = destination(mount);
        let is_dev_tmpfs = kind == "tmpfs" && (dest == "/dev" || dest == "/dev/shm");
        if kind == "tmpfs" && !is_dev_tmpfs {
            continue; // a client tmpfs: the tmpfs rule
        }
        if !is_dev_tmpfs && !KERNEL_TYPES.contains(&kind) {
            return Err(Denial::new(
                RULE,
                format!("/mounts/{index}/type"),
                format!("{kind} at {dest}"),
                "mount type is not allowed: only binds (judged by filesystem.bind), tmpfs \
                 and the standard kernel filesystems",
            ));
        }
        if let Some(standard) = standard_destination(kind) {
            let refuse = |reason: &str| {
                Err(Denial::new(
                    RULE,
                    format!("/mounts/{index}/destination"),
                    format!("{kind} at {dest}"),
                    reason,
                ))
            };
            if dest != standard {
                return refuse(&format!(
                    "{kind} is only mounted at {standard}, where the masked and read-only \
                     paths apply"
                ));
            }
            if seen.contains(&standard) {
                return refuse(&format!("a second {kind} mount at {standard}"));
            }
            seen.push(standard);
        }
        // Device nodes live on the /dev tmpfs and on devpts (the pty slaves),
        // so those two keep device semantics; everything else is nodev.
        let needs_dev = (kind == "tmpfs" && dest == "/dev") || kind == "devpts";
        let read_only = READ_ONLY_TYPES.contains(&kind);
        edit_options(mount, index, RULE, rec, |options| {
            add_option(options, "nosuid");
            remove_option(options, "suid");
            if !needs_dev {
                add_option(options, "nodev");
                remove_option(options, "dev");
            }
            if read_only {
                remove_option(options, "rw");
                add_option(options, "ro");
            }
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::rules::options_at;
    use serde_json::json;

    fn run(spec: &mut Value) -> Result<Record, Denial> {
        crate::rules::run_rule(apply, spec, &Policy::default())
    }

    #[test]
    fn privileged_sysfs_and_cgroup_become_read_only() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-privileged.json"
        ))
        .unwrap();
        let rec = run(&mut spec).unwrap();
        assert!(options_at(&spec, "/sys").contains(&"ro".to_string()));
        assert!(options_at(&spec, "/sys/fs/cgroup").contains(&"ro".to_string()));
        let fields: Vec<_> = rec.changes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["/mounts/3/options", "/mounts/4/options"]);
    }

    #[test]
    fn default_docker_mounts_already_comply() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-default.json"
        ))
        .unwrap();
        let rec = run(&mut spec).unwrap();
        assert_eq!(rec.changes, vec![]);
    }

    #[test]
    fn dev_and_devpts_keep_device_semantics() {
        let mut spec = json!({"mounts": [
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["suid", "dev"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["dev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["rw"]},
            {"destination": "/proc", "type": "proc", "source": "proc"},
        ]});
        run(&mut spec).unwrap();
        assert_eq!(options_at(&spec, "/dev"), ["dev", "nosuid"]);
        assert_eq!(options_at(&spec, "/dev/pts"), ["nosuid"]);
        assert_eq!(options_at(&spec, "/dev/shm"), ["nosuid", "nodev"]);
        assert_eq!(options_at(&spec, "/sys"), ["nosuid", "nodev", "ro"]);
        assert_eq!(options_at(&spec, "/proc"), ["nosuid", "nodev"]);
    }

    #[test]
    fn kernel_filesystems_only_once_and_only_at_home() {
        for (kind, dest) in [
            ("proc", "/x"),
            ("proc", "/proc/1"),
            ("proc", "/"),
            ("sysfs", "/x"),
            ("sysfs", "/sys/fs"),
            ("cgroup", "/x"),
            ("cgroup2", "/sys"),
            ("mqueue", "/x"),
            ("devpts", "/dev/pts2"),
        ] {
            let mut spec = json!({"mounts": [
                {"destination": dest, "type": kind, "source": kind},
            ]});
            let denial = run(&mut spec).unwrap_err();
            assert_eq!(denial.field, "/mounts/0/destination");
            assert_eq!(denial.value, format!("{kind} at {dest}"));
        }
        for (first, second) in [("proc", "proc"), ("cgroup", "cgroup2"), ("sysfs", "sysfs")] {
            let dest = standard_destination(first).unwrap();
            let mut spec = json!({"mounts": [
                {"destination": dest, "type": first, "source": first},
                {"destination": format!("{dest}/"), "type": second, "source": second},
            ]});
            let denial = run(&mut spec).unwrap_err();
            assert_eq!(denial.field, "/mounts/1/destination");
            assert!(denial.reason.contains("second"), "{denial}");
        }
        // Unclean spellings of the standard place are the standard place.
        let mut spec = json!({"mounts": [
            {"destination": "//proc/.", "type": "proc", "source": "proc"},
        ]});
        assert!(run(&mut spec).is_ok());
    }

    #[test]
    fn block_device_filesystem_is_refused() {
        let mut spec = json!({"mounts": [
            {"destination": "/x", "type": "ext4", "source": "/dev/vda1"},
        ]});
        let denial = run(&mut spec).unwrap_err();
        assert_eq!(denial.rule, RULE);
        assert_eq!(denial.field, "/mounts/0/type");
        assert!(denial.value.contains("ext4"), "{denial}");
    }

    #[test]
    fn binds_and_client_tmpfs_are_left_to_their_rules() {
        let mut spec = json!({"mounts": [
            {"destination": "/x", "type": "none", "source": "/srv", "options": ["rbind"]},
            {"destination": "/t", "type": "tmpfs", "source": "tmpfs", "options": ["suid"]},
        ]});
        let rec = run(&mut spec).unwrap();
        assert!(rec.changes.is_empty());
    }
}
