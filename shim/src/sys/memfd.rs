//! Handing rewritten JSON to runc without leaving it on disk.
//!
//! vibe-shim execs runc, so runc *is* this process afterwards: a memfd
//! created without `MFD_CLOEXEC` survives the exec and runc opens it as
//! `/proc/self/fd/N`. Nothing lands in a shared directory, there is no
//! clean-up to forget, and no other user can read or swap the file. The
//! memfd is sealed, so not even runc can change it. runc init marks every
//! inherited fd above the preserved ones close-on-exec, so it never reaches
//! the container's process; we also place it above `3 + preserve_fds`.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::path::PathBuf;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};

#[derive(Debug, thiserror::Error)]
pub enum PrivateFileError {
    #[error("cannot create private memfd: {0}")]
    Create(nix::Error),
    #[error("cannot write private memfd: {0}")]
    Write(std::io::Error),
    #[error("cannot seal private memfd: {0}")]
    Seal(nix::Error),
    #[error("cannot move private memfd above the preserved fds: {0}")]
    Dup(nix::Error),
}

/// Writes `contents` to a sealed memfd that stays open across `execv` and
/// returns the `/proc/self/fd/N` path runc should read. `min_fd` keeps the
/// fd out of the range runc passes through (`3 + --preserve-fds`).
pub fn sealed_memfd(contents: &[u8], min_fd: i32) -> Result<PathBuf, PrivateFileError> {
    let fd = memfd_create(c"vibe-shim", MemFdCreateFlag::MFD_ALLOW_SEALING)
        .map_err(PrivateFileError::Create)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(contents).map_err(PrivateFileError::Write)?;
    let seals = SealFlag::F_SEAL_SEAL
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_WRITE;
    fcntl(file.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals)).map_err(PrivateFileError::Seal)?;
    let fd = OwnedFd::from(file);
    let fd = if fd.as_raw_fd() < min_fd {
        // F_DUPFD (not _CLOEXEC): the copy must survive the exec.
        let raw =
            fcntl(fd.as_raw_fd(), FcntlArg::F_DUPFD(min_fd)).map_err(PrivateFileError::Dup)?;
        // SAFETY: `raw` is a new fd returned by F_DUPFD and owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(raw) }
    } else {
        fd
    };
    // Deliberately leaked: it must stay open until runc reads it after execv.
    let raw = fd.into_raw_fd();
    Ok(PathBuf::from(format!("/proc/self/fd/{raw}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfd_is_readable_sealed_and_not_cloexec() {
        let path = sealed_memfd(b"{\"a\":1}", 40).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}");
        let n: i32 = path.file_name().unwrap().to_str().unwrap().parse().unwrap();
        assert!(n >= 40);
        let flags = fcntl(n, FcntlArg::F_GETFD).unwrap();
        assert_eq!(flags & nix::libc::FD_CLOEXEC, 0);
        assert!(std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"x"))
            .is_err());
        nix::unistd::close(n).unwrap();
    }
}
