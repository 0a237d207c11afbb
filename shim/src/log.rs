//! Reporting a refusal the way runc reports its own errors: one line on
//! stderr, and one line in the `--log` file in runc's format, because
//! containerd shows the last error line of that file to the user.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("cannot append to log file {path}: {source}")]
    Append {
        path: String,
        source: std::io::Error,
    },
}

/// `{"level":"error","msg":…,"time":…}`: exactly the keys runc (logrus) writes.
pub fn json_line(msg: &str, time: &str) -> String {
    let mut line = serde_json::json!({"level": "error", "msg": msg, "time": time}).to_string();
    line.push('\n');
    line
}

/// logrus's text format: `time="…" level=error msg="…"`.
pub fn text_line(msg: &str, time: &str) -> String {
    format!("time=\"{time}\" level=error msg={}\n", go_quote(msg))
}

/// Quotes like Go's `%q` for the characters a message can hold.
fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Appends `line` with one `write` (O_APPEND), creating the file if needed.
pub fn append_line(path: &Path, line: &str, mode: u32) -> Result<(), LogError> {
    let fail = |source| LogError::Append {
        path: path.display().to_string(),
        source,
    };
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(mode)
        .open(path)
        .map_err(fail)?;
    file.write_all(line.as_bytes()).map_err(fail)
}

/// Writes the refusal: stderr always, the `--log` file when given. Always
/// one line, whatever the reason text holds.
pub fn report(message: &str, log: Option<&Path>, json: bool) {
    let msg = format!("vibe-shim: {}", one_line(message));
    eprintln!("{msg}");
    if let Some(path) = log {
        let time = rfc3339_now();
        let line = if json {
            json_line(&msg, &time)
        } else {
            text_line(&msg, &time)
        };
        if let Err(e) = append_line(path, &line, 0o644) {
            eprintln!("vibe-shim: {e}");
        }
    }
}

fn one_line(text: &str) -> String {
    text.split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

pub fn rfc3339_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339_utc(secs)
}

/// RFC 3339 in UTC from Unix seconds (one home: vibe-policy, which the
/// egress proxy's log uses too).
pub use vibe_policy::lang::rfc3339::rfc3339_utc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_utc(4_107_542_399), "2100-02-28T23:59:59Z");
        assert_eq!(rfc3339_utc(1_709_164_800), "2024-02-29T00:00:00Z");
    }

    #[test]
    fn json_line_has_runc_keys_in_order() {
        let line = json_line("vibe-shim: binds: x \"y\"", "2023-11-14T22:13:20Z");
        assert_eq!(
            line,
            "{\"level\":\"error\",\"msg\":\"vibe-shim: binds: x \\\"y\\\"\",\"time\":\"2023-11-14T22:13:20Z\"}\n"
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["level"], "error");
    }

    #[test]
    fn text_line_is_logrus_style() {
        assert_eq!(
            text_line("vibe-shim: a \"b\"\nc", "T"),
            "time=\"T\" level=error msg=\"vibe-shim: a \\\"b\\\"\\nc\"\n"
        );
    }

    #[test]
    fn multi_line_reasons_become_one_line() {
        assert_eq!(one_line("a\nb\r\n\nc"), "a; b; c");
    }

    #[test]
    fn report_appends_one_json_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log.json");
        std::fs::write(&log, "{\"level\":\"info\",\"msg\":\"x\",\"time\":\"t\"}\n").unwrap();
        report("binds: refused (/mounts/0/source: /)", Some(&log), true);
        let text = std::fs::read_to_string(&log).unwrap();
        let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(
            last["msg"],
            "vibe-shim: binds: refused (/mounts/0/source: /)"
        );
        assert_eq!(text.lines().count(), 2);
    }
}
