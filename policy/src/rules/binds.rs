//! Bind mounts, the core of the filesystem policy. A bind is allowed only if
//! it is one of the engine's own per-container files, the engine's own init
//! binary, one of the engine's volumes that [`crate::rules::volumes`]
//! allows, or if its canonical source lies in a `filesystem.bind` subtree.
//! Every allowed bind is made non-recursive, nosuid and nodev, and gets its
//! canonical source written back. vibe-shim's own trust bundle file
//! ([`crate::rules::credentials`]) is no client bind and is skipped.
//!
//! A path is only a name: between this check and runc's mount(2) a client
//! that can write in an allowed subtree can swap a component for a symlink.
//! So this rule only decides; [`pins`] tells the shim, for each bind, the
//! trusted directory to resolve below (without symlinks or mount crossings)
//! and what must hold for the object found there. The shim holds that
//! object and hands runc a root-only staging mount of it (shim/src/stage.rs).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::{BindMode, Policy};
use crate::decision::{Denial, Record};
use crate::engine::context::{CreateContext, RuleContext};
use crate::host::HostView;
use crate::lang::json::{as_object, set, str_field};
use crate::rules::host_ids;
use crate::rules::kernel_mounts::{
    add_option, destination, edit_options, is_bind, mounts_mut, remove_option,
};
use crate::rules::notice::is_own_file_mount;
use crate::rules::volumes::{self, Volume};

const RULE: &str = "binds";

/// Destinations the engine fills from its own per-container directory, with
/// the file name the source must have (Docker: `<data-root>/containers/<id>/hosts`,
/// `.../<id>/mounts/shm`; podman: `.../overlay-containers/<id>/userdata/hosts`).
pub(crate) const ENGINE_FILES: &[(&str, &str)] = &[
    ("/etc/resolv.conf", "resolv.conf"),
    ("/etc/hostname", "hostname"),
    ("/etc/hosts", "hosts"),
    ("/dev/shm", "shm"),
    ("/run/.containerenv", ".containerenv"),
];

/// Why a bind passed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// An engine's per-container file below `id_dir`, the directory named by the id.
    EngineFile { id_dir: PathBuf },
    /// One of `filesystem.init_binaries`: always read-only.
    InitBinary,
    /// Below the allowed root `root` (canonical).
    Allowed { root: PathBuf, mode: BindMode },
    /// An engine volume under `filesystem.volumes = "private"`.
    Volume(Volume),
}

/// What must hold for the object the shim pins (see [`Pin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinKind {
    /// Below an allowed root and on that root's own mount.
    Subtree { read_only: bool },
    /// An engine file: the anchor (the directory named by the id) must be
    /// owned by root and writable by nobody else.
    EngineFile,
    /// The engine's init binary: a regular file owned by root and writable
    /// by nobody else; staged read-only.
    InitBinary,
    /// An engine volume (`Pin::volume`): a directory on the volume
    /// directory's own mount, allowed only to the holder of its claim.
    Volume,
}

/// One allowed bind as the shim must pin it: `rest` resolved below the
/// directory `anchor` (both from the judged canonical source) with no
/// symlink, no magic link and no `..` out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// Index into `mounts`.
    pub index: usize,
    pub anchor: PathBuf,
    /// Relative; empty when the source is the anchor itself.
    pub rest: PathBuf,
    pub kind: PinKind,
    /// Set for [`PinKind::Volume`]: the volume the shim must claim.
    pub volume: Option<Volume>,
}

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let writable = judge_binds(spec, cx, rec)?;
    record_writable(spec, &writable, rec);
    Ok(())
}

/// Judges and rewrites every bind; returns the destinations the container
/// can write below a read-write `filesystem.bind` subtree.
fn judge_binds(
    spec: &mut Value,
    cx: &RuleContext,
    rec: &mut Record,
) -> Result<Vec<String>, Denial> {
    let judge = Judge::new(cx.policy, cx.host, cx.create);
    let mut writable = Vec::new();
    let Some(mounts) = mounts_mut(spec) else {
        return Ok(writable);
    };
    for (index, mount) in mounts.iter_mut().enumerate() {
        if !is_bind(mount) || is_own_file_mount(mount, cx.create) {
            continue;
        }
        let (canonical, verdict) = judge.judge(mount, index)?;
        let field = || format!("/mounts/{index}/source");
        let source = str_field(mount, "source");
        let canonical_text = canonical.to_str().ok_or_else(|| {
            Denial::new(RULE, field(), source, "canonical source is not valid UTF-8")
        })?;
        if canonical_text != source {
            let before = set(as_object(mount), "source", Value::from(canonical_text));
            rec.change(RULE, field(), before, Value::from(canonical_text));
        }
        // The engine's resolv.conf, hosts and hostname are files on the
        // host's disk: under a read-only root they are read-only too (as
        // Docker's --read-only makes them), or a root process could fill
        // that disk through them. /dev/shm is scratch space.
        let engine_file_ro = matches!(verdict, Verdict::EngineFile { .. })
            && cx.policy.filesystem.readonly_root
            && destination(mount) != "/dev/shm";
        let read_only = engine_file_ro
            || matches!(
                verdict,
                Verdict::InitBinary
                    | Verdict::Allowed {
                        mode: BindMode::Ro,
                        ..
                    }
            );
        edit_options(mount, index, RULE, rec, |options| {
            force_non_recursive(options);
            options.retain(|o| !WEAKENING_RECURSIVE.contains(o));
            add_option(options, "nosuid");
            remove_option(options, "suid");
            add_option(options, "nodev");
            remove_option(options, "dev");
            if read_only {
                remove_option(options, "rw");
                add_option(options, "ro");
            }
        });
        let subtree_rw = matches!(
            verdict,
            Verdict::Allowed {
                mode: BindMode::Rw,
                ..
            }
        );
        if subtree_rw && !host_ids::read_only(mount) {
            writable.push(destination(mount).into_owned());
        }
    }
    Ok(writable)
}

/// Writes [`host_ids::WRITABLE_BINDS_ANNOTATION`], replacing whatever the
/// client put there: the `host_ids` rule and every later exec read it.
fn record_writable(spec: &mut Value, writable: &[String], rec: &mut Record) {
    let key = host_ids::WRITABLE_BINDS_ANNOTATION;
    let after = Value::from(serde_json::to_string(writable).unwrap_or_else(|_| "[]".into()));
    let annotations = crate::lang::json::object_at(spec, "annotations");
    let before = set(annotations, key, after.clone());
    if before != Value::Null && before != after {
        rec.change(RULE, format!("/annotations/{key}"), before, after);
    }
}

/// The pins for every bind of a spec this rule has already rewritten (its
/// sources are canonical): judged again, so a host that changed since is
/// refused rather than trusted.
pub fn pins(
    spec: &Value,
    policy: &Policy,
    host: &dyn HostView,
    create: &CreateContext,
) -> Result<Vec<Pin>, Denial> {
    let judge = Judge::new(policy, host, Some(create));
    let mounts = spec.get("mounts").and_then(Value::as_array);
    let mut pins = Vec::new();
    for (index, mount) in mounts.into_iter().flatten().enumerate() {
        // vibe-shim's own file in its root-only state directory: nothing to pin.
        if !is_bind(mount) || is_own_file_mount(mount, Some(create)) {
            continue;
        }
        let (canonical, verdict) = judge.judge(mount, index)?;
        let mut volume = None;
        let (anchor, kind) = match verdict {
            Verdict::EngineFile { id_dir } => (id_dir, PinKind::EngineFile),
            Verdict::Volume(v) => {
                let dir = v.dir.clone();
                volume = Some(v);
                (dir, PinKind::Volume)
            }
            Verdict::InitBinary => (
                canonical.parent().unwrap_or(Path::new("/")).to_path_buf(),
                PinKind::InitBinary,
            ),
            Verdict::Allowed { root, mode } => (
                root,
                PinKind::Subtree {
                    read_only: mode == BindMode::Ro,
                },
            ),
        };
        let rest = canonical
            .strip_prefix(&anchor)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        pins.push(Pin {
            index,
            anchor,
            rest,
            kind,
            volume,
        });
    }
    Ok(pins)
}

/// Everything a bind is judged against, canonicalised once per spec.
struct Judge<'a> {
    policy: &'a Policy,
    host: &'a dyn HostView,
    create: Option<&'a CreateContext>,
    /// An allow source that does not exist matches nothing.
    allowed: Vec<(PathBuf, BindMode)>,
    inits: Vec<PathBuf>,
    /// The canonical `filesystem.volume_dirs`.
    volume_dirs: Vec<PathBuf>,
}

impl<'a> Judge<'a> {
    fn new(policy: &'a Policy, host: &'a dyn HostView, create: Option<&'a CreateContext>) -> Self {
        let allowed = allowed_roots(policy, host);
        // The admin's probe is bound as an init binary is: read-only, and
        // only while it is root's alone.
        let inits = policy
            .filesystem
            .init_binaries
            .iter()
            .chain(policy.filesystem.probe.iter())
            .filter_map(|p| host.canonicalize(p))
            .collect();
        Judge {
            policy,
            host,
            create,
            allowed,
            inits,
            volume_dirs: volumes::canonical_dirs(policy, host),
        }
    }

    fn judge(&self, mount: &Value, index: usize) -> Result<(PathBuf, Verdict), Denial> {
        // Field and message text are built only when a denial needs them.
        let field = || format!("/mounts/{index}/source");
        let source = str_field(mount, "source");
        // runc would resolve a relative source against the bundle, which the
        // policy cannot see; refuse rather than guess.
        if !source.starts_with('/') {
            return Err(Denial::new(
                RULE,
                field(),
                source,
                "bind mount source must be an absolute host path",
            ));
        }
        let canonical = self.host.canonicalize(Path::new(source)).ok_or_else(|| {
            Denial::new(
                RULE,
                field(),
                source,
                "bind mount source does not exist or cannot be resolved",
            )
        })?;
        let named = || {
            if canonical == Path::new(source) {
                source.to_string()
            } else {
                format!("{source} (resolves to {})", canonical.display())
            }
        };
        let (id, runc_root) = self
            .create
            .map(|c| (c.container_id.as_str(), c.runc_root.as_path()))
            .unwrap_or(("", Path::new("")));
        let verdict = if let Some(id_dir) = engine_file_dir(&destination(mount), &canonical, id) {
            // The id comes from argv: a client that names another
            // container's id must not get that container's files.
            if self.host.container_id_in_use(runc_root, id) {
                return Err(Denial::new(
                    RULE,
                    field(),
                    named(),
                    format!(
                        "engine file of container {id}, but a container with that id \
                         already exists (this or another runc root): not this container's"
                    ),
                ));
            }
            Verdict::EngineFile { id_dir }
        } else if self.inits.contains(&canonical) {
            Verdict::InitBinary
        } else {
            // A volume that is not allowed as one is judged as a bind: only
            // an admin's filesystem.bind of its path passes it, and the
            // refusal says volume.
            let mut not_allowed = None;
            if let Some(volume) = volumes::classify(&canonical, &self.volume_dirs) {
                match volumes::judge(&volume, &canonical, &field(), self.policy, self.host)? {
                    volumes::Judgement::Private => {
                        return Ok((canonical, Verdict::Volume(volume)));
                    }
                    volumes::Judgement::AsBind => {
                        not_allowed = Some(volumes::off(&volume, &canonical, &field()));
                    }
                }
            } else if let Some(volume) = volumes::looks_like(&canonical) {
                not_allowed = Some(volumes::unlisted(&volume, &canonical, &field()));
            }
            judge_allowlist(&canonical, &self.allowed, self.host).map_err(|reason| {
                match (reason, not_allowed) {
                    (BindRefusal::NotAllowed, Some(volume)) => volume,
                    (reason, _) => Denial::new(RULE, field(), named(), reason.to_string()),
                }
            })?
        };
        Ok((canonical, verdict))
    }
}

/// The canonical `filesystem.bind` roots with their modes. An allow source
/// that does not exist matches nothing.
fn allowed_roots(policy: &Policy, host: &dyn HostView) -> Vec<(PathBuf, BindMode)> {
    policy
        .filesystem
        .bind
        .iter()
        .filter_map(|b| host.canonicalize(&b.source).map(|c| (c, b.mode)))
        .collect()
}

/// Why a host path is not in the bind allowlist; the text is the denial's
/// reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BindRefusal {
    #[error("bind mount source is not under an allowed path (filesystem.bind)")]
    NotAllowed,
    #[error("cannot find the host mount that holds the bind mount source")]
    NoMount,
    #[error(
        "bind mount source is on {}, a separate mount inside the allowed subtree {}, \
         and could carry another host path in",
        mount_point.display(),
        root.display()
    )]
    NestedMount { mount_point: PathBuf, root: PathBuf },
    #[error("internal: unexpected bind verdict")]
    Unexpected,
}

/// The allowlist judgment of a host path named outside a spec (the Docker
/// API gate, policy/src/authz): `canonical` must lie in a `filesystem.bind`
/// subtree and on that subtree's own mount, exactly as for a spec's bind.
/// Returns the reason on refusal.
pub fn judge_host_path(
    policy: &Policy,
    host: &dyn HostView,
    canonical: &Path,
) -> Result<BindMode, BindRefusal> {
    match judge_allowlist(canonical, &allowed_roots(policy, host), host)? {
        Verdict::Allowed { mode, .. } => Ok(mode),
        // judge_allowlist gives nothing else.
        _ => Err(BindRefusal::Unexpected),
    }
}

/// runc's recursive mount attributes that clear what this rule sets: runc
/// applies them with `mount_setattr` after the `ro`/`nosuid`/`nodev`
/// remount, so `rrw` would leave a read-only bind writable. The ones that
/// only add a restriction (`rro`, `rnosuid`, …) are kept.
pub(crate) const WEAKENING_RECURSIVE: &[&str] = &["rrw", "rsuid", "rdev", "rexec", "rsymfollow"];

/// `rbind` would carry every mount below the source in with it.
fn force_non_recursive(options: &mut Vec<&str>) {
    let first = options.iter().position(|o| *o == "bind" || *o == "rbind");
    options.retain(|o| *o != "bind" && *o != "rbind");
    options.insert(first.unwrap_or(0), "bind");
}

/// Engine-generated container ids (Docker, podman, containerd CRI) are long
/// hex strings. Requiring that shape keeps a hand-picked id such as `etc`
/// from turning the host's own `/etc/hosts` into an "engine file".
fn looks_like_engine_id(id: &str) -> bool {
    id.len() >= 12 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// An engine's per-container file: a known destination, a source with the
/// same file name, inside a directory named after this container (its
/// parent or grandparent). Returns that directory.
fn engine_file_dir(dest: &str, canonical: &Path, container_id: &str) -> Option<PathBuf> {
    let (_, name) = ENGINE_FILES.iter().find(|(d, _)| *d == dest)?;
    if !looks_like_engine_id(container_id) || canonical.file_name() != Some(OsStr::new(name)) {
        return None;
    }
    canonical
        .parent()
        .into_iter()
        .flat_map(Path::ancestors)
        .take(2)
        .find(|dir| dir.file_name() == Some(OsStr::new(container_id)))
        .map(Path::to_path_buf)
}

/// Judges a canonical source against the canonical allow roots. The most
/// specific root decides the mode, so `/srv` ro with `/srv/wt` rw gives rw
/// below `/srv/wt`.
fn judge_allowlist(
    canonical: &Path,
    allowed: &[(PathBuf, BindMode)],
    host: &dyn HostView,
) -> Result<Verdict, BindRefusal> {
    // Path::starts_with compares whole components: /srv/wt2 is not under /srv/wt.
    let (root, mode) = allowed
        .iter()
        .filter(|(root, _)| canonical.starts_with(root))
        .max_by_key(|(root, _)| root.components().count())
        .ok_or(BindRefusal::NotAllowed)?;
    let mount_point = host.mount_point_of(canonical).ok_or(BindRefusal::NoMount)?;
    if mount_point != *root && mount_point.starts_with(root) {
        return Err(BindRefusal::NestedMount {
            mount_point,
            root: root.clone(),
        });
    }
    Ok(Verdict::Allowed {
        root: root.clone(),
        mode: *mode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BindAllow, Policy};
    use crate::engine::CreateContext;
    use crate::host::FakeHost;
    use crate::lang::json::strings;
    use serde_json::json;

    fn fixture(name: &str) -> Value {
        let text = match name {
            "default" => include_str!("../../tests/fixtures/docker-20.10/config-default.json"),
            "bind-root" => include_str!("../../tests/fixtures/docker-20.10/config-bind-root.json"),
            "docker-sock" => {
                include_str!("../../tests/fixtures/docker-20.10/config-docker-sock.json")
            }
            "etc-ro" => include_str!("../../tests/fixtures/docker-20.10/config-etc-ro.json"),
            "mount-bind" => {
                include_str!("../../tests/fixtures/docker-20.10/config-mount-bind.json")
            }
            "volume-etc" => {
                include_str!("../../tests/fixtures/docker-20.10/config-volume-etc.json")
            }
            "worktree" => include_str!("../../tests/fixtures/docker-20.10/config-worktree.json"),
            "init" => include_str!("../../tests/fixtures/docker-20.10/config-init.json"),
            other => panic!("no fixture {other}"),
        };
        serde_json::from_str(text).unwrap()
    }

    /// Docker's container id, as it appears in the cgroup path.
    fn container_id(spec: &Value) -> String {
        spec["linux"]["cgroupsPath"]
            .as_str()
            .unwrap()
            .trim_start_matches("/docker/")
            .to_string()
    }

    fn policy_with(binds: &[(&str, BindMode)]) -> Policy {
        let mut policy = Policy::default();
        policy.filesystem.bind = binds
            .iter()
            .map(|(source, mode)| BindAllow {
                source: PathBuf::from(source),
                mode: *mode,
            })
            .collect();
        policy
    }

    fn run_with(
        spec: &mut Value,
        policy: &Policy,
        host: &FakeHost,
        id: &str,
    ) -> Result<Record, Denial> {
        let ctx = CreateContext {
            container_id: id.to_string(),
            ..CreateContext::default()
        };
        let cx = RuleContext {
            policy,
            host,
            create: Some(&ctx),
            process_field: "/process",
        };
        let mut rec = Record::default();
        apply(spec, &cx, &mut rec).map(|_| rec)
    }

    fn run(spec: &mut Value, policy: &Policy, host: &FakeHost) -> Result<Record, Denial> {
        let id = container_id(spec);
        run_with(spec, policy, host, &id)
    }

    fn mount_at<'a>(spec: &'a Value, dest: &str) -> &'a Value {
        spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == dest)
            .unwrap()
    }

    #[test]
    fn docker_engine_files_pass_non_recursive_nosuid_nodev_read_only() {
        let mut spec = fixture("default");
        let rec = run(&mut spec, &Policy::default(), &FakeHost::new()).unwrap();
        for dest in ["/etc/resolv.conf", "/etc/hostname", "/etc/hosts"] {
            let options = strings(mount_at(&spec, dest).get("options"));
            assert_eq!(
                options,
                ["bind", "rprivate", "nosuid", "nodev", "ro"],
                "{dest}"
            );
        }
        let fields: Vec<_> = rec.changes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "/mounts/7/options",
                "/mounts/8/options",
                "/mounts/9/options"
            ]
        );
    }

    #[test]
    fn engine_files_stay_writable_only_without_a_read_only_root() {
        let mut spec = fixture("default");
        let shm = format!(
            "/var/lib/docker/containers/{}/mounts/shm",
            container_id(&spec)
        );
        spec["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/dev/shm", "type": "bind", "options": ["rbind", "rprivate"],
            "source": shm
        }));
        let mut writable_root = Policy::default();
        writable_root.filesystem.readonly_root = false;
        let mut open = spec.clone();
        run(&mut open, &writable_root, &FakeHost::new()).unwrap();
        run(&mut spec, &Policy::default(), &FakeHost::new()).unwrap();
        for dest in ["/etc/resolv.conf", "/etc/hostname", "/etc/hosts"] {
            assert!(!strings(mount_at(&open, dest).get("options")).contains(&"ro".to_string()));
        }
        assert!(!strings(mount_at(&spec, "/dev/shm").get("options")).contains(&"ro".to_string()));
    }

    #[test]
    fn engine_file_of_another_container_is_refused() {
        let mut spec = fixture("default");
        let other = "0123456789abcdef0123456789abcdef";
        let denial = run_with(&mut spec, &Policy::default(), &FakeHost::new(), other).unwrap_err();
        assert_eq!(denial.field, "/mounts/7/source");
        assert!(denial.value.ends_with("/resolv.conf"), "{denial}");
    }

    #[test]
    fn engine_file_needs_matching_name_and_engine_like_id() {
        let id = "0123456789abcdef";
        let mut spec = json!({"mounts": [{"destination": "/etc/hosts", "type": "bind",
            "source": format!("/var/lib/docker/containers/{id}/config.v2.json"), "options": ["rbind"]}]});
        assert!(run_with(&mut spec, &Policy::default(), &FakeHost::new(), id).is_err());
        // A hand-picked id "etc" must not make the host's /etc/hosts an engine file.
        let mut spec = json!({"mounts": [{"destination": "/etc/hosts", "type": "bind",
            "source": "/etc/hosts", "options": ["rbind"]}]});
        assert!(run_with(&mut spec, &Policy::default(), &FakeHost::new(), "etc").is_err());
    }

    #[test]
    fn podman_userdata_files_pass() {
        let id = "a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6abcd";
        let base = format!("/var/lib/containers/storage/overlay-containers/{id}/userdata");
        let mut spec = json!({"mounts": [
            {"destination": "/etc/hosts", "type": "bind", "source": format!("{base}/hosts"),
             "options": ["bind", "private"]},
            {"destination": "/run/.containerenv", "type": "bind",
             "source": format!("{base}/.containerenv"), "options": ["bind", "private"]},
        ]});
        run_with(&mut spec, &Policy::default(), &FakeHost::new(), id).unwrap();
        let options = strings(mount_at(&spec, "/etc/hosts").get("options"));
        assert_eq!(options, ["bind", "private", "nosuid", "nodev", "ro"]);
    }

    #[test]
    fn host_paths_outside_the_allowlist_are_refused() {
        let policy = policy_with(&[("/srv/wt", BindMode::Rw)]);
        for (name, source) in [
            ("bind-root", "/"),
            ("docker-sock", "/run/vs-dev/docker.sock"),
            ("etc-ro", "/etc"),
            ("mount-bind", "/etc"),
        ] {
            let mut spec = fixture(name);
            let denial = run(&mut spec, &policy, &FakeHost::new()).unwrap_err();
            assert_eq!(denial.rule, RULE);
            assert_eq!(denial.value, source, "{name}");
            assert!(denial.reason.contains("filesystem.bind"), "{denial}");
        }
    }

    #[test]
    fn worktree_bind_passes_non_recursive() {
        let mut spec = fixture("worktree");
        let policy = policy_with(&[("/srv/wt", BindMode::Rw)]);
        run(&mut spec, &policy, &FakeHost::new()).unwrap();
        let mount = mount_at(&spec, "/srv/wt");
        assert_eq!(mount["source"], "/srv/wt");
        assert_eq!(
            strings(mount.get("options")),
            ["bind", "rprivate", "nosuid", "nodev"]
        );
    }

    #[test]
    fn sibling_with_common_prefix_is_not_under_the_allow_root() {
        let policy = policy_with(&[("/srv/wt", BindMode::Rw)]);
        let mut spec = json!({"mounts": [{"destination": "/w", "type": "bind",
            "source": "/srv/wt2/x", "options": ["rbind"]}]});
        assert!(run_with(&mut spec, &policy, &FakeHost::new(), "").is_err());
    }

    #[test]
    fn symlinks_are_judged_by_their_canonical_path() {
        let policy = policy_with(&[("/srv/wt", BindMode::Rw)]);
        let mut host = FakeHost::new();
        host.canonical
            .insert(PathBuf::from("/srv/wt/escape"), PathBuf::from("/etc"));
        host.canonical.insert(
            PathBuf::from("/srv/wt/alias"),
            PathBuf::from("/srv/wt/real"),
        );
        let mut spec = json!({"mounts": [{"destination": "/w", "type": "bind",
            "source": "/srv/wt/escape/shadow", "options": ["rbind"]}]});
        let denial = run_with(&mut spec, &policy, &host, "").unwrap_err();
        assert!(denial.value.contains("resolves to /etc/shadow"), "{denial}");

        let mut spec = json!({"mounts": [{"destination": "/w", "type": "bind",
            "source": "/srv/wt/alias/src", "options": ["rbind"]}]});
        let rec = run_with(&mut spec, &policy, &host, "").unwrap();
        assert_eq!(spec["mounts"][0]["source"], "/srv/wt/real/src");
        assert_eq!(rec.changes[0].field, "/mounts/0/source");
        assert_eq!(rec.changes[0].before, "/srv/wt/alias/src");
    }

    #[test]
    fn missing_source_or_missing_allow_root_is_refused() {
        let policy = policy_with(&[("/srv/wt", BindMode::Rw)]);
        let mut host = FakeHost::new();
        host.all_paths_exist = false;
        host.canonical
            .insert(PathBuf::from("/srv/other"), PathBuf::from("/srv/other"));
        let mut spec = json!({"mounts": [{"destination": "/w", "type": "bind",
            "source": "/srv/wt/gone", "options": ["rbind"]}]});
        let denial = run_with(&mut spec, &policy, &host, "").unwrap_err();
        assert!(denial.reason.contains("does not exist"), "{denial}");
        // /srv/wt itself is missing, so nothing can be under it.
        host.canonical
            .insert(PathBuf::from("/srv/wt/x"), PathBuf::from("/srv/wt/x"));
        let mut spec = json!({"mounts": [{"destination": "/w", "type": "bind",
            "source": "/srv/wt/x", "options": ["rbind"]}]});
        let denial = run_with(&mut spec, &policy, &host, "").unwrap_err();
        assert!(
            denial.reason.contains("not under an allowed path"),
            "{denial}"
        );
    }

    #[test]
    fn relative_source_is_refused() {
        let mut spec = json!({"mounts": [{"destination": "/w", "type": "bind",
            "source": "srv/wt", "options": ["bind"]}]});
        let policy = policy_with(&[("/srv/wt", BindMode::Rw)]);
        assert!(run_with(&mut spec, &policy, &FakeHost::new(), "").is_err());
    }

    #[test]
    fn named_volume_over_a_host_path_is_a_separate_mount_and_refused() {
        let mut spec = fixture("volume-etc");
        let mut host = FakeHost::new();
        // `docker volume create -o type=none -o o=bind -o device=/etc etcvol`
        // makes _data a bind mount of /etc on the host.
        host.mount_points
            .insert(PathBuf::from("/var/lib/vs-dev/volumes/etcvol/_data"));
        // The fixture's data-root is no volume_dirs entry: refused as a
        // volume of an unlisted directory, and as a mount once it is listed.
        let denial = run(&mut spec, &Policy::default(), &host).unwrap_err();
        assert!(denial.reason.contains("filesystem.volume_dirs"), "{denial}");
        let mut listed = with_volumes(Policy::default());
        listed.filesystem.volume_dirs = vec![PathBuf::from("/var/lib/vs-dev/volumes")];
        let denial = run(&mut spec, &listed, &host).unwrap_err();
        assert!(denial.reason.contains("mount of its own"), "{denial}");
        let policy = policy_with(&[("/var/lib/vs-dev/volumes", BindMode::Rw)]);
        let denial = run(&mut spec, &policy, &host).unwrap_err();
        assert!(denial.reason.contains("separate mount"), "{denial}");
        assert_eq!(denial.value, "/var/lib/vs-dev/volumes/etcvol/_data");
    }

    fn volume_spec(source: &str) -> Value {
        json!({"mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/data", "type": "bind", "source": source, "options": ["rbind"]},
        ]})
    }

    fn with_volumes(mut policy: Policy) -> Policy {
        policy.filesystem.volumes = crate::config::VolumesMode::Private;
        policy
    }

    #[test]
    fn volumes_off_refuse_named_anonymous_and_podman_volumes_saying_volume() {
        let anonymous = "9c4e0a8f1b2d3c4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6";
        for (source, name) in [
            ("/var/lib/docker/volumes/myvol/_data", "myvol"),
            (
                &format!("/var/lib/docker/volumes/{anonymous}/_data")[..],
                anonymous,
            ),
            ("/var/lib/containers/storage/volumes/pvol/_data", "pvol"),
        ] {
            let mut spec = volume_spec(source);
            let denial =
                run_with(&mut spec, &Policy::default(), &FakeHost::new(), "c1").unwrap_err();
            assert_eq!(denial.rule, volumes::RULE, "{denial}");
            assert_eq!(denial.field, "/mounts/1/source");
            assert_eq!(denial.value, source);
            assert!(
                denial.reason.contains(&format!("volume {name:?}")),
                "{denial}"
            );
            assert!(denial.reason.contains("volumes = \"private\""), "{denial}");
            assert!(!denial.reason.contains("bind"), "{denial}");
        }
    }

    #[test]
    fn volumes_off_keep_an_admins_bind_of_the_volume_dir() {
        // The old way: the admin allowed the whole directory as a bind.
        let policy = policy_with(&[("/var/lib/docker/volumes", BindMode::Rw)]);
        let mut spec = volume_spec("/var/lib/docker/volumes/myvol/_data");
        run_with(&mut spec, &policy, &FakeHost::new(), "c1").unwrap();
        let ctx = CreateContext::default();
        let pinned = pins(&spec, &policy, &FakeHost::new(), &ctx).unwrap();
        assert_eq!(pinned[0].kind, PinKind::Subtree { read_only: false });
        assert_eq!(pinned[0].volume, None);
    }

    #[test]
    fn private_volume_passes_confined_and_pins_below_its_volume_dir() {
        let policy = with_volumes(Policy::default());
        let mut spec = volume_spec("/var/lib/docker/volumes/myvol/_data");
        let rec = run_with(&mut spec, &policy, &FakeHost::new(), "c1").unwrap();
        assert_eq!(
            strings(spec["mounts"][1].get("options")),
            ["bind", "nosuid", "nodev"]
        );
        // Not a host subtree: no host_ids obligation.
        let writable = &spec["annotations"][host_ids::WRITABLE_BINDS_ANNOTATION];
        assert_eq!(writable, "[]", "{rec:?}");
        let ctx = CreateContext::default();
        let pinned = pins(&spec, &policy, &FakeHost::new(), &ctx).unwrap();
        assert_eq!(pinned.len(), 1);
        let pin = &pinned[0];
        assert_eq!(pin.kind, PinKind::Volume);
        assert_eq!(pin.anchor, Path::new("/var/lib/docker/volumes"));
        assert_eq!(pin.rest, Path::new("myvol/_data"));
        assert_eq!(pin.volume.as_ref().map(|v| v.name.as_str()), Some("myvol"));
        // Below a volume, or the volume directory itself, is no volume.
        for source in [
            "/var/lib/docker/volumes/myvol/_data/sub",
            "/var/lib/docker/volumes",
            "/var/lib/docker/volumes/myvol",
        ] {
            let mut spec = volume_spec(source);
            let denial = run_with(&mut spec, &policy, &FakeHost::new(), "c1").unwrap_err();
            assert!(
                denial.reason.contains("filesystem.bind"),
                "{source}: {denial}"
            );
        }
    }

    #[test]
    fn private_volume_over_a_host_path_is_refused_saying_volume() {
        // `docker volume create -o type=none -o o=bind -o device=/etc etcvol`.
        let mut host = FakeHost::new();
        host.mount_points
            .insert(PathBuf::from("/var/lib/docker/volumes/etcvol/_data"));
        let policy = with_volumes(Policy::default());
        let mut spec = volume_spec("/var/lib/docker/volumes/etcvol/_data");
        let denial = run_with(&mut spec, &policy, &host, "c1").unwrap_err();
        assert_eq!(denial.rule, volumes::RULE);
        assert!(
            denial.reason.contains("volume \"etcvol\" is a mount"),
            "{denial}"
        );
        // A symlinked volume directory is judged by its canonical path.
        let mut host = FakeHost::new();
        host.canonical.insert(
            PathBuf::from("/var/lib/docker/volumes/evil/_data"),
            PathBuf::from("/etc"),
        );
        let mut spec = volume_spec("/var/lib/docker/volumes/evil/_data");
        let denial = run_with(&mut spec, &policy, &host, "c1").unwrap_err();
        assert!(denial.reason.contains("filesystem.bind"), "{denial}");
        assert!(denial.value.contains("resolves to /etc"), "{denial}");
    }

    #[test]
    fn a_volume_of_another_data_root_is_refused_naming_volume_dirs() {
        for policy in [Policy::default(), with_volumes(Policy::default())] {
            let mut spec = volume_spec("/srv/docker/volumes/v1/_data");
            let denial = run_with(&mut spec, &policy, &FakeHost::new(), "c1").unwrap_err();
            assert_eq!(denial.rule, volumes::RULE, "{denial}");
            assert!(denial.reason.contains("filesystem.volume_dirs"), "{denial}");
            assert!(denial.reason.contains("volume \"v1\""), "{denial}");
        }
        // Allowed as a bind by the admin: still passes as before.
        let policy = policy_with(&[("/srv/docker/volumes", BindMode::Rw)]);
        let mut spec = volume_spec("/srv/docker/volumes/v1/_data");
        run_with(&mut spec, &policy, &FakeHost::new(), "c1").unwrap();
    }

    #[test]
    fn volume_dirs_are_the_policys_canonical_dirs() {
        let mut policy = with_volumes(Policy::default());
        policy.filesystem.volume_dirs = vec![PathBuf::from("/srv/dr/volumes")];
        let mut host = FakeHost::new();
        // A data-root reached through a symlink.
        host.canonical
            .insert(PathBuf::from("/srv/dr"), PathBuf::from("/data/docker"));
        let mut spec = volume_spec("/data/docker/volumes/v/_data");
        run_with(&mut spec, &policy, &host, "c1").unwrap();
        // Docker's default directory is no longer listed.
        let mut spec = volume_spec("/var/lib/docker/volumes/v/_data");
        assert!(run_with(&mut spec, &policy, &host, "c1").is_err());
    }

    #[test]
    fn allow_root_that_is_itself_a_mount_is_fine() {
        let mut host = FakeHost::new();
        host.mount_points.insert(PathBuf::from("/srv/wt"));
        let policy = policy_with(&[("/srv/wt", BindMode::Rw)]);
        let mut spec = fixture("worktree");
        run(&mut spec, &policy, &host).unwrap();
    }

    #[test]
    fn engine_init_binary_is_allowed_read_only_by_its_exact_path() {
        // Debian: /usr/bin/docker-init -> tini-static; judged canonically.
        let mut host = FakeHost::new();
        host.canonical.insert(
            PathBuf::from("/usr/bin/docker-init"),
            PathBuf::from("/usr/bin/tini-static"),
        );
        let mut spec = fixture("init");
        run(&mut spec, &Policy::default(), &host).unwrap();
        let options = strings(mount_at(&spec, "/sbin/docker-init").get("options"));
        assert_eq!(options, ["bind", "ro", "nosuid", "nodev"]);
        assert_eq!(
            mount_at(&spec, "/sbin/docker-init")["source"],
            "/usr/bin/tini-static"
        );
        // A client asking rw still gets ro.
        let mut spec = json!({"mounts": [{"destination": "/init", "type": "bind",
            "source": "/usr/bin/catatonit", "options": ["rbind", "rw"]}]});
        run_with(&mut spec, &Policy::default(), &host, "").unwrap();
        assert_eq!(
            strings(spec["mounts"][0].get("options")),
            ["bind", "nosuid", "nodev", "ro"]
        );
        // Not a pattern: a look-alike path, or the binary's directory, is refused.
        for source in [
            "/usr/bin/docker-init2",
            "/tmp/usr/bin/docker-init",
            "/usr/bin",
        ] {
            let mut spec = json!({"mounts": [{"destination": "/sbin/docker-init",
                "type": "bind", "source": source, "options": ["bind"]}]});
            assert!(
                run_with(&mut spec, &Policy::default(), &host, "").is_err(),
                "{source}"
            );
        }
        // An admin who empties the list refuses --init.
        let mut policy = Policy::default();
        policy.filesystem.init_binaries.clear();
        let mut spec = fixture("init");
        assert!(run(&mut spec, &policy, &host).is_err());
    }

    #[test]
    fn engine_file_of_an_id_already_in_use_is_refused() {
        let mut spec = fixture("default");
        let id = container_id(&spec);
        let mut host = FakeHost::new();
        host.ids_in_use.insert(id.clone());
        let denial = run_with(&mut spec, &Policy::default(), &host, &id).unwrap_err();
        assert!(denial.reason.contains("already exists"), "{denial}");
        assert_eq!(denial.field, "/mounts/7/source");
    }

    #[test]
    fn pins_name_the_trusted_anchor_of_each_bind() {
        let mut host = FakeHost::new();
        host.canonical.insert(
            PathBuf::from("/usr/bin/docker-init"),
            PathBuf::from("/usr/bin/tini-static"),
        );
        let id = "0123456789abcdef";
        let policy = policy_with(&[("/srv", BindMode::Ro), ("/srv/wt", BindMode::Rw)]);
        let mut spec = json!({"mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/a", "type": "bind", "source": "/srv/data/x", "options": ["rbind"]},
            {"destination": "/b", "type": "bind", "source": "/srv/wt", "options": ["rbind"]},
            {"destination": "/etc/hosts", "type": "bind",
             "source": format!("/var/lib/docker/containers/{id}/hosts"), "options": ["rbind"]},
            {"destination": "/dev/shm", "type": "bind",
             "source": format!("/var/lib/docker/containers/{id}/mounts/shm"), "options": ["rbind"]},
            {"destination": "/sbin/docker-init", "type": "bind",
             "source": "/usr/bin/docker-init", "options": ["bind", "ro"]},
        ]});
        run_with(&mut spec, &policy, &host, id).unwrap();
        let ctx = CreateContext {
            container_id: id.to_string(),
            ..CreateContext::default()
        };
        let pinned = pins(&spec, &policy, &host, &ctx).unwrap();
        let engine_dir = PathBuf::from(format!("/var/lib/docker/containers/{id}"));
        let expected = [
            (1, "/srv", "data/x", PinKind::Subtree { read_only: true }),
            (2, "/srv/wt", "", PinKind::Subtree { read_only: false }),
            (
                3,
                engine_dir.to_str().unwrap(),
                "hosts",
                PinKind::EngineFile,
            ),
            (
                4,
                engine_dir.to_str().unwrap(),
                "mounts/shm",
                PinKind::EngineFile,
            ),
            (5, "/usr/bin", "tini-static", PinKind::InitBinary),
        ];
        assert_eq!(pinned.len(), expected.len(), "{pinned:?}");
        for (pin, (index, anchor, rest, kind)) in pinned.iter().zip(expected) {
            assert_eq!(
                (
                    pin.index,
                    pin.anchor.as_path(),
                    pin.rest.as_path(),
                    pin.kind
                ),
                (index, Path::new(anchor), Path::new(rest), kind)
            );
        }
        // A host that changed since the rewrite is judged again, not trusted.
        host.canonical
            .insert(PathBuf::from("/srv/data/x"), PathBuf::from("/etc"));
        assert!(pins(&spec, &policy, &host, &ctx).is_err());
    }

    #[test]
    fn recursive_attributes_that_undo_the_rule_are_dropped() {
        let mut policy = Policy::default();
        policy.filesystem.bind = vec![BindAllow {
            source: PathBuf::from("/srv"),
            mode: BindMode::Ro,
        }];
        let mut spec = json!({"mounts": [{"destination": "/x", "type": "bind", "source": "/srv/a",
            "options": ["rbind", "ro", "rrw", "rsuid", "rdev", "rexec", "rsymfollow", "rro", "rnoexec"]}]});
        crate::rules::run_rule(apply, &mut spec, &policy).unwrap();
        assert_eq!(
            crate::rules::options_at(&spec, "/x"),
            ["bind", "ro", "rro", "rnoexec", "nosuid", "nodev"]
        );
    }

    #[test]
    fn read_only_mode_removes_rw_and_most_specific_root_decides() {
        let policy = policy_with(&[("/srv", BindMode::Ro), ("/srv/wt", BindMode::Rw)]);
        let mut spec = json!({"mounts": [
            {"destination": "/a", "type": "bind", "source": "/srv/data", "options": ["rbind", "rw", "suid"]},
            {"destination": "/b", "type": "bind", "source": "/srv/wt/x", "options": ["rbind", "rw"]},
        ]});
        run_with(&mut spec, &policy, &FakeHost::new(), "").unwrap();
        assert_eq!(
            strings(spec["mounts"][0].get("options")),
            ["bind", "nosuid", "nodev", "ro"]
        );
        assert_eq!(
            strings(spec["mounts"][1].get("options")),
            ["bind", "rw", "nosuid", "nodev"]
        );
    }

    #[test]
    fn bind_option_on_another_type_is_still_judged() {
        let mut spec = json!({"mounts": [{"destination": "/x", "type": "tmpfs",
            "source": "/etc", "options": ["rbind"]}]});
        assert!(run_with(&mut spec, &Policy::default(), &FakeHost::new(), "").is_err());
    }
}
