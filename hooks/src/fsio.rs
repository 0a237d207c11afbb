//! The one way vibe-shim writes a file it owns: never through a symlink,
//! never onto a name someone else made, with the mode it asks for whatever
//! the umask, and (for a replacement) never half-written.
//!
//! The lowest crate that does I/O holds it, so the engine configs install
//! edits, lockdown's record, create's judged spec and egress records all
//! share one posture.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// How many temp names to try before giving up: a name is taken only by a
/// crashed run of the same pid or by someone planting it.
const TEMP_ATTEMPTS: u32 = 16;

/// Creates `path`, which must not exist, with exactly `mode`, and writes
/// `bytes` to it, synced or not as `durability` says. O_EXCL|O_NOFOLLOW:
/// never through a symlink and never over an existing file (a planted name
/// fails instead); O_CLOEXEC: no child inherits it. A failed write leaves
/// the file behind: it is new, so no one else's bytes are lost, and the
/// caller names what failed.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32, durability: Durability) -> io::Result<()> {
    let mut file = create_excl(path, mode)?;
    file.write_all(bytes)?;
    match durability {
        Durability::Synced => file.sync_all(),
        Durability::Volatile => Ok(()),
    }
}

/// Replaces (or creates) `path` with `bytes` at `mode`: a temp file in the
/// same directory (created as [`write_new`] creates), synced, renamed over
/// `path`, then the directory synced, so a reader sees the old bytes or the
/// new ones and a crash leaves one of the two. A symlink at `path` is
/// replaced, never followed.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    replace(path, bytes, mode, None, Durability::Synced)
}

/// Whether [`replace`] makes the new bytes survive a crash, or only makes
/// every reader see the old bytes or the new ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the file and the directory.
    Synced,
    /// No fsync: for files no one needs after a crash (a bundle the engine
    /// recreates, a container's state directory, which a reboot ends with
    /// the container), where fsync would only cost time.
    Volatile,
}

/// [`write_atomic`] with the owner set (when running as root) and the
/// durability chosen.
pub fn replace(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
    durability: Durability,
) -> io::Result<()> {
    let dir = parent_dir(path);
    let (tmp, mut file) = temp_in(dir, path, mode)?;
    let written = (|| {
        if let Some((uid, gid)) = owner.filter(|_| nix::unistd::geteuid().is_root()) {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
        }
        file.write_all(bytes)?;
        if durability == Durability::Synced {
            file.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    match durability {
        Durability::Synced => sync_dir(dir),
        Durability::Volatile => Ok(()),
    }
}

/// Makes a rename or an unlink in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_CLOEXEC)
        .open(dir)?
        .sync_all()
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn create_excl(path: &Path, mode: u32) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode & 0o7777)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)?;
    // The mode asked for, not the one the umask left.
    file.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))?;
    Ok(file)
}

/// A fresh temp file next to `target`: `.NAME.vibe-shim.PID.N.tmp`.
fn temp_in(dir: &Path, target: &Path, mode: u32) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut last = None;
    for _ in 0..TEMP_ATTEMPTS {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.vibe-shim.{}.{n}.tmp", std::process::id()));
        match create_excl(&tmp, mode) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free temp name")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn write_new_refuses_an_existing_name_and_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_new(&path, b"one", 0o600, Durability::Synced).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
        let err = write_new(&path, b"two", 0o600, Durability::Synced).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(dir.path().join("target"), &link).unwrap();
        assert!(write_new(&link, b"x", 0o600, Durability::Volatile).is_err());
        assert!(!dir.path().join("target").exists());
    }

    #[test]
    fn write_atomic_replaces_with_the_mode_asked_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conf");
        write_atomic(&path, b"old", 0o644).unwrap();
        write_atomic(&path, b"new", 0o640).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o640);
        // A symlink at the name is replaced, its target untouched.
        let target = dir.path().join("target");
        std::fs::write(&target, "mine").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_atomic(&link, b"ours", 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine");
        assert!(!std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        assert!(write_atomic(&dir.path().join("no/such/dir/f"), b"x", 0o600).is_err());
    }
}

/// Why a root-private file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PrivateFileError {
    #[error("cannot open {path} (without following a symlink): {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{path} must be a regular file of root's, mode 0600 or tighter (uid {uid}, mode {mode:04o})"
    )]
    NotPrivate { path: PathBuf, uid: u32, mode: u32 },
    #[error("{path} is larger than {max} bytes")]
    TooLarge { path: PathBuf, max: u64 },
    #[error("directory {dir} above {path} {reason}: a secret's directories must be root's and writable by nobody else")]
    UnsafeDir {
        path: PathBuf,
        dir: PathBuf,
        reason: &'static str,
    },
    #[error("{path} is not an absolute, clean path")]
    NotClean { path: PathBuf },
}

impl PrivateFileError {
    /// The file is not there at all (an optional secret may be absent).
    pub fn is_missing(&self) -> bool {
        matches!(self, PrivateFileError::Open { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// The bytes of `path`, read the one way a secret is read: every
/// directory on the way opened without following a symlink and judged on
/// its descriptor (root's, writable by nobody else; a sticky ancestor such
/// as /var/tmp passes, since only root may rename root's entries in it),
/// then the file itself the same way (a regular file of root's, no group
/// or other bits), at most `max` bytes. A user who owns a directory above
/// the file could otherwise swap which file is read between two reads.
/// `path` (absolute, clean) opened for reading by a walk of descriptors
/// from `/`, each directory judged as [`read_private`] says.
fn open_below_root_dirs(path: &Path) -> Result<File, PrivateFileError> {
    use nix::fcntl::OFlag;
    use nix::sys::stat::{fstat, Mode, SFlag};
    use std::collections::VecDeque;
    use std::ffi::{OsStr, OsString};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::path::Component;
    /// Symlinks followed at most (the kernel's own limit).
    const MAX_LINKS: usize = 40;
    let open = |source: io::Error| PrivateFileError::Open {
        path: path.to_path_buf(),
        source,
    };
    let errno = |e: nix::errno::Errno| open(io::Error::from(e));
    let unsafe_dir = |dir: PathBuf, reason| PrivateFileError::UnsafeDir {
        path: path.to_path_buf(),
        dir,
        reason,
    };
    let openat = |dir: &OwnedFd, name: &OsStr, flags: OFlag| {
        let fd = nix::fcntl::openat(
            Some(dir.as_raw_fd()),
            name,
            flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)?;
        // SAFETY: openat just returned this fd, and nothing else owns it.
        Ok::<OwnedFd, PrivateFileError>(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    // Root's, and writable by nobody else (a sticky ancestor passes unless
    // `strict`: the directory that holds the file itself).
    let judge = |fd: &OwnedFd, at: &Path, strict: bool| {
        let st = fstat(fd.as_raw_fd()).map_err(errno)?;
        if st.st_uid != 0 {
            return Err(unsafe_dir(at.to_path_buf(), "is not root's"));
        }
        if st.st_mode & 0o022 != 0 && (strict || st.st_mode & 0o1000 == 0) {
            return Err(unsafe_dir(
                at.to_path_buf(),
                "is writable by group or others",
            ));
        }
        Ok(())
    };
    let root = || -> Result<(OwnedFd, PathBuf), PrivateFileError> {
        let fd = nix::fcntl::open(
            "/",
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)?;
        // SAFETY: open just returned this fd, and nothing else owns it.
        Ok((unsafe { OwnedFd::from_raw_fd(fd) }, PathBuf::from("/")))
    };
    if !path.is_absolute() || path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(PrivateFileError::NotClean {
            path: path.to_path_buf(),
        });
    }
    let names = |p: &Path| -> VecDeque<OsString> {
        p.components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some(OsString::from("..")),
                _ => None,
            })
            .collect()
    };
    // Each directory entered is judged; a symlink on the way is followed
    // only when it is root's (and so is the directory holding it), and its
    // target's directories are judged the same way.
    let mut queue = names(path);
    let mut stack = vec![root()?];
    judge(&stack[0].0, &stack[0].1, false)?;
    let mut links = 0;
    while let Some(name) = queue.pop_front() {
        if name == ".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        let (dir, at) = stack
            .last()
            .ok_or_else(|| open(io::Error::other("no directory")))?;
        let here = at.join(&name);
        let entry = openat(dir, &name, OFlag::O_PATH)?;
        let st = fstat(entry.as_raw_fd()).map_err(errno)?;
        let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
        if kind == SFlag::S_IFLNK {
            if st.st_uid != 0 {
                return Err(unsafe_dir(here, "is a symlink that is not root's"));
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(open(io::Error::from_raw_os_error(nix::libc::ELOOP)));
            }
            let target =
                nix::fcntl::readlinkat(Some(dir.as_raw_fd()), name.as_os_str()).map_err(errno)?;
            let target = PathBuf::from(target);
            if target.is_absolute() {
                stack.truncate(0);
                stack.push(root()?);
            }
            let mut rest = names(&target);
            rest.extend(queue);
            queue = rest;
            continue;
        }
        if queue.is_empty() {
            // The file itself: its directory may not be writable by anyone
            // else at all, sticky or not.
            judge(dir, at, true)?;
            let fd = openat(dir, &name, OFlag::O_RDONLY | OFlag::O_NONBLOCK)?;
            return Ok(File::from(fd));
        }
        if kind != SFlag::S_IFDIR {
            return Err(open(io::Error::from_raw_os_error(nix::libc::ENOTDIR)));
        }
        drop(entry);
        let fd = openat(dir, &name, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
        judge(&fd, &here, false)?;
        stack.push((fd, here));
    }
    Err(PrivateFileError::NotClean {
        path: path.to_path_buf(),
    })
}

pub fn read_private(path: &Path, max: u64) -> Result<Vec<u8>, PrivateFileError> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let open = |source| PrivateFileError::Open {
        path: path.to_path_buf(),
        source,
    };
    let file = open_below_root_dirs(path)?;
    let meta = file.metadata().map_err(open)?;
    if !meta.file_type().is_file() || meta.uid() != 0 || meta.mode() & 0o077 != 0 {
        return Err(PrivateFileError::NotPrivate {
            path: path.to_path_buf(),
            uid: meta.uid(),
            mode: meta.mode() & 0o7777,
        });
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(open)?;
    if bytes.len() as u64 > max {
        bytes.fill(0);
        return Err(PrivateFileError::TooLarge {
            path: path.to_path_buf(),
            max,
        });
    }
    Ok(bytes)
}
