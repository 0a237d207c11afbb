//! Finding the real runc, never vibe-shim itself.

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Set in the environment before runc is exec'd. Seeing it again on entry
/// means "runc" led back to vibe-shim, which would loop forever.
pub const ACTIVE_ENV: &str = "VIBE_SHIM_ACTIVE";

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RuntimeError {
    #[error("[runtime] path {0} does not exist")]
    Missing(PathBuf),
    #[error("[runtime] path {0} is not an executable file")]
    NotExecutable(PathBuf),
    #[error("[runtime] path {0} is vibe-shim itself")]
    IsSelf(PathBuf),
    #[error("no runc found in PATH ({0}) other than vibe-shim itself")]
    NotInPath(String),
    #[error("{0}")]
    Lockdown(String),
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
            find(Some(&missing), None, None),
            Err(RuntimeError::Missing(missing.clone()))
        );
        let plain = dir.path().join("plain");
        fs::write(&plain, "x").unwrap();
        assert_eq!(
            find(Some(&plain), None, None),
            Err(RuntimeError::NotExecutable(plain.clone()))
        );
        let good = script(dir.path(), "runc");
        assert_eq!(find(Some(&good), None, None), Ok(good));
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
        assert_eq!(find(None, Some(&path), Some(&me)), Ok(real));
    }

    #[test]
    fn path_search_fails_when_only_self() {
        let a = tempfile::tempdir().unwrap();
        let shim = script(a.path(), "runc");
        let me = FileId::of(&shim).unwrap();
        let err = find(None, Some(a.path().as_os_str()), Some(&me)).unwrap_err();
        assert!(matches!(err, RuntimeError::NotInPath(_)), "{err}");
        let err = find(Some(&shim), None, Some(&me)).unwrap_err();
        assert_eq!(err, RuntimeError::IsSelf(shim));
    }

    #[test]
    fn relative_path_entries_are_ignored() {
        let err = find(None, Some(OsStr::new("relative:also")), None).unwrap_err();
        assert!(matches!(err, RuntimeError::NotInPath(_)));
    }

    #[test]
    fn reentry_is_refused() {
        assert_eq!(check_not_reentered(None), Ok(()));
        assert_eq!(
            check_not_reentered(Some(OsStr::new("1"))),
            Err(RuntimeError::Recursion)
        );
    }
}
