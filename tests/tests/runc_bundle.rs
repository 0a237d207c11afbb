//! What runc reads is what vibe-shim judged: nothing done to the engine's
//! bundle after the check reaches runc. Raw bundles through the real runc;
//! the posture is judged from inside the container. Needs root and runc.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use vibe_shim_tests::bundle::{describe, status_field, Bundle};

const POLICY: &str = "[process]\npids_limit = 64\n";

/// The client's own version of the spec: uid 0 and every capability.
fn hostile(spec: &Value) -> Value {
    let mut spec = spec.clone();
    let all: Vec<String> = caps_all();
    spec["process"]["user"] = json!({"uid": 0, "gid": 0});
    spec["process"]["noNewPrivileges"] = json!(false);
    for set in ["bounding", "effective", "permitted", "inheritable"] {
        spec["process"]["capabilities"][set] = json!(all);
    }
    spec
}

fn caps_all() -> Vec<String> {
    [
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_FOWNER",
        "CAP_KILL",
        "CAP_SETUID",
        "CAP_SETGID",
        "CAP_NET_ADMIN",
        "CAP_SYS_ADMIN",
        "CAP_SYS_PTRACE",
        "CAP_NET_RAW",
    ]
    .iter()
    .map(|c| c.to_string())
    .collect()
}

/// Waits (bounded) for the container's init to finish writing its output.
fn init_output(bundle: &Bundle) -> String {
    let path = bundle.dir.path().join("init.out");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = fs::read_to_string(&path).unwrap_or_default();
        if text.contains("END") || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One create while another thread waits for vibe-shim's rewrite to land
/// in the engine's config.json and renames a hostile copy of it (same
/// hooks, all capabilities, uid 0) over it. Returns the init's CapEff, or
/// `None` when the create or start was refused.
fn raced_create(round: usize) -> Option<String> {
    let bundle = Bundle::busybox(
        &format!("race{round}"),
        &["sh", "-c", "grep CapEff /proc/self/status; echo END"],
        POLICY,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let config = bundle.bundle_dir().join("config.json");
    let tmp = bundle.bundle_dir().join(".hostile");
    let swapper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok(bytes) = fs::read(&config) else {
                    continue;
                };
                let Ok(judged) = serde_json::from_slice::<Value>(&bytes) else {
                    continue;
                };
                let rewritten = judged.to_string().contains("vibe-shim-network-hook");
                let already = judged["process"]["user"]["uid"] == json!(0)
                    && judged["process"]["noNewPrivileges"] == json!(false);
                if rewritten && !already {
                    let evil = serde_json::to_vec(&hostile(&judged)).expect("json");
                    if fs::write(&tmp, evil).is_ok() {
                        let _ = fs::rename(&tmp, &config);
                    }
                }
            }
        })
    };
    let out = bundle.create();
    stop.store(true, Ordering::Relaxed);
    let _ = swapper.join();
    if !out.status.success() {
        return None;
    }
    let out = bundle.shim(&["start", &bundle.id], b"");
    if !out.status.success() {
        return None;
    }
    let text = init_output(&bundle);
    Some(
        status_field(&text, "CapEff")
            .unwrap_or("missing")
            .to_string(),
    )
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn swapping_config_json_after_the_check_changes_nothing() {
    let mut ran = 0;
    for round in 0..20 {
        if let Some(cap_eff) = raced_create(round) {
            ran += 1;
            assert_eq!(
                cap_eff, "0000000000000000",
                "round {round}: runc ran a spec vibe-shim never judged"
            );
        }
    }
    assert!(ran > 0, "no raced create ran at all");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn a_symlinked_or_fifo_config_json_is_refused() {
    let bundle = Bundle::busybox("cfglink", &["true"], POLICY);
    let config = bundle.bundle_dir().join("config.json");
    let real = bundle.dir.path().join("elsewhere.json");
    fs::rename(&config, &real).expect("move config");
    std::os::unix::fs::symlink(&real, &config).expect("symlink");
    let out = bundle.create();
    assert!(!out.status.success(), "symlinked config.json ran");
    let line = bundle.last_log_line().expect("a log line");
    assert!(
        line["msg"].as_str().unwrap_or("").contains("vibe-shim"),
        "{line}"
    );

    let bundle = Bundle::busybox("cfgfifo", &["true"], POLICY);
    let config = bundle.bundle_dir().join("config.json");
    fs::remove_file(&config).expect("rm config");
    let made = std::process::Command::new("mkfifo")
        .arg(&config)
        .status()
        .expect("mkfifo");
    assert!(made.success(), "mkfifo failed");
    let started = Instant::now();
    let out = bundle.create();
    assert!(!out.status.success(), "FIFO config.json ran");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "create blocked on the FIFO"
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn runc_gets_a_private_bundle_that_hooks_can_read_and_delete_removes() {
    let bundle = Bundle::busybox("private", &["sleep", "30"], POLICY);
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    let state = bundle.shim(&["state", &bundle.id], b"");
    let state: Value = serde_json::from_slice(&state.stdout).expect("runc state is JSON");
    let private = state["bundle"].as_str().expect("state.bundle").to_string();
    assert!(
        private.starts_with("/run/vibe-shim/containers/"),
        "{private}"
    );
    assert_ne!(Path::new(&private), bundle.bundle_dir());
    // Hooks read config.json through state.bundle: it is the judged spec.
    let judged: Value =
        serde_json::from_slice(&fs::read(Path::new(&private).join("config.json")).expect("read"))
            .expect("json");
    assert_eq!(judged["process"]["capabilities"]["bounding"], json!([]));
    let out = bundle.shim(&["delete", "-f", &bundle.id], b"");
    assert!(out.status.success(), "delete: {}", describe(&out));
    assert!(!Path::new(&private).exists(), "{private} left behind");
}
