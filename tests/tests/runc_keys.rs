//! Key smuggling through the real runc: Go's encoding/json matches keys
//! case-insensitively and takes the last of repeated keys, so a
//! `"Process"` after the `"process"` vibe-shim judged is what runc would
//! run. Judged from inside the container. Needs root and runc.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use vibe_shim_tests::bundle::{describe, status_field, Bundle};

/// A forced user, so a smuggled uid 0 shows.
const POLICY: &str = "[process]\npids_limit = 64\nuser = \"1000:1000\"\n";

/// Every capability up to CAP_CHECKPOINT_RESTORE, in number order.
const ALL_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every capability in this host's bounding set (a VM may lack some, and
/// runc fails to apply one the host cannot give).
fn host_caps() -> Vec<&'static str> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let bounding = u64::from_str_radix(status_field(&status, "CapBnd").unwrap(), 16).unwrap();
    ALL_CAPS
        .iter()
        .enumerate()
        .filter(|(bit, _)| bounding & (1 << bit) != 0)
        .map(|(_, cap)| *cap)
        .collect()
}

/// A process asking for uid 0 and every capability.
fn root_process(args: &[&str]) -> Value {
    let caps = host_caps();
    json!({
        "terminal": false,
        "user": {"uid": 0, "gid": 0},
        "args": args,
        "env": ["PATH=/bin"],
        "cwd": "/",
        "noNewPrivileges": false,
        "capabilities": {
            "bounding": caps, "effective": caps, "permitted": caps,
            "inheritable": caps, "ambient": caps
        }
    })
}

/// The refusal is one line naming vibe-shim on stderr and in the --log file,
/// and it names the smuggled key.
fn assert_refused_for_key(bundle: &Bundle, out: &std::process::Output, key: &str) {
    assert!(!out.status.success(), "must be refused: {}", describe(out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("vibe-shim: json-keys: ") && stderr.contains(key),
        "{stderr}"
    );
    let last = bundle.last_log_line().expect("a --log line");
    assert_eq!(last["level"], "error");
    let msg = last["msg"].as_str().unwrap();
    assert!(
        msg.starts_with("vibe-shim: json-keys: ") && msg.contains(key),
        "{msg}"
    );
    assert!(bundle.log_is_all_json());
}

/// Waits for the init's output file to hold a whole /proc/self/status.
fn init_status(bundle: &Bundle) -> String {
    let path = bundle.dir.path().join("init.out");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = std::fs::read_to_string(&path).unwrap_or_default();
        if status.contains("CapAmb") || Instant::now() > deadline {
            return status;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn config_with_a_second_process_key_is_refused() {
    let bundle = Bundle::busybox("keys-spec", &["cat", "/proc/self/status"], POLICY);
    let mut spec = bundle.spec();
    // preserve_order: "Process" lands after "process", so Go reads it last.
    spec["Process"] = root_process(&["cat", "/proc/self/status"]);
    bundle.write_spec(&spec);
    let written = std::fs::read_to_string(bundle.bundle_dir().join("config.json")).unwrap();
    assert!(written.find("\"process\"") < written.find("\"Process\""));

    let out = bundle.create();
    if out.status.success() {
        // What the code before the fix did: runc ran the smuggled process.
        assert!(bundle.shim(&["start", &bundle.id], b"").status.success());
        let status = init_status(&bundle);
        panic!(
            "create accepted a smuggled \"Process\": init Uid {:?} CapEff {:?}",
            status_field(&status, "Uid"),
            status_field(&status, "CapEff")
        );
    }
    assert_refused_for_key(&bundle, &out, "Process");
    assert!(bundle.runc_list().is_empty(), "a container was left");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn exec_process_file_with_a_folded_key_is_refused() {
    let bundle = Bundle::busybox("keys-exec", &["sleep", "300"], POLICY);
    assert!(bundle.create().status.success());
    assert!(bundle.shim(&["start", &bundle.id], b"").status.success());
    // "uſer" (U+017F) is "user" to Go, and comes after it.
    let mut process = root_process(&["cat", "/proc/self/status"]);
    process["u\u{17F}er"] = json!({"uid": 0, "gid": 0});
    process["capabilitie\u{17F}"] = process["capabilities"].clone();
    let body = process.to_string();
    let file = bundle.dir.path().join("process.json");
    std::fs::write(&file, &body).unwrap();
    let out = bundle.shim(
        &["exec", "--process", file.to_str().unwrap(), &bundle.id],
        b"",
    );
    if out.status.success() {
        let status = text(&out.stdout);
        panic!(
            "exec accepted a smuggled \"u\u{17F}er\": Uid {:?} CapEff {:?}",
            status_field(&status, "Uid"),
            status_field(&status, "CapEff")
        );
    }
    assert_refused_for_key(&bundle, &out, "u\u{17F}er");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn update_resources_with_a_second_pids_key_is_refused() {
    let bundle = Bundle::busybox("keys-update", &["sleep", "300"], POLICY);
    assert!(bundle.create().status.success());
    assert!(bundle.shim(&["start", &bundle.id], b"").status.success());
    let out = bundle.shim(
        &["update", "--resources", "-", &bundle.id],
        br#"{"pids":{"limit":64},"Pids":{"limit":-1}}"#,
    );
    if out.status.success() {
        let out = bundle.exec(&[
            "sh",
            "-c",
            "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max",
        ]);
        panic!(
            "update accepted a smuggled \"Pids\": pids.max {}",
            text(&out.stdout).trim()
        );
    }
    assert_refused_for_key(&bundle, &out, "Pids");
}
