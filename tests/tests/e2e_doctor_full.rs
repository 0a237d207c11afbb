//! End-to-end: `vibe-shim doctor --full`, the hostile battery, against the
//! test dockerd. Under vibe-shim (the default test policy) every door must
//! be closed, each by a refusal naming vibe-shim or by a container whose
//! probe verdicts all hold, and doctor exits 0. Under plain runc the same
//! battery must fail: the doors runc leaves open read OPEN, with the rule
//! that shows it, and doctor exits 1. Either way no container is left.
//!
//! The probe's network targets are ports on the bridge gateway with no
//! listener (a refused connect counts as answering), and `--dns` points
//! the container at the gateway, so no probe traffic leaves the machine.

use std::collections::BTreeMap;
use std::time::Duration;

use vibe_shim_tests::docker::{docker, runtime, IMAGE};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::{program, Output};
use vibe_shim_tests::probe::probe_copy;

const DOCTOR_TIMEOUT: Duration = Duration::from_secs(900);

/// `doctor --full --json` with `--runtime runtime`: its JSON and output.
fn battery(runtime: &str) -> (serde_json::Value, Output) {
    let env = env();
    let probe = probe_copy();
    let probe_path = probe.path().join("vibe-shim-probe");
    let gw = env.var("VIBE_TEST_GATEWAY");
    let args: Vec<String> = [
        "doctor",
        "--full",
        "--json",
        "-H",
        env.docker_host.as_str(),
        "--image",
        IMAGE,
        "--runtime",
        runtime,
        "--worktree",
        env.var("VIBE_TEST_WORKTREES"),
        "--probe",
        probe_path.to_str().unwrap(),
        &format!("--run-arg=--dns={gw}"),
        "--probe-arg=--timeout-ms=500",
        "--probe-arg=--port=1",
        &format!("--probe-arg=--metadata={gw}:2"),
        &format!("--probe-arg=--private={gw}:3"),
        &format!("--probe-arg=--outside={gw}:4"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = program(env.shim_bin.to_str().unwrap(), &args, DOCTOR_TIMEOUT);
    let json = out
        .stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .unwrap_or_else(|| panic!("no JSON from doctor --full: {out}"));
    (json, out)
}

/// (door, rule or "-") -> (result, evidence).
fn rows(json: &serde_json::Value) -> BTreeMap<(String, String), (String, String)> {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("-").to_string();
    json["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                (text(&r["door"]), text(&r["rule"])),
                (text(&r["result"]), text(&r["evidence"])),
            )
        })
        .collect()
}

fn assert_no_leftovers(json: &serde_json::Value) {
    let canaries = json["battery"]["canaries"].as_str().expect("canaries");
    let prefix = canaries.trim_end_matches('*');
    let left = docker(&["ps", "-a", "--format", "{{.Names}}"]).ok();
    assert!(
        !left.stdout.contains(prefix),
        "battery containers left behind: {}",
        left.stdout
    );
}

#[test]
#[ignore = "needs the test dockerd (tests/run.sh)"]
fn every_door_is_closed_under_vibe_shim() {
    let (json, out) = battery(&runtime());
    println!("{out}");
    let rows = rows(&json);
    for ((door, rule), (result, evidence)) in &rows {
        assert!(
            result == "closed" || result == "n/a",
            "{door} / {rule}: {result} {evidence}"
        );
    }
    // Every door the battery tries is here.
    let doors: Vec<&String> = rows.keys().filter(|k| k.1 == "-").map(|k| &k.0).collect();
    assert!(doors.len() >= 30, "{doors:?}");
    for door in [
        "--pid=host",
        "--net=host",
        "--ipc=host",
        "--uts=host",
        "-v /:/host",
        "engine socket bound in",
    ] {
        let (result, evidence) = &rows[&(door.to_string(), "-".to_string())];
        assert_eq!(result, "closed", "{door}");
        assert!(
            evidence.starts_with("refused: vibe-shim: "),
            "{door}: {evidence}"
        );
    }
    // The rest ran, and the probe judged each rule from inside.
    for door in [
        "--privileged",
        "--cap-add ALL",
        "exec --privileged",
        "update --pids-limit -1",
    ] {
        let (result, evidence) = &rows[&(door.to_string(), "-".to_string())];
        assert_eq!(result, "closed", "{door}");
        assert!(
            evidence.starts_with("ran; every probe rule holds"),
            "{door}: {evidence}"
        );
        let caps = &rows[&(door.to_string(), "caps".to_string())];
        assert!(
            caps.1.contains("CapEff 0000000000000000"),
            "{door}: {caps:?}"
        );
    }
    assert_eq!(json["verdict"], "closed");
    assert_eq!(out.code, Some(0), "{out}");
    assert_no_leftovers(&json);
}

#[test]
#[ignore = "needs the test dockerd (tests/run.sh)"]
fn the_battery_finds_plain_runcs_doors_open() {
    let (json, out) = battery("runc");
    println!("{out}");
    let rows = rows(&json);
    let result = |door: &str, rule: &str| {
        rows.get(&(door.to_string(), rule.to_string()))
            .unwrap_or_else(|| panic!("no row {door} / {rule}: {out}"))
            .0
            .as_str()
    };
    // Each door OPEN, and OPEN on the rule it is about.
    for (door, rule) in [
        ("(no flags)", "caps"),
        ("(no flags)", "root.readonly"),
        ("--security-opt seccomp=unconfined", "seccomp"),
        ("--security-opt seccomp=unconfined", "seccomp.userns"),
        ("--cap-add SYS_ADMIN", "seccomp.mount"),
        ("-v /:/host", "host.paths"),
        ("engine socket bound in", "host.paths"),
        ("--pids-limit -1", "cgroup.pids"),
        ("--memory 1t --memory-swap -1", "caps"),
        ("--tmpfs /scratch (no size)", "mounts.tmpfs_size"),
        ("-e GITHUB_TOKEN=... (a secret-looking env)", "env.secrets"),
        ("exec -u 0", "caps"),
        ("exec -e GITHUB_TOKEN=...", "env.secrets"),
        ("update --pids-limit -1", "cgroup.pids"),
    ] {
        assert_eq!(result(door, "-"), "OPEN", "{door}: {out}");
        assert_eq!(result(door, rule), "OPEN", "{door} / {rule}: {out}");
    }
    // A rule runc does enforce still reads closed.
    assert_eq!(result("(no flags)", "host.paths"), "closed", "{out}");
    assert_eq!(json["verdict"], "open");
    assert_eq!(out.code, Some(1), "{out}");
    assert_no_leftovers(&json);
}
