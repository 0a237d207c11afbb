//! What the egress daemon remembers about each registered container, so a
//! restarted daemon can serve the running ones again:
//!
//! ```text
//! /run/vibe-shim/egress/<runc root, escaped>/<container id>.json
//!     {"id", "runc_root", "pid", "start_time", "network",
//!      "credentials", "ca"}          (the last two: a container with credentials)
//! ```
//!
//! A container's CA key lives only here (0600 files in 0700 directories of
//! root's) and in the daemon's memory, and goes with its record.
//!
//! The pid alone could name another process by then: a record counts only
//! while `/proc/<pid>/stat` still shows the recorded start time.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use vibe_policy::config::NetworkSection;
use vibe_policy::egress::credential::Binding;
use vibe_policy::lang::container_id;

/// Where the daemon keeps its records unless told otherwise.
pub const DEFAULT_RECORDS_DIR: &str = "/run/vibe-shim/egress";

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("invalid container id {0:?}")]
    BadId(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// One registered container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    pub runc_root: PathBuf,
    pub pid: i32,
    /// Field 22 of `/proc/<pid>/stat` at registration.
    pub start_time: u64,
    pub network: NetworkSection,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<Binding>,
    /// The CA its credential hosts are terminated with (key included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<super::ca::StoredCa>,
}

/// One path component naming a runc root: every byte outside
/// `[A-Za-z0-9._-]` as `%XX`, so distinct roots never share a directory.
/// (vibe-shim's per-container directories use the same escaping.)
pub fn escape_root(root: &Path) -> String {
    let mut out = String::new();
    for &b in root.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The record file of `id` under `root`.
pub fn path(dir: &Path, root: &Path, id: &str) -> Result<PathBuf, RecordError> {
    if !container_id::is_valid(id) {
        return Err(RecordError::BadId(id.to_string()));
    }
    Ok(dir.join(escape_root(root)).join(format!("{id}.json")))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError + '_ {
    move |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes the record (root-only directories, 0600 file, temp file + rename
/// so a reader never sees half of one).
pub fn write(dir: &Path, record: &Record) -> Result<(), RecordError> {
    let file = path(dir, &record.runc_root, &record.id)?;
    let parent = file.parent().unwrap_or(dir);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .map_err(io(parent))?;
    let bytes = serde_json::to_vec(record).map_err(|source| RecordError::Json {
        path: file.clone(),
        source,
    })?;
    crate::fsio::write_atomic(&file, &bytes, 0o600).map_err(io(&file))
}

/// Removes the record (absent is fine) and its root's directory when empty.
pub fn remove(dir: &Path, root: &Path, id: &str) {
    let Ok(file) = path(dir, root, id) else {
        return;
    };
    let _ = std::fs::remove_file(&file);
    if let Some(parent) = file.parent() {
        let _ = std::fs::remove_dir(parent);
    }
}

/// Every record file under `dir`, parsed (or why not).
pub fn list(dir: &Path) -> Vec<(PathBuf, Result<Record, RecordError>)> {
    let mut found = Vec::new();
    let Ok(roots) = std::fs::read_dir(dir) else {
        return found;
    };
    for root in roots.flatten() {
        let Ok(files) = std::fs::read_dir(root.path()) else {
            continue;
        };
        for file in files.flatten() {
            let path = file.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let parsed = std::fs::read(&path).map_err(io(&path)).and_then(|bytes| {
                serde_json::from_slice::<Record>(&bytes).map_err(|source| RecordError::Json {
                    path: path.clone(),
                    source,
                })
            });
            found.push((path, parsed));
        }
    }
    found
}

/// Field 22 of `/proc/<pid>/stat` (the start time in clock ticks), read
/// after the last `)` since the command name may hold spaces.
pub fn process_start(pid: i64) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Whether `pid` is still the process that started at `start_time`.
pub fn same_process(pid: i32, start_time: u64) -> bool {
    pid > 0 && process_start(i64::from(pid)) == Some(start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, root: &str) -> Record {
        Record {
            id: id.into(),
            runc_root: root.into(),
            pid: std::process::id() as i32,
            start_time: process_start(i64::from(std::process::id())).unwrap(),
            network: NetworkSection::default(),
            credentials: Vec::new(),
            ca: None,
        }
    }

    #[test]
    fn write_list_remove() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("egress");
        let a = record("a", "/run/runc");
        let b = record("b.1", "/run/docker/runtime-runc/moby");
        write(&dir, &a).unwrap();
        write(&dir, &b).unwrap();
        let file = path(&dir, Path::new("/run/runc"), "a").unwrap();
        assert_eq!(file, dir.join("%2Frun%2Frunc/a.json"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mode = std::fs::metadata(file.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let mut all: Vec<Record> = list(&dir).into_iter().map(|(_, r)| r.unwrap()).collect();
        all.sort_by(|x, y| x.id.cmp(&y.id));
        assert_eq!(all, vec![a.clone(), b]);
        assert!(same_process(a.pid, a.start_time));
        assert!(!same_process(a.pid, a.start_time + 1));
        remove(&dir, Path::new("/run/runc"), "a");
        remove(&dir, Path::new("/run/runc"), "a");
        assert!(!dir.join("%2Frun%2Frunc").exists());
        assert_eq!(list(&dir).len(), 1);
        // A file that is not a record is reported, not fatal.
        std::fs::write(
            dir.join("%2Frun%2Fdocker%2Fruntime-runc%2Fmoby/x.json"),
            "{",
        )
        .unwrap();
        assert_eq!(list(&dir).iter().filter(|(_, r)| r.is_err()).count(), 1);
    }

    #[test]
    fn a_ca_goes_with_its_record() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("egress");
        let ca = crate::egress::ca::Ca::generate(&["a.example".into()]).unwrap();
        let r = Record {
            ca: Some(ca.stored()),
            ..record("c", "/run/runc")
        };
        write(&dir, &r).unwrap();
        let back = list(&dir).pop().unwrap().1.unwrap();
        assert_eq!(back, r);
        let again = crate::egress::ca::Ca::restore(back.ca.as_ref().unwrap()).unwrap();
        assert_eq!(again.cert_pem(), ca.cert_pem());
        remove(&dir, Path::new("/run/runc"), "c");
        assert!(list(&dir).is_empty());
    }

    #[test]
    fn ids_and_roots_cannot_escape() {
        let dir = Path::new("/d");
        assert!(path(dir, Path::new("/r"), "../x").is_err());
        assert!(path(dir, Path::new("/r"), "a/b").is_err());
        assert_ne!(
            path(dir, Path::new("/run/a_b"), "c").unwrap(),
            path(dir, Path::new("/run/a/b"), "c").unwrap()
        );
        assert_eq!(process_start(-1), None);
    }
}
