//! Helpers for the end-to-end suites: the private test dockerd started by
//! `tests/env/up.sh`, bounded command runs, a posture probe that judges a
//! container from inside with busybox tools, and the test policy's numbers.
//!
//! Every helper panics with a clear message instead of skipping: the suites
//! run only under `tests/run.sh`, and a test that cannot fail is worthless.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

/// The image `up.sh` imports: busybox only, no PATH in its config.
pub const IMAGE: &str = "vibe-busybox:latest";
/// [`IMAGE`] as containerd names it after [`ctr_import_image`].
pub const CTR_IMAGE: &str = "docker.io/library/vibe-busybox:latest";
/// The runtime registered with `tests/policies/default.toml`: `vibe-shim`.
/// `VIBE_TEST_RUNTIME` overrides it only to try the probes against another
/// runtime by hand (tests/run.sh never sets it).
pub fn runtime() -> String {
    std::env::var("VIBE_TEST_RUNTIME").unwrap_or_else(|_| "vibe-shim".to_string())
}
/// The runtime registered with `tests/policies/<stem>.toml`:
/// `vibe-shim-<stem>`, or `$VIBE_TEST_RUNTIME-<stem>` when that is set.
pub fn runtime_for(stem: &str) -> String {
    format!("{}-{stem}", runtime())
}
/// Default bound for one docker client call.
pub const TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// The environment written by tests/env/up.sh

/// `$STATE/env`, as written by `tests/env/up.sh`.
#[derive(Debug, Clone)]
pub struct Env {
    pub vars: BTreeMap<String, String>,
    pub state: PathBuf,
    pub docker_host: String,
    pub containerd_address: String,
    pub shim_bin: PathBuf,
    pub repo: PathBuf,
}

impl Env {
    /// A key from `$STATE/env`; panics when up.sh did not write it.
    pub fn var(&self, key: &str) -> &str {
        self.vars
            .get(key)
            .unwrap_or_else(|| panic!("{key} missing from {}/env", self.state.display()))
    }

    /// `tests/policies/<stem>.toml` in the repo the env was started from.
    pub fn policy_path(&self, stem: &str) -> PathBuf {
        self.repo
            .join("tests/policies")
            .join(format!("{stem}.toml"))
    }

    /// The parsed test policy `tests/policies/<stem>.toml`.
    pub fn policy(&self, stem: &str) -> TestPolicy {
        TestPolicy::load(&self.policy_path(stem))
    }
}

impl Env {
    /// The command that runs `tool` (ctr, runc, podman) of the stack under
    /// test: `VIBE_TEST_<TOOL>` from the env file (the sid stack's run
    /// inside its tree), else the host's own.
    pub fn tool(&self, tool: &str) -> String {
        let key = format!("VIBE_TEST_{}", tool.to_ascii_uppercase());
        self.vars
            .get(&key)
            .cloned()
            .unwrap_or_else(|| tool.to_string())
    }

    /// `argv` as the engine's processes would run it: in the sid tree's
    /// mount namespace (`VIBE_TEST_IN_TREE`) for the sid stack, else as is.
    pub fn in_engine_ns<'a>(&'a self, argv: &[&'a str]) -> Vec<&'a str> {
        let mut full: Vec<&str> = self
            .vars
            .get("VIBE_TEST_IN_TREE")
            .map(|w| vec![w.as_str()])
            .unwrap_or_default();
        full.extend_from_slice(argv);
        full
    }

    /// A mount's root (a path on its filesystem) as the engine names it.
    /// The sid engine's `/` is a directory of the host's filesystem
    /// (`VIBE_TEST_MOUNT_ROOT`), so its files show that prefix in
    /// mountinfo; host directories bound into the tree do not.
    pub fn engine_path(&self, root: &str) -> String {
        match self.vars.get("VIBE_TEST_MOUNT_ROOT") {
            Some(prefix) if prefix != "/" && under(root, prefix) => {
                let rest = &root[prefix.trim_end_matches('/').len()..];
                if rest.is_empty() {
                    "/".to_string()
                } else {
                    rest.to_string()
                }
            }
            _ => root.to_string(),
        }
    }

    /// The stack under test: "sid" for tests/env/sid-up.sh's, else "host".
    pub fn stack(&self) -> &str {
        self.vars
            .get("VIBE_TEST_STACK")
            .map(String::as_str)
            .unwrap_or("host")
    }
}

/// The test dockerd's version as (major, minor), from `docker version`.
pub fn server_version() -> (u32, u32) {
    static VERSION: OnceLock<(u32, u32)> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = docker(&["version", "--format", "{{.Server.Version}}"]).ok();
        let text = out.stdout.trim().to_string();
        let mut parts = text.split(|c: char| !c.is_ascii_digit());
        let mut next = || parts.next().and_then(|p| p.parse::<u32>().ok());
        match (next(), next()) {
            (Some(major), Some(minor)) => (major, minor),
            _ => panic!("cannot read the test dockerd's version from {text:?}"),
        }
    })
}

/// The test env, loaded once. Panics (fails the test) when it is missing.
pub fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let state = PathBuf::from(
            std::env::var("VIBE_TEST_STATE").unwrap_or_else(|_| "/run/vibe-test".to_string()),
        );
        let file = state.join("env");
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "test env missing ({}: {e}): start it with tests/env/up.sh, or run tests/run.sh",
                file.display()
            )
        });
        let vars: BTreeMap<String, String> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        // REPO and VIBE_SHIM_BIN may be overridden from the environment, to
        // run a work tree's suites against an env started from another.
        let get = |k: &str| {
            let overridable = matches!(k, "REPO" | "VIBE_SHIM_BIN");
            overridable
                .then(|| std::env::var(k).ok())
                .flatten()
                .or_else(|| vars.get(k).cloned())
                .unwrap_or_else(|| panic!("{k} missing from {}", file.display()))
        };
        let env = Env {
            state: PathBuf::from(get("STATE")),
            docker_host: get("DOCKER_HOST"),
            containerd_address: get("CONTAINERD_ADDRESS"),
            shim_bin: PathBuf::from(get("VIBE_SHIM_BIN")),
            repo: PathBuf::from(get("REPO")),
            vars,
        };
        assert!(
            env.shim_bin.is_file(),
            "vibe-shim binary {} missing: build it (cargo build --release)",
            env.shim_bin.display()
        );
        env
    })
}

// ---------------------------------------------------------------------------
// Bounded command runs

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

/// `docker -H <test daemon> args...`, bounded by [`TIMEOUT`].
pub fn docker<S: AsRef<str>>(args: &[S]) -> Output {
    docker_with(args, None, TIMEOUT)
}

/// `docker` with stdin and an explicit bound.
pub fn docker_with<S: AsRef<str>>(args: &[S], input: Option<&[u8]>, timeout: Duration) -> Output {
    let env = env();
    let mut cmd = Command::new("docker");
    cmd.env_remove("DOCKER_CONTEXT")
        .env_remove("DOCKER_CONFIG")
        .arg("-H")
        .arg(&env.docker_host)
        .args(args.iter().map(|a| a.as_ref()));
    run_bounded(cmd, input, timeout)
}

/// Any other program, bounded.
pub fn program<S: AsRef<str>>(prog: &str, args: &[S], timeout: Duration) -> Output {
    let mut cmd = Command::new(prog);
    cmd.args(args.iter().map(|a| a.as_ref()));
    run_bounded(cmd, None, timeout)
}

// ---------------------------------------------------------------------------
// Containers that clean up after themselves

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

/// Owns a container name; `docker rm -f` on drop, even when the test panics.
#[derive(Debug)]
pub struct Container {
    pub name: String,
}

impl Container {
    pub fn new(tag: &str) -> Container {
        Container {
            name: unique_name(tag),
        }
    }

    /// The full container id, if Docker knows the name.
    pub fn id(&self) -> Option<String> {
        let out = docker(&[
            "ps",
            "-a",
            "-q",
            "--no-trunc",
            "--filter",
            &format!("name=^/?{}$", self.name),
        ]);
        out.stdout
            .lines()
            .next()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// `docker inspect -f <format>`.
    pub fn inspect(&self, format: &str) -> String {
        docker(&["inspect", "-f", format, &self.name])
            .ok()
            .stdout
            .trim()
            .to_string()
    }

    /// `docker exec <name> sh -c <posture script>` with extra exec flags.
    pub fn exec_posture(&self, exec_flags: &[&str], policy: &TestPolicy, extra: &str) -> Outcome {
        let script = posture_script(policy, extra);
        let mut args: Vec<String> = vec!["exec".into()];
        args.extend(exec_flags.iter().map(|s| s.to_string()));
        args.extend([self.name.clone(), "sh".into(), "-c".into(), script]);
        Outcome::from_output(docker(&args))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker_with(&["rm", "-f", &self.name], None, Duration::from_secs(30));
    }
}

/// A named volume removed on drop.
#[derive(Debug)]
pub struct Volume {
    pub name: String,
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = docker_with(
            &["volume", "rm", "-f", &self.name],
            None,
            Duration::from_secs(30),
        );
    }
}

/// `docker run --name <c> --runtime <runtime> <flags> IMAGE sh -c <posture>`.
pub fn run_posture(
    c: &Container,
    runtime: &str,
    flags: &[&str],
    policy: &TestPolicy,
    extra: &str,
) -> Outcome {
    let script = posture_script(policy, extra);
    let mut args: Vec<String> = vec![
        "run".into(),
        "--name".into(),
        c.name.clone(),
        "--runtime".into(),
        runtime.into(),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    args.extend([IMAGE.into(), "sh".into(), "-c".into(), script]);
    Outcome::from_output(docker_with(&args, None, Duration::from_secs(120)))
}

/// A container either ran (and printed its posture) or was refused.
#[derive(Debug)]
pub enum Outcome {
    Ran(Box<Posture>, Output),
    Refused(Output),
}

impl Outcome {
    pub fn from_output(out: Output) -> Outcome {
        if out.success() {
            Outcome::Ran(Box::new(Posture::parse(&out.stdout)), out)
        } else {
            Outcome::Refused(out)
        }
    }

    /// The posture; panics if the container did not run.
    pub fn ran(self) -> Posture {
        match self {
            Outcome::Ran(p, _) => *p,
            Outcome::Refused(out) => panic!("expected the container to run: {out}"),
        }
    }

    /// The refused output; panics if it ran.
    pub fn refused(self) -> Output {
        match self {
            Outcome::Refused(out) => out,
            Outcome::Ran(_, out) => panic!("expected a refusal, but it ran: {out}"),
        }
    }
}

/// A refusal must reach the docker client and name vibe-shim.
pub fn assert_refused_by_shim(out: &Output) {
    assert!(!out.timed_out, "timed out instead of refusing: {out}");
    assert!(out.code != Some(0), "expected non-zero exit: {out}");
    assert!(
        out.stderr.contains("vibe-shim"),
        "refusal does not name vibe-shim on docker's stderr: {out}"
    );
}

/// The pass rule for a hostile case: confined from inside, or refused by
/// vibe-shim with the reason on docker's stderr. Returns the posture if it ran.
pub fn assert_confined_or_refused(outcome: Outcome, policy: &TestPolicy) -> Option<Posture> {
    match outcome {
        Outcome::Ran(p, _) => {
            assert_confined(&p, policy);
            Some(*p)
        }
        Outcome::Refused(out) => {
            assert_refused_by_shim(&out);
            None
        }
    }
}

// ---------------------------------------------------------------------------
// The test policy (a small reader for the keys the suite judges against)

/// The numbers the suite checks, read from a `tests/policies/*.toml` at test
/// time. Keys absent from the file take vibe-shim's documented defaults.
#[derive(Debug, Clone)]
pub struct TestPolicy {
    pub path: PathBuf,
    pub runtime_path: Option<String>,
    pub readonly_root: bool,
    pub tmpfs: Vec<String>,
    pub home_tmpfs: bool,
    /// `(source, read_write)`.
    pub binds: Vec<(String, bool)>,
    pub capabilities: Vec<String>,
    pub no_new_privileges: bool,
    pub pids_limit: i64,
    pub user: Option<(u32, u32)>,
    pub env_allow: Vec<String>,
}

impl TestPolicy {
    pub fn load(path: &Path) -> TestPolicy {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read test policy {}: {e}", path.display()));
        TestPolicy::parse(&text, path)
    }

    /// Parses the flat subset of TOML the test policies use: `[section]`,
    /// `[[filesystem.bind]]`, and `key = string|int|bool|[strings]`.
    /// Reads the policy with vibe-shim's own parser, so the tests judge
    /// containers against exactly what the shim enforces.
    pub fn parse(text: &str, path: &Path) -> TestPolicy {
        let policy = vibe_policy::Policy::from_toml_str(text, path)
            .unwrap_or_else(|e| panic!("test policy does not parse: {e}"));
        let fs = &policy.filesystem;
        TestPolicy {
            path: path.to_path_buf(),
            runtime_path: policy
                .runtime
                .path
                .as_ref()
                .map(|p| p.display().to_string()),
            readonly_root: fs.readonly_root,
            tmpfs: fs
                .tmpfs
                .iter()
                .map(|d| d.path.display().to_string())
                .collect(),
            home_tmpfs: fs.home == vibe_policy::config::HomeMode::Tmpfs,
            binds: fs
                .bind
                .iter()
                .map(|b| {
                    let rw = b.mode == vibe_policy::config::BindMode::Rw;
                    (b.source.display().to_string(), rw)
                })
                .collect(),
            capabilities: policy.process.capabilities.clone(),
            no_new_privileges: policy.process.no_new_privileges,
            pids_limit: policy.process.pids_limit,
            user: policy.process.forced_user(),
            env_allow: policy.process.env_allow.clone(),
        }
    }

    pub fn env_allowed(&self, name: &str) -> bool {
        self.env_allow
            .iter()
            .any(|pat| match pat.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == pat,
            })
    }

    /// The first read-write bind root: where worktrees may live.
    pub fn worktree_root(&self) -> PathBuf {
        self.binds
            .iter()
            .find(|(src, rw)| *rw && !src.is_empty() && !src.starts_with("/usr"))
            .map(|(src, _)| PathBuf::from(src))
            .unwrap_or_else(|| panic!("{}: no rw [[filesystem.bind]] root", self.path.display()))
    }

    /// Bitmask of the capabilities the policy keeps.
    pub fn capability_mask(&self) -> u64 {
        self.capabilities.iter().fold(0, |mask, name| {
            let bit = capability_bit(name)
                .unwrap_or_else(|| panic!("unknown capability {name} in policy"));
            mask | (1u64 << bit)
        })
    }
}

/// Linux capability numbers (include/uapi/linux/capability.h).
pub fn capability_bit(name: &str) -> Option<u32> {
    const NAMES: &[&str] = &[
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ];
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    NAMES.iter().position(|n| *n == bare).map(|i| i as u32)
}

// ---------------------------------------------------------------------------
// The posture probe

/// A busybox `sh` script that prints everything [`assert_confined`] judges,
/// one fact per line with a one-letter tag, then `END`. `extra` is appended
/// (its lines should start with `X `) before `END`.
pub fn posture_script(policy: &TestPolicy, extra: &str) -> String {
    let mut s = String::from(
        r#"exec 2>/dev/null
while IFS= read -r l; do case "$l" in Cap*|NoNewPrivs*|Seccomp:*) echo "S $l";; esac; done < /proc/$$/status
cat /proc/self/status | while IFS= read -r l; do case "$l" in Cap*|NoNewPrivs*|Seccomp:*) echo "C $l";; esac; done
while IFS= read -r l; do echo "M $l"; done < /proc/$$/mountinfo
tr '\0' '\n' < /proc/$$/environ | while IFS= read -r l; do echo "V $l"; done
env | while IFS= read -r l; do echo "E $l"; done
echo "I uid=$(id -u) gid=$(id -g) groups=$(id -G)"
echo "H $HOME"
for n in pid net ipc uts mnt cgroup; do echo "N $n=$(readlink /proc/$$/ns/$n)"; done
if [ -r /sys/fs/cgroup/pids/pids.max ]; then echo "P $(cat /sys/fs/cgroup/pids/pids.max)"; elif [ -r /sys/fs/cgroup/pids.max ]; then echo "P $(cat /sys/fs/cgroup/pids.max)"; fi
echo "U $(hostname)"
while IFS= read -r l; do echo "G $l"; done < /sys/fs/cgroup/devices/devices.list
find /dev -type b | while IFS= read -r d; do echo "D b $d"; done
find /dev -type c | while IFS= read -r d; do echo "D c $d"; done
echo "1 $(head -c 300 /proc/1/cmdline | tr '\0\n' '  ')"
probe() { f="${2%/}/.vibe-probe-$$"; if ( : > "$f" ) 2>/dev/null; then echo "W $1=ok"; rm -f "$f"; else echo "W $1=fail"; fi; }
probe root /
probe home "$HOME"
"#,
    );
    for dir in &policy.tmpfs {
        let _ = writeln!(s, "probe '{dir}' '{dir}'");
    }
    s.push_str(extra);
    // Without a cgroup mount (ctr's default spec has none) the limit is
    // measured: fork past it in a subshell (ash exits on a failed fork), then
    // count the live processes with builtins only, as no fork is left.
    let _ = write!(
        s,
        "\nif [ ! -r /sys/fs/cgroup/pids/pids.max ] && [ ! -r /sys/fs/cgroup/pids.max ]; then\n\
         ( i=0; while [ $i -lt {} ]; do sleep 3 & i=$((i+1)); done ) 2>/dev/null\n\
         set -- /proc/[0-9]*; echo \"P fork:$#\"\nfi\necho END\n",
        policy.pids_limit + 40
    );
    s
}

/// One `/proc/self/mountinfo` line.
#[derive(Debug, Clone)]
pub struct Mount {
    pub majmin: String,
    pub root: String,
    pub point: String,
    pub opts: Vec<String>,
    pub fstype: String,
    pub source: String,
    pub super_opts: Vec<String>,
}

impl Mount {
    fn parse(line: &str) -> Option<Mount> {
        let (pre, post) = line.split_once(" - ")?;
        let pre: Vec<&str> = pre.split_whitespace().collect();
        let post: Vec<&str> = post.split_whitespace().collect();
        Some(Mount {
            majmin: pre.get(2)?.to_string(),
            root: unescape(pre.get(3)?),
            point: unescape(pre.get(4)?),
            opts: pre.get(5)?.split(',').map(str::to_string).collect(),
            fstype: post.first()?.to_string(),
            source: post.get(1).unwrap_or(&"").to_string(),
            super_opts: post
                .get(2)
                .unwrap_or(&"")
                .split(',')
                .map(str::to_string)
                .collect(),
        })
    }

    pub fn has(&self, opt: &str) -> bool {
        self.opts.iter().any(|o| o == opt)
    }

    pub fn major(&self) -> u32 {
        self.majmin
            .split(':')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0)
    }
}

fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
}

/// Everything the probe printed, parsed.
#[derive(Debug, Clone, Default)]
pub struct Posture {
    /// The probed process's own `/proc/$$/status` lines (CapEff, ...).
    pub status: BTreeMap<String, String>,
    /// `/proc/self/status` of an exec'd child (caps recomputed on exec).
    pub child_status: BTreeMap<String, String>,
    pub mounts: Vec<Mount>,
    /// The environment the process was started with (`/proc/$$/environ`).
    pub environ: Vec<(String, String)>,
    /// `env` as the shell prints it.
    pub env: Vec<(String, String)>,
    pub uid: String,
    pub gid: String,
    pub groups: String,
    pub home: String,
    pub namespaces: BTreeMap<String, String>,
    /// `pids.max`, or `fork:N` when no cgroup is mounted and the probe
    /// counted how many processes it could have at once.
    pub pids_max: String,
    pub hostname: String,
    pub device_cgroup: Vec<String>,
    /// `(b|c, path)` device nodes under /dev.
    pub devices: Vec<(char, String)>,
    pub pid1_cmdline: String,
    /// Write probes: path -> writable.
    pub writes: BTreeMap<String, bool>,
    /// `X ...` lines from the case's extra script, without the tag.
    pub extra: Vec<String>,
    pub complete: bool,
    pub raw: String,
}

fn kv(line: &str, sep: char) -> (String, String) {
    match line.split_once(sep) {
        Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
        None => (line.trim().to_string(), String::new()),
    }
}

impl Posture {
    pub fn parse(text: &str) -> Posture {
        let mut p = Posture {
            raw: text.to_string(),
            ..Posture::default()
        };
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            let (tag, rest) = line.split_at(line.find(' ').unwrap_or(line.len()));
            let rest = rest.strip_prefix(' ').unwrap_or(rest);
            match tag {
                "S" => {
                    let (k, v) = kv(rest, ':');
                    p.status.insert(k, v);
                }
                "C" => {
                    let (k, v) = kv(rest, ':');
                    p.child_status.insert(k, v);
                }
                "M" => p.mounts.extend(Mount::parse(rest)),
                "V" => p.environ.push(kv(rest, '=')),
                "E" => p.env.push(kv(rest, '=')),
                "I" => {
                    for field in rest.split(' ') {
                        let (k, v) = kv(field, '=');
                        match k.as_str() {
                            "uid" => p.uid = v,
                            "gid" => p.gid = v,
                            "groups" => p.groups = v,
                            _ => {}
                        }
                    }
                    // `id -G` may print several groups separated by spaces.
                    if let Some(g) = rest.split_once("groups=") {
                        p.groups = g.1.trim().to_string();
                    }
                }
                "H" => p.home = rest.to_string(),
                "N" => {
                    let (k, v) = kv(rest, '=');
                    p.namespaces.insert(k, v);
                }
                "P" => p.pids_max = rest.trim().to_string(),
                "U" => p.hostname = rest.trim().to_string(),
                "G" => p.device_cgroup.push(rest.to_string()),
                "D" => {
                    let (t, path) = rest.split_at(1);
                    p.devices
                        .push((t.chars().next().unwrap_or('?'), path.trim().to_string()));
                }
                "1" => p.pid1_cmdline = rest.trim().to_string(),
                "W" => {
                    if let Some((path, res)) = rest.rsplit_once('=') {
                        p.writes.insert(path.to_string(), res == "ok");
                    }
                }
                "X" => p.extra.push(rest.to_string()),
                "END" => p.complete = true,
                _ => {}
            }
        }
        p
    }

    /// The mount that covers `path` (the last one mounted at the longest
    /// matching mount point, as the kernel resolves it).
    pub fn mount_covering(&self, path: &str) -> Option<&Mount> {
        let path = if path.len() > 1 {
            path.trim_end_matches('/')
        } else {
            path
        };
        self.mounts
            .iter()
            .filter(|m| {
                m.point == "/"
                    || m.point == path
                    || path.starts_with(&format!("{}/", m.point.trim_end_matches('/')))
            })
            .fold(None, |best: Option<&Mount>, m| match best {
                Some(b) if b.point.len() > m.point.len() => Some(b),
                _ => Some(m),
            })
    }

    pub fn mount_at(&self, point: &str) -> Option<&Mount> {
        self.mounts.iter().rev().find(|m| m.point == point)
    }

    /// A variable from the process's initial environment.
    pub fn environ_var(&self, name: &str) -> Option<&str> {
        self.environ
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// True if any environment view holds this name or value.
    pub fn env_mentions(&self, needle: &str) -> bool {
        self.environ
            .iter()
            .chain(self.env.iter())
            .any(|(k, v)| k == needle || v.contains(needle))
    }

    /// `X key=value` lines from the extra script.
    pub fn extra_value(&self, key: &str) -> Option<&str> {
        self.extra.iter().find_map(|l| {
            l.strip_prefix(key)
                .and_then(|r| r.strip_prefix('='))
                .map(str::trim)
        })
    }
}

// ---------------------------------------------------------------------------
// The judgement

fn hex_field(map: &BTreeMap<String, String>, key: &str, raw: &str) -> u64 {
    let v = map
        .get(key)
        .unwrap_or_else(|| panic!("{key} missing from the probe output:\n{raw}"));
    u64::from_str_radix(v, 16).unwrap_or_else(|_| panic!("{key}={v:?} is not hex"))
}

/// The host's namespace link for `name`, taken from the test dockerd (the
/// namespaces `--pid=host` etc. would hand out), else from this process.
/// /proc/1/ns is not readable here without CAP_SYS_PTRACE over init.
pub fn host_namespace(name: &str) -> String {
    let dockerd = std::fs::read_to_string(env().state.join("docker.pid"))
        .ok()
        .and_then(|pid| std::fs::read_link(format!("/proc/{}/ns/{name}", pid.trim())).ok());
    let link = dockerd.or_else(|| std::fs::read_link(format!("/proc/self/ns/{name}")).ok());
    link.unwrap_or_else(|| panic!("cannot read the host's {name} namespace"))
        .display()
        .to_string()
}

/// Device numbers of the host's own tmpfs/devtmpfs mounts (e.g. /run with
/// docker.sock): seeing one inside a container means a host bind leaked in.
fn host_tmpfs_devices() -> BTreeSet<String> {
    let text = std::fs::read_to_string("/proc/1/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(Mount::parse)
        .filter(|m| m.fstype == "tmpfs" || m.fstype == "devtmpfs")
        .map(|m| m.majmin)
        .collect()
}

/// Docker's default masked and read-only paths (from the captured fixture),
/// limited to those that exist on this kernel.
fn expected_masks(repo: &Path) -> (Vec<String>, Vec<String>) {
    let fixture = repo.join("policy/tests/fixtures/docker-20.10/config-default.json");
    let text = std::fs::read_to_string(&fixture)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", fixture.display()));
    let spec: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
    let list = |key: &str| -> Vec<String> {
        spec["linux"][key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str())
                    .filter(|p| Path::new(p).exists())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    (list("maskedPaths"), list("readonlyPaths"))
}

fn under(path: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    path == root || path.starts_with(&format!("{root}/"))
}

/// Variables a shell or runc may add on its own.
const SHELL_VARS: &[&str] = &["PWD", "SHLVL", "OLDPWD", "_"];

/// Device nodes a confined container may have: the safe set.
fn safe_device(path: &str) -> bool {
    matches!(
        path,
        "/dev/null"
            | "/dev/zero"
            | "/dev/full"
            | "/dev/random"
            | "/dev/urandom"
            | "/dev/tty"
            | "/dev/ptmx"
            | "/dev/console"
    ) || path.starts_with("/dev/pts/")
}

/// Char devices the device cgroup may grant read/write on.
fn safe_cgroup_device(spec: &str) -> bool {
    matches!(
        spec,
        "1:3" | "1:5" | "1:7" | "1:8" | "1:9" | "5:0" | "5:1" | "5:2" | "136:*" | "10:200"
    )
}

/// Judges a container from what it printed about itself. Panics with every
/// violation found, and the raw probe output, if it is not confined.
pub fn assert_confined(p: &Posture, policy: &TestPolicy) {
    let env = env();
    let mut bad: Vec<String> = Vec::new();
    let raw = &p.raw;
    if !p.complete {
        bad.push("probe did not finish (no END line)".into());
    }

    // Capabilities: only the policy's, in all five sets, for the process and
    // for anything it execs.
    let allowed = policy.capability_mask();
    for (who, map) in [("process", &p.status), ("exec'd child", &p.child_status)] {
        for set in ["CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"] {
            let v = hex_field(map, set, raw);
            if v & !allowed != 0 {
                bad.push(format!(
                    "{who} {set}={v:016x} exceeds policy {allowed:016x}"
                ));
            }
        }
        if policy.no_new_privileges && map.get("NoNewPrivs").map(String::as_str) != Some("1") {
            bad.push(format!("{who} NoNewPrivs={:?}", map.get("NoNewPrivs")));
        }
        if map.get("Seccomp").map(String::as_str) != Some("2") {
            bad.push(format!("{who} Seccomp={:?} (want 2)", map.get("Seccomp")));
        }
    }

    // Root filesystem.
    if policy.readonly_root {
        match p.mount_at("/") {
            Some(m) if m.has("ro") => {}
            other => bad.push(format!("root mount not ro: {other:?}")),
        }
        if p.writes.get("root") != Some(&false) {
            bad.push(format!("root write probe: {:?}", p.writes.get("root")));
        }
    }
    // Policy tmpfs dirs and HOME: private tmpfs, writable, nosuid, nodev.
    let mut tmpfs_dirs: Vec<(String, String)> = policy
        .tmpfs
        .iter()
        .map(|d| (d.clone(), d.clone()))
        .collect();
    if policy.home_tmpfs {
        if p.home.is_empty() || p.home == "/" {
            bad.push(format!("HOME={:?} cannot carry a private tmpfs", p.home));
        } else {
            tmpfs_dirs.push((p.home.clone(), "home".into()));
        }
    }
    for (dir, label) in &tmpfs_dirs {
        match p.mount_covering(dir) {
            Some(m) if m.fstype == "tmpfs" && m.has("rw") => {
                for opt in ["nosuid", "nodev"] {
                    if !m.has(opt) {
                        bad.push(format!("tmpfs {dir} lacks {opt}: {:?}", m.opts));
                    }
                }
            }
            other => bad.push(format!("{dir} is not a rw tmpfs: {other:?}")),
        }
        if p.writes.get(label.as_str()) != Some(&true) {
            bad.push(format!(
                "{dir} not writable: {:?}",
                p.writes.get(label.as_str())
            ));
        }
    }

    // Kernel filesystems nosuid/nodev; /sys and cgroups read-only.
    let dev_majmin = p.mount_at("/dev").map(|m| m.majmin.clone());
    for m in &p.mounts {
        let kernel_fs = matches!(
            m.fstype.as_str(),
            "proc" | "sysfs" | "cgroup" | "cgroup2" | "mqueue" | "devpts" | "tmpfs"
        );
        // runc masks directories with an empty read-only tmpfs: harmless.
        let ro_mask = m.fstype == "tmpfs" && m.has("ro");
        if kernel_fs && !ro_mask && !m.has("nosuid") {
            bad.push(format!("{} ({}) lacks nosuid", m.point, m.fstype));
        }
        let needs_dev =
            m.point == "/dev" || m.fstype == "devpts" || Some(&m.majmin) == dev_majmin.as_ref();
        if kernel_fs && !ro_mask && !needs_dev && !m.has("nodev") {
            bad.push(format!("{} ({}) lacks nodev", m.point, m.fstype));
        }
        if (m.fstype == "sysfs" || m.fstype.starts_with("cgroup")) && !m.has("ro") {
            bad.push(format!("{} ({}) is not read-only", m.point, m.fstype));
        }
        if m.has("shared") || m.opts.iter().any(|o| o.starts_with("shared:")) {
            bad.push(format!("{} has shared propagation", m.point));
        }
    }

    // Masked and read-only paths survive whatever the client asked for.
    let (masked, readonly) = expected_masks(&env.repo);
    for path in &masked {
        if p.mount_at(path).is_none() {
            bad.push(format!("{path} is not masked"));
        }
    }
    for path in &readonly {
        match p.mount_at(path) {
            Some(m) if m.has("ro") => {}
            other => bad.push(format!("{path} not read-only: {other:?}")),
        }
    }

    // No host filesystem beyond the allowlist and the engine's own files.
    let host_tmpfs = host_tmpfs_devices();
    for m in &p.mounts {
        if m.major() != 0 {
            let root = env.engine_path(&m.root);
            let allowed_bind = policy
                .binds
                .iter()
                .find(|(src, _)| !src.is_empty() && under(&root, src));
            // The engine's per-container files, from a directory named after
            // this container (whose hostname is its short id). podman also
            // binds /run/.containerenv (engine metadata) from the same place.
            let engine_file = [
                "/etc/resolv.conf",
                "/etc/hostname",
                "/etc/hosts",
                "/run/.containerenv",
            ]
            .contains(&m.point.as_str())
                && m.root.ends_with(m.point.rsplit('/').next().unwrap_or("?"))
                && !p.hostname.is_empty()
                && m.root.split('/').any(|part| part.starts_with(&p.hostname));
            match allowed_bind {
                Some((src, rw)) => {
                    if !rw && !m.has("ro") {
                        bad.push(format!("{} from ro root {src} is writable", m.point));
                    }
                }
                None if engine_file => {}
                None => bad.push(format!(
                    "host filesystem leaked in: {} from {}:{} ({})",
                    m.point, m.source, m.root, m.majmin
                )),
            }
        } else if (m.fstype == "tmpfs" || m.fstype == "devtmpfs") && host_tmpfs.contains(&m.majmin)
        {
            bad.push(format!(
                "host tmpfs leaked in: {} from {} ({})",
                m.point, m.root, m.majmin
            ));
        }
    }

    // Namespaces: never the host's.
    for ns in ["pid", "net", "ipc", "uts", "mnt", "cgroup"] {
        let inside = p.namespaces.get(ns).map(String::as_str).unwrap_or("");
        if inside.is_empty() {
            bad.push(format!("{ns} namespace unreadable"));
        } else if inside == host_namespace(ns) {
            bad.push(format!("shares the host's {ns} namespace ({inside})"));
        }
    }

    // Pids limit.
    let limit = policy.pids_limit;
    match p.pids_max.strip_prefix("fork:").map(str::parse::<i64>) {
        // It tried limit+40; a count near the limit shows the cap did it.
        Some(Ok(n)) if n <= limit && n > limit / 2 => {}
        Some(_) => bad.push(format!(
            "no pids cgroup mounted; {} live processes after forking {} (policy limit {limit})",
            p.pids_max,
            limit + 40
        )),
        None => match p.pids_max.parse::<i64>() {
            Ok(n) if n > 0 && n <= limit => {}
            _ => bad.push(format!("pids.max={:?}, policy limit {limit}", p.pids_max)),
        },
    }

    // Devices: safe nodes only, and no cgroup grant beyond them.
    for (kind, path) in &p.devices {
        if *kind == 'b' || !safe_device(path) {
            bad.push(format!("device node {kind} {path} reachable"));
        }
    }
    if p.device_cgroup.is_empty() && p.mount_at("/sys/fs/cgroup/devices").is_some() {
        bad.push("devices.list unreadable".into());
    }
    for rule in &p.device_cgroup {
        let parts: Vec<&str> = rule.split_whitespace().collect();
        let (kind, spec, access) = match parts.as_slice() {
            [k, s, a] => (*k, *s, *a),
            _ => {
                bad.push(format!("odd devices.list line {rule:?}"));
                continue;
            }
        };
        let rw = access.contains('r') || access.contains('w');
        if kind == "a" || (rw && (kind == "b" || !safe_cgroup_device(spec))) {
            bad.push(format!("device cgroup grants {rule:?}"));
        }
    }

    // Environment: the allowlist only.
    for (name, _) in &p.environ {
        if !policy.env_allowed(name) {
            bad.push(format!("env {name} outside the allowlist"));
        }
    }
    for (name, _) in &p.env {
        if !policy.env_allowed(name) && !SHELL_VARS.contains(&name.as_str()) {
            bad.push(format!("env {name} outside the allowlist (env)"));
        }
    }

    // Forced user.
    if let Some((uid, gid)) = policy.user {
        if p.uid != uid.to_string() || p.gid != gid.to_string() {
            bad.push(format!("runs as {}:{}, policy {uid}:{gid}", p.uid, p.gid));
        }
    }

    assert!(
        bad.is_empty(),
        "container not confined by {}:\n  - {}\n--- probe output ---\n{raw}",
        policy.path.display(),
        bad.join("\n  - ")
    );
}

// ---------------------------------------------------------------------------
// Leftovers

/// The runc state roots dockerd's containerd uses
/// (`<exec-root>/runtime-*/moby`), found on disk.
pub fn runc_roots() -> Vec<PathBuf> {
    let env = env();
    let mut roots = Vec::new();
    let Ok(entries) = std::fs::read_dir(&env.state) else {
        return roots;
    };
    for top in entries.flatten() {
        let Ok(inner) = std::fs::read_dir(top.path()) else {
            continue;
        };
        for e in inner.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let moby = e.path().join("moby");
            if name.starts_with("runtime-") && moby.is_dir() {
                roots.push(moby);
            }
        }
    }
    roots
}

/// Every container id `runc list` shows under the given roots.
pub fn runc_list(roots: &[PathBuf]) -> String {
    let mut all = String::new();
    for root in roots {
        let root = root.display().to_string();
        let out = program(
            &env().tool("runc"),
            &["--root", root.as_str(), "list", "-q"],
            Duration::from_secs(30),
        )
        .ok();
        all.push_str(&out.stdout);
    }
    all
}

/// After a refusal: nothing running for this name, and runc lists no id.
pub fn assert_nothing_left(c: &Container) {
    let running = docker(&[
        "ps",
        "-a",
        "-q",
        "--filter",
        "status=running",
        "--filter",
        &format!("name=^/?{}$", c.name),
    ])
    .ok();
    assert!(
        running.stdout.trim().is_empty(),
        "refused container {} still running: {running}",
        c.name
    );
    if let Some(id) = c.id() {
        let listed = runc_list(&runc_roots());
        assert!(
            !listed.lines().any(|l| l.trim() == id),
            "runc still lists refused container {id}"
        );
    }
}

/// The stack's own `ctr` (the sid tree's runs in that tree's mounts) on the
/// test containerd, in namespace `ns`.
pub fn ctr<S: AsRef<str>>(ns: &str, args: &[S], timeout: Duration) -> Output {
    let env = env();
    let mut full: Vec<String> = vec![
        "--address".into(),
        env.containerd_address.clone(),
        "-n".into(),
        ns.into(),
    ];
    full.extend(args.iter().map(|a| a.as_ref().to_string()));
    program(&env.tool("ctr"), &full, timeout)
}

/// Puts [`IMAGE`] into containerd namespace `ns` as [`CTR_IMAGE`]
/// (`docker save`, then `ctr images import`).
pub fn ctr_import_image(ns: &str) {
    let dir = tempfile::tempdir().unwrap();
    let tar = dir.path().join("busybox.tar");
    let tar_s = tar.to_str().unwrap();
    docker_with(
        &["save", "-o", tar_s, IMAGE],
        None,
        Duration::from_secs(120),
    )
    .ok();
    ctr(ns, &["images", "import", tar_s], Duration::from_secs(120)).ok();
}
