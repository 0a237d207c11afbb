//! Pinned bind sources: what runc mounts is the object vibe-shim checked.
//!
//! The binds rule judges a source by its canonical path, but a path is only a
//! name: runc mounts it tens of milliseconds later, and mount(2) follows
//! symlinks in every component, so a client that can write in an allowed
//! subtree could swap a component for a symlink to `/` in between. Here each
//! allowed bind is resolved below its trusted anchor (the allowed root, the
//! engine's per-container directory, the init binary's directory) with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`
//! (plus `RESOLVE_NO_XDEV` in an allowed subtree: no other mount carried in),
//! checked on that fd, and bind-mounted from the fd onto a root-only staging
//! point `<container dir>/binds/<mount index>`. runc gets the staging path,
//! which nobody but root can change.
//!
//! The staging mounts are removed at `start` (runc create has mounted them
//! into the container by then), at `delete`, at the next create of the same
//! id, and on every failure here. They inherit the propagation of their
//! parent on purpose: a private mount would leave its copies behind in the
//! namespaces it propagated to when it was made.

use std::fs::{DirBuilder, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::{fstat, SFlag};
use nix::sys::statvfs::{fstatvfs, FsFlags};
use serde_json::Value;
use vibe_policy::rules::binds::{pins, Pin, PinKind};
use vibe_policy::rules::volumes::{self, Holder};
use vibe_policy::{CreateContext, Denial, HostView, Policy, Refusal, Rewrite};

use crate::sys::state_dir::{self, StateDirError};
use crate::sys::volume_ledger::{self, LedgerError};

const RULE: &str = "binds";
/// Stacked mounts on one staging point are unmounted up to this many times.
const MAX_UNMOUNTS: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("cannot open {path} without following symlinks or leaving it: {errno}")]
    Resolve { path: String, errno: Errno },
    #[error(
        "{0} is not on the same mount as the allowed root: another mount cannot be carried in"
    )]
    OtherMount(String),
    #[error("{path} must be owned by root and writable by nobody else (uid {uid}, mode {mode:o})")]
    NotRootOnly { path: String, uid: u32, mode: u32 },
    #[error("{0} is not a regular file")]
    NotAFile(String),
    #[error("{what} {path}: {errno}")]
    Sys {
        what: &'static str,
        path: String,
        errno: Errno,
    },
    #[error("staging point {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    #[error(
        "volume {name:?} is a mount of its own, not a directory on the mount of {dir}: \
         a local volume with type, o or device options is refused (filesystem.volumes)"
    )]
    VolumeMount { name: String, dir: String },
    #[error("volume {name:?}: {path} is not a directory (filesystem.volumes)")]
    VolumeNotADir { name: String, path: String },
    #[error("volume {name:?}: {source}")]
    Ledger {
        name: String,
        #[source]
        source: LedgerError,
    },
    /// The claim ledger's decision: another container holds the volume.
    #[error("{0}")]
    Claimed(Denial),
}

fn sys<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(Errno) -> StageError + 'a {
    move |errno| StageError::Sys {
        what,
        path: path.display().to_string(),
        errno,
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StageError + '_ {
    move |source| StageError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// `<container dir>/binds`.
fn staging_dir(runc_root: &Path, id: &str) -> Result<PathBuf, StageError> {
    Ok(state_dir::container_dir(runc_root, id)?.join("binds"))
}

/// Pins and stages every bind of a rewritten spec, pointing each mount's
/// source at its staging point (recorded as a change). Called by create
/// after the policy rewrite, before the spec is written.
pub fn binds(
    policy: &Policy,
    host: &dyn HostView,
    create: &CreateContext,
    rewrite: &mut Rewrite,
) -> Result<(), Refusal> {
    let refuse = |denial: Denial, rewrite: &Rewrite| Refusal {
        denial,
        changes: rewrite.changes.clone(),
    };
    let pins = pins(&rewrite.document, policy, host, create).map_err(|d| refuse(d, rewrite))?;
    if pins.is_empty() {
        return Ok(());
    }
    let whole = |e: StageError| Denial::new(RULE, "/mounts", "staging", e.to_string());
    let dir = staging_dir(&create.runc_root, &create.container_id)
        .map_err(|e| refuse(whole(e), rewrite))?;
    // Leftovers of an earlier create with this id that runc refused.
    release_dir(&dir)
        .and_then(|()| Ok(state_dir::ensure_private(&dir)?))
        .map_err(|e| refuse(whole(e), rewrite))?;
    for pin in &pins {
        let field = format!("/mounts/{}/source", pin.index);
        let Some(mount) = rewrite
            .document
            .get_mut("mounts")
            .and_then(Value::as_array_mut)
            .and_then(|m| m.get_mut(pin.index))
        else {
            continue;
        };
        let before = mount.get("source").cloned().unwrap_or(Value::Null);
        match stage_one(pin, &dir, create, policy, &field) {
            Ok(point) => {
                let after = Value::from(point.to_string_lossy().into_owned());
                if let Some(object) = mount.as_object_mut() {
                    object.insert("source".into(), after.clone());
                }
                rewrite.changes.push(vibe_policy::Change {
                    rule: RULE,
                    field,
                    before,
                    after,
                });
            }
            Err(e) => {
                let _ = release_dir(&dir);
                // Nothing of this container is left to mark its id in use.
                if let Some(container_dir) = dir.parent() {
                    let _ = std::fs::remove_dir(container_dir);
                }
                let value = before.as_str().unwrap_or_default().to_string();
                let denial = match e {
                    StageError::Claimed(denial) => denial,
                    e if pin.volume.is_some() => {
                        Denial::new(volumes::RULE, field, value, e.to_string())
                    }
                    e => Denial::new(RULE, field, value, e.to_string()),
                };
                return Err(refuse(denial, rewrite));
            }
        }
    }
    Ok(())
}

/// Opens the pinned object, checks it, and bind-mounts it onto `dir/<index>`.
/// A volume is claimed for this container on the opened object, once
/// every other check has passed.
fn stage_one(
    pin: &Pin,
    dir: &Path,
    create: &CreateContext,
    policy: &Policy,
    field: &str,
) -> Result<PathBuf, StageError> {
    let source = pin.anchor.join(&pin.rest);
    let anchor = open_pinned(None, &pin.anchor, OFlag::O_DIRECTORY, ResolveFlag::empty())?;
    let rest: &Path = if pin.rest.as_os_str().is_empty() {
        Path::new(".")
    } else {
        &pin.rest
    };
    let subtree = matches!(pin.kind, PinKind::Subtree { .. } | PinKind::Volume);
    let extra = if subtree {
        ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_XDEV
    } else {
        ResolveFlag::RESOLVE_BENEATH
    };
    let object = open_pinned(Some(&anchor), rest, OFlag::empty(), extra).map_err(|e| match e {
        StageError::Resolve { errno, .. } => StageError::Resolve {
            path: source.display().to_string(),
            errno,
        },
        other => other,
    })?;
    let stat = fstat(object.as_raw_fd()).map_err(sys("fstat", &source))?;
    let file_type = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if file_type == SFlag::S_IFLNK {
        return Err(StageError::Resolve {
            path: source.display().to_string(),
            errno: Errno::ELOOP,
        });
    }
    let is_dir = file_type == SFlag::S_IFDIR;
    let read_only = match pin.kind {
        PinKind::Subtree { read_only } => {
            if mount_id(&anchor, &pin.anchor)? != mount_id(&object, &source)? {
                return Err(StageError::OtherMount(source.display().to_string()));
            }
            read_only
        }
        PinKind::Volume => {
            let volume = pin.volume.as_ref().ok_or(StageError::Resolve {
                path: source.display().to_string(),
                errno: Errno::EINVAL,
            })?;
            if mount_id(&anchor, &pin.anchor)? != mount_id(&object, &source)? {
                return Err(StageError::VolumeMount {
                    name: volume.name.clone(),
                    dir: pin.anchor.display().to_string(),
                });
            }
            if !is_dir {
                return Err(StageError::VolumeNotADir {
                    name: volume.name.clone(),
                    path: source.display().to_string(),
                });
            }
            claim_volume(volume, &object, &source, create, policy, field)?;
            false
        }
        PinKind::EngineFile => {
            let a = fstat(anchor.as_raw_fd()).map_err(sys("fstat", &pin.anchor))?;
            root_only(&pin.anchor, a.st_uid, a.st_mode)?;
            false
        }
        PinKind::InitBinary => {
            if file_type != SFlag::S_IFREG {
                return Err(StageError::NotAFile(source.display().to_string()));
            }
            root_only(&source, stat.st_uid, stat.st_mode)?;
            true
        }
    };
    let point = dir.join(pin.index.to_string());
    if is_dir {
        DirBuilder::new()
            .mode(0o700)
            .create(&point)
            .map_err(io(&point))?;
    } else {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&point)
            .map_err(io(&point))?;
    }
    let proc_path = PathBuf::from(format!("/proc/self/fd/{}", object.as_raw_fd()));
    mount(
        Some(&proc_path),
        &point,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(sys("bind-mount onto", &point))?;
    // Add nosuid,nodev (and ro) without clearing what the source mount had:
    // a bind remount sets the per-mount flags to exactly these.
    let kept = fstatvfs(object.as_fd())
        .map(|s| s.flags())
        .map_err(sys("statvfs", &source))?;
    let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    for (fs, ms) in [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if kept.contains(fs) {
            flags |= ms;
        }
    }
    if read_only {
        flags |= MsFlags::MS_RDONLY;
    }
    mount(None::<&str>, &point, None::<&str>, flags, None::<&str>)
        .map_err(sys("remount", &point))?;
    Ok(point)
}

/// Claims `volume` (open as `object`) for this container in the ledger and
/// judges the holder: anyone but this container is refused.
fn claim_volume(
    volume: &volumes::Volume,
    object: &OwnedFd,
    source: &Path,
    create: &CreateContext,
    policy: &Policy,
    field: &str,
) -> Result<(), StageError> {
    let ledger = |source| StageError::Ledger {
        name: volume.name.clone(),
        source,
    };
    let identity = volume_ledger::identity(object, source).map_err(ledger)?;
    let this = Holder {
        runc_root: create.runc_root.clone(),
        id: create.container_id.clone(),
    };
    let claim = volume_ledger::claim(volume, identity, &this).map_err(ledger)?;
    volumes::judge_claim(volume, field, &claim.holder, &this).map_err(StageError::Claimed)?;
    if claim.fresh {
        give_fresh_root(volume, object, source, policy)?;
    }
    Ok(())
}

/// On a volume's first use: an empty, root-owned `_data` goes to the
/// forced user ([`volumes::fresh_owner`]), through our fd on it.
fn give_fresh_root(
    volume: &volumes::Volume,
    object: &OwnedFd,
    source: &Path,
    policy: &Policy,
) -> Result<(), StageError> {
    let fd_path = PathBuf::from(format!("/proc/self/fd/{}", object.as_raw_fd()));
    let stat = fstat(object.as_raw_fd()).map_err(sys("fstat", source))?;
    let ledger = |e: std::io::Error| StageError::Ledger {
        name: volume.name.clone(),
        source: LedgerError::Io {
            path: source.display().to_string(),
            source: e,
        },
    };
    let empty = std::fs::read_dir(&fd_path)
        .map_err(ledger)?
        .next()
        .is_none();
    let root = volumes::FreshRoot {
        uid: stat.st_uid,
        gid: stat.st_gid,
        empty,
    };
    if let Some((uid, gid)) = volumes::fresh_owner(policy, root) {
        std::os::unix::fs::chown(&fd_path, Some(uid), Some(gid)).map_err(ledger)?;
    }
    Ok(())
}

/// `openat2(O_PATH)` with no symlink or magic link anywhere on the way:
/// `path` absolute from `/` when `dir` is `None`, else below `dir`.
fn open_pinned(
    dir: Option<&OwnedFd>,
    path: &Path,
    flags: OFlag,
    resolve: ResolveFlag,
) -> Result<OwnedFd, StageError> {
    // No O_NOFOLLOW: with O_PATH it would hand back the symlink itself,
    // where RESOLVE_NO_SYMLINKS alone refuses a trailing symlink (ELOOP).
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | flags)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS | resolve);
    let dirfd = dir.map_or(nix::libc::AT_FDCWD, AsRawFd::as_raw_fd);
    let fd = openat2(dirfd, path, how).map_err(|errno| StageError::Resolve {
        path: path.display().to_string(),
        errno,
    })?;
    // SAFETY: openat2 just returned this fd, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The id of the mount an fd is on (statx STATX_MNT_ID).
fn mount_id(fd: &OwnedFd, path: &Path) -> Result<u64, StageError> {
    statx_fd(fd)
        .map(|buf| buf.stx_mnt_id)
        .map_err(sys("statx (mount id)", path))
}

/// statx of the fd itself, which must report its mount id (Linux 5.8+).
pub(crate) fn statx_fd(fd: &OwnedFd) -> Result<nix::libc::statx, Errno> {
    // SAFETY: statx fills the zeroed buffer we pass; the empty path with
    // AT_EMPTY_PATH makes it describe the fd itself.
    let mut buf: nix::libc::statx = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        nix::libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            nix::libc::AT_EMPTY_PATH,
            nix::libc::STATX_MNT_ID,
            &mut buf,
        )
    };
    Errno::result(rc)?;
    if buf.stx_mask & nix::libc::STATX_MNT_ID == 0 {
        return Err(Errno::ENOTSUP);
    }
    Ok(buf)
}

/// Owned by root (or by us) and writable by neither group nor others.
fn root_only(path: &Path, uid: u32, mode: u32) -> Result<(), StageError> {
    let me = nix::unistd::geteuid().as_raw();
    if (uid == 0 || uid == me) && mode & 0o022 == 0 {
        Ok(())
    } else {
        Err(StageError::NotRootOnly {
            path: path.display().to_string(),
            uid,
            mode: mode & 0o7777,
        })
    }
}

/// Unmounts and removes every staging point of a container, and the pin
/// of its user namespace; absent is fine.
pub fn release(runc_root: &Path, id: &str) -> Result<(), StageError> {
    let pin = state_dir::container_dir(runc_root, id)?.join(state_dir::USERNS_PIN_FILE);
    let pin_released = detach(&pin).and_then(|()| match std::fs::remove_file(&pin) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(&pin)(e)),
    });
    // The binds are released whatever became of the pin.
    let binds_released = release_dir(&staging_dir(runc_root, id)?);
    pin_released.and(binds_released)
}

/// [`release`] where nothing can be refused any more (start, delete): a
/// failure is reported on stderr, since what is left behind is root-only.
pub fn release_quietly(runc_root: &Path, id: &str) {
    if let Err(e) = release(runc_root, id) {
        eprintln!("vibe-shim: releasing staged bind sources of {id}: {e}");
    }
}

/// Unmounts and removes each entry of `dir` (one level, no recursion), then
/// `dir` itself.
fn release_dir(dir: &Path) -> Result<(), StageError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let path = entry.map_err(io(dir))?.path();
        detach(&path)?;
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        let removed = if meta.is_dir() {
            std::fs::remove_dir(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(io(&path))?;
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(dir)(e)),
    }
}

/// Lazily unmounts everything mounted on `path`.
fn detach(path: &Path) -> Result<(), StageError> {
    for _ in 0..MAX_UNMOUNTS {
        match umount2(path, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW) {
            Ok(()) => continue,
            // Not (or no longer) a mount point.
            Err(Errno::EINVAL) | Err(Errno::ENOENT) => return Ok(()),
            Err(errno) => return Err(sys("unmount", path)(errno)),
        }
    }
    Err(sys("unmount", path)(Errno::EBUSY))
}

/// runc's own state roots on Debian (plain runc, Docker, containerd).
const RUNC_ROOT_PARENTS: &[(&str, bool)] = &[
    ("/run/runc", false),
    ("/run/docker/runtime-runc", true),
    ("/run/containerd/runc", true),
];

/// Whether a container with this id already exists: runc state under this
/// root, a vibe-shim container directory under another root, or runc state
/// under one of runc's usual roots. Fails closed (true) on anything it
/// cannot read.
pub fn container_id_in_use(runc_root: &Path, id: &str) -> bool {
    let Ok(ours) = state_dir::container_dir(runc_root, id) else {
        return true;
    };
    let exists = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    if exists(&runc_root.join(id)) {
        return true;
    }
    let our_root_dir = ours.parent().map(Path::to_path_buf).unwrap_or_default();
    match std::fs::read_dir(state_dir::BASE) {
        Ok(roots) => {
            for root in roots {
                let Ok(root) = root else { return true };
                if root.path() != our_root_dir && exists(&root.path().join(id)) {
                    return true;
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => return true,
    }
    let mut runc_roots = Vec::new();
    for (path, is_parent) in RUNC_ROOT_PARENTS {
        if *is_parent {
            if let Ok(children) = std::fs::read_dir(path) {
                runc_roots.extend(children.flatten().map(|c| c.path()));
            }
        } else {
            runc_roots.push(PathBuf::from(path));
        }
    }
    runc_roots
        .iter()
        .filter(|r| state_dir::runc_root(Some(r.as_os_str())) != runc_root)
        .any(|r| exists(&r.join(id).join("state.json")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn pinned_open_refuses_symlinks_and_escapes() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("real/sub")).unwrap();
        symlink("/", root.join("link")).unwrap();
        symlink("real", root.join("rel")).unwrap();
        let anchor = open_pinned(None, &root, OFlag::O_DIRECTORY, ResolveFlag::empty()).unwrap();
        let beneath = ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_XDEV;
        assert!(open_pinned(
            Some(&anchor),
            Path::new("real/sub"),
            OFlag::empty(),
            beneath
        )
        .is_ok());
        assert!(open_pinned(Some(&anchor), Path::new("."), OFlag::empty(), beneath).is_ok());
        for bad in ["link", "link/etc", "rel/sub", "../root/real", "/etc"] {
            assert!(
                open_pinned(Some(&anchor), Path::new(bad), OFlag::empty(), beneath).is_err(),
                "{bad}"
            );
        }
        // The anchor itself is opened without symlinks too.
        symlink(&root, tmp.path().join("alias")).unwrap();
        assert!(open_pinned(
            None,
            &tmp.path().join("alias"),
            OFlag::O_DIRECTORY,
            ResolveFlag::empty()
        )
        .is_err());
    }

    #[test]
    fn root_only_means_owner_and_no_group_or_other_write() {
        let p = Path::new("/x");
        assert!(root_only(p, 0, 0o100755).is_ok());
        assert!(root_only(p, 0, 0o100775).is_err());
        assert!(root_only(p, 0, 0o100757).is_err());
        assert!(root_only(p, 4242, 0o100755).is_err() || nix::unistd::geteuid().as_raw() == 4242);
    }

    #[test]
    fn release_of_nothing_is_fine_and_never_recursive() {
        let tmp = tempfile::tempdir().unwrap();
        release_dir(&tmp.path().join("absent")).unwrap();
        let dir = tmp.path().join("binds");
        std::fs::create_dir_all(dir.join("0/deeper")).unwrap();
        std::fs::write(dir.join("1"), b"").unwrap();
        // A non-empty entry is not a staging point: refuse to recurse into it.
        assert!(release_dir(&dir).is_err());
        assert!(dir.join("0/deeper").exists());
        std::fs::remove_dir(dir.join("0/deeper")).unwrap();
        release_dir(&dir).unwrap();
        assert!(!dir.exists());
    }
}
