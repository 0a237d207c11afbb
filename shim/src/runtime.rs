//! Finding the real runc, never vibe-shim itself.

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Set in the environment before runc is exec'd. Seeing it again on entry
/// means "runc" led back to vibe-shim, which would loop forever.
pub const ACTIVE_ENV: &str = "VIBE_SHIM_ACTIVE";

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("[runtime] path {0} does not exist")]
    Missing(PathBuf),
    #[error("[runtime] path {0} is not an executable file")]
    NotExecutable(PathBuf),
    #[error("[runtime] path {0} is vibe-shim itself")]
    IsSelf(PathBuf),
    #[error("no runc found in PATH ({0}) other than vibe-shim itself")]
    NotInPath(String),
    /// Lockdown's record of the real runc cannot be read.
    #[error(transparent)]
    Lockdown(#[from] crate::install::lockdown::LockdownError),
    #[error("the recorded real runc {} must be a regular file owned by root and writable by nobody else", .0.display())]
    RecordedUnsafe(PathBuf),
    #[error("vibe-shim was started by vibe-shim ({ACTIVE_ENV} is set): \"runc\" resolves to vibe-shim; set [runtime] path")]
    Recursion,
}

/// Identity of a file: its canonical path and (device, inode).
#[derive(Debug, Clone, PartialEq)]
pub struct FileId {
    pub canonical: PathBuf,
    pub dev_ino: (u64, u64),
}

impl FileId {
    pub fn of(path: &Path) -> Option<FileId> {
        let canonical = std::fs::canonicalize(path).ok()?;
        let meta = std::fs::metadata(&canonical).ok()?;
        Some(FileId {
            canonical,
            dev_ino: (meta.dev(), meta.ino()),
        })
    }

    fn same_as(&self, other: &FileId) -> bool {
        self.canonical == other.canonical || self.dev_ino == other.dev_ino
    }
}

/// vibe-shim's own binary (`/proc/self/exe`).
pub fn own_exe() -> Option<FileId> {
    FileId::of(Path::new("/proc/self/exe"))
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Refuses when vibe-shim is re-entered through "runc" (see [`ACTIVE_ENV`]).
pub fn check_not_reentered(env_value: Option<&OsStr>) -> Result<(), RuntimeError> {
    match env_value {
        Some(_) => Err(RuntimeError::Recursion),
        None => Ok(()),
    }
}

/// The real runtime: `[runtime] path` if configured (it must exist and be
/// executable), else the first `runc` in `path_var` that is not `self_exe`.
pub fn find(
    configured: Option<&Path>,
    path_var: Option<&OsStr>,
    self_exe: Option<&FileId>,
) -> Result<PathBuf, RuntimeError> {
    let is_self = |candidate: &Path| {
        self_exe.is_some_and(|me| FileId::of(candidate).is_some_and(|c| c.same_as(me)))
    };
    if let Some(path) = configured {
        if !path.exists() {
            return Err(RuntimeError::Missing(path.to_path_buf()));
        }
        if !is_executable_file(path) {
            return Err(RuntimeError::NotExecutable(path.to_path_buf()));
        }
        if is_self(path) {
            return Err(RuntimeError::IsSelf(path.to_path_buf()));
        }
        return Ok(path.to_path_buf());
    }
    let search = path_var.unwrap_or_else(|| {
        OsStr::new("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    });
    std::env::split_paths(search)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("runc"))
        .find(|candidate| is_executable_file(candidate) && !is_self(candidate))
        .ok_or_else(|| RuntimeError::NotInPath(search.to_string_lossy().into_owned()))
}

/// Why the recorded real runc could not be run through a sealed copy.
#[derive(Debug, thiserror::Error)]
#[error("[runtime] sealed exec of {path}: {what}: {source}")]
pub struct SealedExecError {
    pub path: PathBuf,
    pub what: &'static str,
    #[source]
    pub source: std::io::Error,
}

/// The real runc lockdown keeps with no execute bit: it must be a regular
/// file owned by root and writable by nobody else (every container runs it).
pub fn check_recorded(path: &Path, self_exe: Option<&FileId>) -> Result<PathBuf, RuntimeError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(_) => return Err(RuntimeError::Missing(path.to_path_buf())),
    };
    if !meta.file_type().is_file() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(RuntimeError::RecordedUnsafe(path.to_path_buf()));
    }
    if self_exe.is_some_and(|me| FileId::of(path).is_some_and(|c| c.same_as(me))) {
        return Err(RuntimeError::IsSelf(path.to_path_buf()));
    }
    Ok(path.to_path_buf())
}

/// The seals runc 1.1 checks on `/proc/self/exe` to skip its own memfd
/// copy for `runc init` (libcontainer/nsenter/cloned_binary.c).
fn runc_seals() -> nix::fcntl::SealFlag {
    use nix::fcntl::SealFlag;
    SealFlag::F_SEAL_SEAL | SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_WRITE
}

/// Linux >= 6.3: ask for an executable memfd explicitly (`vm.memfd_noexec`).
const MFD_EXEC: nix::libc::c_uint = 0x0010;

/// The mode lockdown keeps the real runc at: readable by root, executable by
/// nobody, so a client naming it (`ctr --runc-binary`, `podman --runtime`)
/// gets EACCES even as root.
pub const SEALED_MODE: u32 = 0o400;

/// Opens `path`, checks what was opened (root-owned, writable by nobody
/// else), takes away any execute bit a package upgrade put back, and copies
/// it into a sealed memfd: what was checked is what runs, and the file
/// itself never needs an execute bit. The memfd's fd (close-on-exec).
pub fn sealed_copy(path: &Path) -> Result<std::os::fd::OwnedFd, SealedExecError> {
    use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |what: &'static str| {
        move |source: std::io::Error| SealedExecError {
            path: path.to_path_buf(),
            what,
            source,
        }
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
        .map_err(fail("open"))?;
    let meta = file.metadata().map_err(fail("fstat"))?;
    if !meta.file_type().is_file() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(fail("check")(std::io::Error::other(
            "not a regular file owned by root and writable by nobody else",
        )));
    }
    if meta.mode() & 0o111 != 0 {
        // A dpkg upgrade lands at the diverted name with 0755. Best effort:
        // failing here would stop every container; doctor reports the bit.
        let _ = file.set_permissions(std::fs::Permissions::from_mode(SEALED_MODE));
    }
    let name = c"runc";
    let base = MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING;
    let memfd = match memfd_create(name, base | MemFdCreateFlag::from_bits_retain(MFD_EXEC)) {
        // Before Linux 6.3 the flag is unknown.
        Err(nix::errno::Errno::EINVAL) => memfd_create(name, base),
        other => other,
    }
    .map_err(|e| fail("memfd_create (vm.memfd_noexec=2 forbids executable memfds)")(e.into()))?;
    let mut copy = std::fs::File::from(memfd);
    // std's copy uses copy_file_range/sendfile between files.
    let len = std::io::copy(&mut file, &mut copy).map_err(fail("copy"))?;
    if len != meta.len() {
        return Err(fail("copy")(std::io::Error::other(format!(
            "copied {len} of {} bytes",
            meta.len()
        ))));
    }
    nix::fcntl::fcntl(
        std::os::fd::AsRawFd::as_raw_fd(&copy),
        nix::fcntl::FcntlArg::F_ADD_SEALS(runc_seals()),
    )
    .map_err(|e| fail("seal")(e.into()))?;
    Ok(copy.into())
}

/// Replaces this process with the sealed copy of `path` (argv[0] stays what
/// runc would be called by). Returns only on failure.
pub fn exec_sealed(
    path: &Path,
    argv: &[std::ffi::CString],
) -> Result<std::convert::Infallible, SealedExecError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let memfd = sealed_copy(path)?;
    let env: Vec<std::ffi::CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            std::ffi::CString::new(kv).ok()
        })
        .collect();
    // execveat(AT_EMPTY_PATH) needs no /proc (a chroot may have none).
    let errno = match nix::unistd::execveat(
        Some(memfd.as_raw_fd()),
        c"",
        argv,
        &env,
        nix::fcntl::AtFlags::AT_EMPTY_PATH,
    ) {
        Err(errno) => errno,
        Ok(never) => match never {},
    };
    Err(SealedExecError {
        path: path.to_path_buf(),
        what: "execveat",
        source: errno.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn script(dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn configured_path_must_exist_and_be_executable() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        assert_eq!(
            find(Some(&missing), None, None).unwrap_err().to_string(),
            RuntimeError::Missing(missing.clone()).to_string()
        );
        let plain = dir.path().join("plain");
        fs::write(&plain, "x").unwrap();
        assert_eq!(
            find(Some(&plain), None, None).unwrap_err().to_string(),
            RuntimeError::NotExecutable(plain.clone()).to_string()
        );
        let good = script(dir.path(), "runc");
        assert_eq!(find(Some(&good), None, None).ok(), Some(good));
    }

    #[test]
    fn path_search_skips_self_by_inode_and_path() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let c = tempfile::tempdir().unwrap();
        let shim = script(a.path(), "runc"); // vibe-shim installed as "runc"
        fs::hard_link(&shim, b.path().join("runc")).unwrap(); // same inode
        let real = script(c.path(), "runc");
        let me = FileId::of(&shim).unwrap();
        let path = std::env::join_paths([a.path(), b.path(), c.path()]).unwrap();
        assert_eq!(find(None, Some(&path), Some(&me)).ok(), Some(real));
    }

    #[test]
    fn path_search_fails_when_only_self() {
        let a = tempfile::tempdir().unwrap();
        let shim = script(a.path(), "runc");
        let me = FileId::of(&shim).unwrap();
        let err = find(None, Some(a.path().as_os_str()), Some(&me)).unwrap_err();
        assert!(matches!(err, RuntimeError::NotInPath(_)), "{err}");
        let err = find(Some(&shim), None, Some(&me)).unwrap_err();
        assert!(
            matches!(err, RuntimeError::IsSelf(ref p) if *p == shim),
            "{err}"
        );
    }

    #[test]
    fn relative_path_entries_are_ignored() {
        let err = find(None, Some(OsStr::new("relative:also")), None).unwrap_err();
        assert!(matches!(err, RuntimeError::NotInPath(_)));
    }

    #[test]
    fn reentry_is_refused() {
        assert_eq!(check_not_reentered(None).ok(), Some(()));
        assert_eq!(
            check_not_reentered(Some(OsStr::new("1")))
                .unwrap_err()
                .to_string(),
            RuntimeError::Recursion.to_string()
        );
    }
    #[test]
    fn the_recorded_runc_needs_no_exec_bit_but_must_be_root_only() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("runc.vibe-shim-real");
        fs::write(&real, "real").unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(SEALED_MODE)).unwrap();
        // Root-only (the test runs as root, as lockdown does).
        assert_eq!(check_recorded(&real, None).ok(), Some(real.clone()));
        fs::set_permissions(&real, fs::Permissions::from_mode(0o620)).unwrap();
        assert!(matches!(
            check_recorded(&real, None),
            Err(RuntimeError::RecordedUnsafe(_))
        ));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(matches!(
            check_recorded(&link, None),
            Err(RuntimeError::RecordedUnsafe(_))
        ));
        let missing = dir.path().join("nope");
        assert_eq!(
            check_recorded(&missing, None).unwrap_err().to_string(),
            RuntimeError::Missing(missing.clone()).to_string()
        );
    }

    #[test]
    fn the_sealed_copy_is_the_file_sealed_as_runc_expects_and_takes_the_exec_bit() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("runc.vibe-shim-real");
        let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        fs::write(&real, &body).unwrap();
        // As a dpkg upgrade leaves it.
        fs::set_permissions(&real, fs::Permissions::from_mode(0o755)).unwrap();
        let memfd = sealed_copy(&real).unwrap();
        assert_eq!(fs::metadata(&real).unwrap().mode() & 0o7777, SEALED_MODE);
        let seals = nix::fcntl::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&memfd),
            nix::fcntl::FcntlArg::F_GET_SEALS,
        )
        .unwrap();
        assert_eq!(seals, runc_seals().bits());
        let mut copy = std::fs::File::from(memfd);
        let mut read = Vec::new();
        std::io::Seek::rewind(&mut copy).unwrap();
        copy.read_to_end(&mut read).unwrap();
        assert_eq!(read, body);
        fs::set_permissions(&real, fs::Permissions::from_mode(0o646)).unwrap();
        assert!(sealed_copy(&real).is_err(), "writable by others");
    }
}
