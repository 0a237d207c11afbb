//! The real runc driven through vibe-shim on a busybox bundle; the posture
//! is judged from inside the container. Needs root and runc.

use std::process::Command;

use serde_json::json;
use vibe_shim_tests::bundle::{describe, runc_bin, shim_bin, status_field, Bundle};

const PIDS_LIMIT: i64 = 64;

fn policy() -> String {
    format!("[process]\npids_limit = {PIDS_LIMIT}\n")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The container's pids.max (cgroup v1 with a private cgroup namespace, or v2).
fn pids_max(bundle: &Bundle) -> String {
    let out = bundle.exec(&[
        "sh",
        "-c",
        "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max",
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    text(&out.stdout).trim().to_string()
}

fn assert_within_policy(value: &str) {
    let n: i64 = value
        .parse()
        .unwrap_or_else(|_| panic!("pids.max is {value:?}, not a number"));
    assert!(n > 0 && n <= PIDS_LIMIT, "pids.max {n} > {PIDS_LIMIT}");
}

fn assert_confined_status(status: &str) {
    for key in ["CapEff", "CapBnd", "CapPrm", "CapAmb"] {
        assert_eq!(
            status_field(status, key),
            Some("0000000000000000"),
            "{key} in\n{status}"
        );
    }
    assert_eq!(status_field(status, "NoNewPrivs"), Some("1"), "{status}");
    assert_eq!(status_field(status, "Seccomp"), Some("2"), "{status}");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn lifecycle_confines_init_exec_and_update() {
    let bundle = Bundle::busybox("life", &["sleep", "300"], &policy());
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(out.status.success(), "start: {}", describe(&out));

    // The init process, seen from inside.
    let out = bundle.exec(&["cat", "/proc/1/status"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_confined_status(&text(&out.stdout));
    // A flag-built exec process.
    let out = bundle.exec(&["cat", "/proc/self/status"]);
    assert_confined_status(&text(&out.stdout));

    // Read-only root; /tmp and HOME writable.
    let out = bundle.exec(&["sh", "-c", "touch /vibe-root-write"]);
    assert!(
        !out.status.success(),
        "writing / must fail: {}",
        describe(&out)
    );
    let out = bundle.exec(&["sh", "-c", "touch /tmp/x && touch \"$HOME/y\" && echo ok"]);
    assert_eq!(text(&out.stdout).trim(), "ok", "{}", describe(&out));

    // pids: created at or below the policy, and update cannot lift it.
    assert_within_policy(&pids_max(&bundle));
    let out = bundle.shim(&["update", "--pids-limit", "-1", &bundle.id], b"");
    assert!(out.status.success(), "update flags: {}", describe(&out));
    assert_within_policy(&pids_max(&bundle));
    let out = bundle.shim(
        &["update", "--resources", "-", &bundle.id],
        br#"{"pids":{"limit":-1}}"#,
    );
    assert!(out.status.success(), "update stdin: {}", describe(&out));
    assert_within_policy(&pids_max(&bundle));
    let out = bundle.shim(&["update", "--pids-limit=100000", &bundle.id], b"");
    assert!(out.status.success(), "update: {}", describe(&out));
    assert_within_policy(&pids_max(&bundle));

    // An exec --process file asking for everything comes out confined.
    let process = json!({
        "terminal": false,
        "user": {"uid": 0, "gid": 0},
        "args": ["sh", "-c", "cat /proc/self/status; echo \"TOKEN=[$GITHUB_TOKEN]\""],
        "env": ["PATH=/bin", "GITHUB_TOKEN=ghp_secret", "AWS_SECRET_ACCESS_KEY=y"],
        "cwd": "/",
        "noNewPrivileges": false,
        "capabilities": {
            "bounding": ["CAP_SYS_ADMIN", "CAP_NET_ADMIN"],
            "effective": ["CAP_SYS_ADMIN", "CAP_NET_ADMIN"],
            "permitted": ["CAP_SYS_ADMIN", "CAP_NET_ADMIN"],
            "ambient": ["CAP_SYS_ADMIN"]
        }
    });
    let process_file = bundle.dir.path().join("process.json");
    std::fs::write(&process_file, process.to_string()).unwrap();
    let out = bundle.shim(
        &[
            "exec",
            "--process",
            process_file.to_str().unwrap(),
            &bundle.id,
        ],
        b"",
    );
    assert!(out.status.success(), "exec --process: {}", describe(&out));
    let stdout = text(&out.stdout);
    assert_confined_status(&stdout);
    assert!(stdout.contains("TOKEN=[]"), "secret env leaked:\n{stdout}");
    // The caller's file is left as it was; runc got a private copy.
    assert_eq!(
        std::fs::read_to_string(&process_file).unwrap(),
        process.to_string()
    );

    // Flags asking for capabilities and secrets are confined too.
    let out = bundle.shim(
        &[
            "exec",
            "--cap",
            "CAP_SYS_ADMIN",
            "-e",
            "GITHUB_TOKEN=x",
            &bundle.id,
            "sh",
            "-c",
            "cat /proc/self/status; echo \"T=[$GITHUB_TOKEN]\"",
        ],
        b"",
    );
    let stdout = text(&out.stdout);
    assert_confined_status(&stdout);
    assert!(stdout.contains("T=[]"), "{stdout}");

    // Audit: one line per enforced verb, env values never written.
    let audit = std::fs::read_to_string(bundle.audit_path()).unwrap();
    assert!(!audit.contains("ghp_secret"), "audit leaked a secret");
    let verbs: Vec<String> = bundle
        .audit_lines()
        .iter()
        .map(|l| l["verb"].as_str().unwrap_or("").to_string())
        .collect();
    for verb in ["create", "start", "exec", "update"] {
        assert!(
            verbs.iter().any(|v| v == verb),
            "no audit line for {verb}: {verbs:?}"
        );
    }

    let out = bundle.shim(&["delete", "-f", &bundle.id], b"");
    assert!(out.status.success(), "delete: {}", describe(&out));
    assert!(bundle.runc_list().is_empty());
    assert!(bundle.log_is_all_json());
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn refused_bind_of_root_leaves_no_container() {
    let bundle = Bundle::busybox("bindroot", &["true"], &policy());
    let mut spec = bundle.spec();
    spec["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/host", "type": "bind", "source": "/", "options": ["rbind", "rw"]
    }));
    bundle.write_spec(&spec);
    let before = std::fs::read(bundle.bundle_dir().join("config.json")).unwrap();
    let out = bundle.create();
    assert!(
        !out.status.success(),
        "bind of / must be refused: {}",
        describe(&out)
    );
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("vibe-shim: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    let last = bundle.last_log_line().expect("a --log line");
    assert_eq!(last["level"], "error");
    let msg = last["msg"].as_str().unwrap();
    assert!(
        msg.starts_with("vibe-shim: ") && msg.ends_with(": /)"),
        "{msg}"
    );
    assert!(last["time"].as_str().unwrap().ends_with('Z'));
    assert!(bundle.log_is_all_json());
    assert!(bundle.runc_list().is_empty(), "a container was left");
    // A refused bundle is not rewritten.
    assert_eq!(
        std::fs::read(bundle.bundle_dir().join("config.json")).unwrap(),
        before
    );
    let audit = bundle.audit_lines();
    assert_eq!(audit.last().unwrap()["denial"]["value"], "/");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn missing_runtime_is_refused_clearly() {
    let bundle = Bundle::busybox(
        "noruntime",
        &["true"],
        "[runtime]\npath = \"/nonexistent/vibe/runc\"\n",
    );
    let out = bundle.create();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/vibe/runc") && stderr.contains("does not exist"),
        "{stderr}"
    );
    let msg = bundle.last_log_line().unwrap()["msg"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("/nonexistent/vibe/runc"), "{msg}");
    assert!(bundle.runc_list().is_empty());
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn invalid_config_is_refused_with_file_and_line() {
    let bundle = Bundle::busybox("badconfig", &["true"], &policy());
    std::fs::write(
        bundle.policy_path(),
        "[process]\npids_limit = 5\nno_such_key = 1\n",
    )
    .unwrap();
    let out = bundle.create();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    let file = bundle.policy_path().display().to_string();
    assert!(
        stderr.contains(&file) && stderr.contains("line 3") && stderr.contains("no_such_key"),
        "{stderr}"
    );
    assert!(bundle.last_log_line().unwrap()["msg"]
        .as_str()
        .unwrap()
        .contains("no_such_key"));
    assert!(bundle.runc_list().is_empty());
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn exec_into_proc_fd_cwd_is_refused() {
    let bundle = Bundle::busybox("procfd", &["sleep", "300"], &policy());
    assert!(bundle.create().status.success());
    assert!(bundle.shim(&["start", &bundle.id], b"").status.success());
    let out = bundle.shim(
        &["exec", "--cwd", "/proc/self/fd/7", &bundle.id, "true"],
        b"",
    );
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("/proc/self/fd/7"),
        "{}",
        describe(&out)
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn pass_through_verbs_reach_runc_unchanged() {
    let shim = Command::new(shim_bin()).arg("--version").output().unwrap();
    let runc = Command::new(runc_bin()).arg("--version").output().unwrap();
    assert!(shim.status.success());
    assert_eq!(shim.stdout, runc.stdout);
    // Exit codes come from runc: state of an unknown container fails the same way.
    let bundle = Bundle::busybox("pass", &["true"], &policy());
    let out = bundle.shim(&["state", "no-such-container"], b"");
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("does not exist") || bundle.last_log_line().is_some(),
        "{}",
        describe(&out)
    );
}

/// runc gets the signal dispositions it would get when started directly:
/// Rust's runtime ignores SIGPIPE, and that must not leak through the exec.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn runc_starts_with_default_sigpipe() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("fake-runc");
    std::fs::write(&fake, "#!/bin/sh\ngrep SigIgn /proc/self/status\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!("[runtime]\npath = \"{}\"\n", fake.display()),
    )
    .unwrap();
    let out = Command::new(shim_bin())
        .arg("--config")
        .arg(&policy)
        .args(["state", "x"])
        .env_remove("VIBE_SHIM_ACTIVE")
        .output()
        .unwrap();
    let line = text(&out.stdout);
    let mask = line
        .split_whitespace()
        .nth(1)
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .unwrap_or_else(|| panic!("no SigIgn in {}", describe(&out)));
    let sigpipe = 1u64 << (13 - 1);
    assert_eq!(mask & sigpipe, 0, "SIGPIPE ignored in runc: {line}");
}

/// The container's init pid, from runc's state under the bundle's root.
fn init_pid(bundle: &Bundle) -> i64 {
    let state = std::fs::read(bundle.root_dir().join(&bundle.id).join("state.json")).unwrap();
    let state: serde_json::Value = serde_json::from_slice(&state).unwrap();
    state["init_process_pid"].as_i64().unwrap()
}

fn nft_in_netns(pid: i64, args: &[&str]) -> std::process::Output {
    Command::new("nsenter")
        .arg("-t")
        .arg(pid.to_string())
        .arg("-n")
        .arg("nft")
        .args(args)
        .output()
        .unwrap()
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn network_table_is_checked_before_start() {
    let bundle = Bundle::busybox("netstart", &["sleep", "300"], &policy());
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    let pid = init_pid(&bundle);
    // The hook installed vibe-shim's table in the container's namespace.
    let out = nft_in_netns(pid, &["list", "table", "inet", "vibe_shim"]);
    assert!(
        out.status.success(),
        "no vibe_shim table: {}",
        describe(&out)
    );
    // Remove it behind vibe-shim's back: start must be refused.
    let out = nft_in_netns(pid, &["delete", "table", "inet", "vibe_shim"]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(
        !out.status.success(),
        "start without the table: {}",
        describe(&out)
    );
    let msg = bundle.last_log_line().unwrap()["msg"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.starts_with("vibe-shim: network: "), "{msg}");
    let state = Command::new(runc_bin())
        .arg("--root")
        .arg(bundle.root_dir())
        .args(["state", &bundle.id])
        .output()
        .unwrap();
    let state: serde_json::Value = serde_json::from_slice(&state.stdout).unwrap();
    assert_eq!(
        state["status"], "created",
        "the process must not have started"
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn network_hook_failure_refuses_create() {
    let bundle = Bundle::busybox(
        "nohook",
        &["true"],
        "[network]\nnft = \"/nonexistent/vibe/nft\"\n",
    );
    let out = bundle.create();
    assert!(!out.status.success(), "{}", describe(&out));
    let msg = bundle.last_log_line().unwrap()["msg"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("vibe-shim: network: ") && msg.contains("/nonexistent/vibe/nft"),
        "{msg}"
    );
    assert!(bundle.runc_list().is_empty(), "a container was left");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn runc_that_leads_back_to_vibe_shim_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // A "runc" that is really vibe-shim behind a wrapper script.
    let fake = dir.path().join("runc");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\nexec {} \"$@\"\n", shim_bin().display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "").unwrap();
    let out = Command::new("/usr/bin/timeout")
        .arg("20")
        .arg(shim_bin())
        .arg("--config")
        .arg(&policy)
        .args(["state", "x"])
        .env("PATH", dir.path())
        .env_remove("VIBE_SHIM_ACTIVE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("VIBE_SHIM_ACTIVE"),
        "{}",
        describe(&out)
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn policy_explain_lists_changes_and_refusals() {
    let bundle = Bundle::busybox("explain", &["true"], &policy());
    let explain = |b: &Bundle| {
        Command::new(shim_bin())
            .args(["policy", "explain", "--bundle"])
            .arg(b.bundle_dir())
            .arg("--config")
            .arg(b.policy_path())
            .output()
            .unwrap()
    };
    let before = std::fs::read(bundle.bundle_dir().join("config.json")).unwrap();
    let out = explain(&bundle);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("capabilities") && stdout.contains("→"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read(bundle.bundle_dir().join("config.json")).unwrap(),
        before
    );
    let mut spec = bundle.spec();
    spec["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/host", "type": "bind", "source": "/", "options": ["rbind"]
    }));
    bundle.write_spec(&spec);
    let out = explain(&bundle);
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("refused: "),
        "{}",
        describe(&out)
    );
    let out = Command::new(shim_bin())
        .args(["policy", "check", "--json", "--config"])
        .arg(bundle.policy_path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        text(&out.stdout).contains("\"pids_limit\": 64"),
        "{}",
        describe(&out)
    );
}
