//! `[userns] mode = "private"`: the container gets a user namespace of its
//! own, with container ids 0-65535 mapped onto the block the shim allocated
//! for it ([`IdBlock`]), so no two containers, and no container and host
//! account, share a host id (their per-uid kernel budgets, `/proc/<pid>`
//! access, the owner a kernel escape lands as).
//!
//! A read-write `filesystem.bind` subtree is id-mapped for the container's
//! user: its host owner (uid O, gid G) appears as the process's uid and gid,
//! and what the process creates there is owned by O:G on the host. Every
//! other id there has no mapping: the kernel refuses to create a file as
//! one (EOVERFLOW), so container root cannot write the worktree at all.
//!
//! The client never brings its own: a `user` namespace entry, a path to
//! join and any mapping are refused by [`super::namespaces`] before this
//! rule runs, in every mode. A host whose runc cannot id-map a bind mount
//! (runc < 1.2, no `mountExtensions.idmap` in `runc features`) or whose
//! kernel or filesystem cannot is refused with what is missing, unless the
//! policy says `unsupported = "run-without"`.

use std::path::Path;

use serde_json::{json, Value};

use crate::config::{userns_range, UsernsMode, UsernsSection, UsernsUnsupported, USERNS_BLOCK};
use crate::decision::{Denial, Record};
use crate::engine::context::{IdBlock, RuleContext};
use crate::host::HostView;
use crate::lang::json::str_field;
use crate::rules::host_ids::{read_only, WRITABLE_BINDS_ANNOTATION};
use crate::rules::kernel_mounts::{destination, is_bind};

pub const RULE: &str = "userns";
/// The name whose line in /etc/subuid and /etc/subgid reserves the range.
pub const SUBID_NAME: &str = "vibe-shim";
/// Id-mapped mounts (`mount_setattr(MOUNT_ATTR_IDMAP)`).
const KERNEL_IDMAP: (u32, u32) = (5, 12);
/// Filesystems the kernel can id-map, and since which release.
const IDMAP_FILESYSTEMS: &[(&str, (u32, u32))] = &[
    ("ext4", (5, 12)),
    ("xfs", (5, 12)),
    ("vfat", (5, 12)),
    ("btrfs", (5, 15)),
    ("ntfs3", (5, 15)),
    ("f2fs", (5, 18)),
    ("erofs", (5, 19)),
    ("tmpfs", (6, 3)),
];

/// The reserved range: a start and a size, both multiples of 65,536.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pub start: u32,
    pub size: u32,
}

impl IdRange {
    /// How many private blocks the range holds.
    pub fn blocks(&self) -> u32 {
        self.size / USERNS_BLOCK
    }
}

/// The uid and gid ranges blocks come from: the policy's own, else the
/// `vibe-shim:` lines of /etc/subuid and /etc/subgid (their text given).
pub fn ranges(
    section: &UsernsSection,
    subuid: Option<&str>,
    subgid: Option<&str>,
) -> Result<(IdRange, IdRange), String> {
    if let (Some(start), Some(size)) = (section.range_start, section.range_size) {
        userns_range(start, size)?;
        let range = IdRange { start, size };
        return Ok((range, range));
    }
    let uids = subid_range(subuid.unwrap_or_default(), "/etc/subuid")?;
    let gids = subid_range(subgid.unwrap_or_default(), "/etc/subgid")?;
    Ok((uids, gids))
}

/// The one `vibe-shim:START:COUNT` line of a subid file, checked against
/// the reserved ids and every other line (no one else's range overlaps).
pub fn subid_range(text: &str, file: &str) -> Result<IdRange, String> {
    let mut ours = None;
    let mut others = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split(':');
        let (Some(name), Some(start), Some(count), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            if line.starts_with("vibe-shim:") {
                return Err(format!("{file}: malformed line {line:?}"));
            }
            continue;
        };
        let (Ok(start), Ok(count)) = (start.parse::<u64>(), count.parse::<u64>()) else {
            if name == SUBID_NAME {
                return Err(format!("{file}: malformed line {line:?}"));
            }
            continue;
        };
        if name == SUBID_NAME {
            if ours.is_some() {
                return Err(format!("{file}: more than one {SUBID_NAME}: line"));
            }
            ours = Some((start, count));
        } else {
            others.push((name.to_string(), start, count));
        }
    }
    let Some((start, count)) = ours else {
        return Err(format!(
            "{file} has no {SUBID_NAME}: line (and [userns] range_start is not set)"
        ));
    };
    let (Ok(start32), Ok(size32)) = (u32::try_from(start), u32::try_from(count)) else {
        return Err(format!("{file}: {start}:{count} is beyond 32-bit ids"));
    };
    userns_range(start32, size32).map_err(|e| format!("{file}: {e}"))?;
    for (name, other, other_count) in others {
        if other < start + count && start < other + other_count {
            return Err(format!(
                "{file}: {SUBID_NAME}'s {start}:{count} overlaps {name}'s {other}:{other_count}"
            ));
        }
    }
    Ok(IdRange {
        start: start32,
        size: size32,
    })
}

/// Block `index` of the ranges: the host ids container 0 maps to.
pub fn block(uids: IdRange, gids: IdRange, index: u32) -> Option<IdBlock> {
    if index >= uids.blocks().min(gids.blocks()) {
        return None;
    }
    Some(IdBlock {
        uid: uids.start + index * USERNS_BLOCK,
        gid: gids.start + index * USERNS_BLOCK,
    })
}

/// What this host lacks for private user namespaces with `runtime`, or
/// `None` when it has it all. The shim asks before allocating a block.
pub fn missing_support(host: &dyn HostView, runtime: &Path) -> Option<String> {
    let mut missing = Vec::new();
    match host.runtime_features(runtime) {
        None => missing.push(format!(
            "{} reports no features (`runc features`; runc >= 1.2 is needed)",
            runtime.display()
        )),
        Some(features) => {
            if !features.user_namespaces {
                missing.push(format!("{} has no user namespaces", runtime.display()));
            }
            if !features.idmap_mounts {
                missing.push(format!(
                    "{} cannot id-map bind mounts (no linux.mountExtensions.idmap in \
                     `runc features`; runc >= 1.2 is needed)",
                    runtime.display()
                ));
            }
        }
    }
    match host.kernel_release() {
        Some(release) if release >= KERNEL_IDMAP => {}
        Some((major, minor)) => missing.push(format!(
            "kernel {major}.{minor} has no id-mapped mounts (5.12 or later is needed)"
        )),
        None => missing.push("the kernel release cannot be read".into()),
    }
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// Whether the shim must allocate a block for a create with `runtime`.
pub fn wants_block(section: &UsernsSection, host: &dyn HostView, runtime: &Path) -> bool {
    section.mode == UsernsMode::Private
        && (section.unsupported == UsernsUnsupported::Refuse
            || missing_support(host, runtime).is_none())
}

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let section = &cx.policy.userns;
    let Some(create) = cx.create.filter(|_| section.mode == UsernsMode::Private) else {
        return Ok(());
    };
    if let Some(missing) = missing_support(cx.host, &create.runtime_path) {
        return match section.unsupported {
            UsernsUnsupported::RunWithout => Ok(()),
            UsernsUnsupported::Refuse => Err(Denial::new(
                RULE,
                "[userns] mode",
                "private",
                format!(
                    "this host cannot give the container a private user namespace: {missing} \
                     (or set [userns] unsupported = \"run-without\" to run without one)"
                ),
            )),
        };
    }
    let (Some(block), Some(pin)) = (create.userns, create.userns_pin.as_deref()) else {
        return Err(Denial::new(
            RULE,
            "[userns] mode",
            "private",
            "no private id block and user namespace were made for this container",
        ));
    };
    refuse_joined_namespaces(spec)?;
    let (uid, gid) = process_ids(spec, cx)?;
    let binds = writable_binds(spec);
    let (uid_min, gid_min) = cx.host.regular_id_min();
    let release = cx.host.kernel_release().unwrap_or_default();
    let mounts = spec.get_mut("mounts").and_then(Value::as_array_mut);
    for (index, mount) in mounts.into_iter().flatten().enumerate() {
        let dest = destination(mount).into_owned();
        if !is_bind(mount) || read_only(mount) || !binds.contains(&dest) {
            continue;
        }
        let field = format!("/mounts/{index}/source");
        let source = str_field(mount, "source").to_string();
        let refuse = |reason: String| Denial::new(RULE, &field, &source, reason);
        let Some((owner_uid, owner_gid)) = cx.host.owner(Path::new(&source)) else {
            return Err(refuse("cannot read the owner of the bind source".into()));
        };
        if owner_uid < uid_min || owner_gid < gid_min {
            return Err(refuse(format!(
                "owned by {owner_uid}:{owner_gid}, a host system id: files the container \
                 creates there would be that account's (regular ids start at uid {uid_min}, \
                 gid {gid_min})"
            )));
        }
        idmap_filesystem(cx.host, Path::new(&source), release).map_err(refuse)?;
        let maps = [
            ("uidMappings", owner_uid, block.uid + uid),
            ("gidMappings", owner_gid, block.gid + gid),
        ];
        for (key, on_disk, host_id) in maps {
            let after = json!([{"containerID": on_disk, "hostID": host_id, "size": 1}]);
            if let Some(object) = mount.as_object_mut() {
                object.insert(key.into(), after.clone());
            }
            rec.change(RULE, format!("/mounts/{index}/{key}"), Value::Null, after);
        }
    }
    // runc joins the namespace the shim made, mapped and owned by the
    // block (a namespace runc makes is root's: see the shim's userns_pin);
    // runc reads the mappings from it, and warns when the spec repeats them.
    if let Some(Value::Array(list)) = spec.pointer_mut("/linux/namespaces") {
        let entry = json!({"type": "user", "path": pin.to_string_lossy()});
        list.push(entry.clone());
        let at = format!("/linux/namespaces/{}", list.len() - 1);
        rec.change(RULE, at, Value::Null, entry);
    }
    Ok(())
}

/// runc joins the container's user namespace before any other namespace
/// path, and from inside it cannot enter a namespace made outside it
/// (setns: EPERM), as an engine's network namespace is. Said here, not as
/// runc's `failed to setns`.
fn refuse_joined_namespaces(spec: &Value) -> Result<(), Denial> {
    let list = spec.pointer("/linux/namespaces").and_then(Value::as_array);
    for (i, ns) in list.into_iter().flatten().enumerate() {
        let path = str_field(ns, "path");
        if !path.is_empty() {
            let kind = str_field(ns, "type");
            return Err(Denial::new(
                RULE,
                format!("/linux/namespaces/{i}/path"),
                path,
                format!(
                    "a private user namespace cannot join a {kind} namespace made outside it \
                     (runc enters the user namespace first); the engine must let runc make it"
                ),
            ));
        }
    }
    Ok(())
}

/// The container ids the worktree's owner appears as: the forced user, else
/// the process's own (runc runs a process with no user as 0:0), which must
/// lie in the block.
fn process_ids(spec: &Value, cx: &RuleContext) -> Result<(u32, u32), Denial> {
    if let Some(ids) = cx.policy.process.forced_user() {
        return Ok(ids);
    }
    let user = spec.pointer("/process/user").unwrap_or(&Value::Null);
    let id = |key: &str| {
        let value = user.get(key).and_then(Value::as_u64).unwrap_or(0);
        u32::try_from(value)
            .ok()
            .filter(|v| *v < USERNS_BLOCK)
            .ok_or_else(|| {
                Denial::new(
                    RULE,
                    format!("/process/user/{key}"),
                    value.to_string(),
                    "beyond the container's 65,536 ids: it has no mapping",
                )
            })
    };
    Ok((id("uid")?, id("gid")?))
}

fn writable_binds(spec: &Value) -> Vec<String> {
    spec.pointer("/annotations")
        .and_then(|a| a.get(WRITABLE_BINDS_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// The bind source's filesystem must be one the kernel can id-map.
fn idmap_filesystem(host: &dyn HostView, source: &Path, release: (u32, u32)) -> Result<(), String> {
    let fs = host
        .mount_point_of(source)
        .and_then(|point| host.mount_fs_type(&point))
        .unwrap_or_else(|| "unknown".into());
    match IDMAP_FILESYSTEMS.iter().find(|(name, _)| *name == fs) {
        Some((_, since)) if release >= *since => Ok(()),
        Some((_, (major, minor))) => Err(format!(
            "the kernel cannot id-map a {fs} mount before {major}.{minor}"
        )),
        None => Err(format!(
            "the kernel cannot id-map a {fs} mount (filesystem {fs})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::host::{FakeHost, RuntimeFeatures};
    use crate::CreateContext;
    use std::path::PathBuf;

    const PIN: &str = "/run/vibe-shim/containers/r/c1/userns";
    const WT: &str = "/srv/worktrees/a";
    const B: IdBlock = IdBlock {
        uid: 0x7000_0000 + 3 * USERNS_BLOCK,
        gid: 0x7100_0000,
    };

    fn policy(unsupported: UsernsUnsupported) -> Policy {
        let mut policy = Policy::default();
        policy.userns.mode = UsernsMode::Private;
        policy.userns.unsupported = unsupported;
        policy.process.user = Some("1000:1000".into());
        policy
    }

    fn runc_1_3() -> FakeHost {
        let mut host = FakeHost::new();
        host.runtime_features = Some(RuntimeFeatures {
            user_namespaces: true,
            idmap_mounts: true,
        });
        host.kernel_release = Some((6, 18));
        host.mount_points.insert(PathBuf::from("/srv"));
        host.mount_types
            .insert(PathBuf::from("/srv"), "ext4".into());
        host.owners.insert(PathBuf::from(WT), (1234, 1235));
        host
    }

    fn runc_1_1_5() -> FakeHost {
        let mut host = runc_1_3();
        host.runtime_features = Some(RuntimeFeatures {
            user_namespaces: true,
            idmap_mounts: false,
        });
        host
    }

    fn spec() -> Value {
        json!({
            "process": {"user": {"uid": 1000, "gid": 1000}},
            "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "mount"}]},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/work", "type": "bind", "source": WT, "options": ["bind", "rw"]},
                {"destination": "/ro", "type": "bind", "source": WT, "options": ["bind", "ro"]},
                {"destination": "/etc/hosts", "type": "bind", "source": "/var/lib/docker/h",
                 "options": ["rbind"]}
            ],
            "annotations": {WRITABLE_BINDS_ANNOTATION: "[\"/work\"]"}
        })
    }

    fn run(
        spec: &mut Value,
        policy: &Policy,
        host: &FakeHost,
        block: Option<IdBlock>,
    ) -> Result<Record, Denial> {
        let create = CreateContext {
            runtime_path: PathBuf::from("/usr/sbin/runc"),
            userns: block,
            userns_pin: block.map(|_| PathBuf::from(PIN)),
            ..CreateContext::default()
        };
        crate::rules::run_rule_with(apply, spec, policy, host, Some(&create))
    }

    #[test]
    fn private_block_maps_the_whole_container_and_idmaps_the_worktree() {
        let mut spec = spec();
        let rec = run(
            &mut spec,
            &policy(UsernsUnsupported::Refuse),
            &runc_1_3(),
            Some(B),
        )
        .unwrap();
        // The namespace the shim made for the block, joined; runc reads
        // its mappings there.
        assert!(spec["linux"].get("uidMappings").is_none());
        assert!(spec["linux"].get("gidMappings").is_none());
        assert_eq!(
            spec["linux"]["namespaces"][3],
            json!({"type": "user", "path": PIN})
        );
        // On-disk 1234 (the owner) is container 1000: host B + 1000 inside.
        assert_eq!(
            spec["mounts"][1]["uidMappings"],
            json!([{"containerID": 1234, "hostID": B.uid + 1000, "size": 1}])
        );
        assert_eq!(
            spec["mounts"][1]["gidMappings"],
            json!([{"containerID": 1235, "hostID": B.gid + 1000, "size": 1}])
        );
        // Read-only and engine binds are left as they are.
        for i in [2, 3] {
            assert!(spec["mounts"][i].get("uidMappings").is_none());
        }
        assert_eq!(rec.changes.len(), 3);
    }

    #[test]
    fn old_runc_is_refused_naming_what_is_missing() {
        let mut spec = spec();
        let before = spec.clone();
        let err = run(
            &mut spec,
            &policy(UsernsUnsupported::Refuse),
            &runc_1_1_5(),
            Some(B),
        )
        .unwrap_err();
        assert_eq!(err.rule, RULE);
        assert!(err.reason.contains("cannot id-map bind mounts"), "{err}");
        assert!(err.reason.contains("runc >= 1.2"), "{err}");
        assert_eq!(spec, before);
        // No features at all (runc 1.0) and an old kernel: both named.
        let mut host = runc_1_1_5();
        host.runtime_features = None;
        host.kernel_release = Some((5, 10));
        let err = run(
            &mut spec,
            &policy(UsernsUnsupported::Refuse),
            &host,
            Some(B),
        )
        .unwrap_err();
        assert!(err.reason.contains("reports no features"), "{err}");
        assert!(err.reason.contains("kernel 5.10"), "{err}");
    }

    #[test]
    fn run_without_only_when_the_policy_says_so() {
        let mut spec = spec();
        let before = spec.clone();
        let host = runc_1_1_5();
        let policy = policy(UsernsUnsupported::RunWithout);
        assert!(!wants_block(
            &policy.userns,
            &host,
            Path::new("/usr/sbin/runc")
        ));
        let rec = run(&mut spec, &policy, &host, None).unwrap();
        assert!(rec.changes.is_empty());
        assert_eq!(spec, before);
        // A host that can still gets its namespace.
        assert!(wants_block(&policy.userns, &runc_1_3(), Path::new("/r")));
        run(&mut spec, &policy, &runc_1_3(), Some(B)).unwrap();
        assert_eq!(spec["linux"]["namespaces"][3]["path"], PIN);
    }

    #[test]
    fn mode_off_and_exec_add_nothing() {
        let mut spec = spec();
        let before = spec.clone();
        let mut off = policy(UsernsUnsupported::Refuse);
        off.userns.mode = UsernsMode::Off;
        assert!(run(&mut spec, &off, &runc_1_3(), Some(B))
            .unwrap()
            .changes
            .is_empty());
        let on = policy(UsernsUnsupported::Refuse);
        let host = runc_1_3();
        assert!(crate::rules::run_rule_with(apply, &mut spec, &on, &host, None).is_ok());
        assert_eq!(spec, before);
    }

    #[test]
    fn a_process_id_beyond_the_block_is_refused() {
        let mut policy = policy(UsernsUnsupported::Refuse);
        policy.process.user = None;
        let mut spec = spec();
        spec["process"]["user"] = json!({"uid": 70000, "gid": 1000});
        let err = run(&mut spec, &policy, &runc_1_3(), Some(B)).unwrap_err();
        assert_eq!(err.field, "/process/user/uid");
        spec["process"]["user"] = json!({"uid": 1001, "gid": 1002});
        run(&mut spec, &policy, &runc_1_3(), Some(B)).unwrap();
        assert_eq!(spec["mounts"][1]["uidMappings"][0]["hostID"], B.uid + 1001);
        assert_eq!(spec["mounts"][1]["gidMappings"][0]["hostID"], B.gid + 1002);
    }

    #[test]
    fn a_namespace_path_from_the_engine_is_refused_before_runc_fails_on_it() {
        let mut spec = spec();
        spec["linux"]["namespaces"][1] = json!({"type": "network", "path": "/run/netns/x"});
        let before = spec.clone();
        let err = run(
            &mut spec,
            &policy(UsernsUnsupported::Refuse),
            &runc_1_3(),
            Some(B),
        )
        .unwrap_err();
        assert_eq!(err.field, "/linux/namespaces/1/path");
        assert!(
            err.reason.contains("network namespace made outside"),
            "{err}"
        );
        assert_eq!(spec, before);
    }

    #[test]
    fn no_block_is_a_refusal() {
        let err = run(
            &mut spec(),
            &policy(UsernsUnsupported::Refuse),
            &runc_1_3(),
            None,
        )
        .unwrap_err();
        assert!(err.reason.contains("no private id block"), "{err}");
        // A block without the namespace made for it is no less a refusal.
        let create = CreateContext {
            runtime_path: PathBuf::from("/usr/sbin/runc"),
            userns: Some(B),
            ..CreateContext::default()
        };
        let policy = policy(UsernsUnsupported::Refuse);
        let host = runc_1_3();
        let err = crate::rules::run_rule_with(apply, &mut spec(), &policy, &host, Some(&create))
            .unwrap_err();
        assert!(err.reason.contains("user namespace"), "{err}");
    }

    #[test]
    fn a_worktree_owned_by_a_system_id_is_refused() {
        for owner in [(0, 1000), (1000, 0), (999, 1000)] {
            let mut host = runc_1_3();
            host.owners.insert(PathBuf::from(WT), owner);
            let err = run(
                &mut spec(),
                &policy(UsernsUnsupported::Refuse),
                &host,
                Some(B),
            )
            .unwrap_err();
            assert_eq!(err.field, "/mounts/1/source");
            assert!(err.reason.contains("host system id"), "{err}");
        }
    }

    #[test]
    fn a_filesystem_the_kernel_cannot_idmap_is_refused() {
        let mut host = runc_1_3();
        host.mount_types.insert(PathBuf::from("/srv"), "nfs".into());
        let err = run(
            &mut spec(),
            &policy(UsernsUnsupported::Refuse),
            &host,
            Some(B),
        )
        .unwrap_err();
        assert!(err.reason.contains("cannot id-map a nfs mount"), "{err}");
        host.mount_types
            .insert(PathBuf::from("/srv"), "tmpfs".into());
        host.kernel_release = Some((6, 1));
        let err = run(
            &mut spec(),
            &policy(UsernsUnsupported::Refuse),
            &host,
            Some(B),
        )
        .unwrap_err();
        assert!(err.reason.contains("before 6.3"), "{err}");
    }

    #[test]
    fn the_clients_own_userns_and_mappings_are_refused_before_this_rule() {
        // The namespaces rule runs first in the chain, in every mode.
        let chain = crate::engine::SPEC_RULES;
        let at = |rule: crate::engine::SpecRule| {
            chain.iter().position(|r| std::ptr::fn_addr_eq(*r, rule))
        };
        assert!(at(crate::rules::namespaces::apply) < at(apply));
        assert!(at(crate::rules::binds::apply) < at(apply));
        let policy = policy(UsernsUnsupported::Refuse);
        let host = runc_1_3();
        for edit in [
            (|s: &mut Value| {
                s["linux"]["namespaces"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"type": "user", "path": "/proc/77/ns/user"}))
            }) as fn(&mut Value),
            |s| {
                s["linux"]["namespaces"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"type": "user"}))
            },
            |s| s["linux"]["uidMappings"] = json!([{"containerID": 0, "hostID": 0, "size": 1}]),
            |s| {
                s["linux"]["gidMappings"] =
                    json!([{"containerID": 0, "hostID": B.gid, "size": 65536}])
            },
            |s| s["mounts"][1]["uidMappings"] = json!([{"containerID": 0, "hostID": 0, "size": 1}]),
            |s| s["mounts"][1]["options"] = json!(["bind", "idmap"]),
        ] {
            let mut spec = spec();
            edit(&mut spec);
            let err = crate::rules::run_rule_with(
                crate::rules::namespaces::apply,
                &mut spec,
                &policy,
                &host,
                None,
            )
            .unwrap_err();
            assert_eq!(err.rule, "namespaces", "{err}");
        }
    }

    #[test]
    fn subid_lines_give_the_range_and_others_may_not_overlap() {
        let text = "alice:100000:65536\nvibe-shim:1879048192:6553600\n";
        let range = subid_range(text, "/etc/subuid").unwrap();
        assert_eq!(range.start, 0x7000_0000);
        assert_eq!(range.blocks(), 100);
        for (bad, needle) in [
            (
                "bob:1879113728:10\nvibe-shim:1879048192:6553600\n",
                "overlaps bob",
            ),
            ("alice:1:2\n", "no vibe-shim: line"),
            (
                "vibe-shim:1879048192:65536\nvibe-shim:1879113728:65536\n",
                "more than one",
            ),
            ("vibe-shim:1879048193:65536\n", "multiples of 65536"),
            ("vibe-shim:100000:65536\n", "multiples of 65536"),
            ("vibe-shim:0:131072\n", "overlaps host accounts"),
            ("vibe-shim:524288:65536\n", "systemd-nspawn"),
            ("vibe-shim:2147352576:65536\n", "foreign"),
            ("vibe-shim:2147418112:131072\n", "2^31"),
            ("vibe-shim:x:65536\n", "malformed"),
        ] {
            let err = subid_range(bad, "/etc/subuid").unwrap_err();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn blocks_are_aligned_disjoint_and_bounded() {
        let mut section = UsernsSection {
            range_start: Some(0x7000_0000),
            range_size: Some(4 * USERNS_BLOCK),
            ..UsernsSection::default()
        };
        let (uids, gids) = ranges(&section, None, None).unwrap();
        let all: Vec<IdBlock> = (0..4).map(|i| block(uids, gids, i).unwrap()).collect();
        for (i, a) in all.iter().enumerate() {
            assert_eq!(a.uid % USERNS_BLOCK, 0);
            assert!(u64::from(a.uid) + u64::from(USERNS_BLOCK) <= 1 << 31);
            for b in &all[i + 1..] {
                assert!(a.uid.abs_diff(b.uid) >= USERNS_BLOCK);
            }
        }
        assert_eq!(block(uids, gids, 4), None);
        // Without the policy's range, the subid files'.
        section.range_start = None;
        section.range_size = None;
        let (u, g) = ranges(
            &section,
            Some("vibe-shim:1879048192:131072\n"),
            Some("vibe-shim:1879179264:65536\n"),
        )
        .unwrap();
        let one = block(u, g, 0).unwrap();
        assert_eq!((one.uid, one.gid), (1_879_048_192, 1_879_179_264));
        assert_eq!(block(u, g, 1), None, "the smaller range bounds the blocks");
    }

    #[test]
    fn features_are_read_as_runc_writes_them() {
        let runc_1_3 = json!({"linux": {"namespaces": ["cgroup", "user"],
            "mountExtensions": {"idmap": {"enabled": true}}}});
        let f = RuntimeFeatures::from_json(&runc_1_3);
        assert!(f.user_namespaces && f.idmap_mounts);
        let runc_1_1 = json!({"linux": {"namespaces": ["cgroup", "user"]}});
        assert!(!RuntimeFeatures::from_json(&runc_1_1).idmap_mounts);
    }
}
