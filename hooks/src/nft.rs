//! Running the `nft` binary, for an admin who set `[network] nft` (the
//! default is netlink in process, `nftables.rs`). The caller runs this on the
//! thread that entered the container's network namespace: a child inherits
//! that thread's netns.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("nft not found: {0} is not an executable file")]
    NotExecutable(PathBuf),
    #[error("cannot run {path}: {source}")]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} failed ({status}): {stderr}")]
    Failed {
        path: PathBuf,
        status: String,
        stderr: String,
    },
}

/// The configured `nft` must be an executable file; no search, no fallback.
pub fn check_executable(configured: &Path) -> Result<PathBuf, NftError> {
    if is_executable(configured) {
        Ok(configured.to_path_buf())
    } else {
        Err(NftError::NotExecutable(configured.to_path_buf()))
    }
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `nft -f -` with `batch` on stdin: one transaction.
pub fn apply(nft: &Path, batch: &str) -> Result<(), NftError> {
    let spawn_err = |source| NftError::Spawn {
        path: nft.to_path_buf(),
        source,
    };
    let mut child = Command::new(nft)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_err)?;
    let mut truncated = false;
    if let Some(mut pipe) = child.stdin.take() {
        // An nft that exits before reading all its input closes the pipe:
        // its exit status and stderr, not EPIPE, say why.
        match pipe.write_all(batch.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => truncated = true,
            Err(e) => return Err(spawn_err(e)),
            Ok(()) => {}
        }
    }
    let out = child.wait_with_output().map_err(spawn_err)?;
    // Success without reading the whole batch is not success.
    if out.status.success() && !truncated {
        return Ok(());
    }
    let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if truncated {
        stderr.push_str(" (exited before reading the whole batch)");
    }
    Err(NftError::Failed {
        path: nft.to_path_buf(),
        status: out.status.to_string(),
        // One line: it ends up in runc's error and `docker run`'s message.
        stderr: stderr.split_whitespace().collect::<Vec<_>>().join(" "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_path_must_be_executable() {
        let err = check_executable(Path::new("/nonexistent/nft")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "nft not found: /nonexistent/nft is not an executable file"
        );
        assert_eq!(
            check_executable(Path::new("/bin/sh")).unwrap(),
            Path::new("/bin/sh")
        );
        assert!(check_executable(Path::new("/etc")).is_err());
    }
}
