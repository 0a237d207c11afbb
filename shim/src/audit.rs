//! One JSON line per enforced verb, written before runc runs. If it cannot
//! be written, the verb is refused: an unaudited container is not allowed.
//!
//! The lines form a hash chain: each carries `prev`, `sha256:` and the hex
//! SHA-256 of the line before it (its bytes without the newline), so a line
//! removed, changed or inserted shows as a break at the line after it
//! ([`verify`], `vibe-shim audit verify`). The first line of a file carries
//! none: a rotated log starts a fresh chain. Appends hold an exclusive
//! flock(2) on the log while they read the last line and write theirs, so
//! shims appending at once each name the line they follow.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use serde::Serialize;
use vibe_policy::notice::Notice;
use vibe_policy::{Change, Denial};

use crate::log::{rfc3339_now, LogError};

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

/// The prefix of a `prev` value.
pub const PREV_PREFIX: &str = "sha256:";

/// What one audit line records. Env values never appear: the rules record
/// variable names only.
#[derive(Debug, Clone, Serialize)]
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
    /// A start's assurance record, summarised.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assurance: Option<&'a crate::enforce::start::AssuranceSummary>,
    /// The previous line's hash; set by [`write`] under the log's lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prev: Option<String>,
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
            assurance: None,
            prev: None,
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

/// Appends the record to `path`, creating its directory 0700 if needed,
/// chained to the line before it.
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
    let fail = |source| {
        AuditError::Write(LogError::Append {
            path: path.display().to_string(),
            source,
        })
    };
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_CLOEXEC)
        .open(path)
        .map_err(fail)?;
    let mut file = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| fail(e.into()))?;
    let (last, torn) = last_line(&file).map_err(fail)?;
    let mut chained = record.clone();
    chained.prev = last.map(|line| prev_of(&line));
    let mut line = chained.line();
    if torn {
        // A crash cut the last line short: ours starts on its own line.
        line.insert(0, '\n');
    }
    file.write_all(line.as_bytes()).map_err(fail)
}

/// The `prev` value naming `line` (without its newline).
pub fn prev_of(line: &[u8]) -> String {
    format!("{PREV_PREFIX}{}", vibe_hooks::digest::sha256_hex(line))
}

/// The file's last line (without its newline), and whether the file ends
/// without one; read backwards from the end in blocks.
fn last_line(file: &File) -> std::io::Result<(Option<Vec<u8>>, bool)> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok((None, false));
    }
    const BLOCK: u64 = 8192;
    let mut tail: Vec<u8> = Vec::new();
    let mut end = len;
    loop {
        let start = end.saturating_sub(BLOCK);
        let mut block = vec![0; (end - start) as usize];
        file.read_exact_at(&mut block, start)?;
        block.extend_from_slice(&tail);
        tail = block;
        let torn = tail.last() != Some(&b'\n');
        let body = match torn {
            true => &tail[..],
            false => &tail[..tail.len() - 1],
        };
        if let Some(nl) = body.iter().rposition(|&b| b == b'\n') {
            return Ok((Some(body[nl + 1..].to_vec()), torn));
        }
        if start == 0 {
            return Ok((Some(body.to_vec()), torn));
        }
        end = start;
    }
}

/// What a whole chain holds.
#[derive(Debug, PartialEq, Eq)]
pub struct ChainSummary {
    pub lines: usize,
    /// The first line that carries `prev` (earlier ones predate the chain).
    pub chained_from: Option<usize>,
}

/// The first line (1-based) where the chain breaks, and why.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ChainBreak {
    pub line: usize,
    pub reason: String,
}

/// Walks the chain of a log's bytes and reports its first break.
pub fn verify(log: &[u8]) -> Result<ChainSummary, ChainBreak> {
    let body = log.strip_suffix(b"\n").unwrap_or(log);
    let mut summary = ChainSummary {
        lines: 0,
        chained_from: None,
    };
    if body.is_empty() {
        return Ok(summary);
    }
    let mut before: Option<&[u8]> = None;
    for (index, line) in body.split(|&b| b == b'\n').enumerate() {
        let number = index + 1;
        let broken = |reason: String| ChainBreak {
            line: number,
            reason,
        };
        let value: serde_json::Value = serde_json::from_slice(line)
            .map_err(|e| broken(format!("not a JSON audit line ({e})")))?;
        let prev = value.get("prev").map(|p| p.as_str().unwrap_or_default());
        match (prev, before) {
            (None, _) if summary.chained_from.is_some() => {
                return Err(broken("no prev after chained lines: the chain restarts mid-file".into()))
            }
            (None, _) => {}
            (Some(prev), None) => {
                return Err(broken(format!(
                    "names a previous line ({prev}) this file does not hold: lines were removed before it"
                )))
            }
            (Some(prev), Some(last)) => {
                if prev != prev_of(last) {
                    return Err(broken(format!(
                        "prev {prev} is not line {}'s hash: a line was removed, changed or inserted before it",
                        number - 1
                    )));
                }
                summary.chained_from.get_or_insert(number);
            }
        }
        before = Some(line);
        summary.lines = number;
    }
    Ok(summary)
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
    fn lines_are_chained_and_a_removed_line_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        for verb in ["create", "start", "exec", "delete"] {
            write(&path, &AuditRecord::new("c1", verb, Path::new("/x"))).unwrap();
        }
        let text = std::fs::read(&path).unwrap();
        assert_eq!(
            verify(&text),
            Ok(ChainSummary {
                lines: 4,
                chained_from: Some(2)
            })
        );
        let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
        let first: serde_json::Value = serde_json::from_slice(lines[0]).unwrap();
        assert_eq!(first.get("prev"), None);
        // The second line removed: the third names a line not before it.
        let cut = [lines[0], lines[2], lines[3], b""].join(&b'\n');
        assert_eq!(verify(&cut).unwrap_err().line, 2);
        // The first one removed: the file starts mid-chain.
        let head = [lines[1], lines[2], lines[3], b""].join(&b'\n');
        assert_eq!(verify(&head).unwrap_err().line, 1);
        // One changed.
        let changed = String::from_utf8(text.clone())
            .unwrap()
            .replacen("exec", "exek", 1);
        assert_eq!(verify(changed.as_bytes()).unwrap_err().line, 4);
        // Lines from before the chain, then chained ones, are whole.
        let legacy = [&br#"{"verb":"old"}"#[..], lines[0], b""].join(&b'\n');
        assert!(verify(&legacy).is_ok());
        assert_eq!(
            verify(b""),
            Ok(ChainSummary {
                lines: 0,
                chained_from: None
            })
        );
    }

    #[test]
    fn a_torn_last_line_is_chained_and_ended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        write(&path, &AuditRecord::new("c1", "create", Path::new("/x"))).unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"verb":"cut"#).unwrap();
        write(&path, &AuditRecord::new("c1", "start", Path::new("/x"))).unwrap();
        let text = std::fs::read(&path).unwrap();
        let err = verify(&text).unwrap_err();
        // The torn line is not JSON: the verifier names it.
        assert_eq!(err.line, 2, "{err}");
        let last: serde_json::Value =
            serde_json::from_slice(text.split(|&b| b == b'\n').nth(2).unwrap()).unwrap();
        assert_eq!(last["prev"], prev_of(br#"{"verb":"cut"#).as_str());
    }

    #[test]
    fn long_lines_are_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let long = "x".repeat(20_000);
        write(&path, &AuditRecord::new(&long, "create", Path::new("/x"))).unwrap();
        write(&path, &AuditRecord::new("c", "start", Path::new("/x"))).unwrap();
        assert!(verify(&std::fs::read(&path).unwrap()).is_ok());
    }

    #[test]
    fn concurrent_writers_keep_one_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for i in 0..25 {
                        let id = format!("c{t}-{i}");
                        write(&path, &AuditRecord::new(&id, "start", Path::new("/x"))).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let summary = verify(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(summary.lines, 100);
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
