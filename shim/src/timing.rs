//! Where a verb's time goes, phase by phase, for benchmarks. With
//! `VIBE_SHIM_TIMINGS=<file>` in vibe-shim's own environment (the engine's,
//! never a container's), each process appends one JSON line when it execs
//! runc or gives up: `{"verb", "main_us", "phases": [[name, µs], ...]}`,
//! where `main_us` is the wall clock (µs since the epoch) at `main`, so a
//! caller that notes the time before starting vibe-shim sees the loader's
//! share too. Without the variable a mark is one thread-local check.

use std::cell::RefCell;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The variable naming the file the phase lines go to.
pub const ENV: &str = "VIBE_SHIM_TIMINGS";

struct Marks {
    sink: PathBuf,
    main_us: u128,
    last: Instant,
    phases: Vec<(&'static str, u128)>,
}

thread_local! {
    static MARKS: RefCell<Option<Marks>> = const { RefCell::new(None) };
}

/// Starts the clock, if the variable asks for it.
pub fn begin() {
    let Some(sink) = std::env::var_os(ENV) else {
        return;
    };
    let main_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    MARKS.with(|m| {
        *m.borrow_mut() = Some(Marks {
            sink: PathBuf::from(sink),
            main_us,
            last: Instant::now(),
            phases: Vec::new(),
        });
    });
}

/// Ends phase `name`: the time since the previous mark is its share.
pub fn mark(name: &'static str) {
    MARKS.with(|m| {
        if let Some(marks) = m.borrow_mut().as_mut() {
            let now = Instant::now();
            marks
                .phases
                .push((name, now.duration_since(marks.last).as_micros()));
            marks.last = now;
        }
    });
}

/// Writes this process's line (once; later calls find nothing to write).
/// Best effort: a benchmark aid never changes what the verb does.
pub fn flush(verb: &str) {
    let Some(marks) = MARKS.with(|m| m.borrow_mut().take()) else {
        return;
    };
    let phases: Vec<serde_json::Value> = marks
        .phases
        .iter()
        .map(|(name, us)| serde_json::json!([name, us]))
        .collect();
    let line = serde_json::json!({
        "verb": verb,
        "main_us": marks.main_us,
        "phases": phases,
    });
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&marks.sink);
    if let Ok(mut file) = file {
        let _ = writeln!(file, "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_written_once_and_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let sink = dir.path().join("t.jsonl");
        // Not asked: nothing is kept, nothing written.
        mark("argv");
        flush("create");
        assert!(!sink.exists());
        MARKS.with(|m| {
            *m.borrow_mut() = Some(Marks {
                sink: sink.clone(),
                main_us: 7,
                last: Instant::now(),
                phases: Vec::new(),
            })
        });
        mark("argv");
        mark("policy");
        flush("create");
        flush("create");
        let text = std::fs::read_to_string(&sink).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["verb"], "create");
        assert_eq!(line["main_us"], 7);
        let names: Vec<&str> = line["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[0].as_str().unwrap())
            .collect();
        assert_eq!(names, ["argv", "policy"]);
    }
}
