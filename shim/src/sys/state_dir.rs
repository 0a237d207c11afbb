//! vibe-shim's own per-container directory, which nobody but root can change:
//!
//! ```text
//! /run/vibe-shim/containers/<runc root, escaped>/<container id>/
//!     config.json   the judged spec: this directory is the bundle runc gets
//!     notice        what create changed, bound read-only into the container
//!                   (`vibe-shim explain` prints it)
//!     ...           other per-container state (staged bind sources, ...)
//! ```
//!
//! Beside it, root-only, start's assurance record of each container:
//!
//! ```text
//! /run/vibe-shim/assurance/<runc root, escaped>/<container id>.json
//! ```
//!
//! It exists because the engine's bundle directory is not ours: whatever is
//! in it can change between our check and runc's read. Keyed by runc's root
//! as well as the id, since two engines (or two containerd namespaces) may
//! reuse an id under different roots.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Where every per-container directory lives.
pub const BASE: &str = "/run/vibe-shim/containers";
/// How files in a container's directory are written: not synced, since
/// nothing in it outlives a crash that ends the container too (and on most
/// hosts /run is a tmpfs, where fsync does nothing anyway).
pub const STATE: vibe_hooks::fsio::Durability = vibe_hooks::fsio::Durability::Volatile;
/// Where start writes each container's assurance record (0600, in 0700
/// directories; the container reads its copy beside the notice).
pub const ASSURANCE_BASE: &str = "/run/vibe-shim/assurance";
/// The container's notice file ([`vibe_policy::notice`]).
pub const NOTICE_FILE: &str = "notice";
/// The bind that pins a private container's user namespace until runc has
/// joined it ([`crate::sys::userns_pin`]).
pub const USERNS_PIN_FILE: &str = "userns";
/// runc's state directory when `--root` is not given (as root).
pub const DEFAULT_RUNC_ROOT: &str = "/run/runc";

#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("invalid container id {0:?} (runc allows letters, digits, '_', '+', '-' and '.')")]
    BadId(String),
    #[error("{path}: {reason}")]
    Unsafe { path: String, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateDirError + '_ {
    move |source| StateDirError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The one container-id rule ([`vibe_policy::lang::container_id`]): an id
/// outside it could escape the directory.
pub fn check_id(id: &str) -> Result<(), StateDirError> {
    if vibe_policy::lang::container_id::is_valid(id) {
        Ok(())
    } else {
        Err(StateDirError::BadId(id.to_string()))
    }
}

/// The absolute, lexically clean form of runc's `--root` (runc makes it
/// absolute the same way, against its working directory).
pub fn runc_root(root: Option<&OsStr>) -> PathBuf {
    let given = Path::new(root.unwrap_or(OsStr::new(DEFAULT_RUNC_ROOT)));
    let absolute = if given.is_absolute() {
        given.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(given)
    };
    let mut clean = PathBuf::from("/");
    for part in absolute.components() {
        match part {
            std::path::Component::Normal(p) => clean.push(p),
            std::path::Component::ParentDir => {
                clean.pop();
            }
            _ => {}
        }
    }
    clean
}

/// One path component naming a runc root (shared with the egress daemon's
/// records, so both name a root alike).
fn escape_root(root: &Path) -> String {
    vibe_hooks::egress::records::escape_root(root)
}

/// The container's directory under `base` (without creating it).
pub fn container_dir_in(base: &Path, root: &Path, id: &str) -> Result<PathBuf, StateDirError> {
    check_id(id)?;
    Ok(base.join(escape_root(root)).join(id))
}

/// [`container_dir_in`] under [`BASE`].
pub fn container_dir(root: &Path, id: &str) -> Result<PathBuf, StateDirError> {
    container_dir_in(Path::new(BASE), root, id)
}

/// The container's assurance record under `base` (without creating it).
pub fn assurance_record_in(base: &Path, root: &Path, id: &str) -> Result<PathBuf, StateDirError> {
    check_id(id)?;
    Ok(base.join(escape_root(root)).join(format!("{id}.json")))
}

/// [`assurance_record_in`] under [`ASSURANCE_BASE`].
pub fn assurance_record(root: &Path, id: &str) -> Result<PathBuf, StateDirError> {
    assurance_record_in(Path::new(ASSURANCE_BASE), root, id)
}

/// Creates `dir` and its missing parents as root-only (0700) directories,
/// and checks that every existing one from `/` down is a real directory
/// (not a symlink) owned by us and writable by nobody else, so no other
/// user can swap anything below it.
pub fn ensure_private(dir: &Path) -> Result<(), StateDirError> {
    let me = nix::unistd::geteuid().as_raw();
    let mut path = PathBuf::from("/");
    for part in dir.components().skip(1) {
        path.push(part);
        match std::fs::symlink_metadata(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                    Ok(()) => {}
                    // Another vibe-shim made it meanwhile: judged below.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io(&path)(e)),
                }
            }
            Err(e) => return Err(io(&path)(e)),
        }
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        let unsafe_because = if !meta.file_type().is_dir() {
            Some("not a directory")
        } else if meta.uid() != me && meta.uid() != 0 {
            Some("owned by another user")
        } else if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
            Some("writable by group or others")
        } else {
            None
        };
        if let Some(reason) = unsafe_because {
            return Err(StateDirError::Unsafe {
                path: path.display().to_string(),
                reason: reason.into(),
            });
        }
    }
    Ok(())
}

/// Whether runc has state for `id` under `root` (a created container).
pub fn container_exists(root: &Path, id: &str) -> bool {
    check_id(id).is_ok() && root.join(id).join("state.json").exists()
}

/// Mount points at or below `dir`, deepest first, from mountinfo.
fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = text
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape_mountinfo)
        .filter(|point| point.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(field: &str) -> PathBuf {
    let bytes = crate::sys::host::unescape_octal(field.as_bytes());
    PathBuf::from(<std::ffi::OsStr as OsStrExt>::from_bytes(&bytes))
}

/// Removes a container's directory and everything in it; absent is fine.
/// Anything mounted below it is detached first, and if a mount is still
/// there the removal stops: deleting through a bind mount would delete the
/// host files it shows.
pub fn remove(dir: &Path) -> Result<(), StateDirError> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Ok(());
    }
    for point in mounts_below(dir) {
        // EINVAL: no longer a mount point (detached with its parent).
        match nix::mount::umount2(&point, nix::mount::MntFlags::MNT_DETACH) {
            Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => {}
            Err(e) => return Err(io(&point)(std::io::Error::from(e))),
        }
    }
    if let Some(point) = mounts_below(dir).first() {
        return Err(StateDirError::Unsafe {
            path: point.display().to_string(),
            reason: "still a mount point; not removed".into(),
        });
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(dir)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn ids_follow_the_container_id_rule() {
        for ok in ["abc", "a.b-c_d", "0123456789abcdef"] {
            assert!(check_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "a+b", "ä", "x\n"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn roots_are_absolute_clean_and_escaped_apart() {
        assert_eq!(runc_root(None), PathBuf::from("/run/runc"));
        assert_eq!(
            runc_root(Some(OsStr::new("/run//x/../runc/"))),
            PathBuf::from("/run/runc")
        );
        let a = container_dir_in(Path::new("/b"), Path::new("/run/a_b"), "c").unwrap();
        let b = container_dir_in(Path::new("/b"), Path::new("/run/a/b"), "c").unwrap();
        assert_ne!(a, b);
        assert_eq!(b, PathBuf::from("/b/%2Frun%2Fa%2Fb/c"));
        assert!(container_dir_in(Path::new("/b"), Path::new("/r"), "../x").is_err());
        assert_eq!(
            assurance_record_in(Path::new("/a"), Path::new("/run/a/b"), "c").unwrap(),
            PathBuf::from("/a/%2Frun%2Fa%2Fb/c.json")
        );
        assert!(assurance_record_in(Path::new("/a"), Path::new("/r"), "../x").is_err());
    }

    #[test]
    fn private_dirs_are_made_0700_and_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b/c");
        ensure_private(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        ensure_private(&dir).unwrap();
        // A world-writable level (without the sticky bit) is refused.
        std::fs::set_permissions(tmp.path().join("a"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        assert!(ensure_private(&dir).is_err());
        std::fs::set_permissions(tmp.path().join("a"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        // A symlink on the way is refused.
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path().join("a"), &link).unwrap();
        assert!(ensure_private(&link.join("b")).is_err());
        remove(&dir).unwrap();
        remove(&dir).unwrap();
        assert!(!dir.exists());
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(
            unescape_mountinfo("/a\\040b\\134c"),
            PathBuf::from("/a b\\c")
        );
        assert_eq!(unescape_mountinfo("/plain"), PathBuf::from("/plain"));
    }
}
