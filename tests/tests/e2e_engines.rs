//! End-to-end: vibe-shim under containerd (`ctr --runc-binary`) and podman
//! (`podman --runtime`). Each must show the same posture from inside as under
//! Docker. The runtime each engine runs is a wrapper that logs its argv and
//! execs vibe-shim, so the exact argv every engine sends is on record in
//! `$STATE/e2e-argv/<engine>.log` and in the test output.

use std::path::{Path, PathBuf};
use std::time::Duration;

use vibe_shim_tests::docker::{ctr, ctr_import_image, CTR_IMAGE};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::{run_bounded, unique_name, Output};
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
        let env = env();
        let dir = env.state.join("e2e-argv");
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join(format!("{engine}-runtime.sh"));
        let log = dir.join(format!("{engine}.log"));
        let _ = std::fs::remove_file(&log);
        let text = format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            env.shim_bin.display()
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

/// `podman --runtime <wrapper> --runtime-flag config=<toml> run --rm ...`
/// with `net` flags (empty: podman's default network).
fn podman_case(engine: &str, net: &[&str]) {
    let env = env();
    let root = env.state.join("podman");
    let (storage, runroot) = (root.join("root"), root.join("run"));
    let base: Vec<String> = vec![
        "--root".into(),
        storage.display().to_string(),
        "--runroot".into(),
        runroot.display().to_string(),
    ];
    let podman = |args: &[&str], secs: u64| {
        let mut full = base.clone();
        full.extend(args.iter().map(|s| s.to_string()));
        let mut cmd = std::process::Command::new(env.tool("podman"));
        cmd.args(&full);
        run_bounded(cmd, None, Duration::from_secs(secs))
    };

    // The same busybox rootfs up.sh imported into Docker.
    if !podman(&["image", "exists", PODMAN_IMAGE], 60).success() {
        let tar = env.var("VIBE_TEST_ROOTFS_TAR").to_string();
        podman(&["import", &tar, PODMAN_IMAGE], 120).ok();
    }

    let wrapper = ArgvWrapper::new(engine);
    let config = env.policy_path("default");
    let config_flag = format!("config={}", config.display());
    let (policy, script) = probe_args("");
    let name = unique_name("podman");
    let out = podman(
        &[
            "--runtime",
            wrapper.path(),
            "--runtime-flag",
            &config_flag,
            "run",
            "--rm",
            "--name",
            &name,
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
        ]
        .iter()
        .chain(net)
        .chain(&[PODMAN_IMAGE, "sh", "-c", &script])
        .copied()
        .collect::<Vec<&str>>(),
        180,
    );
    let _ = podman(&["rm", "-f", &name], 60);
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
