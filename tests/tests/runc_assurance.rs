//! The start's assurance check with the real runc: what the kernel shows of
//! a created container is judged before its process runs, the record is
//! written (root-only on the host, read-only inside), and the audit log's
//! hash chain shows a removed line. Needs root and runc.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use vibe_shim_tests::bundle::{describe, shim_bin, Bundle};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Where start writes the record of `bundle`'s container.
fn record_path(bundle: &Bundle) -> PathBuf {
    let root = bundle.root_dir().display().to_string().replace('/', "%2F");
    PathBuf::from("/run/vibe-shim/assurance")
        .join(root)
        .join(format!("{}.json", bundle.id))
}

fn runc_status(bundle: &Bundle) -> String {
    bundle
        .runc_state()
        .and_then(|v| v["status"].as_str().map(str::to_string))
        .unwrap_or_else(|| "gone".into())
}

/// The policy tightened between create and start: the kernel shows a
/// pids ceiling (set at create) above the policy's, so start is refused
/// with the rule, the init is killed, and the workload never runs.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn evidence_that_contradicts_the_policy_refuses_the_start_and_nothing_runs() {
    let bundle = Bundle::busybox(
        "contradicted",
        &["sleep", "30"],
        "[process]\npids_limit = 64\n",
    );
    let policy = std::fs::read_to_string(bundle.policy_path()).unwrap();
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    assert_eq!(runc_status(&bundle), "created");
    std::fs::write(
        bundle.policy_path(),
        policy.replace("pids_limit = 64", "pids_limit = 32"),
    )
    .unwrap();

    let out = bundle.shim(&["start", &bundle.id], b"");
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success(),
        "start must be refused: {}",
        describe(&out)
    );
    assert!(
        stderr.contains("vibe-shim: assurance:") && stderr.contains("pids rule"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    for _ in 0..50 {
        if runc_status(&bundle) != "created" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Killed on runc's exec fifo: the workload never ran.
    assert_eq!(runc_status(&bundle), "stopped", "the init must be dead");
    // The refusal has its record.
    let record: Value =
        serde_json::from_slice(&std::fs::read(record_path(&bundle)).unwrap()).unwrap();
    assert_eq!(record["verdict"], "refused");
    assert_eq!(record["contradictions"][0]["rule"], "pids", "{record}");
    let audit = bundle.audit_lines();
    let start = audit
        .iter()
        .find(|l| l["verb"] == "start")
        .expect("a start line");
    assert_eq!(start["assurance"]["verdict"], "refused", "{start}");
    // A start again (the engine retrying) finds no process to run.
    let again = bundle.shim(&["start", &bundle.id], b"");
    assert!(!again.status.success(), "{}", describe(&again));
}

/// A confined start: the record is root-only on the host, the container
/// reads the same bytes at /etc/vibe-shim/assurance.json and cannot change
/// them, delete removes it; and the audit log's chain is whole until a line
/// is cut from its middle.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn a_confined_start_has_its_record_inside_and_the_audit_chain_shows_a_cut() {
    let bundle = Bundle::busybox("record", &["sleep", "300"], "[process]\npids_limit = 64\n");
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(out.status.success(), "start: {}", describe(&out));

    let path = record_path(&bundle);
    let host = std::fs::read(&path).expect("the record");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    let record: Value = serde_json::from_slice(&host).unwrap();
    assert_eq!(record["verdict"], "confined", "{record}");
    assert_eq!(record["vibe_shim_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        record["policy"]["path"],
        bundle.policy_path().display().to_string()
    );
    assert_eq!(record["policy"]["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(record["evidence"]["status"]["cap_eff"], 0);
    assert_eq!(record["evidence"]["status"]["no_new_privs"], 1);
    assert_eq!(record["evidence"]["cgroup"]["pids_max"], 64);

    let inside = bundle.exec(&["cat", "/etc/vibe-shim/assurance.json"]);
    assert!(inside.status.success(), "{}", describe(&inside));
    assert_eq!(inside.stdout, host, "the container's copy is the record");
    let write = bundle.exec(&["sh", "-c", "echo forged > /etc/vibe-shim/assurance.json"]);
    assert!(!write.status.success(), "the copy must not be writable");
    let inside = bundle.exec(&["cat", "/etc/vibe-shim/assurance.json"]);
    assert_eq!(inside.stdout, host);

    let out = bundle.shim(&["delete", "-f", &bundle.id], b"");
    assert!(out.status.success(), "delete: {}", describe(&out));
    assert!(!path.exists(), "delete removes the record");

    let verify = |file: &std::path::Path| {
        Command::new(shim_bin())
            .args(["audit", "verify"])
            .arg(file)
            .output()
            .expect("vibe-shim audit verify")
    };
    let log = bundle.audit_path();
    let out = verify(&log);
    assert!(out.status.success(), "whole chain: {}", describe(&out));
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert!(lines.len() >= 3, "create, start, delete: {lines:?}");
    let cut = bundle.dir.path().join("cut.jsonl");
    let kept: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, l)| l.as_str())
        .collect();
    std::fs::write(&cut, kept.join("\n") + "\n").unwrap();
    let out = verify(&cut);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a cut chain: {}",
        describe(&out)
    );
    assert!(text(&out.stdout).contains("line 2:"), "{}", describe(&out));
}
