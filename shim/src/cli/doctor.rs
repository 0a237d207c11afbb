//! `vibe-shim doctor [-H DOCKER_HOST] [--image IMAGE] [--worktree DIR]`:
//! tries each door a client has around the runtime (a runtime other than
//! vibe-shim, no `--runtime`, `docker cp` through a bind, a bind source that does not
//! exist, a privileged run), and with `--worktree` a `-v` source swapped
//! for a symlink between create and start, with a canary container; judges
//! each from inside the container (or by host evidence), prints one row per door and exits
//! non-zero if any door is open or could not be judged. Then a legacy-builder
//! build's RUN step, `runc` as each engine resolves it (run, to see it is
//! vibe-shim and reaches the real runc), and every runc a client can still
//! name by path (exec'd as root: closed only on EACCES). It drives the
//! docker CLI, so it must run on the engine's host (the bind-source row
//! looks at this host's filesystem). Every canary it creates is removed.
//! `--full` runs the hostile battery instead ([`full`]).

pub mod full;

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Labels every canary, so a leftover is easy to find.
pub const LABEL: &str = "vibe-shim-doctor";
const TIMEOUT: Duration = Duration::from_secs(120);

/// Run inside each canary: the posture as the kernel sees it.
pub const PROBE: &str = r#"s=/proc/self/status
echo "cap=$(sed -n 's/^CapEff:[[:space:]]*//p' $s)"
echo "nnp=$(sed -n 's/^NoNewPrivs:[[:space:]]*//p' $s)"
if touch /.vibe-shim-doctor 2>/dev/null; then echo root=rw; rm -f /.vibe-shim-doctor; else echo root=ro; fi
if [ ! -e /x/shadow ]; then echo shadow=absent; elif cat /x/shadow >/dev/null 2>&1; then echo shadow=read; else echo shadow=denied; fi
"#;

/// Exit codes, for `--help` and the scripts that run doctor.
const EXIT_CODES: &str = "Exit codes:\n  0  every door is closed (or does not apply here)\n  1  a door is open or could not be judged, or the engine could not be asked its version\n  2  a usage error\n\nThe doors, and how --full judges each: docs/admin/doctor.md.";

/// `vibe-shim doctor`: which engine, which image, and where the bind
/// canary may plant its symlink.
#[derive(Debug, clap::Parser)]
#[command(
    name = "doctor",
    bin_name = "vibe-shim doctor",
    about = "Try each door around vibe-shim with canary containers; one row per door",
    args_override_self = true,
    after_help = EXIT_CODES
)]
pub struct DoctorArgs {
    /// The engine, as docker's -H [default: $DOCKER_HOST]
    #[arg(short = 'H', long = "host", value_name = "DOCKER_HOST")]
    host: Option<OsString>,
    /// The canaries' image
    #[arg(long, value_name = "IMAGE", default_value = "busybox")]
    image: String,
    /// The docker CLI to drive
    #[arg(long, value_name = "PATH", default_value = "docker")]
    docker: OsString,
    /// A directory the policy allows as a read-write bind (as an agent's
    /// worktree is): where the bind-creation canary plants its symlink
    #[arg(long, value_name = "DIR")]
    worktree: Option<PathBuf>,
    /// Run the hostile battery instead: client flags that try to loosen
    /// the policy, each judged from inside by the probe; one row per door
    /// and per probe rule
    #[arg(long)]
    full: bool,
    #[command(flatten)]
    battery: full::FullArgs,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Open,
    Closed,
    NotApplicable,
    /// The canary failed for a reason that is not a vibe-shim refusal:
    /// the door is not proven closed.
    Error,
}

impl Verdict {
    fn label(&self) -> &'static str {
        match self {
            Verdict::Open => "OPEN",
            Verdict::Closed => "closed",
            Verdict::NotApplicable => "n/a",
            Verdict::Error => "ERROR",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub door: String,
    /// The probe rule the row judges (`doctor --full`); `None` for the door.
    pub rule: Option<String>,
    pub verdict: Verdict,
    pub evidence: String,
}

/// Judges a probe's output: open if any of CapEff != 0, NoNewPrivs != 1,
/// a writable root or a readable /x/shadow.
pub fn judge_probe(stdout: &str) -> (Verdict, String) {
    let get = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::trim)
            .unwrap_or("")
    };
    let (cap, nnp, root, shadow) = (get("cap"), get("nnp"), get("root"), get("shadow"));
    if cap.is_empty() || nnp.is_empty() || root.is_empty() || shadow.is_empty() {
        return (
            Verdict::Error,
            format!("probe output incomplete: {:?}", first_line(stdout)),
        );
    }
    let caps_zero = cap.chars().all(|c| c == '0');
    let open = !caps_zero || nnp != "1" || root != "ro" || shadow == "read";
    let evidence = format!("CapEff={cap} NoNewPrivs={nnp} root={root} /x/shadow={shadow}");
    (if open { Verdict::Open } else { Verdict::Closed }, evidence)
}

/// Where vibe-shim speaks in `line`: `vibe-shim: ` as a word of its own
/// (the refusal's `vibe-shim: RULE: ...`, the API gate's `plugin vibe-shim:
/// ...`), not the name inside a path (`/run/vibe-shim/...`,
/// `mkdir /etc/vibe-shim: ...`), a runtime's name (`vibe-shim-strict`) or
/// containerd's `.../vibe-shim did not terminate successfully` of a
/// vibe-shim that crashed.
fn refusal_in(line: &str) -> Option<&str> {
    const SAYS: &str = "vibe-shim: ";
    line.match_indices(SAYS)
        .map(|(i, _)| i)
        .find(|&i| {
            line[..i]
                .chars()
                .next_back()
                .is_none_or(|c| c.is_whitespace() || c == '"' || c == '\'')
        })
        .map(|i| &line[i..])
}

/// A failed docker call is a closed door only when vibe-shim refused it
/// (the runtime's or the authz plugin's message is in vibe-shim's words).
pub fn judge_failure(stderr: &str) -> (Verdict, String) {
    // Canary, image and directory names carry the label: a message quoting
    // one ("name already in use") is no refusal.
    let stderr = &stderr.replace(LABEL, "<canary>");
    match stderr.lines().find_map(refusal_in) {
        // From our name on: what the runtime or the plugin said.
        Some(said) => (Verdict::Closed, format!("refused: {}", shorten(said, 200))),
        // The end of docker's message carries the cause.
        None => {
            let line = first_line(stderr).trim();
            let tail = match line.char_indices().rev().nth(160) {
                Some((i, _)) => format!("...{}", &line[i..]),
                None => line.to_string(),
            };
            (Verdict::Error, format!("failed: {tail}"))
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

fn shorten(s: &str, max: usize) -> String {
    let s = s.trim();
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// dockerd >= 23 hands dotted runtime names straight to containerd.
pub fn engine_major(version: &str) -> Option<u32> {
    version.trim().split('.').next()?.parse().ok()
}

/// The table; a RULE column (`-` for a door's own row) when a row names one.
pub fn render(rows: &[Row]) -> String {
    let width = rows.iter().map(|r| r.door.len()).max().unwrap_or(4).max(4);
    let rules = rows.iter().filter_map(|r| r.rule.as_deref());
    let rule_width = rules.map(str::len).max().map(|w| w.max(4));
    let rule = |r: Option<&str>| match rule_width {
        Some(w) => format!("{:w$}  ", r.unwrap_or("-")),
        None => String::new(),
    };
    let mut out = format!(
        "{:width$}  {}{:6}  EVIDENCE\n",
        "DOOR",
        rule(Some("RULE")),
        "RESULT"
    );
    for r in rows {
        out.push_str(&format!(
            "{:width$}  {}{:6}  {}\n",
            r.door,
            rule(r.rule.as_deref()),
            r.verdict.label(),
            r.evidence
        ));
    }
    out
}

/// Non-zero when any door is open or unproven.
pub fn exit_code(rows: &[Row]) -> i32 {
    match rows
        .iter()
        .any(|r| matches!(r.verdict, Verdict::Open | Verdict::Error))
    {
        true => 1,
        false => 0,
    }
}

// ---------------------------------------------------------------------------
// Plumbing: the docker CLI.

struct Docker {
    program: OsString,
    host: Option<OsString>,
    image: String,
    prefix: String,
    created: Vec<String>,
}

struct Out {
    ok: bool,
    stdout: Vec<u8>,
    stderr: String,
}

impl Docker {
    /// Canaries named `vibe-shim-doctor-<pid>-<nanos>-<door>`: unique to this run.
    fn new(program: OsString, host: Option<OsString>, image: String) -> Docker {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Docker {
            program,
            host: host.or_else(|| std::env::var_os("DOCKER_HOST")),
            image,
            prefix: format!("{LABEL}-{}-{nanos:x}", std::process::id()),
            created: Vec::new(),
        }
    }

    fn run(&self, args: &[&str]) -> Out {
        self.run_env(&[], args)
    }

    fn run_env(&self, env: &[(&str, &str)], args: &[&str]) -> Out {
        let mut cmd = Command::new(&self.program);
        cmd.envs(env.iter().copied());
        if let Some(host) = &self.host {
            cmd.arg("-H").arg(host);
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Out {
                    ok: false,
                    stdout: Vec::new(),
                    stderr: format!("cannot run {}: {e}", self.program.to_string_lossy()),
                }
            }
        };
        let mut pipes = (child.stdout.take(), child.stderr.take());
        let out_reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipes.0.take() {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        });
        let err_reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipes.1.take() {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        });
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        let stdout = out_reader.join().unwrap_or_default();
        let mut stderr =
            String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
        if status.is_none() {
            stderr.push_str("\n(timed out)");
        }
        Out {
            ok: status.is_some_and(|s| s.success()),
            stdout,
            stderr,
        }
    }

    fn name(&mut self, door: &str) -> String {
        let name = format!("{}-{door}", self.prefix);
        self.created.push(name.clone());
        name
    }

    /// `docker run` a canary with the probe, `extra` before the image. When
    /// vibe-shim refuses the /etc bind, a second canary without it is
    /// judged from inside too: a refused bind says nothing of the caps.
    fn canary(&mut self, door: &str, extra: &[&str]) -> (Verdict, String) {
        let first = self.probe(door, extra, true);
        if first.0 != Verdict::Closed || !first.1.starts_with("refused") {
            return first;
        }
        let (verdict, evidence) = self.probe(&format!("{door}-nobind"), extra, false);
        (
            verdict,
            format!("/etc bind {}; without it: {evidence}", first.1),
        )
    }

    fn probe(&mut self, door: &str, extra: &[&str], bind: bool) -> (Verdict, String) {
        let name = self.name(door);
        let mut args = vec!["run", "--name", &name, "--label", LABEL];
        if bind {
            args.extend(["-v", "/etc:/x"]);
        }
        args.extend_from_slice(extra);
        let image = self.image.clone();
        args.extend([image.as_str(), "/bin/sh", "-c", PROBE]);
        let out = self.run(&args);
        match out.ok {
            true => judge_probe(&String::from_utf8_lossy(&out.stdout)),
            false => judge_failure(&out.stderr),
        }
    }

    /// `docker VERB` a canary named for `door` with `-v SOURCE:/y`, running
    /// `/bin/true`: its name and the outcome.
    fn bind_canary(&mut self, verb: &str, door: &str, source: &std::path::Path) -> (String, Out) {
        let name = self.name(door);
        let image = self.image.clone();
        let bind = format!("{}:/y", source.display());
        let out = self.run(&[
            verb,
            "--name",
            &name,
            "--label",
            LABEL,
            "-v",
            &bind,
            &image,
            "/bin/true",
        ]);
        (name, out)
    }

    fn remove_all(&mut self) {
        for name in std::mem::take(&mut self.created) {
            let _ = self.run(&["rm", "-f", "-v", &name]);
        }
    }
}

/// Every canary goes, however doctor leaves (an early return, a panic).
impl Drop for Docker {
    fn drop(&mut self) {
        self.remove_all();
    }
}

fn row(door: &str, (verdict, evidence): (Verdict, String)) -> Row {
    Row {
        door: door.to_string(),
        rule: None,
        verdict,
        evidence,
    }
}

fn cp_door(d: &mut Docker) -> (Verdict, String) {
    let name = d.name("cp");
    let image = d.image.clone();
    let created = d.run(&[
        "create",
        "--name",
        &name,
        "--label",
        LABEL,
        "-v",
        "/etc:/x",
        &image,
        "/bin/true",
    ]);
    if !created.ok {
        return judge_failure(&created.stderr);
    }
    let cp = d.run(&["cp", &format!("{name}:/x/shadow"), "-"]);
    match (cp.ok, cp.stdout.is_empty()) {
        (true, false) => (
            Verdict::Open,
            format!(
                "docker cp read {} bytes of the host's /etc/shadow",
                cp.stdout.len()
            ),
        ),
        (true, true) => (Verdict::Error, "docker cp returned nothing".into()),
        (false, _) => judge_failure(&cp.stderr),
    }
}

/// A bind whose source is missing: does dockerd create it on this host?
fn bind_source_door(d: &mut Docker) -> (Verdict, String) {
    let base = PathBuf::from(format!("/var/tmp/{}", d.prefix));
    let source = base.join("missing");
    if base.exists() {
        return (Verdict::Error, format!("{} exists already", base.display()));
    }
    let (_, out) = d.bind_canary("run", "bind-source", &source);
    let created = source.exists();
    // Only the directories this run made: the name is unique to it.
    let _ = std::fs::remove_dir(&source);
    let _ = std::fs::remove_dir(&base);
    bind_source_verdict(&source.display().to_string(), created, out.ok, &out.stderr)
}

/// The bind-source door from what doctor saw. dockerd creates a missing
/// `-v` source before it calls the runtime, so only a refusal before that
/// (the authz gate's) leaves it uncreated; a canary that ran, or a runtime
/// refusal, without the directory here means dockerd wrote to a filesystem
/// doctor does not see (an engine in another mount namespace): unproven,
/// never closed.
pub fn bind_source_verdict(
    source: &str,
    created: bool,
    ran: bool,
    stderr: &str,
) -> (Verdict, String) {
    const ELSEWHERE: &str =
        "dockerd creates it before the runtime runs: run doctor in the engine's mount namespace";
    match (created, ran) {
        (true, _) => (
            Verdict::Open,
            format!("dockerd created {source} on the host"),
        ),
        (false, false) => match gate_refused_bind(stderr) {
            Ok(why) => (Verdict::Closed, format!("source not created; {why}")),
            Err(why) => (
                Verdict::Error,
                format!("{source} not seen here after {why}; {ELSEWHERE}"),
            ),
        },
        (false, true) => (
            Verdict::Error,
            format!("the canary ran, but {source} is not on this host; {ELSEWHERE}"),
        ),
    }
}

/// `Ok(why)` when the authz gate's bind rule itself refused the request,
/// not a refusal for another reason (a runtime the gate does not accept)
/// that never judged the bind; else `Err(why)`, what the failure was.
fn gate_refused_bind(stderr: &str) -> Result<String, String> {
    match judge_failure(stderr) {
        (Verdict::Closed, why)
            if stderr.contains("authorization denied") && stderr.contains("authz-binds") =>
        {
            Ok(why)
        }
        (_, why) => Err(why),
    }
}

// ---------------------------------------------------------------------------
// Builds, lockdown, and the runc binaries a client can name.

/// A legacy-builder RUN step (no buildx needed): its posture, one line.
const BUILD_RUN: &str = r#"s=/proc/self/status; echo "vibe-build cap=$(sed -n 's/^CapEff:[[:space:]]*//p' $s) nnp=$(sed -n 's/^NoNewPrivs:[[:space:]]*//p' $s)""#;

/// The build door from `docker build`'s outcome: the RUN step's own line
/// (the echoed `Step` line quotes the command, so only a line that starts
/// with the marker counts). CapEff 0 and NoNewPrivs 1 is confined; a build
/// refused by vibe-shim (the gate's or the runtime's message) is closed.
pub fn build_verdict(ok: bool, stdout: &str, stderr: &str) -> (Verdict, String) {
    let line = stdout
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("vibe-build "));
    match (ok, line) {
        (true, Some(line)) => {
            let get = |key: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                    .unwrap_or("")
            };
            let (cap, nnp) = (get("cap"), get("nnp"));
            if cap.is_empty() || nnp.is_empty() {
                return (
                    Verdict::Error,
                    format!("RUN step output incomplete: {line:?}"),
                );
            }
            let evidence = format!("RUN step: CapEff={cap} NoNewPrivs={nnp}");
            match cap.chars().all(|c| c == '0') && nnp == "1" {
                true => (Verdict::Closed, evidence),
                false => (Verdict::Open, evidence),
            }
        }
        (true, None) => (
            Verdict::Error,
            format!(
                "the build ran but its RUN step said nothing: {:?}",
                first_line(stdout)
            ),
        ),
        (false, _) => judge_failure(stderr),
    }
}

/// One engine's `runc`, as doctor found and ran it.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Whose PATH: "the engines' default PATH" or "dockerd (pid N)".
    pub whose: String,
    /// The first executable `runc` on that PATH.
    pub runc: Option<String>,
    /// `runc doctor`: only vibe-shim refuses it with its own message.
    pub own_verb_stderr: String,
    /// `runc --version`: did it reach a real runc?
    pub version: (bool, String),
}

/// vibe-shim's refusal of its own verbs when run as runc (main.rs).
const AS_RUNC_REFUSAL: &str = "vibe-shim's own verbs are refused when it runs as runc";

/// runc logs `time=... level=error msg="..."`: the message.
fn said_msg(line: &str) -> &str {
    match line.split_once("msg=\"") {
        Some((_, msg)) => msg.trim_end_matches('"').trim_end_matches("\\n"),
        None => line,
    }
}

/// The lockdown row: every engine's `runc` must be vibe-shim (it refuses
/// `runc doctor` with its own message) and must still reach the real runc.
pub fn lockdown_verdict(seen: &[Resolved]) -> (Verdict, String) {
    let mut worst = Verdict::Closed;
    // Outcome -> whose PATHs gave it: one clause per outcome.
    let mut said: Vec<(String, Vec<&str>)> = Vec::new();
    for r in seen {
        let (verdict, why) = match &r.runc {
            None => (Verdict::Error, "finds no runc".to_string()),
            Some(runc) if !r.own_verb_stderr.contains(AS_RUNC_REFUSAL) => (
                Verdict::Open,
                format!(
                    "runc is {runc}, not vibe-shim (`runc doctor`: {})",
                    shorten(said_msg(first_line(&r.own_verb_stderr)), 80)
                ),
            ),
            Some(runc) => match &r.version {
                (true, out) if out.starts_with("runc version") => (
                    Verdict::Closed,
                    format!(
                        "runc is {runc}, vibe-shim, which runs the real {}",
                        first_line(out).trim()
                    ),
                ),
                (_, out) => (
                    Verdict::Error,
                    format!(
                        "runc is {runc}, vibe-shim, but `runc --version` failed: {}",
                        shorten(first_line(out), 120)
                    ),
                ),
            },
        };
        worst = match (&worst, &verdict) {
            (Verdict::Open, _) | (_, Verdict::Open) => Verdict::Open,
            (Verdict::Error, _) | (_, Verdict::Error) => Verdict::Error,
            _ => Verdict::Closed,
        };
        match said.iter_mut().find(|(w, _)| *w == why) {
            Some((_, whose)) => whose.push(&r.whose),
            None => said.push((why, vec![&r.whose])),
        }
    }
    if said.is_empty() {
        return (Verdict::Error, "no engine PATH to resolve runc on".into());
    }
    let clauses: Vec<String> = said
        .iter()
        .map(|(why, whose)| format!("{}: {why}", whose.join(", ")))
        .collect();
    (worst, clauses.join("; "))
}

/// A runc binary a client can name by path (`ctr run --runc-binary P`,
/// `podman --runtime P`), run by doctor as root the same way: closed only
/// when the kernel refuses to exec it.
pub fn exec_verdict(
    path: &str,
    mode: Option<u32>,
    ran: &Result<(bool, String), std::io::ErrorKind>,
) -> (Verdict, String) {
    let mode = mode.map_or(String::new(), |m| format!(" (mode {m:04o})"));
    match ran {
        Err(std::io::ErrorKind::PermissionDenied) => (
            Verdict::Closed,
            format!("exec {path} as root: Permission denied{mode}"),
        ),
        Err(std::io::ErrorKind::NotFound) => (Verdict::NotApplicable, format!("no {path}")),
        Err(e) => (Verdict::Error, format!("exec {path}: {e}")),
        Ok((_, out)) => (
            Verdict::Open,
            format!(
                "{path}{mode} runs without vibe-shim: {}",
                shorten(first_line(out), 80)
            ),
        ),
    }
}

/// An engine socket that lets a client name its own runtime binary:
/// `(path, mode, gid)`.
pub type Socket = (String, u32, u32);

/// The containerd/podman sockets: a client of one names any binary as its
/// runtime (a runc unpacked from an image snapshot included), which no
/// runtime-side check can stop. Closed only when each is root-only.
pub fn socket_verdict(sockets: &[Socket]) -> (Verdict, String) {
    if sockets.is_empty() {
        return (
            Verdict::NotApplicable,
            "no containerd or podman socket here".into(),
        );
    }
    let open: Vec<String> = sockets
        .iter()
        .filter(|(_, mode, gid)| mode & 0o006 != 0 || (*gid != 0 && mode & 0o060 != 0))
        .map(|(p, mode, gid)| format!("{p} (mode {:04o}, gid {gid})", mode & 0o7777))
        .collect();
    match open.is_empty() {
        true => (
            Verdict::Closed,
            format!(
                "root-only: {} (root can still run a runc of its own: such a socket is root)",
                sockets
                    .iter()
                    .map(|s| s.0.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        false => (
            Verdict::Open,
            format!(
                "{}: a non-root client names its own runc (e.g. one unpacked from an image)",
                open.join(", ")
            ),
        ),
    }
}

/// Where a distribution ships a runc of its own, which its containerd
/// finds first on its PATH.
pub const DISTRO_RUNCS: &[(&str, &str)] = &[
    ("k3s", "/var/lib/rancher/k3s/data/current/bin/runc"),
    ("RKE2", "/var/lib/rancher/rke2/bin/runc"),
    ("k0s", "/var/lib/k0s/bin/runc"),
];

/// The sockets whose clients name their own runtime binary.
const ENGINE_SOCKETS: &[&str] = &[
    "/run/containerd/containerd.sock",
    "/run/docker/containerd/containerd.sock",
    "/run/k3s/containerd/containerd.sock",
    "/run/k0s/containerd.sock",
    "/run/podman/podman.sock",
];

fn first_runc(path_var: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path_var
        .split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| std::path::Path::new(d).join("runc"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Runs `program args` with no input and a deadline; `Err` only when it
/// could not be started (the kernel's answer to the exec).
fn run_direct(
    program: &std::path::Path,
    args: &[&str],
) -> Result<(bool, String, String), std::io::ErrorKind> {
    let mut child = Command::new(program)
        .args(args)
        .env_remove(crate::runtime::ACTIVE_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.kind())?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().map_err(|e| e.kind())?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Same mount namespace as doctor: a PATH of an engine elsewhere names
/// files doctor does not see.
fn same_mount_ns(whose: &str) -> bool {
    let pid = whose
        .rsplit_once("(pid ")
        .and_then(|(_, p)| p.strip_suffix(')'));
    let Some(pid) = pid else {
        return true;
    };
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/mnt")).ok();
    ns(pid).is_some() && ns(pid) == ns("self")
}

fn lockdown_door() -> (Verdict, String) {
    let mut paths = vec![(
        "the engines' default PATH".to_string(),
        crate::install::lockdown::ENGINE_PATH.to_string(),
    )];
    paths.extend(
        crate::install::lockdown::engine_paths_here()
            .into_iter()
            .filter(|(whose, _)| same_mount_ns(whose)),
    );
    let seen: Vec<Resolved> = paths
        .into_iter()
        .map(|(whose, path)| {
            let runc = first_runc(&path);
            let (own_verb_stderr, version) = match &runc {
                None => (String::new(), (false, String::new())),
                Some(runc) => {
                    let own = run_direct(runc, &["doctor"])
                        .map(|o| o.2)
                        .unwrap_or_else(|e| e.to_string());
                    let version = match run_direct(runc, &["--version"]) {
                        Ok((ok, out, err)) => (ok, if ok { out } else { err }),
                        Err(e) => (false, e.to_string()),
                    };
                    (own, version)
                }
            };
            Resolved {
                whose,
                runc: runc.map(|p| p.display().to_string()),
                own_verb_stderr,
                version,
            }
        })
        .collect();
    lockdown_verdict(&seen)
}

fn mode_of(path: &std::path::Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.mode() & 0o7777)
}

fn exec_door(path: &std::path::Path) -> (Verdict, String) {
    let ran = run_direct(path, &["--version"]).map(|(ok, out, err)| (ok, out + &err));
    exec_verdict(&path.display().to_string(), mode_of(path), &ran)
}

fn real_runc_door() -> (Verdict, String) {
    match crate::install::lockdown::recorded_real_runc() {
        Err(e) => (Verdict::Error, e.to_string()),
        Ok(None) => (
            Verdict::Open,
            "no lockdown record: the runc a client names is the real one".into(),
        ),
        Ok(Some(real)) => match exec_door(&real) {
            (Verdict::NotApplicable, why) => (Verdict::Error, format!("recorded, but {why}")),
            judged => judged,
        },
    }
}

/// The gRPC socket of a running containerd: `--address`, else its
/// `--config`'s `[grpc] address`, else containerd's default.
pub fn containerd_address(argv: &[String], config: impl Fn(&str) -> Option<String>) -> String {
    let mut it = argv.iter().skip(1);
    let (mut address, mut config_path) = (None, None);
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        match flag {
            "--address" | "-a" => address = inline.or_else(|| it.next().cloned()),
            "--config" | "-c" => config_path = inline.or_else(|| it.next().cloned()),
            _ => {}
        }
    }
    let from_config = || {
        let text = config(config_path.as_deref()?)?;
        let value: toml::Value = toml::from_str(&text).ok()?;
        Some(value.get("grpc")?.get("address")?.as_str()?.to_string())
    };
    address
        .or_else(from_config)
        .unwrap_or_else(|| "/run/containerd/containerd.sock".into())
}

fn running_containerd_sockets() -> Vec<String> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "containerd")
        })
        .filter(|e| same_mount_ns(&format!("(pid {})", e.file_name().to_string_lossy())))
        .filter_map(|e| {
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let argv: Vec<String> = raw
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            Some(containerd_address(&argv, |p| {
                std::fs::read_to_string(p).ok()
            }))
        })
        .collect()
}

fn socket_door() -> (Verdict, String) {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut paths: Vec<String> = ENGINE_SOCKETS.iter().map(|p| p.to_string()).collect();
    for p in running_containerd_sockets() {
        if !paths.contains(&p) {
            paths.push(p);
        }
    }
    let found: Vec<Socket> = paths
        .iter()
        .filter_map(|p| {
            let m = std::fs::metadata(p).ok()?;
            m.file_type()
                .is_socket()
                .then(|| (p.to_string(), m.mode(), m.gid()))
        })
        .collect();
    socket_verdict(&found)
}

/// A legacy-builder `docker build` (DOCKER_BUILDKIT=0: the host CLI may
/// have no buildx) whose one RUN step reports its posture. Its image and
/// context directory are removed.
fn build_door(d: &mut Docker) -> (Verdict, String) {
    let dir = PathBuf::from(format!("/var/tmp/{}-build", d.prefix));
    if dir.exists() {
        return (Verdict::Error, format!("{} exists already", dir.display()));
    }
    let dockerfile = format!("FROM {}\nRUN {BUILD_RUN}\n", d.image);
    if let Err(e) =
        std::fs::create_dir(&dir).and_then(|()| std::fs::write(dir.join("Dockerfile"), dockerfile))
    {
        let _ = std::fs::remove_dir_all(&dir);
        return (
            Verdict::Error,
            format!("cannot make the build context: {e}"),
        );
    }
    let iid = dir.join("iid");
    let (iid_s, dir_s) = (iid.display().to_string(), dir.display().to_string());
    let out = d.run_env(
        &[("DOCKER_BUILDKIT", "0")],
        &[
            "build",
            "--no-cache",
            "--rm",
            "--force-rm",
            "--network",
            "none",
            "--label",
            LABEL,
            "--iidfile",
            &iid_s,
            &dir_s,
        ],
    );
    if let Ok(id) = std::fs::read_to_string(&iid) {
        let _ = d.run(&["image", "rm", "-f", id.trim()]);
    }
    let _ = std::fs::remove_dir_all(&dir);
    build_verdict(out.ok, &String::from_utf8_lossy(&out.stdout), &out.stderr)
}

/// `docker create -v <worktree>/<canary>/d/new:/y`, then `d` swapped for a
/// symlink to a directory outside, then `docker start`: does dockerd create
/// `new` there (its MkdirAll at start follows the symlink)? A container
/// that writes its worktree can make the same swap.
fn bind_create_door(d: &mut Docker, worktree: Option<&std::path::Path>) -> (Verdict, String) {
    let Some(worktree) = worktree else {
        return (
            Verdict::NotApplicable,
            "give --worktree DIR (a directory the policy binds read-write) to try it".into(),
        );
    };
    let base = worktree.join(&d.prefix);
    let outside = PathBuf::from(format!("/var/tmp/{}-outside", d.prefix));
    let made = outside.join("new");
    if let Some(there) = [&base, &outside].into_iter().find(|p| p.exists()) {
        return (
            Verdict::Error,
            format!("{} exists already", there.display()),
        );
    }
    if let Err(e) =
        std::fs::create_dir_all(base.join("d/new")).and_then(|()| std::fs::create_dir(&outside))
    {
        let _ = std::fs::remove_dir_all(&base);
        return (
            Verdict::Error,
            format!("cannot make the canary's directories: {e}"),
        );
    }
    let (name, created) = d.bind_canary("create", "bind-create", &base.join("d/new"));
    let started = created.ok
        && std::fs::remove_dir_all(base.join("d"))
            .and_then(|()| std::os::unix::fs::symlink(&outside, base.join("d")))
            .is_ok()
        && {
            let _ = d.run(&["start", &name]);
            true
        };
    let exists = made.exists();
    // Whatever was made: base holds only the canary's own entries, and a
    // symlink inside it is removed, not followed.
    let _ = std::fs::remove_dir_all(&base);
    let _ = std::fs::remove_dir_all(&outside);
    bind_create_verdict(
        &made.display().to_string(),
        exists,
        created.ok,
        started,
        &created.stderr,
    )
}

/// The bind-creation door from what doctor saw: closed only when the gate
/// refused the `-v` bind itself at create.
pub fn bind_create_verdict(
    made: &str,
    exists: bool,
    created: bool,
    started: bool,
    create_stderr: &str,
) -> (Verdict, String) {
    match (exists, created, started) {
        (true, _, _) => (
            Verdict::Open,
            format!("dockerd created {made} at start, through a symlink planted after create"),
        ),
        (false, false, _) => match gate_refused_bind(create_stderr) {
            Ok(why) => (Verdict::Closed, why),
            Err(why) => (Verdict::Error, format!("create failed: {why}")),
        },
        (false, true, false) => (Verdict::Error, "could not swap in the symlink".into()),
        (false, true, true) => (
            Verdict::Error,
            format!(
                "created and started, but {made} is not on this host: run doctor in the engine's mount namespace"
            ),
        ),
    }
}

/// `config_path`: the global `--config`, where `--full` looks for the
/// policy's `filesystem.probe`.
pub fn run(config_path: &std::path::Path, args: &[OsString]) -> i32 {
    let DoctorArgs {
        host,
        image,
        docker: program,
        worktree,
        full,
        battery,
    } = match super::parse::<DoctorArgs>("doctor", args, 2) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let mut d = Docker::new(program, host, image);
    if full {
        return full::run(&mut d, config_path, worktree.as_deref(), &battery);
    }
    let version = d.run(&["version", "--format", "{{.Server.Version}}"]);
    let version_text = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let Some(major) = engine_major(&version_text).filter(|_| version.ok) else {
        eprintln!(
            "vibe-shim doctor: cannot ask the engine its version: {}",
            first_line(&version.stderr)
        );
        return 1;
    };
    println!(
        "# engine {version_text}, image {}, canaries {}-*",
        d.image, d.prefix
    );
    let mut rows = vec![
        row("--runtime=runc", d.canary("runc", &["--runtime=runc"])),
        row("(no --runtime)", d.canary("default", &[])),
    ];
    for (door, runtime) in [
        ("--runtime=io.containerd.runc.v2", "io.containerd.runc.v2"),
        ("--runtime=x.runc.v2", "x.runc.v2"),
    ] {
        let result = match major >= 23 {
            true => d.canary(
                &runtime.replace('.', "-"),
                &[&format!("--runtime={runtime}")],
            ),
            false => (
                Verdict::NotApplicable,
                format!("engine {major} < 23 does not pass dotted names to containerd"),
            ),
        };
        rows.push(row(door, result));
    }
    rows.push(row("docker create -v /etc:/x + docker cp", cp_door(&mut d)));
    rows.push(row(
        "bind source that does not exist",
        bind_source_door(&mut d),
    ));
    rows.push(row(
        "-v source swapped between create and start",
        bind_create_door(&mut d, worktree.as_deref()),
    ));
    rows.push(row(
        "--privileged",
        d.canary("privileged", &["--privileged"]),
    ));
    rows.push(row(
        "docker build (legacy builder) RUN step",
        build_door(&mut d),
    ));
    d.remove_all();
    rows.push(row(
        "lockdown: runc as the engines resolve it",
        lockdown_door(),
    ));
    rows.push(row(
        "ctr --runc-binary / podman --runtime <real runc>",
        real_runc_door(),
    ));
    for (distro, runc) in DISTRO_RUNCS {
        rows.push(row(
            &format!("{distro}'s own runc"),
            exec_door(std::path::Path::new(runc)),
        ));
    }
    rows.push(row(
        "ctr --runc-binary <a runc from an image>",
        socket_door(),
    ));
    print!("{}", render(&rows));
    exit_code(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_verdicts() {
        let closed = "cap=0000000000000000\nnnp=1\nroot=ro\nshadow=absent\n";
        assert_eq!(judge_probe(closed).0, Verdict::Closed);
        let open = "cap=00000000a80425fb\nnnp=0\nroot=rw\nshadow=read\n";
        let (v, ev) = judge_probe(open);
        assert_eq!(v, Verdict::Open);
        assert!(ev.contains("CapEff=00000000a80425fb"), "{ev}");
        for one in [
            "cap=01\nnnp=1\nroot=ro\nshadow=denied",
            "cap=0\nnnp=0\nroot=ro\nshadow=denied",
            "cap=0\nnnp=1\nroot=rw\nshadow=denied",
            "cap=0\nnnp=1\nroot=ro\nshadow=read",
        ] {
            assert_eq!(judge_probe(one).0, Verdict::Open, "{one}");
        }
        // A probe that did not finish proves nothing.
        assert_eq!(judge_probe("cap=0\n").0, Verdict::Error);
    }

    #[test]
    fn only_a_vibe_shim_refusal_is_closed() {
        let refused = "docker: Error response from daemon: OCI runtime create failed: vibe-shim: mounts: /etc not allowed\n";
        assert_eq!(judge_failure(refused).0, Verdict::Closed);
        let authz =
            "Error response from daemon: authorization denied by plugin vibe-shim: bind /etc";
        assert_eq!(judge_failure(authz).0, Verdict::Closed);
        let missing = "Unable to find image 'busybox:latest' locally\n";
        assert_eq!(judge_failure(missing).0, Verdict::Error);
    }

    #[test]
    fn bind_source_is_closed_only_by_a_refusal_before_dockerd_acts() {
        let src = "/var/tmp/x/missing";
        assert_eq!(bind_source_verdict(src, true, true, "").0, Verdict::Open);
        assert_eq!(bind_source_verdict(src, true, false, "").0, Verdict::Open);
        let authz = "Error response from daemon: authorization denied by plugin vibe-shim: vibe-shim: authz-binds: bind mount source is not under an allowed path";
        assert_eq!(
            bind_source_verdict(src, false, false, authz).0,
            Verdict::Closed
        );
        // Refused by the gate for another reason: the bind was never judged.
        let other = "Error response from daemon: authorization denied by plugin vibe-shim: vibe-shim: authz-runtime: runtime is not vibe-shim's";
        assert_eq!(
            bind_source_verdict(src, false, false, other).0,
            Verdict::Error
        );
        // The runtime refuses after dockerd made the source: not seeing it
        // here means doctor looks at another filesystem.
        let runtime = "docker: Error response from daemon: OCI runtime create failed: vibe-shim: binds: /var/tmp/x";
        assert_eq!(
            bind_source_verdict(src, false, false, runtime).0,
            Verdict::Error
        );
        // Ran with the bind, yet nothing here: an engine in another mount ns.
        let (v, why) = bind_source_verdict(src, false, true, "");
        assert_eq!(v, Verdict::Error);
        assert!(why.contains("mount namespace"), "{why}");
    }

    #[test]
    fn table_and_exit_code() {
        let rows = vec![
            row("a", (Verdict::Closed, "x".into())),
            row("--runtime=x.runc.v2", (Verdict::NotApplicable, "y".into())),
        ];
        assert_eq!(exit_code(&rows), 0);
        let text = render(&rows);
        assert!(text.starts_with("DOOR"), "{text}");
        assert!(
            text.contains("\n--runtime=x.runc.v2  n/a     y\n"),
            "{text}"
        );
        let mut open = rows.clone();
        open.push(row("b", (Verdict::Open, "z".into())));
        assert_eq!(exit_code(&open), 1);
        let mut err = rows;
        err.push(row("c", (Verdict::Error, "z".into())));
        assert_eq!(exit_code(&err), 1);
        assert_eq!(engine_major("20.10.24+dfsg1"), Some(20));
        assert_eq!(engine_major("28.5.1"), Some(28));
    }

    #[test]
    fn bind_create_is_closed_only_by_the_gates_bind_refusal() {
        let made = "/var/tmp/x-outside/new";
        assert_eq!(
            bind_create_verdict(made, true, true, true, "").0,
            Verdict::Open
        );
        let authz = "Error response from daemon: authorization denied by plugin vibe-shim: vibe-shim: authz-binds: dockerd creates a missing -v source";
        assert_eq!(
            bind_create_verdict(made, false, false, false, authz).0,
            Verdict::Closed
        );
        let other = "Error response from daemon: authorization denied by plugin vibe-shim: vibe-shim: authz-runtime: runtime";
        assert_eq!(
            bind_create_verdict(made, false, false, false, other).0,
            Verdict::Error
        );
        // The gate let it through and nothing appeared here: unproven.
        let (v, why) = bind_create_verdict(made, false, true, true, "");
        assert_eq!(v, Verdict::Error);
        assert!(why.contains("mount namespace"), "{why}");
    }

    fn parse_args(args: &[&str]) -> Result<DoctorArgs, clap::Error> {
        use clap::Parser;
        DoctorArgs::try_parse_from(std::iter::once("doctor").chain(args.iter().copied()))
    }

    #[test]
    fn options() {
        let o = parse_args(&["-H", "unix:///x.sock", "--image=bb"]).unwrap();
        assert_eq!(o.host, Some(OsString::from("unix:///x.sock")));
        assert_eq!(o.image, "bb");
        assert_eq!(o.worktree, None);
        let o = parse_args(&["--host=unix:///y.sock", "--worktree", "/srv/wt"]).unwrap();
        assert_eq!(o.host, Some(OsString::from("unix:///y.sock")));
        assert_eq!(o.worktree, Some(PathBuf::from("/srv/wt")));
        assert_eq!(o.docker, OsString::from("docker"));
        assert!(parse_args(&["--nope"]).is_err());
        assert!(parse_args(&["-H"]).is_err());
    }

    #[test]
    fn a_message_quoting_a_canary_name_is_no_refusal() {
        let clash = "docker: Error response from daemon: Conflict. The container name \"/vibe-shim-doctor-1-ab-runc\" is already in use";
        assert_eq!(judge_failure(clash).0, Verdict::Error);
    }

    #[test]
    fn build_verdicts() {
        let step = "Step 2/2 : RUN s=/proc/self/status; echo \"vibe-build cap=$(sed ...)\"\n";
        let closed =
            format!("{step} ---> Running in 1234\nvibe-build cap=0000000000000000 nnp=1\n");
        let (v, ev) = build_verdict(true, &closed, "");
        assert_eq!(v, Verdict::Closed, "{ev}");
        assert!(ev.contains("CapEff=0000000000000000 NoNewPrivs=1"), "{ev}");
        // Docker's default capabilities: a RUN step on plain runc.
        let open = format!("{step}vibe-build cap=00000000a80425fb nnp=0\n");
        assert_eq!(build_verdict(true, &open, "").0, Verdict::Open);
        let caps_only = format!("{step}vibe-build cap=00000000a80425fb nnp=1\n");
        assert_eq!(build_verdict(true, &caps_only, "").0, Verdict::Open);
        let nnp_only = format!("{step}vibe-build cap=0000000000000000 nnp=0\n");
        assert_eq!(build_verdict(true, &nnp_only, "").0, Verdict::Open);
        // The Step line alone quotes the command: not the step's report.
        assert_eq!(build_verdict(true, step, "").0, Verdict::Error);
        assert_eq!(
            build_verdict(true, &format!("{step}vibe-build cap= nnp=\n"), "").0,
            Verdict::Error
        );
        // Refused by the gate, with its reason: closed.
        let gate = "Error response from daemon: authorization denied by plugin vibe-shim: vibe-shim: authz-build: POST /build is refused without lockdown";
        let (v, ev) = build_verdict(false, "", gate);
        assert_eq!(v, Verdict::Closed);
        assert!(ev.contains("authz-build"), "{ev}");
        let broken = "The command '/bin/sh -c s=/proc/self/status' returned a non-zero code: 1";
        assert_eq!(build_verdict(false, step, broken).0, Verdict::Error);
    }

    fn resolved(runc: Option<&str>, own: &str, version: (bool, &str)) -> Resolved {
        Resolved {
            whose: "dockerd (pid 1)".into(),
            runc: runc.map(String::from),
            own_verb_stderr: own.into(),
            version: (version.0, version.1.into()),
        }
    }

    #[test]
    fn lockdown_verdicts() {
        let refusal = "vibe-shim: argv: doctor: not a runc verb: vibe-shim's own verbs are refused when it runs as runc";
        let held = resolved(
            Some("/usr/sbin/runc"),
            refusal,
            (true, "runc version 1.1.5\ncommit: x"),
        );
        let (v, ev) = lockdown_verdict(std::slice::from_ref(&held));
        assert_eq!(v, Verdict::Closed, "{ev}");
        assert!(ev.contains("runc version 1.1.5"), "{ev}");
        // The real runc answers `runc doctor` with its own usage error.
        let plain = resolved(
            Some("/usr/sbin/runc"),
            "No help topic for 'doctor'",
            (true, "runc version 1.1.5"),
        );
        let (v, ev) = lockdown_verdict(&[held.clone(), plain]);
        assert_eq!(v, Verdict::Open, "{ev}");
        assert!(ev.contains("not vibe-shim"), "{ev}");
        // vibe-shim, but it cannot reach the real runc: unproven.
        let broken = resolved(
            Some("/usr/sbin/runc"),
            refusal,
            (false, "vibe-shim: runtime: ..."),
        );
        assert_eq!(lockdown_verdict(&[broken]).0, Verdict::Error);
        assert_eq!(
            lockdown_verdict(&[resolved(None, "", (false, ""))]).0,
            Verdict::Error
        );
        assert_eq!(lockdown_verdict(&[]).0, Verdict::Error);
    }

    #[test]
    fn a_nameable_runc_is_closed_only_when_the_kernel_refuses_its_exec() {
        use std::io::ErrorKind;
        let real = "/usr/sbin/runc.vibe-shim-real";
        let (v, ev) = exec_verdict(real, Some(0o400), &Err(ErrorKind::PermissionDenied));
        assert_eq!(v, Verdict::Closed);
        assert!(ev.contains("mode 0400"), "{ev}");
        let ran = Ok((true, "runc version 1.1.5".to_string()));
        let (v, ev) = exec_verdict(real, Some(0o755), &ran);
        assert_eq!(v, Verdict::Open);
        assert!(ev.contains("runs without vibe-shim"), "{ev}");
        // It ran, even if it then failed: the kernel let it through.
        assert_eq!(
            exec_verdict(real, Some(0o755), &Ok((false, String::new()))).0,
            Verdict::Open
        );
        let k3s = "/var/lib/rancher/k3s/data/current/bin/runc";
        assert_eq!(
            exec_verdict(k3s, None, &Err(ErrorKind::NotFound)).0,
            Verdict::NotApplicable
        );
        assert_eq!(
            exec_verdict(k3s, None, &Err(ErrorKind::Other)).0,
            Verdict::Error
        );
    }

    #[test]
    fn a_running_containerds_socket() {
        let argv = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let none = |_: &str| None;
        assert_eq!(
            containerd_address(&argv(&["containerd", "--address", "/run/x.sock"]), none),
            "/run/x.sock"
        );
        let config = |p: &str| {
            (p == "/run/d/containerd.toml").then(|| "[grpc]\naddress = \"/run/d/c.sock\"\n".into())
        };
        assert_eq!(
            containerd_address(
                &argv(&["containerd", "--config", "/run/d/containerd.toml"]),
                config
            ),
            "/run/d/c.sock"
        );
        assert_eq!(
            containerd_address(&argv(&["containerd"]), none),
            "/run/containerd/containerd.sock"
        );
    }

    #[test]
    fn engine_sockets_are_closed_only_when_root_only() {
        assert_eq!(socket_verdict(&[]).0, Verdict::NotApplicable);
        let root_only = ("/run/containerd/containerd.sock".to_string(), 0o140660, 0);
        assert_eq!(
            socket_verdict(std::slice::from_ref(&root_only)).0,
            Verdict::Closed
        );
        let group = ("/run/podman/podman.sock".to_string(), 0o140660, 999);
        let (v, ev) = socket_verdict(&[root_only.clone(), group]);
        assert_eq!(v, Verdict::Open);
        assert!(ev.contains("podman.sock"), "{ev}");
        let world = ("/run/k0s/containerd.sock".to_string(), 0o140666, 0);
        assert_eq!(socket_verdict(&[world]).0, Verdict::Open);
    }
}
