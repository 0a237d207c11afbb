//! `filesystem.home = "tmpfs"`: with a read-only root the process still needs
//! a writable HOME, so it gets a private tmpfs owned by the process user,
//! mode 0700, of `resources.tmpfs_max` bytes.
//!
//! The HOME directory is the process's `HOME` if that is an absolute path
//! other than `/` and outside `/proc`, `/sys` and `/dev`; otherwise `/root`
//! for uid 0 and `/home/user` for any other uid (Docker 20.10 sets no HOME in
//! the spec, and the image's passwd file is not something a pure policy can
//! read).

use std::path::Path;

use serde_json::{json, Value};

use crate::config::{HomeMode, Policy};
use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
#[cfg(test)] // the tests read lists with it
use crate::lang::json::strings;
use crate::lang::json::{
    array_at, as_object, clean_path, is_string_array, set, str_items, string_array,
};
use crate::rules::kernel_mounts::{destination, is_bind};
use crate::rules::tmpfs::replace_mount_at;

const RULE: &str = "home";

/// Kernel filesystems a HOME tmpfs must never cover.
const KERNEL_DIRS: &[&str] = &["/proc", "/sys", "/dev"];

fn user_id(process: &Value, key: &str) -> u64 {
    process
        .get("user")
        .and_then(|u| u.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// The HOME directory this process gets (see the module docs).
pub(crate) fn home_dir(process: &Value) -> String {
    let requested = str_items(process.get("env")).find_map(|e| e.strip_prefix("HOME="));
    if let Some(home) = requested.filter(|h| h.starts_with('/')) {
        let home = clean_path(home);
        let in_kernel_dir = KERNEL_DIRS
            .iter()
            .any(|k| Path::new(home.as_ref()).starts_with(k));
        if home != "/" && !in_kernel_dir {
            return home.into_owned();
        }
    }
    if user_id(process, "uid") == 0 {
        "/root".to_string()
    } else {
        "/home/user".to_string()
    }
}

/// Sets `HOME` in the process environment (one entry, where the first was).
pub fn apply_process(
    process: &mut Value,
    cx: &RuleContext,
    rec: &mut Record,
) -> Result<(), Denial> {
    if cx.policy.filesystem.home != HomeMode::Tmpfs {
        return Ok(());
    }
    let home = format!("HOME={}", home_dir(process));
    let current = process.get("env");
    let mut env: Vec<&str> = str_items(current).collect();
    match env.iter().position(|e| e.starts_with("HOME=")) {
        Some(first) => {
            env[first] = &home;
            let mut seen = false;
            env.retain(|e| !e.starts_with("HOME=") || !std::mem::replace(&mut seen, true));
        }
        None => env.push(&home),
    }
    if is_string_array(current, &env) {
        return Ok(());
    }
    let after = string_array(&env);
    let before = set(as_object(process), "env", after.clone());
    rec.change(RULE, format!("{}/env", cx.process_field), before, after);
    Ok(())
}

/// The HOME tmpfs's mode (the `tmpfs_modes` hook sets it again after runc).
pub(crate) const HOME_MODE: u32 = 0o700;

/// The HOME tmpfs this spec gets under `policy`, as (directory, uid, gid):
/// `None` when HOME is the image's, lies in a policy tmpfs, or is bound.
pub(crate) fn home_tmpfs(spec: &Value, policy: &Policy) -> Option<(String, u64, u64)> {
    if policy.filesystem.home != HomeMode::Tmpfs {
        return None;
    }
    let process = spec.get("process").unwrap_or(&Value::Null);
    let home = home_dir(process);
    let writable_already =
        policy.filesystem.tmpfs.iter().any(|dir| {
            Path::new(&home).starts_with(clean_path(&dir.path.to_string_lossy()).as_ref())
        });
    let bound = mounts_of(spec).any(|m| is_bind(m) && destination(m) == home);
    if writable_already || bound {
        return None;
    }
    Some((home, user_id(process, "uid"), user_id(process, "gid")))
}

fn mounts_of(spec: &Value) -> impl Iterator<Item = &Value> {
    spec.get("mounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Adds the HOME tmpfs, after the process rules have set HOME and the user.
pub fn apply_mount(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some((home, uid, gid)) = home_tmpfs(spec, cx.policy) else {
        return Ok(());
    };
    let mounts = array_at(spec, "mounts");
    let mount = json!({
        "destination": home,
        "type": "tmpfs",
        "source": "tmpfs",
        "options": [
            "nosuid",
            "nodev",
            format!("mode={HOME_MODE:04o}"),
            format!("uid={uid}"),
            format!("gid={gid}"),
            format!("size={}", cx.policy.resources.tmpfs_max.0),
        ],
    });
    replace_mount_at(mounts, &home, mount, RULE, rec);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::host::FakeHost;

    fn cx<'a>(policy: &'a Policy, host: &'a FakeHost, field: &'a str) -> RuleContext<'a> {
        RuleContext {
            policy,
            host,
            create: None,
            process_field: field,
        }
    }

    /// Runs both halves as the engine does: process first, then the mount.
    fn run_spec(spec: &mut Value, policy: &Policy) -> Record {
        let host = FakeHost::new();
        let cx = cx(policy, &host, "/process");
        let mut rec = Record::default();
        let process = spec.get_mut("process").unwrap();
        apply_process(process, &cx, &mut rec).unwrap();
        apply_mount(spec, &cx, &mut rec).unwrap();
        rec
    }

    fn mount_at<'a>(spec: &'a Value, dest: &str) -> Option<&'a Value> {
        spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == dest)
    }

    #[test]
    fn docker_default_root_gets_home_tmpfs_at_root() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-default.json"
        ))
        .unwrap();
        let rec = run_spec(&mut spec, &Policy::default());
        let env = strings(spec["process"].get("env"));
        assert_eq!(env.last().unwrap(), "HOME=/root");
        let mount = mount_at(&spec, "/root").unwrap();
        assert_eq!(
            mount["options"],
            json!([
                "nosuid",
                "nodev",
                "mode=0700",
                "uid=0",
                "gid=0",
                "size=1073741824"
            ])
        );
        let fields: Vec<_> = rec.changes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["/process/env", "/mounts/10"]);
    }

    #[test]
    fn non_root_user_with_home_set() {
        let mut spec = json!({
            "process": {"user": {"uid": 1000, "gid": 1001},
                        "env": ["HOME=/home/agent/", "PATH=/bin", "HOME=/other"]},
            "mounts": [{"destination": "/home/agent/.cache", "type": "tmpfs", "source": "tmpfs"}],
        });
        run_spec(&mut spec, &Policy::default());
        assert_eq!(
            spec["process"]["env"],
            json!(["HOME=/home/agent", "PATH=/bin"])
        );
        assert_eq!(spec["mounts"][0]["destination"], "/home/agent");
        assert_eq!(
            spec["mounts"][0]["options"],
            json!([
                "nosuid",
                "nodev",
                "mode=0700",
                "uid=1000",
                "gid=1001",
                "size=1073741824"
            ])
        );
    }

    #[test]
    fn unusable_home_falls_back_by_uid() {
        for (home, uid, expected) in [
            ("relative", 0, "/root"),
            ("/", 1000, "/home/user"),
            ("/proc/self/fd/3", 0, "/root"),
            ("/dev", 7, "/home/user"),
        ] {
            let process = json!({"user": {"uid": uid, "gid": 0}, "env": [format!("HOME={home}")]});
            assert_eq!(home_dir(&process), expected, "{home}");
        }
    }

    #[test]
    fn home_under_policy_tmpfs_or_bound_is_left_alone() {
        let mut spec =
            json!({"process": {"user": {"uid": 5}, "env": ["HOME=/tmp/h"]}, "mounts": []});
        let rec = run_spec(&mut spec, &Policy::default());
        assert!(rec.changes.is_empty());
        assert_eq!(spec["mounts"], json!([]));
        let mut spec = json!({"process": {"user": {"uid": 0}, "env": ["HOME=/srv/wt"]},
            "mounts": [{"destination": "/srv/wt", "type": "bind", "source": "/srv/wt", "options": ["bind"]}]});
        run_spec(&mut spec, &Policy::default());
        assert_eq!(spec["mounts"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn client_tmpfs_at_home_is_replaced() {
        let mut spec = json!({"process": {"user": {"uid": 1000, "gid": 1000}, "env": ["HOME=/w"]},
            "mounts": [{"destination": "/w", "type": "tmpfs", "source": "tmpfs", "options": ["mode=0755"]}]});
        run_spec(&mut spec, &Policy::default());
        assert_eq!(spec["mounts"].as_array().unwrap().len(), 1);
        assert_eq!(spec["mounts"][0]["options"][2], "mode=0700");
    }

    #[test]
    fn exec_process_gets_home_with_bare_field() {
        let mut process: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/process-exec-privileged-root-secret.json"
        ))
        .unwrap();
        let policy = Policy::default();
        let host = FakeHost::new();
        let mut rec = Record::default();
        apply_process(&mut process, &cx(&policy, &host, ""), &mut rec).unwrap();
        assert_eq!(rec.changes[0].field, "/env");
        assert!(strings(process.get("env")).contains(&"HOME=/root".to_string()));
    }

    #[test]
    fn image_mode_changes_nothing() {
        let mut policy = Policy::default();
        policy.filesystem.home = HomeMode::Image;
        let mut spec = json!({"process": {"env": []}, "mounts": []});
        assert!(run_spec(&mut spec, &policy).changes.is_empty());
    }
}
