//! Installs vibe-shim's tmpfs-modes hook in `hooks.createContainer`, after
//! removing any entry that pretends to be it.
//!
//! runc (1.1 and 1.3) chmods a new tmpfs to the mode of the image directory
//! it covers, whatever `mode=` says, so an image whose `/tmp` is 0755 gives a
//! `/tmp` the policy's user cannot write. The hook sets each policy tmpfs
//! (and the HOME tmpfs) to its mode and owner after runc's mounts and before
//! the container's process exists.
//!
//! Why createContainer: runc runs those hooks in the container's mount
//! namespace after every mount and before pivot_root, still as root with
//! every capability, so the hook reaches the new mounts under the rootfs
//! path without joining a namespace (setns into a mount namespace from the
//! threaded createRuntime hook would need a fork). A hook that fails makes
//! runc's create fail: fail closed.
//!
//! Everything the hook does is in its arguments, which are part of the judged
//! spec: `vibe-shim hook tmpfs-modes <marker> <rootfs> <mode:uid:gid:path>...`.

use serde_json::{json, Value};

use crate::decision::{Denial, Record};
use crate::engine::context::{RuleContext, TMPFS_MODES_HOOK_MARKER};
use crate::lang::json::{array_at, clean_path};
use crate::rules::home::{home_tmpfs, HOME_MODE};
use crate::rules::network_hook::remove_marked;

const RULE: &str = "tmpfs_modes";
/// The hook's name after `vibe-shim hook`.
pub const HOOK_NAME: &str = "tmpfs-modes";
/// runc kills a hook that takes longer (seconds).
const HOOK_TIMEOUT_SECS: u64 = 10;

/// One directory the hook sets: `mode` (permission bits and sticky), owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeEntry {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Absolute and clean, inside the container.
    pub path: String,
}

impl ModeEntry {
    /// `mode:uid:gid:path` (octal mode; the path last, so it may hold ':').
    pub fn to_arg(&self) -> String {
        format!("{:04o}:{}:{}:{}", self.mode, self.uid, self.gid, self.path)
    }

    pub fn parse(arg: &str) -> Result<ModeEntry, String> {
        let bad = || format!("malformed tmpfs-modes entry {arg:?}");
        let mut parts = arg.splitn(4, ':');
        let mut next = || parts.next().ok_or_else(bad);
        let (mode, uid, gid, path) = (next()?, next()?, next()?, next()?);
        let mode = u32::from_str_radix(mode, 8).map_err(|_| bad())?;
        let entry = ModeEntry {
            mode,
            uid: uid.parse().map_err(|_| bad())?,
            gid: gid.parse().map_err(|_| bad())?,
            path: path.to_string(),
        };
        if mode > 0o1777 || clean_path(path) != path || path == "/" {
            return Err(bad());
        }
        Ok(entry)
    }
}

/// The hook's arguments after `<name>`: the marker, the rootfs, the entries.
pub fn parse_hook_args(args: &[String]) -> Result<(String, Vec<ModeEntry>), String> {
    match args {
        [marker, root, entries @ ..] if marker == TMPFS_MODES_HOOK_MARKER => {
            if !root.starts_with('/') {
                return Err(format!("rootfs {root:?} is not absolute"));
            }
            let entries = entries
                .iter()
                .map(|e| ModeEntry::parse(e))
                .collect::<Result<_, _>>()?;
            Ok((root.clone(), entries))
        }
        _ => Err("expected: <marker> <rootfs> <mode:uid:gid:path>...".into()),
    }
}

/// What the hook must set in this spec: each policy tmpfs, root-owned, then
/// HOME's tmpfs (owned by the process user), in mount order.
pub fn entries(spec: &Value, cx: &RuleContext) -> Vec<ModeEntry> {
    let mut out: Vec<ModeEntry> = cx
        .policy
        .filesystem
        .tmpfs
        .iter()
        .map(|entry| ModeEntry {
            mode: entry.mode.0,
            uid: 0,
            gid: 0,
            path: clean_path(&entry.path.to_string_lossy()).into_owned(),
        })
        .collect();
    if let Some((home, uid, gid)) = home_tmpfs(spec, cx.policy) {
        // Ids beyond u32 are refused by the user rule; never wrap.
        if let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) {
            out.push(ModeEntry {
                mode: HOME_MODE,
                uid,
                gid,
                path: clean_path(&home).into_owned(),
            });
        }
    }
    out
}

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some(create) = cx.create else {
        return Ok(());
    };
    // The hook is vibe-shim itself: the binary the network hook entry names
    // (absent only in tests and `policy explain`).
    let Some(exe) = create
        .network_hook
        .as_ref()
        .and_then(|h| h.get("path"))
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Ok(());
    };
    remove_marked(spec, TMPFS_MODES_HOOK_MARKER, RULE, rec);
    let entries = entries(spec, cx);
    if entries.is_empty() {
        return Ok(());
    }
    let root = match spec.pointer("/root/path").and_then(Value::as_str) {
        Some(root) if root.starts_with('/') => root.to_string(),
        other => {
            return Err(Denial::new(
                RULE,
                "/root/path",
                other.unwrap_or(""),
                "the tmpfs modes need an absolute root.path",
            ))
        }
    };
    let mut args = vec![
        "vibe-shim".to_string(),
        "hook".to_string(),
        HOOK_NAME.to_string(),
        TMPFS_MODES_HOOK_MARKER.to_string(),
        root,
    ];
    args.extend(entries.iter().map(ModeEntry::to_arg));
    let entry = json!({"path": exe, "args": args, "timeout": HOOK_TIMEOUT_SECS});
    // remove_marked made `hooks` an object, so this always runs.
    if let Some(hooks) = spec.get_mut("hooks") {
        let list = array_at(hooks, "createContainer");
        list.push(entry.clone());
        rec.change(
            RULE,
            format!("/hooks/createContainer/{}", list.len() - 1),
            Value::Null,
            entry,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{HomeMode, Policy, TmpfsEntry, TmpfsMode};
    use crate::engine::CreateContext;
    use crate::host::FakeHost;

    fn create() -> CreateContext {
        CreateContext {
            container_id: "c1".into(),
            network_hook: Some(json!({"path": "/usr/bin/vibe-shim", "args": []})),
            ..CreateContext::default()
        }
    }

    fn run(spec: &mut Value, policy: &Policy) -> Record {
        let create = create();
        crate::rules::run_rule_with(apply, spec, policy, &FakeHost::new(), Some(&create)).unwrap()
    }

    fn spec(uid: u64) -> Value {
        json!({"root": {"path": "/var/lib/x/rootfs"},
               "process": {"user": {"uid": uid, "gid": uid}, "env": []}})
    }

    #[test]
    fn hook_sets_policy_tmpfs_and_home() {
        let mut spec = spec(1000);
        let rec = run(&mut spec, &Policy::default());
        assert_eq!(
            spec["hooks"]["createContainer"],
            json!([{"path": "/usr/bin/vibe-shim", "timeout": 10, "args": [
                "vibe-shim", "hook", "tmpfs-modes", TMPFS_MODES_HOOK_MARKER,
                "/var/lib/x/rootfs", "1777:0:0:/tmp", "1777:0:0:/run",
                "0700:1000:1000:/home/user"]}])
        );
        assert_eq!(
            rec.changes.last().unwrap().field,
            "/hooks/createContainer/0"
        );
        // Running again replaces ours rather than adding a second one.
        run(&mut spec, &Policy::default());
        assert_eq!(
            spec["hooks"]["createContainer"].as_array().unwrap().len(),
            1
        );
    }

    #[test]
    fn explicit_modes_and_no_home_under_a_policy_tmpfs() {
        let mut policy = Policy::default();
        policy.filesystem.tmpfs = vec![TmpfsEntry {
            path: "/cache/".into(),
            mode: TmpfsMode(0o750),
        }];
        policy.filesystem.home = HomeMode::Image;
        let mut spec = spec(0);
        run(&mut spec, &policy);
        let args = &spec["hooks"]["createContainer"][0]["args"];
        assert_eq!(args.as_array().unwrap()[5..], [json!("0750:0:0:/cache")]);
        // Nothing to set: no hook at all.
        policy.filesystem.tmpfs.clear();
        let mut spec = self::spec(0);
        assert!(run(&mut spec, &policy).changes.is_empty());
        assert_eq!(spec["hooks"], json!({}));
    }

    #[test]
    fn a_forged_entry_is_replaced_and_engine_hooks_stay() {
        let mut spec = spec(0);
        spec["hooks"] = json!({"createContainer": [
            {"path": "/bin/nvidia-ctk", "args": ["nvidia-ctk"]},
            {"path": "/bin/sh", "args": ["sh", TMPFS_MODES_HOOK_MARKER, "/", "1777:0:0:/etc"]}]});
        run(&mut spec, &Policy::default());
        let list = spec["hooks"]["createContainer"].as_array().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0]["path"], "/bin/nvidia-ctk");
        assert_eq!(list[1]["path"], "/usr/bin/vibe-shim");
    }

    #[test]
    fn nothing_without_our_binary_or_outside_create() {
        let mut spec = spec(0);
        let policy = Policy::default();
        let create = CreateContext::default();
        let rec =
            crate::rules::run_rule_with(apply, &mut spec, &policy, &FakeHost::new(), Some(&create))
                .unwrap();
        assert!(rec.changes.is_empty());
        assert!(crate::rules::run_rule(apply, &mut spec, &policy)
            .unwrap()
            .changes
            .is_empty());
        assert!(spec.get("hooks").is_none());
    }

    #[test]
    fn a_relative_root_is_refused() {
        let mut spec = json!({"root": {"path": "rootfs"}});
        let create = create();
        let denial = crate::rules::run_rule_with(
            apply,
            &mut spec,
            &Policy::default(),
            &FakeHost::new(),
            Some(&create),
        )
        .unwrap_err();
        assert_eq!((denial.rule, denial.value.as_str()), (RULE, "rootfs"));
    }

    #[test]
    fn entries_round_trip_and_bad_ones_are_refused() {
        let entry = ModeEntry {
            mode: 0o1777,
            uid: 0,
            gid: 7,
            path: "/a:b".into(),
        };
        assert_eq!(ModeEntry::parse(&entry.to_arg()), Ok(entry));
        for bad in [
            "1777:0:0",
            "1777:0:0:tmp",
            "1777:0:0:/tmp/../etc",
            "1777:0:0:/",
            "4755:0:0:/tmp",
            "17x7:0:0:/tmp",
            "1777:-1:0:/tmp",
        ] {
            assert!(ModeEntry::parse(bad).is_err(), "{bad}");
        }
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(parse_hook_args(&args(&["other", "/r"])).is_err());
        assert!(parse_hook_args(&args(&[TMPFS_MODES_HOOK_MARKER, "r"])).is_err());
        let (root, entries) =
            parse_hook_args(&args(&[TMPFS_MODES_HOOK_MARKER, "/r", "0700:1:2:/h"])).unwrap();
        assert_eq!((root.as_str(), entries.len()), ("/r", 1));
    }
}
