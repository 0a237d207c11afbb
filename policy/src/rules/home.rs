//! `filesystem.home = "tmpfs"`: with a read-only root the process still needs
//! a writable HOME, so it gets a private tmpfs owned by the process user,
//! mode 0700, of `resources.tmpfs_max` bytes.
//!
//! The HOME directory, the first usable of (usable: an absolute path other
//! than `/`, outside `/proc`, `/sys` and `/dev`, no control characters):
//!
//! 1. the image's `/etc/passwd` home for the process's *final* uid (after
//!    the user rule forced `[process] user`), which the shim read inside the
//!    rootfs ([`CreateContext::image_homes`]). It wins over the spec's HOME:
//!    the engines compute that one for the client's user (Docker 28 writes
//!    `HOME=/root` for an image whose user is root), not for the forced one;
//! 2. the process's `HOME` (Docker 20.10 sets none in the spec);
//! 3. `/root` for uid 0, `/home/user` for any other uid.
//!
//! A bind the binds rule kept at that directory is the HOME itself (a
//! persistent per-agent home from an allowed directory): no tmpfs covers it.
//! An exec of the container's uid gets the container's HOME
//! ([`keep_container`]), where the tmpfs is.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::config::{HomeMode, Policy};
use crate::decision::{Change, Denial, Record};
use crate::engine::context::{CreateContext, RuleContext};
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

/// Where a process's HOME directory came from (the notice says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HomeSource {
    /// The image's `/etc/passwd` entry for the process's final uid.
    Passwd,
    /// The HOME in the client's spec.
    Client,
    /// Neither was usable: `/root` for uid 0, `/home/user` otherwise.
    Default,
}

fn user_id(process: &Value, key: &str) -> u64 {
    process
        .get("user")
        .and_then(|u| u.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// `home` cleaned, when a HOME tmpfs may be mounted there.
fn usable(home: &str) -> Option<String> {
    if !home.starts_with('/') || home.chars().any(char::is_control) {
        return None;
    }
    let home = clean_path(home);
    let in_kernel_dir = KERNEL_DIRS
        .iter()
        .any(|k| Path::new(home.as_ref()).starts_with(k));
    (home != "/" && !in_kernel_dir).then(|| home.into_owned())
}

fn env_home(process: &Value) -> Option<&str> {
    str_items(process.get("env")).find_map(|e| e.strip_prefix("HOME="))
}

/// The HOME directory this process gets and why (see the module docs);
/// `image_homes` is `None` where no rootfs was read (an exec).
pub fn choose(
    process: &Value,
    image_homes: Option<&BTreeMap<u32, String>>,
) -> (String, HomeSource) {
    let uid = user_id(process, "uid");
    let from_image = u32::try_from(uid)
        .ok()
        .and_then(|uid| image_homes?.get(&uid))
        .and_then(|home| usable(home));
    if let Some(home) = from_image {
        return (home, HomeSource::Passwd);
    }
    if let Some(home) = env_home(process).and_then(usable) {
        return (home, HomeSource::Client);
    }
    let fallback = if uid == 0 { "/root" } else { "/home/user" };
    (fallback.to_string(), HomeSource::Default)
}

/// The HOME directory of a process the rule has judged (its `HOME` is set).
pub(crate) fn home_dir(process: &Value) -> String {
    choose(process, None).0
}

/// The judged process's HOME and why it is that one, from the create's
/// passwd homes and the changes recorded: a HOME the rule had to write
/// was not the client's.
pub fn explain(
    judged_process: &Value,
    create: &CreateContext,
    changes: &[Change],
) -> (String, HomeSource) {
    let (home, source) = choose(judged_process, Some(&create.image_homes));
    if source != HomeSource::Client {
        return (home, source);
    }
    let entry = format!("HOME={home}");
    let rewritten = changes
        .iter()
        .find(|c| c.rule == RULE && c.field.ends_with("/env"));
    let client_had_it = rewritten.is_none_or(|c| {
        c.before
            .as_array()
            .is_some_and(|env| env.iter().any(|e| e.as_str() == Some(&entry)))
    });
    match client_had_it {
        true => (home, HomeSource::Client),
        false => (home, HomeSource::Default),
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
    let (home, _) = choose(process, cx.create.map(|c| &c.image_homes));
    set_home(process, &home, format!("{}/env", cx.process_field), rec);
    Ok(())
}

/// An exec (after the process rules): a process of the container's uid
/// gets the container's judged HOME, where its HOME tmpfs is mounted; the
/// engines compute an exec's HOME for the client's user again.
pub fn keep_container(
    process: &mut Value,
    container_process: &Value,
    policy: &Policy,
    rec: &mut Record,
) {
    if policy.filesystem.home != HomeMode::Tmpfs
        || user_id(process, "uid") != user_id(container_process, "uid")
    {
        return;
    }
    if let Some(home) = env_home(container_process).and_then(usable) {
        set_home(process, &home, "/env".to_string(), rec);
    }
}

/// `HOME=<home>` as the one HOME entry, where the first one was.
fn set_home(process: &mut Value, home: &str, field: String, rec: &mut Record) {
    let home = format!("HOME={home}");
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
        return;
    }
    let after = string_array(&env);
    let before = set(as_object(process), "env", after.clone());
    rec.change(RULE, field, before, after);
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

    /// Both halves with the create's passwd homes.
    fn run_with_homes(spec: &mut Value, homes: &[(u32, &str)]) -> Record {
        let policy = Policy::default();
        let host = FakeHost::new();
        let create = CreateContext {
            image_homes: homes.iter().map(|(u, h)| (*u, h.to_string())).collect(),
            ..CreateContext::default()
        };
        let cx = RuleContext {
            create: Some(&create),
            ..cx(&policy, &host, "/process")
        };
        let mut rec = Record::default();
        apply_process(spec.get_mut("process").unwrap(), &cx, &mut rec).unwrap();
        apply_mount(spec, &cx, &mut rec).unwrap();
        rec
    }

    #[test]
    fn passwd_home_of_the_final_uid_wins_over_the_engines_home() {
        // Docker 28: HOME computed for the client's root user.
        let mut spec = json!({
            "process": {"user": {"uid": 1000, "gid": 1000}, "env": ["PATH=/bin", "HOME=/root"]},
            "mounts": [],
        });
        run_with_homes(&mut spec, &[(0, "/root"), (1000, "/home/agent/")]);
        assert_eq!(
            spec["process"]["env"],
            json!(["PATH=/bin", "HOME=/home/agent"])
        );
        assert_eq!(spec["mounts"][0]["destination"], "/home/agent");
        assert_eq!(spec["mounts"][0]["options"][3], "uid=1000");
        // Docker 20.10: no HOME in the spec at all.
        let mut spec =
            json!({"process": {"user": {"uid": 1000, "gid": 1000}, "env": ["PATH=/bin"]}});
        run_with_homes(&mut spec, &[(1000, "/home/agent")]);
        assert_eq!(
            spec["process"]["env"],
            json!(["PATH=/bin", "HOME=/home/agent"])
        );
    }

    #[test]
    fn an_unusable_passwd_home_falls_back_to_the_client_then_the_default() {
        for bad in [
            "/",
            "relative",
            "/proc/1/root",
            "/sys/x",
            "/dev",
            "/a\u{7}b",
            "",
        ] {
            let mut spec = json!({"process": {"user": {"uid": 1000}, "env": ["HOME=/work"]}});
            run_with_homes(&mut spec, &[(1000, bad)]);
            assert_eq!(spec["process"]["env"], json!(["HOME=/work"]), "{bad:?}");
            let mut spec = json!({"process": {"user": {"uid": 1000}, "env": []}});
            run_with_homes(&mut spec, &[(1000, bad)]);
            assert_eq!(
                spec["process"]["env"],
                json!(["HOME=/home/user"]),
                "{bad:?}"
            );
        }
        // Another uid's entry is not this process's.
        let mut spec = json!({"process": {"user": {"uid": 1000}, "env": []}});
        run_with_homes(&mut spec, &[(1001, "/home/other")]);
        assert_eq!(spec["process"]["env"], json!(["HOME=/home/user"]));
    }

    #[test]
    fn a_bind_at_the_passwd_home_is_kept_as_the_persistent_home() {
        let mut spec = json!({
            "process": {"user": {"uid": 1000, "gid": 1000}, "env": []},
            "mounts": [{"destination": "/home/agent", "type": "bind",
                        "source": "/srv/homes/a1", "options": ["bind", "rw"]}],
        });
        run_with_homes(&mut spec, &[(1000, "/home/agent")]);
        assert_eq!(spec["process"]["env"], json!(["HOME=/home/agent"]));
        let mounts = spec["mounts"].as_array().unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0]["type"], "bind");
    }

    #[test]
    fn an_exec_of_the_containers_uid_gets_the_containers_home() {
        let container = json!({"user": {"uid": 1000}, "env": ["HOME=/home/agent"]});
        let mut rec = Record::default();
        let mut exec = json!({"user": {"uid": 1000}, "env": ["HOME=/root", "A=1"]});
        keep_container(&mut exec, &container, &Policy::default(), &mut rec);
        assert_eq!(exec["env"], json!(["HOME=/home/agent", "A=1"]));
        assert_eq!(rec.changes[0].field, "/env");
        // Another uid keeps its own.
        let mut exec = json!({"user": {"uid": 0}, "env": ["HOME=/root"]});
        keep_container(&mut exec, &container, &Policy::default(), &mut rec);
        assert_eq!(exec["env"], json!(["HOME=/root"]));
    }

    #[test]
    fn image_mode_changes_nothing() {
        let mut policy = Policy::default();
        policy.filesystem.home = HomeMode::Image;
        let mut spec = json!({"process": {"env": []}, "mounts": []});
        assert!(run_spec(&mut spec, &policy).changes.is_empty());
    }
}
