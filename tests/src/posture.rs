//! The posture probe: a busybox script that prints what a container sees
//! of itself, its parsed [`Posture`], and [`assert_confined`], the judgement
//! of that posture against the test policy.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use crate::docker::{docker, docker_with, Container, IMAGE};
use crate::env::{env, under};
use crate::harness::Output;
use crate::policy::TestPolicy;
use vibe_policy::config::{ASSURANCE_PATH, NOTICE_PATH};

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

impl Container {
    /// `docker exec <name> sh -c <posture script>` with extra exec flags.
    pub fn exec_posture(&self, exec_flags: &[&str], policy: &TestPolicy, extra: &str) -> Outcome {
        let script = posture_script(policy, extra);
        let mut args: Vec<String> = vec!["exec".into()];
        args.extend(exec_flags.iter().map(|s| s.to_string()));
        args.extend([self.name.clone(), "sh".into(), "-c".into(), script]);
        Outcome::from_output(docker(&args))
    }
}

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
        // The tmpfs runc makes for cgroup v1 hierarchies counts as cgroup,
        // where the container sees it (runc binds it read-only over itself).
        let cgroup_dir =
            m.point == "/sys/fs/cgroup" && p.mount_at(&m.point).is_some_and(|v| std::ptr::eq(v, m));
        if (m.fstype == "sysfs" || m.fstype.starts_with("cgroup") || cgroup_dir) && !m.has("ro") {
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
            // vibe-shim's own notice, read-only, from its root-only state
            // directory: /run/vibe-shim/containers/<runc root>/<id>/notice
            // (ctr's hostname is no prefix of the id, so the id is not
            // matched).
            // Its assurance record beside it, bound the same way.
            let own_file = [(NOTICE_PATH, "notice"), (ASSURANCE_PATH, "assurance.json")]
                .iter()
                .find(|(point, _)| m.point == *point)
                .map(|(_, file)| *file);
            let notice = own_file.is_some_and(|file| {
                m.has("ro")
                    && root
                        .strip_prefix("/run/vibe-shim/containers/")
                        .is_some_and(|rest| {
                            matches!(rest.split('/').collect::<Vec<_>>()[..], [_, _, f] if f == file)
                        })
            });
            match allowed_bind {
                Some((src, rw)) => {
                    if !rw && !m.has("ro") {
                        bad.push(format!("{} from ro root {src} is writable", m.point));
                    }
                }
                None if engine_file || notice => {}
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
