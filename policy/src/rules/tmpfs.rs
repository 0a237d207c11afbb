//! Tmpfs mounts. A client's tmpfs (`--tmpfs /x:exec,suid`) is forced
//! nosuid/nodev (exec is kept: it is not an escalation by itself). Each
//! `filesystem.tmpfs` directory gets a fresh private tmpfs, replacing any
//! mount the client put at exactly that place.
//!
//! Every tmpfs (the client's, `/dev`, `/dev/shm`, the policy's, HOME) is at
//! most `resources.tmpfs_max`: tmpfs pages are RAM that killing the
//! container's processes does not free. A size the rule cannot read is
//! refused; one it changes is written as plain bytes, so the kernel reads
//! exactly what was judged. A bind at `/dev/shm` (a host tmpfs the engine
//! sized) becomes a private tmpfs of `tmpfs_max`.
//!
//! Modes: each `filesystem.tmpfs` directory gets its entry's mode
//! (`mode=`, 1777 unless the entry says otherwise), root-owned. runc copies
//! the image directory's mode onto a tmpfs after mounting it, whatever
//! `mode=` says; the `tmpfs_modes` rule's hook sets the mode again after
//! runc's mounts.

use std::borrow::Cow;

use serde_json::{json, Value};

use crate::config::parse_size;
use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::{array_at, as_object, clean_path, clean_path_within, set, str_items};
use crate::rules::kernel_mounts::{
    add_option, destination, edit_options, is_bind, is_tmpfs, remove_option,
};

const RULE: &str = "tmpfs";
/// The page size `nr_blocks=` counts in (x86-64, arm64 with 4K pages).
const PAGE_SIZE: u64 = 4096;

/// The bytes a tmpfs `size=` or `nr_blocks=` value asks for; `None` when
/// unbounded (`0`). `Err` when it cannot be read. `N%` is of the host's RAM,
/// and unknown RAM counts as unbounded (so it gets the ceiling).
pub fn requested_size(option: &str, ram: Option<u64>) -> Result<Option<u64>, String> {
    let bad = || format!("cannot read tmpfs option {option:?}");
    let bytes = if let Some(value) = option.strip_prefix("size=") {
        match value.strip_suffix('%') {
            Some(percent) => {
                let percent: u64 = percent.parse().map_err(|_| bad())?;
                ram.map(|ram| (ram as u128 * percent as u128 / 100).min(u64::MAX as u128) as u64)
            }
            None => Some(parse_size(value).ok_or_else(bad)?),
        }
    } else if let Some(blocks) = option.strip_prefix("nr_blocks=") {
        let blocks = parse_size(blocks).ok_or_else(bad)?;
        Some(blocks.saturating_mul(PAGE_SIZE))
    } else {
        return Err(bad());
    };
    Ok(bytes.filter(|b| *b > 0))
}

fn is_size_option(option: &str) -> bool {
    option.starts_with("size=") || option.starts_with("nr_blocks=")
}

/// The mount's options with one `size=` at most `max`: the last size
/// option wins, as in the kernel. A size already within `max` and written
/// in decimal is kept as written.
pub(crate) fn clamped_options(
    mount: &Value,
    field: &str,
    max: u64,
    ram: Option<u64>,
) -> Result<Vec<String>, Denial> {
    let options: Vec<&str> = str_items(mount.get("options")).collect();
    let mut requested = None;
    let mut last = None;
    for option in options.iter().filter(|o| is_size_option(o)) {
        requested =
            requested_size(option, ram).map_err(|why| Denial::new(RULE, field, *option, why))?;
        last = Some(*option);
    }
    let decimal = last.is_some_and(|o| {
        o.strip_prefix("size=")
            .is_some_and(|v| !v.starts_with('0') && parse_size(v).is_some())
    });
    let size = match requested {
        Some(bytes) if bytes <= max && decimal => last.map(str::to_string),
        Some(bytes) => Some(format!("size={}", bytes.min(max))),
        None => Some(format!("size={max}")),
    };
    let mut out: Vec<String> = options
        .iter()
        .filter(|o| !is_size_option(o))
        .map(|o| o.to_string())
        .collect();
    out.extend(size);
    Ok(out)
}

/// Every tmpfs at most `tmpfs_max`; a bind at /dev/shm becomes a tmpfs.
fn clamp_sizes(mounts: &mut Vec<Value>, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let max = cx.policy.resources.tmpfs_max.0;
    let ram = cx.host.memory_total();
    if mounts
        .iter()
        .any(|m| destination(m) == "/dev/shm" && is_bind(m))
    {
        let shm = json!({
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": ["nosuid", "noexec", "nodev", "mode=1777", format!("size={max}")],
        });
        replace_mount_at(mounts, "/dev/shm", shm, RULE, rec);
    }
    for (index, mount) in mounts.iter_mut().enumerate() {
        if !is_tmpfs(mount) {
            continue;
        }
        let field = format!("/mounts/{index}/options");
        let after = clamped_options(mount, &field, max, ram)?;
        let unchanged = mount
            .get("options")
            .and_then(Value::as_array)
            .is_some_and(|o| {
                o.len() == after.len() && o.iter().zip(&after).all(|(a, b)| a.as_str() == Some(b))
            });
        if !unchanged {
            let after = Value::from(after);
            let before = set(as_object(mount), "options", after.clone());
            rec.change(RULE, field, before, after);
        }
    }
    Ok(())
}

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
    clamp_sizes(mounts, cx, rec)?;
    for entry in &cx.policy.filesystem.tmpfs {
        let dir = clean_path(&entry.path.to_string_lossy()).into_owned();
        let options = vec![
            "nosuid".to_string(),
            "nodev".to_string(),
            format!("mode={}", entry.mode),
            format!("size={}", cx.policy.resources.tmpfs_max.0),
        ];
        let mount = json!({
            "destination": dir,
            "type": "tmpfs",
            "source": "tmpfs",
            "options": options,
        });
        replace_mount_at(mounts, &dir, mount, RULE, rec);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::lang::json::strings;
    use crate::rules::options_at;

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
            ["nodev", "rprivate", "exec", "nosuid", "size=1073741824"]
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
                   "options": ["nosuid", "nodev", "mode=1777", "size=1073741824"]})
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
            json!(["nosuid", "nodev", "mode=1777", "size=1073741824"])
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

    fn small_policy() -> Policy {
        let mut policy = Policy::default();
        policy.resources.tmpfs_max = crate::config::ByteSize(16 << 20);
        policy
    }

    #[test]
    fn every_tmpfs_size_is_clamped() {
        let mut spec = json!({"mounts": [
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "size=64g"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=68719476736"]},
            {"destination": "/big", "type": "tmpfs", "source": "tmpfs", "options": ["size=1m", "size=0"]},
            {"destination": "/small", "type": "tmpfs", "source": "tmpfs", "options": ["size=1m"]},
            {"destination": "/blocks", "type": "tmpfs", "source": "tmpfs", "options": ["nr_blocks=1000000"]},
            {"destination": "/octal", "type": "tmpfs", "source": "tmpfs", "options": ["size=010m"]},
            {"destination": "/none", "type": "tmpfs", "source": "tmpfs"},
        ]});
        run(&mut spec, &small_policy());
        let max = format!("size={}", 16 << 20);
        assert_eq!(options_at(&spec, "/dev"), ["nosuid", &max]);
        assert_eq!(
            options_at(&spec, "/dev/shm"),
            ["nosuid", "noexec", "nodev", "mode=1777", &max]
        );
        assert_eq!(options_at(&spec, "/big"), ["nosuid", "nodev", &max]);
        assert_eq!(options_at(&spec, "/small"), ["nosuid", "nodev", "size=1m"]);
        assert_eq!(options_at(&spec, "/blocks"), ["nosuid", "nodev", &max]);
        assert_eq!(
            options_at(&spec, "/octal"),
            ["nosuid", "nodev", "size=10485760"]
        );
        assert_eq!(options_at(&spec, "/none"), ["nosuid", "nodev", &max]);
        assert_eq!(
            options_at(&spec, "/tmp"),
            ["nosuid", "nodev", "mode=1777", &max]
        );
    }

    #[test]
    fn percent_sizes_use_host_ram_and_bad_sizes_are_refused() {
        assert_eq!(requested_size("size=50%", Some(1000)), Ok(Some(500)));
        assert_eq!(requested_size("size=50%", None), Ok(None));
        assert_eq!(requested_size("size=0", None), Ok(None));
        assert_eq!(requested_size("nr_blocks=2", None), Ok(Some(8192)));
        for bad in [
            "size=0x10",
            "size=1.5g",
            "size=lots",
            "size=%",
            "size=-1",
            "nr_blocks=x",
        ] {
            assert!(requested_size(bad, None).is_err(), "{bad}");
            let mut spec =
                json!({"mounts": [{"destination": "/x", "type": "tmpfs", "options": [bad]}]});
            let denial = crate::rules::run_rule(apply, &mut spec, &Policy::default()).unwrap_err();
            assert_eq!((denial.rule, denial.value.as_str()), (RULE, bad));
        }
        let host = crate::FakeHost {
            memory_total: Some(1 << 30),
            ..crate::FakeHost::new()
        };
        let policy = small_policy();
        let cx = RuleContext {
            policy: &policy,
            host: &host,
            create: None,
            process_field: "",
        };
        let mut spec = json!({"mounts": [
            {"destination": "/a", "type": "tmpfs", "options": ["size=1%"]},
            {"destination": "/b", "type": "tmpfs", "options": ["size=50%"]}]});
        apply(&mut spec, &cx, &mut Record::default()).unwrap();
        assert_eq!(
            options_at(&spec, "/a").last().unwrap(),
            &format!("size={}", (1u64 << 30) / 100)
        );
        assert_eq!(
            options_at(&spec, "/b").last().unwrap(),
            &format!("size={}", 16 << 20)
        );
    }

    #[test]
    fn shm_bind_becomes_a_private_tmpfs() {
        let mut spec = json!({"mounts": [
            {"destination": "/dev/shm", "type": "bind", "source": "/var/lib/docker/containers/x/mounts/shm",
             "options": ["rbind", "rprivate"]}]});
        run(&mut spec, &small_policy());
        let shm = &spec["mounts"][0];
        assert_eq!(shm["type"], "tmpfs");
        assert_eq!(
            strings(shm.get("options")),
            [
                "nosuid",
                "noexec",
                "nodev",
                "mode=1777",
                &format!("size={}", 16 << 20)
            ]
        );
    }

    #[test]
    fn policy_tmpfs_is_root_owned_with_the_entry_mode() {
        let mut spec = json!({"process": {"user": {"uid": 1000, "gid": 1001}}});
        let mut policy = Policy::default();
        policy.filesystem.tmpfs = vec![
            crate::config::TmpfsEntry::new("/tmp"),
            crate::config::TmpfsEntry {
                path: "/cache/".into(),
                mode: crate::config::TmpfsMode(0o700),
            },
        ];
        run(&mut spec, &policy);
        // No uid=/gid=: the user writes /tmp through its mode, not ownership.
        assert_eq!(
            options_at(&spec, "/tmp"),
            ["nosuid", "nodev", "mode=1777", "size=1073741824"]
        );
        assert_eq!(
            options_at(&spec, "/cache"),
            ["nosuid", "nodev", "mode=0700", "size=1073741824"]
        );
    }

    #[test]
    fn no_mounts_array_gets_one() {
        let mut spec = json!({"ociVersion": "1.0.2"});
        run(&mut spec, &Policy::default());
        assert_eq!(destinations(&spec), ["/tmp", "/run"]);
    }
}
