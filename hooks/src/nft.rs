//! Running the `nft` binary. The caller runs these on the thread that entered
//! the container's network namespace: a child inherits that thread's netns.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("nft not found: {0} is not an executable file")]
    NotExecutable(PathBuf),
    #[error("nft not found in PATH ({0}); set [network] nft in the policy")]
    NotInPath(String),
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

/// `configured` (the policy's `nft`) if set, else the first `nft` in `path`
/// (the hook's own PATH). No other directories are tried.
pub fn find_nft(configured: Option<&Path>, path: Option<OsString>) -> Result<PathBuf, NftError> {
    if let Some(p) = configured {
        return if is_executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(NftError::NotExecutable(p.to_path_buf()))
        };
    }
    let path = path.unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("nft"))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| NftError::NotInPath(path.to_string_lossy().into_owned()))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `nft -f -` with `batch` on stdin: one transaction.
pub fn apply(nft: &Path, batch: &str) -> Result<(), NftError> {
    run(nft, &["-f", "-"], Some(batch)).map(|_| ())
}

/// `nft list table inet vibe_shim`; `Ok(None)` when the table does not exist.
pub fn list_table(nft: &Path) -> Result<Option<String>, NftError> {
    match run(nft, &["list", "table", "inet", "vibe_shim"], None) {
        Ok(text) => Ok(Some(text)),
        Err(NftError::Failed { stderr, .. }) if stderr.contains("No such file or directory") => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

fn run(nft: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, NftError> {
    let spawn_err = |source| NftError::Spawn {
        path: nft.to_path_buf(),
        source,
    };
    let mut child = Command::new(nft)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_err)?;
    let mut truncated = false;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // An nft that exits before reading all its input closes the pipe:
        // its exit status and stderr, not EPIPE, say why.
        match pipe.write_all(text.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => truncated = true,
            Err(e) => return Err(spawn_err(e)),
            Ok(()) => {}
        }
    }
    let out = child.wait_with_output().map_err(spawn_err)?;
    // Success without reading the whole batch is not success.
    if out.status.success() && !truncated {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
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
        let err = find_nft(Some(Path::new("/nonexistent/nft")), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "nft not found: /nonexistent/nft is not an executable file"
        );
        assert_eq!(
            find_nft(Some(Path::new("/bin/sh")), None).unwrap(),
            Path::new("/bin/sh")
        );
    }

    #[test]
    fn searches_only_the_given_path() {
        let err = find_nft(None, Some("/nonexistent:/also-not".into())).unwrap_err();
        assert!(err.to_string().contains("/nonexistent:/also-not"), "{err}");
        assert!(find_nft(None, None).is_err());
        let dir = std::env::temp_dir().join(format!("vibe-hooks-nft-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("nft");
        std::fs::write(&fake, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("relative:/nonexistent:{}", dir.display());
        assert_eq!(find_nft(None, Some(path.into())).unwrap(), fake);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
