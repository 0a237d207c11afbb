//! Tmpfs mounts. A client's tmpfs (`--tmpfs /x:exec,suid`) is forced
//! nosuid/nodev (exec is kept: it is not an escalation by itself). Each
//! `filesystem.tmpfs` directory gets a fresh private tmpfs, replacing any
//! mount the client put at exactly that place.

use std::borrow::Cow;

use serde_json::{json, Value};

use crate::decision::{Denial, Record};
use crate::engine::RuleContext;
use crate::json::{array_at, clean_path, clean_path_within};
use crate::rules::kernel_mounts::{add_option, destination, edit_options, is_tmpfs, remove_option};

const RULE: &str = "tmpfs";

/// Where a new mount at `dir` goes: after the last mount that covers `dir`
/// (so it is not hidden), and before the first later mount beneath `dir` (so
/// podman's `/run/.containerenv` or a worktree bound under `/tmp` stays
/// visible); otherwise at the end.
pub(crate) fn insert_position(mounts: &[Value], dir: &str) -> usize {
    let dests: Vec<Cow<str>> = mounts.iter().map(destination).collect();
    let start = dests
        .iter()
        .rposition(|dest| dest != dir && clean_path_within(dir, dest))
        .map_or(0, |i| i + 1);
    (start..dests.len())
        .find(|&i| dests[i] != dir && clean_path_within(&dests[i], dir))
        .unwrap_or(mounts.len())
}

/// Removes every mount at exactly `dir` and inserts `mount` in its place in
/// the order (see [`insert_position`]), recording both.
pub(crate) fn replace_mount_at(
    mounts: &mut Vec<Value>,
    dir: &str,
    mount: Value,
    rule: &'static str,
    rec: &mut Record,
) {
    let mut index = 0;
    while index < mounts.len() {
        if destination(&mounts[index]) == dir {
            let removed = mounts.remove(index);
            rec.change(rule, format!("/mounts/{index}"), removed, Value::Null);
        } else {
            index += 1;
        }
    }
    let at = insert_position(mounts, dir);
    mounts.insert(at, mount.clone());
    rec.change(rule, format!("/mounts/{at}"), Value::Null, mount);
}

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let mounts = array_at(spec, "mounts");
    for (index, mount) in mounts.iter_mut().enumerate() {
        let dest = destination(mount);
        // /dev and /dev/shm are kernel mounts (kernel_mounts rule).
        if !is_tmpfs(mount) || dest == "/dev" || dest == "/dev/shm" {
            continue;
        }
        edit_options(mount, index, RULE, rec, |options| {
            add_option(options, "nosuid");
            remove_option(options, "suid");
            add_option(options, "nodev");
            remove_option(options, "dev");
        });
    }
    for dir in &cx.policy.filesystem.tmpfs {
        let dir = clean_path(&dir.to_string_lossy()).into_owned();
        let mount = json!({
            "destination": dir,
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "nodev", "mode=1777"],
        });
        replace_mount_at(mounts, &dir, mount, RULE, rec);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::json::strings;

    fn run(spec: &mut Value, policy: &Policy) -> Record {
        crate::rules::run_rule(apply, spec, policy).unwrap()
    }

    fn destinations(spec: &Value) -> Vec<String> {
        spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn client_tmpfs_loses_suid_and_dev_but_keeps_exec() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-tmpfs-exec.json"
        ))
        .unwrap();
        let rec = run(&mut spec, &Policy::default());
        let x = spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == "/x")
            .unwrap();
        assert_eq!(
            strings(x.get("options")),
            ["nodev", "rprivate", "exec", "nosuid"]
        );
        assert_eq!(rec.changes[0].field, "/mounts/7/options");
    }

    #[test]
    fn policy_tmpfs_dirs_are_appended_to_docker_default() {
        let mut spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-default.json"
        ))
        .unwrap();
        let before = spec["mounts"].as_array().unwrap().len();
        let rec = run(&mut spec, &Policy::default());
        let dests = destinations(&spec);
        assert_eq!(dests.len(), before + 2);
        assert_eq!(&dests[before..], ["/tmp", "/run"]);
        assert_eq!(
            spec["mounts"][before],
            json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                   "options": ["nosuid", "nodev", "mode=1777"]})
        );
        assert_eq!(rec.changes.len(), 2);
        assert_eq!(rec.changes[0].field, format!("/mounts/{before}"));
    }

    #[test]
    fn client_mount_at_policy_dir_is_replaced_and_mounts_beneath_stay_visible() {
        let mut spec = json!({"mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/run/", "type": "tmpfs", "source": "tmpfs", "options": ["exec"]},
            {"destination": "/run/.containerenv", "type": "bind", "source": "/x/.containerenv"},
            {"destination": "/tmp/wt", "type": "bind", "source": "/srv/wt"},
        ]});
        let rec = run(&mut spec, &Policy::default());
        assert_eq!(
            destinations(&spec),
            ["/proc", "/run", "/run/.containerenv", "/tmp", "/tmp/wt"]
        );
        assert_eq!(
            spec["mounts"][1]["options"],
            json!(["nosuid", "nodev", "mode=1777"])
        );
        let removed: Vec<_> = rec.changes.iter().filter(|c| c.after.is_null()).collect();
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].field, "/mounts/1");
    }

    #[test]
    fn new_mount_goes_after_a_later_mount_that_covers_it() {
        let mounts = vec![
            json!({"destination": "/data/cache/x", "type": "tmpfs"}),
            json!({"destination": "/data", "type": "tmpfs"}),
            json!({"destination": "/data/cache/y", "type": "tmpfs"}),
        ];
        assert_eq!(insert_position(&mounts, "/data/cache"), 2);
        assert_eq!(insert_position(&mounts, "/elsewhere"), 3);
        assert_eq!(insert_position(&mounts, "/data/cachex"), 3);
    }

    #[test]
    fn no_mounts_array_gets_one() {
        let mut spec = json!({"ociVersion": "1.0.2"});
        run(&mut spec, &Policy::default());
        assert_eq!(destinations(&spec), ["/tmp", "/run"]);
    }
}
