//! Reading a file of a container's rootfs before runc runs, where the
//! client controls every byte of it: each path resolves inside the rootfs
//! only (`openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)`
//! from the rootfs's own descriptor, so an image symlink to `/etc/shadow`
//! or `../../..` stays in the image, as it does for the container), the
//! file must be a regular one (a FIFO would block, a device would be read),
//! and at most `max` bytes are taken.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{open, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use serde_json::Value;

/// More is no passwd file an image would ship: not read at all.
pub const PASSWD_MAX: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    #[error("{path}: cannot open inside the rootfs: {errno}")]
    Open { path: PathBuf, errno: Errno },
    #[error("{0}: not a regular file")]
    NotAFile(PathBuf),
    #[error("{path}: larger than {max} bytes")]
    TooLarge { path: PathBuf, max: u64 },
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The bytes of `path` (absolute, as the container names it) inside the
/// rootfs directory `root` (not itself a symlink: runc refuses that too).
pub fn read_in_root(root: &Path, path: &Path, max: u64) -> Result<Vec<u8>, RootfsError> {
    let open_err = |path: &Path| {
        let path = path.to_path_buf();
        move |errno| RootfsError::Open { path, errno }
    };
    let rootfd = open_root(root).map_err(open_err(root))?;
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_IN_ROOT
                | ResolveFlag::RESOLVE_NO_MAGICLINKS
                | ResolveFlag::RESOLVE_NO_XDEV,
        );
    let fd = openat2(rootfd.as_raw_fd(), path, how).map_err(open_err(path))?;
    // SAFETY: openat2 just returned this fd, and nothing else owns it.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let read_err = |source| RootfsError::Read {
        path: path.to_path_buf(),
        source,
    };
    if !file.metadata().map_err(read_err)?.file_type().is_file() {
        return Err(RootfsError::NotAFile(path.to_path_buf()));
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > max {
        return Err(RootfsError::TooLarge {
            path: path.to_path_buf(),
            max,
        });
    }
    Ok(bytes)
}

/// The rootfs directory itself, never through a symlink (runc refuses one).
fn open_root(root: &Path) -> Result<OwnedFd, Errno> {
    let fd = open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // SAFETY: open just returned this fd, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Where runc's in-root resolution of the container path `dest` lands,
/// as a container path: the deepest existing part resolved inside `root`
/// (image symlinks followed, never out of it), the rest (which runc
/// creates) appended. `None` when even `/` cannot be opened.
pub fn placed_at(root: &Path, dest: &str) -> Option<String> {
    let rootfd = open_root(root).ok()?;
    let root_name = std::fs::read_link(format!("/proc/self/fd/{}", rootfd.as_raw_fd())).ok()?;
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let mut existing = Path::new(dest);
    let mut rest = Vec::new();
    loop {
        if let Ok(fd) = openat2(rootfd.as_raw_fd(), existing, how) {
            // SAFETY: openat2 just returned this fd, and nothing else owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            let name = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
            let inside = name.strip_prefix(&root_name).ok()?;
            let mut placed = Path::new("/").join(inside);
            placed.extend(rest.iter().rev());
            return placed.to_str().map(str::to_string);
        }
        rest.push(existing.file_name()?.to_os_string());
        existing = existing.parent()?;
    }
}

/// The image's home directories by uid, from `/etc/passwd` in the spec's
/// (anchored, absolute) `root.path`; empty when there is none to read: the
/// home rule then falls back to the spec's HOME.
pub fn image_homes(spec: &Value) -> BTreeMap<u32, String> {
    let Some(root) = spec.pointer("/root/path").and_then(Value::as_str) else {
        return BTreeMap::new();
    };
    if !root.starts_with('/') {
        return BTreeMap::new();
    }
    match read_in_root(Path::new(root), Path::new("/etc/passwd"), PASSWD_MAX) {
        Ok(bytes) => vibe_policy::lang::passwd::homes(&bytes),
        Err(_) => BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rootfs() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        dir
    }

    #[test]
    fn a_destination_is_placed_where_image_symlinks_lead_inside_the_root() {
        let dir = rootfs();
        std::fs::create_dir_all(dir.path().join("var/tmp")).unwrap();
        std::os::unix::fs::symlink("/var/tmp", dir.path().join("tmp")).unwrap();
        std::os::unix::fs::symlink("../../../..", dir.path().join("up")).unwrap();
        let at = |dest| placed_at(dir.path(), dest);
        assert_eq!(at("/tmp").as_deref(), Some("/var/tmp"));
        assert_eq!(at("/tmp/new/dir").as_deref(), Some("/var/tmp/new/dir"));
        assert_eq!(at("/etc").as_deref(), Some("/etc"));
        assert_eq!(at("/missing").as_deref(), Some("/missing"));
        assert_eq!(at("/").as_deref(), Some("/"));
        // Out of the root is still inside it, as for runc.
        assert_eq!(at("/up/x").as_deref(), Some("/x"));
    }

    #[test]
    fn reads_the_images_passwd() {
        let dir = rootfs();
        std::fs::write(
            dir.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n",
        )
        .unwrap();
        let spec = serde_json::json!({"root": {"path": dir.path()}});
        let homes = image_homes(&spec);
        assert_eq!(homes.get(&1000).map(String::as_str), Some("/home/agent"));
    }

    #[test]
    fn a_symlink_out_of_the_root_stays_inside_it() {
        let outside = tempfile::tempdir().unwrap();
        let host_passwd = outside.path().join("passwd");
        std::fs::write(&host_passwd, "x:x:1000:1000::/home/host-secret:/bin/sh\n").unwrap();
        let dir = rootfs();
        // Absolute, and relative climbing out: both resolve in the root.
        std::os::unix::fs::symlink(&host_passwd, dir.path().join("etc/passwd")).unwrap();
        let spec = serde_json::json!({"root": {"path": dir.path()}});
        assert!(image_homes(&spec).is_empty());
        std::fs::remove_file(dir.path().join("etc/passwd")).unwrap();
        let climb = format!("../../../../../../..{}", host_passwd.display());
        std::os::unix::fs::symlink(&climb, dir.path().join("etc/passwd")).unwrap();
        assert!(image_homes(&spec).is_empty());
        // A symlinked rootfs is not followed either.
        let link = outside.path().join("rootlink");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        let err = read_in_root(&link, Path::new("/etc/passwd"), PASSWD_MAX).unwrap_err();
        assert!(matches!(err, RootfsError::Open { .. }), "{err}");
    }

    #[test]
    fn only_a_regular_file_within_the_cap() {
        let dir = rootfs();
        let fifo = dir.path().join("etc/passwd");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o644)).unwrap();
        let err = read_in_root(dir.path(), Path::new("/etc/passwd"), 10).unwrap_err();
        assert!(matches!(err, RootfsError::NotAFile(_)), "{err}");
        std::fs::remove_file(&fifo).unwrap();
        std::fs::write(&fifo, "0123456789a").unwrap();
        let err = read_in_root(dir.path(), Path::new("/etc/passwd"), 10).unwrap_err();
        assert!(matches!(err, RootfsError::TooLarge { .. }), "{err}");
        assert_eq!(
            read_in_root(dir.path(), Path::new("etc/passwd"), 11).unwrap(),
            b"0123456789a"
        );
    }
}
