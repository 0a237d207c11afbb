//! The connection log: one JSON line per connection, written when it closes
//! (denials and report mode's would-deny lines included).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use vibe_policy::egress::Verdict;

#[derive(Debug, Serialize)]
pub struct Line<'a> {
    pub time: String,
    pub container: &'a str,
    pub decision: Verdict,
    /// "connect", "http", "inject" (a terminated credential host), "misuse"
    /// (a placeholder where it does not belong), and "" when the request
    /// never parsed.
    pub kind: &'a str,
    pub host: &'a str,
    pub port: u16,
    pub address: Option<SocketAddr>,
    pub rule: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Lines of this container not written before this one, over its
    /// [`Budget`] (their connections were handled as usual).
    #[serde(skip_serializing_if = "is_zero")]
    pub suppressed: u64,
    /// The credential a terminated request was injected with (or whose
    /// placeholder was misused): its name, never its value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential: Option<&'a str>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Longest text field written (a refused Host header can be 32 KiB).
pub const MAX_FIELD: usize = 512;

/// `s` cut to [`MAX_FIELD`] bytes at a char boundary, marked when cut.
pub fn clip(s: &str) -> std::borrow::Cow<'_, str> {
    if s.len() <= MAX_FIELD {
        return s.into();
    }
    let mut end = MAX_FIELD;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end]).into()
}

/// Lines one container may write: a burst, then a steady rate. A
/// container that opens refused connections in a loop otherwise fills the
/// host's disk (one line each, ~80 MB/s seen). Lines over it are counted,
/// and the count goes out with the container's next line, or at close.
#[derive(Debug)]
pub struct Budget {
    state: Mutex<BudgetState>,
}

#[derive(Debug)]
struct BudgetState {
    tokens: f64,
    last: Instant,
    suppressed: u64,
}

/// Lines at once, and per second after that.
pub const BURST: f64 = 500.0;
pub const RATE: f64 = 50.0;

impl Default for Budget {
    fn default() -> Self {
        Budget {
            state: Mutex::new(BudgetState {
                tokens: BURST,
                last: Instant::now(),
                suppressed: 0,
            }),
        }
    }
}

impl Budget {
    /// `Some(lines suppressed before this one)` if this line may be
    /// written, else `None` (counted).
    pub fn take(&self) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let refill = now.duration_since(s.last).as_secs_f64() * RATE;
        s.tokens = (s.tokens + refill).min(BURST);
        s.last = now;
        if s.tokens < 1.0 {
            s.suppressed += 1;
            return None;
        }
        s.tokens -= 1.0;
        Some(std::mem::take(&mut s.suppressed))
    }

    /// The count not reported yet (at close), and zero after.
    pub fn drain(&self) -> u64 {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut s.suppressed)
    }
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
    vibe_policy::lang::rfc3339::rfc3339_utc(secs)
}

fn libc_o_cloexec() -> i32 {
    nix::fcntl::OFlag::O_CLOEXEC.bits()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rest_is_counted_and_reported_once() {
        let b = Budget::default();
        for _ in 0..BURST as usize {
            assert_eq!(b.take(), Some(0));
        }
        let over = (0..100).filter(|_| b.take().is_none()).count();
        assert!(
            over >= 99,
            "only {over} of 100 suppressed right after the burst"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        // RATE/s refills: the next line carries the count.
        assert_eq!(b.take(), Some(over as u64));
        assert_eq!(b.drain(), 0);
    }

    #[test]
    fn long_fields_are_clipped_on_a_char_boundary() {
        assert_eq!(clip("short"), "short");
        let long = "é".repeat(MAX_FIELD);
        let c = clip(&long);
        assert!(
            c.len() <= MAX_FIELD + 3 && c.ends_with("..."),
            "{}",
            c.len()
        );
    }
}
