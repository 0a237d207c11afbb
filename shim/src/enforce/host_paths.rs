//! Host paths that runc's argv makes runc write as root: `--pid-file`
//! (create, run, restore, exec) and checkpoint's image, work and parent
//! paths. Each is read as runc reads it (Go's `filepath.Abs`/`Clean`, which
//! fold `..` lexically), resolved once, judged, and handed to runc in its
//! resolved form: every directory from `/` down to it must be one only root
//! can change, so the path judged is the path runc opens.

use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use vibe_policy::Denial;

#[derive(Debug, thiserror::Error)]
pub enum HostPathError {
    #[error("{0} is not absolute")]
    NotAbsolute(String),
    #[error("the spec runc reads (config.json) is never a pid file")]
    ConfigJson,
    #[error("names no file")]
    NoName,
    #[error("{path} exists and is not a regular file")]
    NotRegular { path: String },
    #[error("{path} exists and is not a pid file (*.pid, pidfile, exec_pid)")]
    NotAPidFile { path: String },
    #[error("{path} {reason}: its entries could change after the check")]
    Unsafe { path: String, reason: &'static str },
    #[error("cannot resolve {path}: {source}")]
    Resolve {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot resolve {path}: working directory: {source}")]
    Cwd {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is outside {allowed}")]
    Outside { path: String, allowed: String },
}

/// Go's `filepath.Clean` of an absolute path: `.`, empty and `..`
/// components folded lexically (`/a/link/../b` is `/a/b` to runc).
pub fn go_clean(path: &Path) -> PathBuf {
    let mut out: Vec<&OsStr> = Vec::new();
    for part in path.as_os_str().as_bytes().split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                out.pop();
            }
            other => out.push(OsStr::from_bytes(other)),
        }
    }
    let mut clean = PathBuf::from("/");
    clean.extend(out);
    clean
}

/// runc's `filepath.Abs`: against the working directory runc inherits
/// from us.
fn go_abs(value: &OsStr) -> Result<PathBuf, HostPathError> {
    let path = Path::new(value);
    if path.is_absolute() {
        return Ok(go_clean(path));
    }
    let cwd = std::env::current_dir().map_err(|source| HostPathError::Cwd {
        path: value.to_string_lossy().into_owned(),
        source,
    })?;
    Ok(go_clean(&cwd.join(path)))
}

/// Every directory from `/` down to `dir` (a resolved path) is a real
/// directory owned by root (or us) that nobody else may write; `/tmp`-like
/// sticky ancestors pass (their root-owned entries are root's alone), the
/// last one must not be sticky either.
fn root_only_chain(dir: &Path) -> Result<(), HostPathError> {
    let me = nix::unistd::geteuid().as_raw();
    let mut path = PathBuf::from("/");
    let parts: Vec<Component> = dir.components().skip(1).collect();
    for i in 0..=parts.len() {
        if i > 0 {
            path.push(parts[i - 1]);
        }
        let last = i == parts.len();
        let meta = std::fs::symlink_metadata(&path).map_err(|source| HostPathError::Resolve {
            path: path.display().to_string(),
            source,
        })?;
        let unsafe_because = if !meta.file_type().is_dir() {
            Some("is not a directory")
        } else if meta.uid() != 0 && meta.uid() != me {
            Some("is owned by another user")
        } else if meta.mode() & 0o022 != 0 && (last || meta.mode() & 0o1000 == 0) {
            Some("is writable by group or others")
        } else {
            None
        };
        if let Some(reason) = unsafe_because {
            return Err(HostPathError::Unsafe {
                path: path.display().to_string(),
                reason,
            });
        }
    }
    Ok(())
}

fn canonical(path: &Path) -> Result<PathBuf, HostPathError> {
    std::fs::canonicalize(path).map_err(|source| HostPathError::Resolve {
        path: path.display().to_string(),
        source,
    })
}

/// `dir` is `base` or below it (both resolved).
fn within(dir: &Path, bases: &[PathBuf]) -> bool {
    bases.iter().any(|base| dir.starts_with(base))
}

/// The policy's directories as they resolve now; one that does not exist
/// allows nothing.
fn resolved(dirs: &[PathBuf]) -> Vec<PathBuf> {
    dirs.iter()
        .filter_map(|d| std::fs::canonicalize(d).ok())
        .collect()
}

fn names(dirs: &[PathBuf], extra: &str) -> String {
    let mut all: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    if !extra.is_empty() {
        all.insert(0, extra.to_string());
    }
    match all.is_empty() {
        true => "every allowed directory (none is set)".into(),
        false => all.join(", "),
    }
}

/// The path runc gets for `--pid-file VALUE`, or why not. runc writes
/// `.NAME` next to it and renames that over it, as root: only directly in
/// the engine's `bundle` (create, run, restore) or below one of `dirs`, in
/// root-only directories, never `config.json` nor over a non-regular file.
pub fn pid_file(value: &OsStr, bundle: Option<&Path>, dirs: &[PathBuf]) -> Result<PathBuf, Denial> {
    let denial = |e: HostPathError| {
        Denial::new(
            "pid_file",
            "--pid-file",
            value.to_string_lossy(),
            e.to_string(),
        )
    };
    let judged = (|| {
        let path = go_abs(value)?;
        let name = path.file_name().ok_or(HostPathError::NoName)?.to_owned();
        if name == "config.json" {
            return Err(HostPathError::ConfigJson);
        }
        let parent = canonical(path.parent().unwrap_or(Path::new("/")))?;
        let bundle = bundle.and_then(|b| std::fs::canonicalize(b).ok());
        let allowed = resolved(dirs);
        if bundle.as_deref() != Some(parent.as_path()) && !within(&parent, &allowed) {
            let bundle_name = bundle
                .as_ref()
                .map(|b| format!("the bundle {}", b.display()))
                .unwrap_or_default();
            return Err(HostPathError::Outside {
                path: parent.display().to_string(),
                allowed: format!("[runtime] pid_file_dirs ({})", names(dirs, &bundle_name)),
            });
        }
        root_only_chain(&parent)?;
        let target = parent.join(name);
        match std::fs::symlink_metadata(&target) {
            Ok(meta) if !meta.file_type().is_file() => Err(HostPathError::NotRegular {
                path: target.display().to_string(),
            }),
            // runc renames over it: an existing file must be a pid file an
            // engine left (a restart), never another container's state.json
            // or a file of an image layer.
            Ok(_) if !is_pid_file_name(&target) => Err(HostPathError::NotAPidFile {
                path: target.display().to_string(),
            }),
            Ok(_) => Ok(target),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(target),
            Err(source) => Err(HostPathError::Resolve {
                path: target.display().to_string(),
                source,
            }),
        }
    })();
    judged.map_err(denial)
}

/// The names the engines give pid files: containerd's `init.pid` and
/// `<exec-id>.pid`, conmon's `pidfile` and `exec_pid`.
fn is_pid_file_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".pid") || n == "pidfile" || n == "exec_pid")
}

/// A checkpoint directory runc (and CRIU) create and write as root: an
/// absolute path below one of `dirs`. Its existing part is resolved and
/// must be root-only from `/` down; the rest runc creates there.
pub fn checkpoint_dir(flag: &str, path: &Path, dirs: &[PathBuf]) -> Result<PathBuf, Denial> {
    let denial = |e: HostPathError| {
        Denial::new(
            "checkpoint",
            flag.to_string(),
            path.display().to_string(),
            e.to_string(),
        )
    };
    if !path.is_absolute() {
        return Err(denial(HostPathError::NotAbsolute(
            path.display().to_string(),
        )));
    }
    let clean = go_clean(path);
    // The deepest existing ancestor, resolved; below it nothing exists yet.
    let mut existing = clean.clone();
    let mut missing = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                missing.push(name.to_owned());
                existing = parent.to_path_buf();
            }
            _ => break,
        }
    }
    let judged = (|| {
        let mut full = canonical(&existing)?;
        root_only_chain(&full)?;
        full.extend(missing.iter().rev());
        let allowed = resolved(dirs);
        if !within(&full, &allowed) {
            return Err(HostPathError::Outside {
                path: full.display().to_string(),
                allowed: format!("[runtime] checkpoint_dirs ({})", names(dirs, "")),
            });
        }
        Ok(full)
    })();
    judged.map_err(denial)
}

/// Bytes of a path, for argv.
pub fn arg(path: &Path) -> std::ffi::OsString {
    std::ffi::OsString::from_vec(path.as_os_str().as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn clean_folds_like_go() {
        for (given, want) in [
            ("/a/b/../c", "/a/c"),
            ("/a/./b//c/", "/a/b/c"),
            ("/../..", "/"),
            ("/", "/"),
            ("/a/link/../../etc/x", "/etc/x"),
        ] {
            assert_eq!(go_clean(Path::new(given)), Path::new(want), "{given}");
        }
    }

    /// A root-only temp dir (tempfile makes 0700 dirs) under /tmp (sticky).
    fn private() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn pid_file_in_the_bundle_or_an_allowed_dir() {
        let tmp = private();
        let bundle = tmp.path().join("bundle");
        std::fs::create_dir(&bundle).unwrap();
        let ok = pid_file(bundle.join("init.pid").as_os_str(), Some(&bundle), &[]).unwrap();
        assert_eq!(ok, std::fs::canonicalize(&bundle).unwrap().join("init.pid"));
        // Only directly in the bundle; below an allowed dir at any depth.
        std::fs::create_dir(bundle.join("sub")).unwrap();
        let sub = bundle.join("sub/x.pid");
        assert!(pid_file(sub.as_os_str(), Some(&bundle), &[]).is_err());
        assert!(pid_file(sub.as_os_str(), None, std::slice::from_ref(&bundle)).is_ok());
        for bad in ["/etc/passwd", "/etc/fresh.pid", "/x.pid"] {
            let err = pid_file(
                OsStr::new(bad),
                Some(&bundle),
                std::slice::from_ref(&bundle),
            )
            .unwrap_err();
            assert_eq!(err.rule, "pid_file");
            assert!(err.reason.contains("outside"), "{bad}: {err:?}");
        }
        // `..` folds lexically, as Go's Clean does, before anything resolves.
        let dotted = format!("{}/nope/../init.pid", bundle.display());
        assert!(pid_file(OsStr::new(&dotted), Some(&bundle), &[]).is_ok());
    }

    #[test]
    fn pid_file_never_config_json_nor_a_non_file() {
        let tmp = private();
        let bundle = tmp.path().to_path_buf();
        let err = pid_file(bundle.join("config.json").as_os_str(), Some(&bundle), &[]).unwrap_err();
        assert!(err.reason.contains("config.json"), "{err:?}");
        std::fs::create_dir(bundle.join("d")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", bundle.join("l")).unwrap();
        for name in ["d", "l"] {
            let err = pid_file(bundle.join(name).as_os_str(), Some(&bundle), &[]).unwrap_err();
            assert!(err.reason.contains("regular file"), "{name}: {err:?}");
        }
        // A symlinked directory is judged where it leads.
        std::os::unix::fs::symlink("/etc", bundle.join("etc")).unwrap();
        let err = pid_file(bundle.join("etc/passwd").as_os_str(), Some(&bundle), &[]).unwrap_err();
        assert!(err.reason.contains("outside"), "{err:?}");
    }

    #[test]
    fn an_existing_file_is_replaced_only_when_it_is_a_pid_file() {
        let dir = private();
        let bundle = dir.path().to_path_buf();
        for name in ["state.json", "sh"] {
            std::fs::write(bundle.join(name), "x").unwrap();
            let err = pid_file(bundle.join(name).as_os_str(), Some(&bundle), &[]).unwrap_err();
            assert!(err.reason.contains("not a pid file"), "{name}: {err:?}");
        }
        for name in ["init.pid", "pidfile", "exec_pid"] {
            std::fs::write(bundle.join(name), "1").unwrap();
            assert!(
                pid_file(bundle.join(name).as_os_str(), Some(&bundle), &[]).is_ok(),
                "{name}"
            );
        }
        // A new file may have any name.
        assert!(pid_file(bundle.join("fresh").as_os_str(), Some(&bundle), &[]).is_ok());
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let tmp = private();
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = pid_file(open.join("x.pid").as_os_str(), Some(&open), &[]).unwrap_err();
        assert!(
            err.reason.contains("writable by group or others"),
            "{err:?}"
        );
        // Sticky and world-writable is fine above, not as the last one.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(pid_file(open.join("x.pid").as_os_str(), Some(&open), &[]).is_err());
        std::fs::create_dir(open.join("mine")).unwrap();
        let mine = open.join("mine");
        assert!(pid_file(mine.join("x.pid").as_os_str(), Some(&mine), &[]).is_ok());
    }

    #[test]
    fn checkpoint_dirs_only_below_the_policy_dirs() {
        let tmp = private();
        let allowed = tmp.path().join("ckpt");
        std::fs::create_dir(&allowed).unwrap();
        let dirs = [allowed.clone()];
        let got = checkpoint_dir("--image-path", &allowed.join("a/b"), &dirs).unwrap();
        assert_eq!(got, std::fs::canonicalize(&allowed).unwrap().join("a/b"));
        for bad in [
            PathBuf::from("/tmp/x"),
            allowed.join("../escape"),
            PathBuf::from("relative"),
        ] {
            let err = checkpoint_dir("--image-path", &bad, &dirs).unwrap_err();
            assert_eq!(err.field, "--image-path");
            assert_eq!(err.rule, "checkpoint");
        }
        assert!(checkpoint_dir("--image-path", &allowed.join("x"), &[]).is_err());
        // A symlink below the allowed dir is judged where it leads.
        std::os::unix::fs::symlink("/etc", allowed.join("etc")).unwrap();
        assert!(checkpoint_dir("--work-path", &allowed.join("etc/x"), &dirs).is_err());
    }
}
