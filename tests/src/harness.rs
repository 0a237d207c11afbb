//! Bounded command runs: every program a suite starts runs in its own
//! process group and is killed after its timeout, so a hang cannot eat CI's
//! budget; [`Output`] keeps the whole story for failure messages.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// What a finished (or killed) command left behind.
#[derive(Debug, Clone)]
pub struct Output {
    /// `None` when killed by a signal (including our timeout).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    /// The command line, for messages.
    pub argv: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }

    /// Panics with the whole story unless the command exited 0.
    pub fn ok(self) -> Output {
        assert!(self.success(), "command failed: {self}");
        self
    }
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` -> code {:?}{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.argv,
            self.code,
            if self.timed_out { " (TIMED OUT)" } else { "" },
            self.stdout,
            self.stderr
        )
    }
}

/// Runs `cmd` with stdin from `input` (or /dev/null), killing its whole
/// process group after `timeout` so a hang cannot eat CI's budget.
pub fn run_bounded(mut cmd: Command, input: Option<&[u8]>, timeout: Duration) -> Output {
    let mut argv = format!("{cmd:?}");
    if argv.len() > 300 {
        // The probe script is long and not what a failure message needs.
        let cut = (0..=300)
            .rev()
            .find(|i| argv.is_char_boundary(*i))
            .unwrap_or(0);
        argv.truncate(cut);
        argv.push_str(" ...");
    }
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .process_group(0);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {argv}: {e}"));
    let pid = child.id();
    if let Some(data) = input {
        let mut stdin = child.stdin.take().expect("stdin piped");
        let data = data.to_vec();
        thread::spawn(move || {
            use std::io::Write;
            let _ = stdin.write_all(&data);
        });
    }
    let (tx, rx) = mpsc::channel::<(bool, Vec<u8>)>();
    let mut out = child.stdout.take().expect("stdout piped");
    let mut err = child.stderr.take().expect("stderr piped");
    let tx2 = tx.clone();
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.read_to_end(&mut buf);
        let _ = tx.send((true, buf));
    });
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = err.read_to_end(&mut buf);
        let _ = tx2.send((false, buf));
    });
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                timed_out = true;
                // Our own process group, by id.
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{pid}")])
                    .status();
                break child.wait().ok();
            }
            Ok(None) => thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    // A grandchild holding a pipe open must not hang us either.
    let drain_deadline = Instant::now() + Duration::from_secs(5);
    for _ in 0..2 {
        let left = drain_deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((true, b)) => stdout = b,
            Ok((false, b)) => stderr = b,
            Err(_) => break,
        }
    }
    Output {
        code: status.and_then(|s| s.code()),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        timed_out,
        argv,
    }
}

/// Any other program, bounded.
pub fn program<S: AsRef<str>>(prog: &str, args: &[S], timeout: Duration) -> Output {
    let mut cmd = Command::new(prog);
    cmd.args(args.iter().map(|a| a.as_ref()));
    run_bounded(cmd, None, timeout)
}

/// Compiles one of tests/probe/*.c into a static binary at `out`, to run
/// inside images without a libc; panics naming what is missing.
pub fn static_c_probe(source: &str, out: &std::path::Path) {
    let source = format!("{}/probe/{source}", env!("CARGO_MANIFEST_DIR"));
    let out_arg = out.to_str().expect("utf-8 probe path");
    let built = program(
        "gcc",
        &["-static", "-no-pie", "-O1", "-o", out_arg, &source],
        Duration::from_secs(120),
    );
    assert!(
        built.success(),
        "building {source} (needs gcc and static libc): {built}"
    );
}

/// A container name unique across tests, threads and runs.
pub fn unique_name(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("vibe-e2e-{tag}-{}-{n}-{nanos:x}", std::process::id())
}
