//! The connection log: one JSON line per connection, written when it closes
//! (denials and report mode's would-deny lines included).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use vibe_policy::egress::Verdict;

#[derive(Debug, Serialize)]
pub struct Line<'a> {
    pub time: String,
    pub container: &'a str,
    pub decision: Verdict,
    /// "connect" or "http" (and "" when the request never parsed).
    pub kind: &'a str,
    pub host: &'a str,
    pub port: u16,
    pub address: Option<SocketAddr>,
    pub rule: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

#[derive(Debug)]
pub struct Log {
    path: PathBuf,
    file: Mutex<File>,
}

impl Log {
    pub fn open(path: &Path) -> std::io::Result<Log> {
        Ok(Log {
            path: path.to_path_buf(),
            file: Mutex::new(open(path)?),
        })
    }

    /// The path again (SIGHUP after logrotate): lines go to the new file
    /// from the next one on; the old file is kept if the new will not open.
    pub fn reopen(&self) -> std::io::Result<()> {
        let file = open(&self.path)?;
        *self.file.lock().unwrap_or_else(|e| e.into_inner()) = file;
        Ok(())
    }

    /// One `write` per line on an O_APPEND file: lines never interleave.
    pub fn write(&self, line: &Line<'_>) {
        let Ok(mut text) = serde_json::to_string(line) else {
            return;
        };
        text.push('\n');
        if let Ok(mut f) = self.file.lock() {
            let _ = f.write_all(text.as_bytes());
        }
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc_o_cloexec())
        .open(path)
}

pub fn now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    vibe_policy::rfc3339::rfc3339_utc(secs)
}

fn libc_o_cloexec() -> i32 {
    nix::fcntl::OFlag::O_CLOEXEC.bits()
}
