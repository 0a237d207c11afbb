//! End-to-end: vibe-shim under containerd (`ctr --runc-binary`) and podman
//! (`podman --runtime`). Each must show the same posture from inside as under
//! Docker. The runtime each engine runs is a wrapper that logs its argv and
//! execs vibe-shim, so the exact argv every engine sends is on record in
//! `$STATE/e2e-argv/<engine>.log` and in the test output.

use std::path::{Path, PathBuf};
use std::time::Duration;

use vibe_policy::egress::sni::build_client_hello;
use vibe_shim_tests::docker::{ctr, ctr_import_image, CTR_IMAGE};
use vibe_shim_tests::egress::{one_hop_host, Daemon, HostsBlock};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::{run_bounded, unique_name, Output};
use vibe_shim_tests::netns::{must, Netns};
use vibe_shim_tests::posture::{assert_confined, posture_script, Outcome, Posture};

/// containerd namespace for these tests (dockerd's own is "moby").
const CTR_NS: &str = "vibe-test";
/// The image as podman names it after `podman import`.
const PODMAN_IMAGE: &str = "localhost/vibe-busybox:latest";
/// The policy file ctr's vibe-shim reads (ctr passes no runtime args).
const DEFAULT_CONFIG: &str = "/etc/vibe-shim/config.toml";

/// A wrapper runtime that appends its argv to a log, then execs vibe-shim.
struct ArgvWrapper {
    script: PathBuf,
    log: PathBuf,
}

impl ArgvWrapper {
    fn new(engine: &str) -> ArgvWrapper {
        ArgvWrapper::with_args(engine, &[])
    }

    /// One that puts `args` (global flags: `--config FILE`) before the
    /// engine's own.
    fn with_args(engine: &str, args: &[&str]) -> ArgvWrapper {
        let env = env();
        let dir = env.state.join("e2e-argv");
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join(format!("{engine}-runtime.sh"));
        let log = dir.join(format!("{engine}.log"));
        let _ = std::fs::remove_file(&log);
        let text = format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nexec '{}'{} \"$@\"\n",
            log.display(),
            env.shim_bin.display(),
            args.iter().map(|a| format!(" '{a}'")).collect::<String>()
        );
        let tmp = script.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, &script).unwrap();
        ArgvWrapper { script, log }
    }

    fn path(&self) -> &str {
        self.script.to_str().unwrap()
    }

    /// Every argv the engine sent, one line per runtime call.
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn report(&self, engine: &str) -> Vec<String> {
        let calls = self.calls();
        eprintln!(
            "--- argv {engine} sent to vibe-shim ({}):",
            self.log.display()
        );
        for c in &calls {
            eprintln!("  {c}");
        }
        calls
    }
}

/// Installs a policy at /etc/vibe-shim/config.toml and restores whatever was
/// there (or its absence) on drop.
/// Held for the life of an [`InstalledConfig`]: tests in this file run in
/// parallel, and one's restore must not pull the file from under another.
static CONFIG_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct InstalledConfig {
    previous: Option<Vec<u8>>,
    created_dir: bool,
    _held: std::sync::MutexGuard<'static, ()>,
}

impl InstalledConfig {
    fn install(from: &Path) -> InstalledConfig {
        let held = CONFIG_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let target = Path::new(DEFAULT_CONFIG);
        let dir = target.parent().unwrap();
        let created_dir = !dir.exists();
        std::fs::create_dir_all(dir).unwrap();
        let previous = std::fs::read(target).ok();
        let tmp = dir.join(".config.toml.vibe-e2e");
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, target).unwrap();
        InstalledConfig {
            previous,
            created_dir,
            _held: held,
        }
    }
}

impl Drop for InstalledConfig {
    fn drop(&mut self) {
        let target = Path::new(DEFAULT_CONFIG);
        match &self.previous {
            Some(bytes) => {
                let _ = std::fs::write(target, bytes);
            }
            None => {
                let _ = std::fs::remove_file(target);
                if self.created_dir {
                    let _ = std::fs::remove_dir(target.parent().unwrap());
                }
            }
        }
    }
}

/// Removes a ctr container (and its task) on drop.
struct CtrContainer(String);

impl Drop for CtrContainer {
    fn drop(&mut self) {
        let t = Duration::from_secs(20);
        let _ = ctr(CTR_NS, &["tasks", "kill", "-s", "SIGKILL", &self.0], t);
        let _ = ctr(CTR_NS, &["tasks", "rm", "-f", &self.0], t);
        let _ = ctr(CTR_NS, &["containers", "rm", &self.0], t);
    }
}

/// The posture probe has to be one argv word for every engine.
fn probe_args(extra: &str) -> (vibe_shim_tests::policy::TestPolicy, String) {
    let policy = env().policy("default");
    let script = posture_script(&policy, extra);
    (policy, script)
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn containerd_ctr_runs_confined() {
    let env = env();
    // ctr gives the runtime no arguments of its own: vibe-shim reads the
    // default config path, so install the test policy there.
    let _config = InstalledConfig::install(&env.policy_path("default"));

    // Put the test image in containerd's own namespace.
    ctr_import_image(CTR_NS);

    let wrapper = ArgvWrapper::new("ctr");
    let (policy, script) = probe_args("");
    let id = CtrContainer(unique_name("ctr"));
    let out = ctr(
        CTR_NS,
        &[
            "run",
            "--rm",
            "--runc-binary",
            wrapper.path(),
            CTR_IMAGE,
            &id.0,
            "sh",
            "-c",
            &script,
        ],
        Duration::from_secs(120),
    );
    let calls = wrapper.report("ctr");
    let p = Outcome::from_output(out).ran();
    assert_confined(&p, &policy);
    assert!(
        calls
            .iter()
            .any(|c| c.contains(" create ") || c.contains("create ")),
        "no create call recorded: {calls:?}"
    );
    assert!(
        !calls.iter().any(|c| c.contains("--config")),
        "ctr was expected to pass no --config: {calls:?}"
    );
}

/// `ctr run --config SPEC`: the client writes the whole spec. runc >= 1.2
/// applies `process.scheduler` and `process.ioPriority` before it drops
/// capabilities, so with plain runc a process with no CAP_SYS_NICE runs at
/// nice -20 in the realtime I/O class. vibe-shim refuses both.
fn ctr_with_spec(
    id: &str,
    runc_binary: Option<&str>,
    edit: impl Fn(&mut serde_json::Value),
) -> Output {
    let env = env();
    let spec = ctr(CTR_NS, &["oci", "spec"], Duration::from_secs(30));
    assert!(spec.success(), "{spec}");
    let mut spec: serde_json::Value = serde_json::from_str(&spec.stdout).unwrap();
    // ctr takes no image with --config, and vibe-shim takes no root outside
    // the bundle: the root is the shim's empty bundle/rootfs, and /bin a
    // bind (from the allowed worktree root) of a static busybox.
    let bin = BusyboxBin::new(id);
    spec["root"] = serde_json::json!({"path": "rootfs", "readonly": true});
    spec["mounts"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"destination": "/bin", "type": "bind",
            "source": bin.0.to_str().unwrap(), "options": ["rbind", "ro"]}));
    spec["process"]["terminal"] = false.into();
    // ctr's default names one cgroup per namespace, which vibe-shim will
    // not join once another container made it.
    spec["linux"]["cgroupsPath"] = format!("/vibe-test/{id}").into();
    spec["process"]["env"] = serde_json::json!(["PATH=/bin:/usr/bin"]);
    // nice is field 19 of /proc/self/stat; ionice prints the I/O class.
    spec["process"]["args"] = serde_json::json!([
        "sh",
        "-c",
        "echo NICE=$(cut -d' ' -f19 /proc/self/stat); echo IO=$(ionice -p $$ 2>&1)"
    ]);
    edit(&mut spec);
    let path = env.state.join(format!("{id}.spec.json"));
    std::fs::write(&path, spec.to_string()).unwrap();
    let mut args = vec!["run", "--rm"];
    if let Some(bin) = runc_binary {
        args.extend(["--runc-binary", bin]);
    }
    let path_s = path.to_str().unwrap().to_string();
    args.extend(["--config", &path_s, id]);
    // ctr 2.1 (sid) once ran the task with success and handed back none of
    // its output; a probe that printed nothing says nothing, so ask again.
    let mut out = ctr(CTR_NS, &args, Duration::from_secs(120));
    for _ in 0..2 {
        if !(out.success() && out.stdout.trim().is_empty()) {
            break;
        }
        eprintln!("ctr run succeeded with no output; running it again: {out}");
        out = ctr(CTR_NS, &args, Duration::from_secs(120));
    }
    let _ = std::fs::remove_file(&path);
    out
}

/// A worktree directory holding busybox and the applets the probe uses;
/// removed on drop.
struct BusyboxBin(PathBuf);

impl BusyboxBin {
    fn new(id: &str) -> BusyboxBin {
        let dir = PathBuf::from(env().var("VIBE_TEST_WORKTREES")).join(format!("{id}-bin"));
        std::fs::create_dir_all(&dir).unwrap();
        let busybox = PathBuf::from(env().var("VIBE_TEST_ROOTFS")).join("bin/busybox");
        std::fs::copy(busybox, dir.join("busybox")).unwrap();
        for applet in ["sh", "cut", "ionice"] {
            std::os::unix::fs::symlink("busybox", dir.join(applet)).unwrap();
        }
        BusyboxBin(dir)
    }
}

impl Drop for BusyboxBin {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn client_spec_cannot_raise_scheduling_priority() {
    let env = env();
    let hostile = |spec: &mut serde_json::Value| {
        spec["process"]["scheduler"] = serde_json::json!({"policy": "SCHED_OTHER", "nice": -20});
        spec["process"]["ioPriority"] =
            serde_json::json!({"class": "IOPRIO_CLASS_RT", "priority": 0});
    };
    // The attack, under plain runc: what the door gives on this stack.
    let plain_id = CtrContainer(unique_name("sched-runc"));
    let plain = ctr_with_spec(&plain_id.0, None, hostile);
    eprintln!("plain runc ({}): {plain}", env.stack());
    let door_open = plain.stdout.contains("NICE=-20");
    if door_open {
        assert!(plain.stdout.contains("realtime"), "{plain}");
    } else {
        // containerd 1.6 drops the fields it does not know; runc 1.1
        // ignores them.
        assert!(
            plain.success() && plain.stdout.contains("NICE=0"),
            "{plain}"
        );
    }

    let _config = InstalledConfig::install(&env.policy_path("default"));
    let id = CtrContainer(unique_name("sched"));
    let shim = env.shim_bin.to_str().unwrap().to_string();
    let out = ctr_with_spec(&id.0, Some(&shim), hostile);
    eprintln!("vibe-shim: {out}");
    assert!(!out.stdout.contains("NICE=-"), "{out}");
    assert!(!out.stdout.contains("realtime"), "{out}");
    if door_open {
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(
            !out.success() && all.contains("vibe-shim") && all.contains("scheduling"),
            "the refusal does not name vibe-shim and the rule: {out}"
        );
    } else {
        assert!(out.success() && out.stdout.contains("NICE=0"), "{out}");
    }
}

/// podman with storage and run state of the test env's own
/// (`$STATE/podman`), and the busybox image imported there.
struct Podman {
    base: Vec<String>,
    /// `CONTAINERS_CONF`: a containers.conf of the test's own, read instead
    /// of the host's.
    conf: Option<PathBuf>,
}

impl Podman {
    /// `global`: more global flags (a private `--network-config-dir`).
    fn new(global: &[String]) -> Podman {
        Podman::with_conf(global, None)
    }

    fn with_conf(global: &[String], conf: Option<PathBuf>) -> Podman {
        let root = env().state.join("podman");
        let mut base: Vec<String> = vec![
            "--root".into(),
            root.join("root").display().to_string(),
            "--runroot".into(),
            root.join("run").display().to_string(),
            // Not left to podman 4's choice, which is CNI where netavark
            // was installed after its storage was first used (and
            // recorded in it), and whose network files differ.
            "--network-backend".into(),
            "netavark".into(),
        ];
        base.extend(global.iter().cloned());
        let podman = Podman { base, conf };
        // The same busybox rootfs up.sh imported into Docker.
        if !podman.run(&["image", "exists", PODMAN_IMAGE], 60).success() {
            let tar = env().var("VIBE_TEST_ROOTFS_TAR").to_string();
            podman.run(&["import", &tar, PODMAN_IMAGE], 120).ok();
        }
        podman
    }

    fn run(&self, args: &[&str], secs: u64) -> Output {
        let mut cmd = std::process::Command::new(env().tool("podman"));
        cmd.args(&self.base).args(args);
        if let Some(conf) = &self.conf {
            cmd.env("CONTAINERS_CONF", conf);
        }
        run_bounded(cmd, None, Duration::from_secs(secs))
    }

    /// `podman --runtime <wrapper> --runtime-flag config=<config> run --rm
    /// --name <name> <ulimits> <flags> IMAGE sh -c <script>`, then `rm -f`
    /// whatever happened. podman's default nofile and nproc limits are over
    /// the policy's maxima: ask for ones under them.
    fn run_script(
        &self,
        wrapper: &ArgvWrapper,
        config: &Path,
        name: &str,
        flags: &[&str],
        script: &str,
    ) -> Output {
        let config_flag = format!("config={}", config.display());
        let mut args = vec![
            "--runtime",
            wrapper.path(),
            "--runtime-flag",
            &config_flag,
            "run",
            "--rm",
            "--name",
            name,
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
        ];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[PODMAN_IMAGE, "sh", "-c", script]);
        let out = self.run(&args, 180);
        let _ = self.run(&["rm", "-f", name], 60);
        out
    }
}

/// `podman --runtime <wrapper> --runtime-flag config=<toml> run --rm ...`
/// with `net` flags (empty: podman's default network).
fn podman_case(engine: &str, net: &[&str]) {
    let env = env();
    let podman = Podman::new(&[]);
    let wrapper = ArgvWrapper::new(engine);
    let config = env.policy_path("default");
    let (policy, script) = probe_args("");
    let name = unique_name("podman");
    let out = podman.run_script(&wrapper, &config, &name, net, &script);
    let calls = wrapper.report(engine);
    let p: Posture = Outcome::from_output(out).ran();
    assert_confined(&p, &policy);
    let config_s = config.display().to_string();
    assert!(
        calls
            .iter()
            .filter(|c| c.contains("create"))
            .all(|c| c.contains(&config_s)),
        "a create call lacks the --config flag: {calls:?}"
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn podman_runs_confined() {
    // podman's default network: the spec names a netns path (/run/netns/...).
    podman_case("podman", &[]);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn podman_network_none_runs_confined() {
    podman_case("podman-netnone", &["--network", "none"]);
}

// ---------------------------------------------------------------------------
// Transparent egress (mode "proxy", `transparent = true`) under podman and
// ctr: tests/policies/proxy-transparent-engines.toml, against a `vibe-shim
// egress` daemon these tests start themselves. Each engine writes its own
// resolv.conf (podman: the host's nameservers on its default network, its
// gateway's aardvark-dns on a network of its own; ctr: whatever file the
// client binds), and the container reaches the daemon's answerer whatever
// it names. The clients are busybox tools with every proxy variable unset,
// as a tool that ignores them.

const T_STEM: &str = "proxy-transparent-engines";
const T_ALLOWED: &str = "allowed.engines.vibe-test";
const T_REFUSED: &str = "secret-7.attacker.vibe-test";

/// One daemon socket for these tests: one at a time.
static TRANSPARENT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The daemon, the test host (a namespace one hop from the host, serving
/// "ok" on port 80 of 203.0.113.`160 + 4 * slot + 2`) and its name in the
/// host's /etc/hosts, for the daemon only.
struct TransparentLab {
    daemon: Daemon,
    _up: Netns,
    ip: String,
    _hosts: HostsBlock,
    _held: std::sync::MutexGuard<'static, ()>,
}

/// The transparent policy as this env runs it: the file in
/// tests/policies with its egress socket in the env's state directory
/// (`$STATE/egress-engines-<slot>/`: the sid stack's tree shares that
/// directory, not the work tree), plus the state directory among
/// `pid_file_dirs` (podman's run root is under it). Written to
/// `$STATE/e2e-argv/`.
fn transparent_policy() -> PathBuf {
    use vibe_policy::config::DEFAULT_PID_FILE_DIRS;
    let env = env();
    let base = env.policy_path(T_STEM);
    let text = std::fs::read_to_string(&base).unwrap();
    let socket = env
        .state
        .join(format!(
            "egress-engines-{}",
            vibe_shim_tests::egress::slot()
        ))
        .join("egress.sock");
    let line = text
        .lines()
        .find(|l| l.starts_with("egress_socket = "))
        .expect("the policy names its egress socket");
    let mut dirs: Vec<String> = DEFAULT_PID_FILE_DIRS
        .iter()
        .map(|d| d.to_string())
        .collect();
    dirs.push(env.state.display().to_string());
    let text = format!(
        "{}\n[runtime]\npid_file_dirs = {}\n",
        text.replace(
            line,
            &format!("egress_socket = {:?}", socket.display().to_string())
        ),
        serde_json::to_string(&dirs).unwrap()
    );
    let dir = env.state.join("e2e-argv");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{T_STEM}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

impl TransparentLab {
    fn new() -> TransparentLab {
        let held = TRANSPARENT.lock().unwrap_or_else(|e| e.into_inner());
        let daemon = Daemon::start_config(&transparent_policy());
        let (mut up, ip) = one_hop_host("vteN", "vten", 160);
        up.tcp_server(80);
        up.tcp_server(443);
        let hosts = HostsBlock::add("e2e_engines", &[(T_ALLOWED, &ip)]);
        TransparentLab {
            daemon,
            _up: up,
            ip,
            _hosts: hosts,
            _held: held,
        }
    }

    /// One `sh -c` word for every engine: each probe's output after a
    /// `== <label>` line. `literals`: addresses to try besides the test
    /// host's (the namespace's IPv6 ones).
    fn script(&self, literals: &[&str]) -> String {
        let get = |host: &str| format!("printf 'GET / HTTP/1.1\\r\\nHost: {host}\\r\\n\\r\\n'");
        // A TLS ClientHello naming `sni`, every byte an octal escape.
        let hello = |sni: &str| {
            let bytes = build_client_hello(Some(sni), 16_384);
            let text: String = bytes.iter().map(|b| format!("\\{b:03o}")).collect();
            format!("printf '{text}'")
        };
        let probes = [
            ("resolv", "cat /etc/resolv.conf".to_string()),
            (
                "by-name",
                format!("{} | nc -w 3 {T_ALLOWED} 80", get(T_ALLOWED)),
            ),
            (
                "lookup-refused",
                format!("nslookup {T_REFUSED}; echo rc=$?"),
            ),
            (
                "refused-name",
                format!("{} | nc -w 3 {T_REFUSED} 80", get(T_REFUSED)),
            ),
            (
                "tls",
                format!("{} | nc -w 3 {T_ALLOWED} 443", hello(T_ALLOWED)),
            ),
            (
                "tls-other-sni",
                format!("{} | nc -w 3 {T_ALLOWED} 443", hello(T_REFUSED)),
            ),
            (
                "literal",
                format!("{} | nc -w 3 {} 80", get(T_ALLOWED), self.ip),
            ),
        ];
        let mut script = String::from(
            "unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy NO_PROXY no_proxy ALL_PROXY all_proxy; ",
        );
        for (label, cmd) in probes {
            script.push_str(&format!("echo '== {label}'; {cmd} 2>&1; "));
        }
        for ip in literals {
            let cmd = format!("{} | nc -w 3 {ip} 80", get(T_ALLOWED));
            script.push_str(&format!("echo '== literal {ip}'; {cmd} 2>&1; "));
        }
        script.push_str("echo '== end'");
        script
    }

    /// What the container saw and the daemon logged, judged; `engine` and
    /// `out` (the engine's run) for the messages.
    fn judge(&self, engine: &str, out: &Output, literals: &[&str]) {
        let section = |label: &str| -> String {
            let start = format!("== {label}\n");
            let Some(at) = out.stdout.find(&start) else {
                return String::new();
            };
            let rest = &out.stdout[at + start.len()..];
            rest[..rest.find("\n== ").map_or(rest.len(), |e| e + 1)].to_string()
        };
        let log = std::fs::read_to_string(self.daemon.egress_log()).unwrap_or_default();
        let context = format!(
            "{engine}: {out}\n--- resolv.conf:\n{}--- egress log:\n{log}--- daemon:\n{}",
            section("resolv"),
            self.daemon.log()
        );
        eprintln!("{context}");
        assert!(
            out.stdout.contains("== end"),
            "the probe did not run to its end: {context}"
        );
        // An allowed name, by name, with no proxy variable: the test host.
        assert!(
            section("by-name").lines().any(|l| l.trim() == "ok"),
            "HTTP by name did not reach the test host: {context}"
        );
        // TLS by name: the right SNI reaches the test host, another not.
        assert!(
            section("tls").lines().any(|l| l.trim() == "ok"),
            "TLS by name with its SNI did not reach the test host: {context}"
        );
        assert!(
            !section("tls-other-sni").contains("ok"),
            "TLS with another name's SNI was let through: {context}"
        );
        // A refused name does not resolve, and nothing reaches anything.
        let lookup = section("lookup-refused");
        assert!(
            !lookup.contains("rc=0") && !lookup.contains("Address: 203."),
            "a refused name resolved: {lookup}\n{context}"
        );
        assert!(
            !section("refused-name").contains("ok"),
            "a refused name was reached: {context}"
        );
        // The allowed host's IP literal: the listener's 403, naming vibe-shim.
        let literal = section("literal");
        assert!(
            literal.starts_with("HTTP/1.1 403")
                && literal.contains("vibe-shim egress: denied")
                && literal.contains("an IP literal")
                && !literal.lines().any(|l| l.trim() == "ok"),
            "the IP literal {} was not refused: {context}",
            self.ip
        );
        for ip in literals {
            let got = section(&format!("literal {ip}"));
            assert!(
                got.starts_with("HTTP/1.1 403") && got.contains("an IP literal"),
                "the IP literal {ip} was not refused: {context}"
            );
        }
        // The log lines: the refused name, the allowed request, the literal.
        let records: Vec<serde_json::Value> = log
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let logged = |kind: &str, host: &str, decision: &str| {
            records.iter().any(|r| {
                r["kind"] == kind
                    && r["host"] == host
                    && r["decision"] == decision
                    && r["container"].as_str().is_some_and(|c| !c.is_empty())
            })
        };
        let mut want = vec![
            ("dns", T_REFUSED, "deny"),
            ("dns", T_ALLOWED, "allow"),
            ("transparent-http", T_ALLOWED, "allow"),
            ("transparent-tls", T_ALLOWED, "allow"),
            ("transparent", self.ip.as_str(), "deny"),
        ];
        want.extend(literals.iter().map(|ip| ("transparent", *ip, "deny")));
        for (kind, host, decision) in want {
            assert!(
                logged(kind, host, decision),
                "no {kind} {decision} line for {host}: {context}"
            );
        }
    }
}

/// A containers.conf of the test's own, `$STATE/podman/<tag>.conf`, with
/// `base_hosts_file = <value>`. podman copies that file's entries into the
/// container's /etc/hosts; by default it is the host's /etc/hosts, where
/// the test maps its names for the daemon, so the container would find
/// them there, at the real address, and never ask the answerer. With
/// "none" the container's /etc/hosts has only podman's own entries, as
/// for a name resolved through DNS (docs/admin/egress.md says so for
/// admins).
fn podman_conf(tag: &str, base_hosts_file: &str) -> PathBuf {
    let path = env().state.join(format!("podman/{tag}.conf"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text = format!("[containers]\nbase_hosts_file = {base_hosts_file:?}\n");
    std::fs::write(&path, text).unwrap();
    path
}

/// podman's run of the probe under the transparent policy, with `flags`
/// (a network) and `podman` (its global flags).
fn podman_transparent(engine: &str, podman: &Podman, flags: &[&str]) {
    let lab = TransparentLab::new();
    let wrapper = ArgvWrapper::new(engine);
    let config = transparent_policy();
    let name = unique_name(engine);
    let out = podman.run_script(&wrapper, &config, &name, flags, &lab.script(&[]));
    wrapper.report(engine);
    lab.judge(engine, &out, &[]);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn transparent_egress_under_podman_default_network() {
    // podman's default network has no DNS of its own: resolv.conf names
    // the host's nameservers, off the container's link.
    let podman = Podman::with_conf(&[], Some(podman_conf("no-base-hosts", "none")));
    podman_transparent("podman-transparent", &podman, &[]);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn transparent_egress_under_podman_names_from_the_base_hosts_file() {
    // podman copies its base_hosts_file (by default the host's /etc/hosts;
    // here a file of the test's own, so the sid stack's tree, with an
    // /etc/hosts of its own, shows the same) into the container's. A name
    // mapped there resolves in the container to its real address, without
    // the answerer: the connection is an IP literal, refused with the
    // listener's 403 and logged.
    let lab = TransparentLab::new();
    let base = env().state.join("podman/base-hosts");
    std::fs::write(&base, format!("{} {T_ALLOWED}\n", lab.ip)).unwrap();
    let podman = Podman::with_conf(
        &[],
        Some(podman_conf("base-hosts", &base.display().to_string())),
    );
    let wrapper = ArgvWrapper::new("podman-transparent-hosts");
    let name = unique_name("podman-transparent-hosts");
    let script = format!(
        "grep -F {T_ALLOWED} /etc/hosts; echo '== by-name'; printf 'GET / HTTP/1.1\\r\\nHost: {T_ALLOWED}\\r\\n\\r\\n' | nc -w 3 {T_ALLOWED} 80 2>&1; echo '== end'"
    );
    let out = podman.run_script(&wrapper, &transparent_policy(), &name, &[], &script);
    wrapper.report("podman-transparent-hosts");
    let log = std::fs::read_to_string(lab.daemon.egress_log()).unwrap_or_default();
    eprintln!("{out}\n--- egress log:\n{log}");
    let ip = lab.ip.as_str();
    assert!(
        out.stdout
            .lines()
            .next()
            .is_some_and(|l| l.split_whitespace().next() == Some(ip)),
        "podman did not copy the base hosts file's entry for {T_ALLOWED}: {out}"
    );
    assert!(
        out.stdout.contains("HTTP/1.1 403")
            && out.stdout.contains("an IP literal")
            && !out.stdout.lines().any(|l| l.trim() == "ok"),
        "{out}"
    );
    assert!(
        log.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|r| r["kind"] == "transparent" && r["host"] == ip && r["decision"] == "deny"),
        "the refusal was not logged:\n{log}"
    );
    assert!(
        !log.contains(&format!("\"kind\":\"dns\",\"host\":\"{T_ALLOWED}\"")),
        "the answerer was asked after all:\n{log}"
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn transparent_egress_under_podman_own_network() {
    // A network of podman's own has aardvark-dns on its gateway, which
    // resolv.conf names: a nameserver on the container's link. The
    // network lives in a config dir of this test's own.
    let dir = env().state.join("podman/networks");
    std::fs::create_dir_all(&dir).unwrap();
    let podman = Podman::with_conf(
        &["--network-config-dir".into(), dir.display().to_string()],
        Some(podman_conf("no-base-hosts", "none")),
    );
    let network = format!("vte-{}", vibe_shim_tests::egress::slot());
    let _ = podman.run(&["network", "rm", "-f", &network], 60);
    let subnet = format!("10.89.{}.0/24", 120 + vibe_shim_tests::egress::slot());
    let made = podman.run(&["network", "create", "--subnet", &subnet, &network], 60);
    assert!(made.success(), "podman network create: {made}");
    // A bridge name of its own: netavark numbers its bridges (podman1, ...)
    // by the config dir it is given, which knows no other user's networks.
    // podman 4.3 has no flag for it; the bridge is made at the first run.
    let file = dir.join(format!("{network}.json"));
    let mut json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display())),
    )
    .unwrap();
    json["network_interface"] = format!("vtepod{}", vibe_shim_tests::egress::slot()).into();
    std::fs::write(&file, json.to_string()).unwrap();
    podman_transparent(
        "podman-transparent-net",
        &podman,
        &["--network", network.as_str()],
    );
    let _ = podman.run(&["network", "rm", "-f", &network], 60);
}

/// A namespace for ctr to join, as a client with its own network set-up
/// prepares one: eth0 on 198.51.100.`224 + 4 * slot + 2`/30 and
/// 2001:db8:7665:`slot`::2/64, its default routes via a gateway namespace
/// of the test's own (so nothing from it could reach the host's network
/// even without vibe-shim's wall).
struct CtrNetns {
    ns: Netns,
    _gateway: Netns,
    gateway_ip: String,
    gateway_ip6: String,
    /// The sid engine's copy of `/run/netns/<name>`, to unmount.
    engine_file: bool,
}

impl CtrNetns {
    fn new() -> CtrNetns {
        let slot = vibe_shim_tests::egress::slot();
        let base = 224 + 4 * u32::from(slot);
        let (gw_ip, ip) = (
            format!("198.51.100.{}", base + 1),
            format!("198.51.100.{}", base + 2),
        );
        let gateway = Netns::new(&format!("vteG{slot}"));
        let ns = Netns::new(&format!("vteC{slot}"));
        must(&[
            "ip",
            "-n",
            &ns.name,
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            "gw0",
            "netns",
            &gateway.name,
        ]);
        gateway.ip(&["addr", "add", &format!("{gw_ip}/30"), "dev", "gw0"]);
        gateway.ip(&["link", "set", "gw0", "up"]);
        ns.ip(&["addr", "add", &format!("{ip}/30"), "dev", "eth0"]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["route", "add", "default", "via", &gw_ip]);
        // No duplicate address detection: the addresses work at once.
        // As the kernel and the daemon's log write them (slot 0 is `::`).
        let v6 = |host: u16| {
            std::net::Ipv6Addr::new(0x2001, 0xdb8, 0x7665, slot.into(), 0, 0, 0, host).to_string()
        };
        let (gw_ip6, ip6) = (v6(1), v6(2));
        gateway.ip(&[
            "addr",
            "add",
            &format!("{gw_ip6}/64"),
            "dev",
            "gw0",
            "nodad",
        ]);
        ns.ip(&["addr", "add", &format!("{ip6}/64"), "dev", "eth0", "nodad"]);
        ns.ip(&["-6", "route", "add", "default", "via", &gw_ip6]);
        // What arrives from the container, counted: DNS (the gateway is
        // a nameserver some tests name), and every IP packet but ICMPv6.
        let rules = "table inet vte_seen {\n\
             \tcounter dns {}\n\
             \tcounter other {}\n\
             \tchain pre {\n\
             \t\ttype filter hook prerouting priority 0; policy accept;\n\
             \t\tmeta l4proto { tcp, udp } th dport 53 counter name dns\n\
             \t\tmeta l4proto != ipv6-icmp counter name other\n\
             \t}\n\
             }\n";
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), rules).unwrap();
        let loaded = gateway.exec(&["nft", "-f", file.path().to_str().unwrap()]);
        assert!(
            loaded.status.success(),
            "nft in the gateway namespace: {}",
            String::from_utf8_lossy(&loaded.stderr)
        );
        let engine_file = env().stack() == "sid";
        if engine_file {
            bind_in_engine_ns(&ns);
        }
        CtrNetns {
            ns,
            _gateway: gateway,
            gateway_ip: gw_ip,
            gateway_ip6: gw_ip6,
            engine_file,
        }
    }

    /// The gateway's counters: (DNS packets, IP packets but ICMPv6) from
    /// the container.
    fn seen(&self) -> (u64, u64) {
        let read = |name: &str| -> u64 {
            let out = self
                ._gateway
                .exec(&["nft", "list", "counter", "inet", "vte_seen", name]);
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            text.split_whitespace()
                .skip_while(|w| *w != "packets")
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("counter {name}: {text}"))
        };
        (read("dns"), read("other"))
    }
}

impl Drop for CtrNetns {
    fn drop(&mut self) {
        if self.engine_file {
            let path = self.ns.path().display().to_string();
            let script = format!("umount {path}; rm -f {path}");
            let _ = vibe_shim_tests::netns::run(&env().in_engine_ns(&["sh", "-c", &script]));
        }
    }
}

/// Makes `ns`'s `/run/netns/<name>` in the sid engine's mount namespace
/// too: that namespace took no mount made after the engine started, so
/// the host's bind is not there. It is bound from a process held in the
/// namespace only for the bind: a namespace a process is in would be
/// judged another container's.
fn bind_in_engine_ns(ns: &Netns) {
    let host_file = ns.path();
    let want = std::fs::metadata(&host_file)
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap_or_else(|e| panic!("{}: {e}", host_file.display()));
    let mut holder = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "sleep", "60"])
        .spawn()
        .expect("ip netns exec sleep");
    let pid = holder.id();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .ok()
        != Some(want)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the holder never entered {}",
            ns.name
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let path = host_file.display().to_string();
    let script =
        format!("mkdir -p /run/netns && touch {path} && mount --bind /proc/{pid}/ns/net {path}");
    let bound = vibe_shim_tests::netns::run(&env().in_engine_ns(&["sh", "-c", &script]));
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(
        bound.status.success(),
        "binding {path} in the engine's mount namespace: {}",
        String::from_utf8_lossy(&bound.stderr)
    );
}

/// `ctr run` of the probe. `nameservers`: `Some` joins a prepared
/// namespace ([`CtrNetns`]) and binds a resolv.conf naming what it returns
/// at /etc/resolv.conf; `None` leaves ctr's own: a new namespace with
/// only lo, and no resolv.conf at all (the image has none).
fn ctr_transparent(engine: &str, nameservers: Option<&dyn Fn(&CtrNetns) -> String>) {
    let lab = TransparentLab::new();
    let env = env();
    ctr_import_image(CTR_NS);
    let id = CtrContainer(unique_name(engine));
    // ctr gives the runtime no arguments: the wrapper names the policy.
    let config = transparent_policy().display().to_string();
    let wrapper = ArgvWrapper::with_args(engine, &["--config", &config]);
    let etc = PathBuf::from(env.var("VIBE_TEST_WORKTREES")).join(format!("{}-etc", id.0));
    let mut netns = None;
    let mut flags: Vec<String> = Vec::new();
    // The namespace's IPv6 gateway (on the link) and an address off it.
    let mut literals: Vec<String> = Vec::new();
    if let Some(nameservers) = nameservers {
        let prepared = CtrNetns::new();
        std::fs::create_dir_all(&etc).unwrap();
        let resolv = etc.join("resolv.conf");
        std::fs::write(&resolv, nameservers(&prepared)).unwrap();
        flags.push("--with-ns".into());
        flags.push(format!("network:{}", prepared.ns.path().display()));
        flags.push("--mount".into());
        flags.push(format!(
            "type=bind,src={},dst=/etc/resolv.conf,options=rbind:ro",
            resolv.display()
        ));
        literals.push(prepared.gateway_ip6.clone());
        literals.push("2001:db8:7470::160".into());
        // The counters count: one datagram to the gateway's port 53,
        // sent before the container runs, is the baseline.
        let sent = prepared.ns.exec(&[
            "python3",
            "-c",
            &format!(
                "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('{}', 53))",
                prepared.gateway_ip
            ),
        ]);
        assert!(sent.status.success(), "{sent:?}");
        assert_eq!(prepared.seen(), (1, 1), "the gateway's counters");
        netns = Some(prepared);
    }
    let literals: Vec<&str> = literals.iter().map(String::as_str).collect();
    let script = lab.script(&literals);
    let mut args: Vec<&str> = vec!["run", "--rm", "--runc-binary", wrapper.path()];
    args.extend(flags.iter().map(String::as_str));
    args.extend_from_slice(&[CTR_IMAGE, &id.0, "sh", "-c", &script]);
    let out = ctr(CTR_NS, &args, Duration::from_secs(120));
    wrapper.report(engine);
    let _ = std::fs::remove_dir_all(&etc);
    lab.judge(engine, &out, &literals);
    // The nameserver resolv.conf names, and the gateway at all, saw
    // nothing: no query, for an allowed name or a refused one.
    if let Some(netns) = netns {
        assert_eq!(
            netns.seen(),
            (1, 1),
            "{engine}: the gateway saw (DNS, IP) packets from the container \
             beyond the test's own one"
        );
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn transparent_egress_under_ctr_host_resolv_conf() {
    // A copy of the host's resolv.conf: nameservers off the link.
    ctr_transparent(
        "ctr-transparent",
        Some(&|_: &CtrNetns| {
            std::fs::read_to_string("/etc/resolv.conf").expect("the host's resolv.conf")
        }),
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn transparent_egress_under_ctr_gateway_resolver() {
    // A nameserver on the container's link (its gateway).
    ctr_transparent(
        "ctr-transparent-gw",
        Some(&|n: &CtrNetns| format!("nameserver {}\n", n.gateway_ip)),
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn transparent_egress_under_ctr_ipv6_gateway_resolver() {
    // A nameserver on the container's link, over IPv6: the answerer on
    // [::1]:3153.
    ctr_transparent(
        "ctr-transparent-gw6",
        Some(&|n: &CtrNetns| format!("nameserver {}\n", n.gateway_ip6)),
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn transparent_egress_under_ctr_own_namespace() {
    // ctr's default: a namespace of its own with only lo, and no
    // resolv.conf (the resolver's default, 127.0.0.1, is asked).
    ctr_transparent("ctr-transparent-lo", None);
}
