//! runc's command line as an attacker writes it, through vibe-shim and the
//! real runc: `--` before the verb, an unknown flag with a value, an exec
//! built from a bundle rewritten after create, and restore. The posture is
//! judged from inside the container. Needs root and runc.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use vibe_shim_tests::bundle::{
    describe, runc_bin, shim_bin, status_field, Bundle, CALL_TIMEOUT_SECS,
};

/// What a container reports about itself: its status and the secret.
const REPORT: &str = "cat /proc/self/status; echo \"TOKEN=[$GITHUB_TOKEN]\"";
const SECRET: &str = "ghp_argv_secret";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A spec asking for what the policy forbids: capabilities, root, no
/// no-new-privileges, and a secret in the environment.
fn greedy(process: &mut Value) {
    let caps = json!([
        "CAP_SYS_ADMIN",
        "CAP_NET_ADMIN",
        "CAP_DAC_OVERRIDE",
        "CAP_KILL"
    ]);
    process["capabilities"] = json!({
        "bounding": caps, "effective": caps, "permitted": caps, "inheritable": caps, "ambient": caps
    });
    process["user"] = json!({"uid": 0, "gid": 0});
    process["noNewPrivileges"] = json!(false);
    process["env"] = json!(["PATH=/bin", format!("GITHUB_TOKEN={SECRET}")]);
}

fn assert_confined(report: &str) {
    for key in ["CapEff", "CapBnd", "CapPrm", "CapAmb"] {
        assert_eq!(
            status_field(report, key),
            Some("0000000000000000"),
            "{key} in\n{report}"
        );
    }
    assert_eq!(status_field(report, "NoNewPrivs"), Some("1"), "{report}");
    assert!(report.contains("TOKEN=[]"), "secret env leaked:\n{report}");
}

/// vibe-shim with the bundle's policy, root and log, then `args` as given.
/// stdio go to files (init.out, init.err): a created container's init holds
/// them open, so a pipe would never reach EOF.
fn shim_raw(bundle: &Bundle, args: &[&str]) -> Output {
    let out_path = bundle.dir.path().join("init.out");
    let err_path = bundle.dir.path().join("init.err");
    let status = Command::new("timeout")
        .arg(CALL_TIMEOUT_SECS)
        .arg(shim_bin())
        .arg("--config")
        .arg(bundle.policy_path())
        .arg("--root")
        .arg(bundle.root_dir())
        .arg("--log")
        .arg(bundle.log_path())
        .arg("--log-format")
        .arg("json")
        .args(args)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_path).expect("init.out"))
        .stderr(fs::File::create(&err_path).expect("init.err"))
        .status()
        .expect("run vibe-shim");
    Output {
        status,
        stdout: fs::read(out_path).unwrap_or_default(),
        stderr: fs::read(err_path).unwrap_or_default(),
    }
}

/// The refusal must come from vibe-shim (stderr and the --log file).
fn assert_refused_by_shim(bundle: &Bundle, out: &Output, needle: &str) {
    assert!(!out.status.success(), "must be refused: {}", describe(out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("vibe-shim") && stderr.contains(needle),
        "want a vibe-shim refusal naming {needle:?}: {}",
        describe(out)
    );
    let line = bundle.last_log_line().expect("a --log line");
    let msg = line["msg"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("vibe-shim: ") && msg.contains(needle),
        "{line}"
    );
}

/// Waits until the container's init has written its report and exited.
fn init_report(bundle: &Bundle) -> String {
    let path = bundle.dir.path().join("init.out");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let report = fs::read_to_string(&path).unwrap_or_default();
        if report.contains("TOKEN=[") || Instant::now() > deadline {
            return report;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// vibe-shim's per-container directory (`state_dir::container_dir`): the
/// runc root escaped into one component, then the id.
fn state_dir(root: &Path, id: &str) -> PathBuf {
    let escaped = vibe_hooks::egress::records::escape_root(root);
    Path::new("/run/vibe-shim/containers")
        .join(escaped)
        .join(id)
}

/// Removes the runc root's state directory when the test ends.
struct StateDirGuard(PathBuf);

impl Drop for StateDirGuard {
    fn drop(&mut self) {
        if let Some(root_dir) = self.0.parent() {
            let _ = fs::remove_dir_all(root_dir);
        }
    }
}

/// Until create keeps the judged spec itself, put it where exec reads it:
/// create rewrote the bundle's config.json in place, so that is the judged one.
fn ensure_judged_spec(bundle: &Bundle) -> StateDirGuard {
    let dir = state_dir(&bundle.root_dir(), &bundle.id);
    let judged = dir.join("config.json");
    if !judged.exists() {
        fs::create_dir_all(&dir).expect("state dir");
        fs::copy(bundle.bundle_dir().join("config.json"), &judged).expect("judged spec");
    }
    StateDirGuard(dir)
}

#[test]
#[ignore = "needs root and runc"]
fn double_dash_before_the_verb_is_still_judged() {
    let bundle = Bundle::busybox("dashdash", &["sh", "-c", REPORT], "");
    let mut spec = bundle.spec();
    greedy(&mut spec["process"]);
    bundle.write_spec(&spec);
    let bundle_dir = bundle.bundle_dir();
    let out = shim_raw(
        &bundle,
        &[
            "--",
            "create",
            "--bundle",
            bundle_dir.to_str().unwrap(),
            &bundle.id,
        ],
    );
    assert!(out.status.success(), "create: {}", describe(&out));
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(out.status.success(), "start: {}", describe(&out));
    assert_confined(&init_report(&bundle));
    // And the audit log saw a create.
    assert!(
        bundle.audit_lines().iter().any(|l| l["verb"] == "create"),
        "{:?}",
        bundle.audit_lines()
    );
}

#[test]
#[ignore = "needs root and runc"]
fn unknown_flags_are_refused_even_if_a_future_runc_takes_a_value() {
    // A runc that knows `--future-flag V` (this one drops it): without a
    // refusal, `-e` and `--cap` after it would reach runc unjudged.
    let bundle = Bundle::busybox("future", &["sleep", "300"], "");
    let future_runc = bundle.dir.path().join("future-runc");
    fs::write(
        &future_runc,
        format!(
            "#!/bin/sh\nfor a; do shift; case \"$a\" in --future-flag) skip=1;; *) if [ -n \"$skip\" ]; then skip=; else set -- \"$@\" \"$a\"; fi;; esac; done\nexec {} \"$@\"\n",
            Command::new("sh")
                .args(["-c", &format!("command -v {}", runc_bin().display())])
                .output()
                .map(|o| text(&o.stdout).trim().to_string())
                .unwrap()
        ),
    )
    .unwrap();
    Command::new("chmod")
        .arg("755")
        .arg(&future_runc)
        .status()
        .unwrap();
    fs::write(
        bundle.policy_path(),
        format!(
            "[runtime]\npath = \"{}\"\n[audit]\npath = \"{}\"\n",
            future_runc.display(),
            bundle.audit_path().display()
        ),
    )
    .unwrap();
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    let _judged = ensure_judged_spec(&bundle);
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(out.status.success(), "start: {}", describe(&out));

    let out = bundle.shim(
        &[
            "exec",
            "--future-flag",
            "v",
            "-e",
            &format!("GITHUB_TOKEN={SECRET}"),
            "--cap",
            "CAP_SYS_ADMIN",
            &bundle.id,
            "sh",
            "-c",
            REPORT,
        ],
        b"",
    );
    assert_refused_by_shim(&bundle, &out, "future-flag");
    assert!(!text(&out.stdout).contains(SECRET), "{}", describe(&out));

    // The same before the verb.
    let out = bundle.shim(&["--future-flag", "v", "exec", &bundle.id, "true"], b"");
    assert_refused_by_shim(&bundle, &out, "future-flag");
}

#[test]
#[ignore = "needs root and runc"]
fn exec_without_process_ignores_a_rewritten_bundle() {
    let bundle = Bundle::busybox("rewrite", &["sleep", "300"], "");
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    let _judged = ensure_judged_spec(&bundle);
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(out.status.success(), "start: {}", describe(&out));

    // The client rewrites the engine's bundle after create: runc's own
    // getProcess would build the exec from this.
    let mut spec = bundle.spec();
    greedy(&mut spec["process"]);
    bundle.write_spec(&spec);

    let out = bundle.exec(&["sh", "-c", REPORT]);
    assert!(out.status.success(), "exec: {}", describe(&out));
    assert_confined(&text(&out.stdout));

    // Flags that ask for more are judged the same way.
    let out = bundle.shim(
        &[
            "exec",
            "-e",
            &format!("GITHUB_TOKEN={SECRET}"),
            "--cap",
            "CAP_SYS_ADMIN",
            "-u",
            "0",
            "--no-new-privs=false",
            &bundle.id,
            "sh",
            "-c",
            REPORT,
        ],
        b"",
    );
    assert!(out.status.success(), "exec flags: {}", describe(&out));
    assert_confined(&text(&out.stdout));

    // An exec that would leave the container's cgroup.
    let out = bundle.shim(&["exec", "--cgroup", "../..", &bundle.id, "true"], b"");
    assert_refused_by_shim(&bundle, &out, "--cgroup");
}

#[test]
#[ignore = "needs root and runc"]
fn exec_of_a_container_vibe_shim_did_not_create_is_refused() {
    // Created by plain runc: no judged spec in vibe-shim's state directory.
    let bundle = Bundle::busybox("foreign", &["sleep", "300"], "");
    let out = Command::new(runc_bin())
        .arg("--root")
        .arg(bundle.root_dir())
        .args(["run", "-d", "--bundle"])
        .arg(bundle.bundle_dir())
        .arg(&bundle.id)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // Not a pipe: the detached container would hold it open.
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "runc run: {}", describe(&out));
    let out = bundle.exec(&["true"]);
    assert_refused_by_shim(&bundle, &out, "not created through vibe-shim");
}

#[test]
#[ignore = "needs root and runc"]
fn restore_is_refused_unless_allowed() {
    let bundle = Bundle::busybox("restore", &["sleep", "300"], "");
    let image = bundle.dir.path().join("image");
    fs::create_dir_all(&image).unwrap();
    let bundle_dir = bundle.bundle_dir();
    let args = [
        "restore",
        "--image-path",
        image.to_str().unwrap(),
        "--bundle",
        bundle_dir.to_str().unwrap(),
        "-d",
        bundle.id.as_str(),
    ];
    let out = bundle.shim(&args, b"");
    assert_refused_by_shim(&bundle, &out, "allow_restore");
    assert!(
        bundle.audit_lines().iter().any(|l| l["verb"] == "restore"),
        "{:?}",
        bundle.audit_lines()
    );

    // Allowed: vibe-shim judges the bundle and lets runc try (runc then
    // fails on the empty image, not on vibe-shim).
    let policy = fs::read_to_string(bundle.policy_path()).unwrap();
    fs::write(
        bundle.policy_path(),
        format!("[runtime]\nallow_restore = true\n{policy}"),
    )
    .unwrap();
    let out = bundle.shim(&args, b"");
    assert!(
        !text(&out.stderr).contains("allow_restore"),
        "{}",
        describe(&out)
    );
    // `--criu` picks the binary runc 1.1 runs as root: refused either way.
    let mut with_criu = vec!["--criu", "/bin/sh"];
    with_criu.extend_from_slice(&args);
    let out = bundle.shim(&with_criu, b"");
    assert_refused_by_shim(&bundle, &out, "--criu");
}

/// A started `sleep 300` container under the bundle's policy.
fn running(name: &str, policy: &str) -> Bundle {
    let bundle = Bundle::busybox(name, &["sleep", "300"], policy);
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(out.status.success(), "start: {}", describe(&out));
    bundle
}

/// A host path outside every engine's state, removed when the test ends.
struct HostPath(PathBuf);

impl HostPath {
    fn new(dir: &str, name: &str) -> HostPath {
        let path = Path::new(dir).join(format!("vibe-argv-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        let _ = fs::remove_file(&path);
        HostPath(path)
    }
    fn arg(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for HostPath {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
        let _ = fs::remove_file(&self.0);
    }
}

#[test]
#[ignore = "needs root and runc"]
fn checkpoint_is_refused_unless_allowed_and_its_paths_judged() {
    let bundle = running("ckpt", "");
    // runc creates --image-path (MkdirAll, as root) before it looks for criu.
    let image = HostPath::new("/tmp", "ckpt-image");
    let out = bundle.shim(
        &["checkpoint", "--image-path", image.arg(), &bundle.id],
        b"",
    );
    assert_refused_by_shim(&bundle, &out, "allow_checkpoint");
    assert!(!image.0.exists(), "runc made {}", image.0.display());
    assert!(
        bundle
            .audit_lines()
            .iter()
            .any(|l| l["verb"] == "checkpoint"),
        "{:?}",
        bundle.audit_lines()
    );

    // Allowed, but only below the policy's checkpoint directory.
    let allowed = bundle.dir.path().join("checkpoints");
    fs::create_dir_all(&allowed).unwrap();
    let policy = fs::read_to_string(bundle.policy_path()).unwrap();
    fs::write(
        bundle.policy_path(),
        format!(
            "[runtime]\nallow_checkpoint = true\ncheckpoint_dirs = [\"{}\"]\n{policy}",
            allowed.display()
        ),
    )
    .unwrap();
    let inside = allowed.join("img");
    let inside = inside.to_str().unwrap();
    for (args, needle) in [
        (vec!["--image-path", image.arg()], "--image-path"),
        (
            vec!["--image-path", inside, "--work-path", "/etc"],
            "--work-path",
        ),
        (
            vec!["--image-path", inside, "--page-server", "127.0.0.1:1"],
            "--page-server",
        ),
        (vec!["--image-path", inside, "--lazy-pages"], "--lazy-pages"),
        (
            vec!["--image-path", inside, "--parent-path", "../../../.."],
            "--parent-path",
        ),
        (vec![], "--image-path"),
    ] {
        let mut argv = vec!["checkpoint"];
        argv.extend(args);
        argv.push(&bundle.id);
        let out = bundle.shim(&argv, b"");
        assert_refused_by_shim(&bundle, &out, needle);
    }
    assert!(!image.0.exists(), "runc made {}", image.0.display());
    // Inside: vibe-shim lets runc try (this host has no criu: runc fails).
    let out = bundle.shim(
        &[
            "checkpoint",
            "--leave-running",
            "--image-path",
            inside,
            &bundle.id,
        ],
        b"",
    );
    assert!(
        !text(&out.stderr).contains("vibe-shim"),
        "{}",
        describe(&out)
    );
}

#[test]
#[ignore = "needs root and runc"]
fn pid_file_only_in_the_bundle_or_engine_state() {
    // runc writes the pid file as root (a temp file, then rename over it).
    let victim = HostPath::new("/etc", "victim");
    fs::write(&victim.0, "keep me\n").unwrap();
    let bundle = Bundle::busybox("pidfile", &["sleep", "300"], "");
    let bundle_dir = bundle.bundle_dir();
    let bundle_arg = bundle_dir.to_str().unwrap();
    let create = |pid_file: &str| {
        shim_raw(
            &bundle,
            &[
                "create",
                "--bundle",
                bundle_arg,
                "--pid-file",
                pid_file,
                &bundle.id,
            ],
        )
    };
    let out = create(victim.arg());
    assert_refused_by_shim(&bundle, &out, "--pid-file");
    assert_eq!(fs::read_to_string(&victim.0).unwrap(), "keep me\n");
    let fresh = HostPath::new("/etc", "fresh.pid");
    let out = create(fresh.arg());
    assert_refused_by_shim(&bundle, &out, "--pid-file");
    assert!(!fresh.0.exists());
    // Not the spec runc reads, nor anything but a regular file.
    let out = create(&format!("{bundle_arg}/config.json"));
    assert_refused_by_shim(&bundle, &out, "config.json");
    fs::create_dir(bundle_dir.join("adir")).unwrap();
    let out = create(&format!("{bundle_arg}/adir"));
    assert_refused_by_shim(&bundle, &out, "regular file");
    // A symlink in the bundle leading out is judged where it leads.
    std::os::unix::fs::symlink("/etc", bundle_dir.join("etc")).unwrap();
    let out = create(&format!(
        "{bundle_arg}/etc/{}",
        victim.0.file_name().unwrap().to_str().unwrap()
    ));
    assert_refused_by_shim(&bundle, &out, "--pid-file");
    assert_eq!(fs::read_to_string(&victim.0).unwrap(), "keep me\n");
    assert!(bundle.runc_list().is_empty());

    // containerd's own: <bundle>/init.pid.
    let out = create(&format!("{bundle_arg}/init.pid"));
    assert!(out.status.success(), "create: {}", describe(&out));
    let pid = fs::read_to_string(bundle_dir.join("init.pid")).unwrap();
    assert!(pid.trim().parse::<u32>().is_ok(), "{pid:?}");
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(out.status.success(), "start: {}", describe(&out));

    // exec: nowhere outside the engines' state directories.
    let out = bundle.shim(
        &[
            "exec",
            "-d",
            "--pid-file",
            victim.arg(),
            &bundle.id,
            "sleep",
            "1",
        ],
        b"",
    );
    assert_refused_by_shim(&bundle, &out, "--pid-file");
    assert_eq!(fs::read_to_string(&victim.0).unwrap(), "keep me\n");
    // ... but directly in the engine's bundle (containerd's
    // <bundle>/<exec-id>.pid), and below a directory the policy names.
    let exec = |pid_file: &str| {
        bundle.shim(
            &[
                "exec",
                "-d",
                "--pid-file",
                pid_file,
                &bundle.id,
                "sleep",
                "1",
            ],
            b"",
        )
    };
    let exec_pid = format!("{bundle_arg}/exec1.pid");
    let out = exec(&exec_pid);
    assert!(out.status.success(), "exec: {}", describe(&out));
    assert!(Path::new(&exec_pid).is_file());
    let state = bundle.dir.path().join("state");
    fs::create_dir_all(state.join("sub")).unwrap();
    let exec_pid = format!("{}/sub/exec2.pid", state.display());
    assert_refused_by_shim(&bundle, &exec(&exec_pid), "--pid-file");
    let policy = fs::read_to_string(bundle.policy_path()).unwrap();
    fs::write(
        bundle.policy_path(),
        format!(
            "[runtime]\npid_file_dirs = [\"{}\"]\n{policy}",
            state.display()
        ),
    )
    .unwrap();
    let out = exec(&exec_pid);
    assert!(out.status.success(), "exec: {}", describe(&out));
    assert!(Path::new(&exec_pid).is_file());
}

#[test]
#[ignore = "needs root and runc"]
fn no_pivot_is_refused_unless_allowed() {
    let bundle = Bundle::busybox("nopivot", &["sleep", "300"], "");
    let bundle_dir = bundle.bundle_dir();
    let args = [
        "create",
        "--no-pivot",
        "--bundle",
        bundle_dir.to_str().unwrap(),
        bundle.id.as_str(),
    ];
    let out = shim_raw(&bundle, &args);
    assert_refused_by_shim(&bundle, &out, "allow_no_pivot");
    assert!(bundle.runc_list().is_empty());
    // `--no-pivot=false` is runc's default: nothing to refuse.
    let mut off = args;
    off[1] = "--no-pivot=false";
    let out = shim_raw(&bundle, &off);
    assert!(out.status.success(), "create: {}", describe(&out));
    let out = bundle.shim(&["delete", "-f", &bundle.id], b"");
    assert!(out.status.success(), "delete: {}", describe(&out));

    let policy = fs::read_to_string(bundle.policy_path()).unwrap();
    fs::write(
        bundle.policy_path(),
        format!("[runtime]\nallow_no_pivot = true\n{policy}"),
    )
    .unwrap();
    let out = shim_raw(&bundle, &args);
    assert!(out.status.success(), "create: {}", describe(&out));
}
