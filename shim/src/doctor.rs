//! `vibe-shim doctor [-H DOCKER_HOST] [--image IMAGE] [--worktree DIR]`:
//! tries each door issue 10 lists (a runtime other than vibe-shim, no
//! `--runtime`, `docker cp` through a bind, a bind source that does not
//! exist, a privileged run), and with `--worktree` a `-v` source swapped
//! for a symlink between create and start, with a canary container; judges
//! each from inside the container (or by host evidence), prints one row per door and exits
//! non-zero if any door is open or could not be judged. It drives the
//! docker CLI, so it must run on the engine's host (the bind-source row
//! looks at this host's filesystem). Every canary it creates is removed.

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

pub const USAGE: &str =
    "usage: vibe-shim doctor [-H DOCKER_HOST] [--image IMAGE] [--docker PATH] [--worktree DIR]";

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

/// A failed docker call is a closed door only when vibe-shim refused it
/// (the runtime's or the authz plugin's message names vibe-shim).
pub fn judge_failure(stderr: &str) -> (Verdict, String) {
    match stderr
        .lines()
        .find_map(|l| l.find("vibe-shim").map(|i| &l[i..]))
    {
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

pub fn render(rows: &[Row]) -> String {
    let width = rows.iter().map(|r| r.door.len()).max().unwrap_or(4).max(4);
    let mut out = format!("{:width$}  {:6}  EVIDENCE\n", "DOOR", "RESULT");
    for r in rows {
        out.push_str(&format!(
            "{:width$}  {:6}  {}\n",
            r.door,
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
    fn run(&self, args: &[&str]) -> Out {
        let mut cmd = Command::new(&self.program);
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

fn row(door: &str, (verdict, evidence): (Verdict, String)) -> Row {
    Row {
        door: door.to_string(),
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

/// What doctor was asked to do.
#[derive(Debug)]
struct Options {
    host: Option<OsString>,
    image: String,
    docker: OsString,
    /// A directory the policy allows as a read-write bind (as an agent's
    /// worktree is): where the bind-creation canary plants its symlink.
    worktree: Option<PathBuf>,
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

fn parse_args(args: &[OsString]) -> Result<Options, String> {
    let mut host = std::env::var_os("DOCKER_HOST");
    let mut image = "busybox".to_string();
    let mut docker = OsString::from("docker");
    let mut worktree = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let a = arg.to_str().ok_or(USAGE)?;
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(OsString::from(v))),
            _ => (a, None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned()).ok_or(USAGE);
        match flag {
            "-H" | "--host" => host = Some(value()?),
            "--image" => image = value()?.into_string().map_err(|_| USAGE)?,
            "--docker" => docker = value()?,
            "--worktree" => worktree = Some(PathBuf::from(value()?)),
            _ => return Err(USAGE.into()),
        }
    }
    Ok(Options {
        host,
        image,
        docker,
        worktree,
    })
}

pub fn run(args: &[OsString]) -> i32 {
    let Options {
        host,
        image,
        docker: program,
        worktree,
    } = match parse_args(args) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut d = Docker {
        program,
        host,
        image,
        prefix: format!("vibe-shim-doctor-{}-{nanos:x}", std::process::id()),
        created: Vec::new(),
    };
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
    d.remove_all();
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

    #[test]
    fn options() {
        let a = |l: &[&str]| l.iter().map(OsString::from).collect::<Vec<_>>();
        let o = parse_args(&a(&["-H", "unix:///x.sock", "--image=bb"])).unwrap();
        assert_eq!(o.host, Some(OsString::from("unix:///x.sock")));
        assert_eq!(o.image, "bb");
        assert_eq!(o.worktree, None);
        let o = parse_args(&a(&["--worktree", "/srv/wt"])).unwrap();
        assert_eq!(o.worktree, Some(PathBuf::from("/srv/wt")));
        assert!(parse_args(&a(&["--nope"])).is_err());
        assert!(parse_args(&a(&["-H"])).is_err());
    }
}
