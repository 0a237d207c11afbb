//! One JSON line per enforced verb, written before runc runs. If it cannot
//! be written, the verb is refused: an unaudited container is not allowed.

use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use serde::Serialize;
use vibe_policy::notice::Notice;
use vibe_policy::{Change, Denial};

use crate::log::{append_line, rfc3339_now, LogError};

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot create audit directory {path}: {source}")]
    Dir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write audit line: {0}")]
    Write(#[from] LogError),
}

/// What one audit line records. Env values never appear: the rules record
/// variable names only.
#[derive(Debug, Serialize)]
pub struct AuditRecord<'a> {
    pub time: String,
    pub container_id: &'a str,
    pub verb: &'a str,
    pub config: &'a Path,
    pub changes: &'a [Change],
    pub denial: Option<&'a Denial>,
    /// A create's notice facts, as the container reads them (names only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<&'a Notice>,
}

impl<'a> AuditRecord<'a> {
    pub fn new(container_id: &'a str, verb: &'a str, config: &'a Path) -> Self {
        AuditRecord {
            time: rfc3339_now(),
            container_id,
            verb,
            config,
            changes: &[],
            denial: None,
            notice: None,
        }
    }

    pub fn line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_else(|e| {
            serde_json::json!({"time": self.time, "error": e.to_string()}).to_string()
        });
        line.push('\n');
        line
    }
}

/// Appends the record to `path`, creating its directory 0700 if needed.
pub fn write(path: &Path, record: &AuditRecord) -> Result<(), AuditError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| AuditError::Dir {
                    path: dir.display().to_string(),
                    source,
                })?;
        }
    }
    append_line(path, &record.line(), 0o600)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_one_line_with_changes_and_denial() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/audit.jsonl");
        let changes = vec![Change {
            rule: "capabilities",
            field: "/process/capabilities/bounding".into(),
            before: json!(["CAP_SYS_ADMIN"]),
            after: json!([]),
        }];
        let denial = Denial::new("binds", "/mounts/3/source", "/", "not allowed");
        let mut record = AuditRecord::new("c1", "create", Path::new("/etc/vibe-shim/config.toml"));
        record.changes = &changes;
        record.denial = Some(&denial);
        write(&path, &record).unwrap();
        write(&path, &AuditRecord::new("c1", "start", Path::new("/x"))).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["container_id"], "c1");
        assert_eq!(lines[0]["verb"], "create");
        assert_eq!(lines[0]["changes"][0]["rule"], "capabilities");
        assert_eq!(lines[0]["denial"]["value"], "/");
        assert_eq!(lines[1]["denial"], serde_json::Value::Null);
        let mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn unwritable_audit_path_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        // A regular file where the directory should be.
        let err = write(
            &file.join("audit.jsonl"),
            &AuditRecord::new("c", "exec", &file),
        );
        assert!(err.is_err());
    }
}
