//! Every Docker 20.10 fixture captured on this machine, through the whole
//! engine: hostile flags are refused with a message naming the offending
//! value, everything else comes out confined.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use vibe_policy::config::DEFAULT_PIDS_LIMIT;
use vibe_policy::host::HostView;
use vibe_policy::{
    enforce_create, enforce_process, enforce_update, CreateContext, FakeHost, Policy, Refusal,
    Rewrite, NETWORK_HOOK_MARKER,
};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/docker-20.10");
/// Docker's `--network host` namespace file on the dev daemon.
const NET_HOST_PATH: &str = "/run/vs-dev/exec/netns/default";

/// Refused fixtures: (case, rule, offending value the message must name).
const REFUSED: &[(&str, &str, &str)] = &[
    ("bind-root", "binds", "/"),
    ("docker-sock", "binds", "/run/vs-dev/docker.sock"),
    ("etc-ro", "binds", "/etc"),
    ("mount-bind", "binds", "/etc"),
    (
        "volume-etc",
        "volumes",
        "/var/lib/vs-dev/volumes/etcvol/_data",
    ),
    ("pid-host", "namespaces", "pid"),
    ("net-host", "namespaces", NET_HOST_PATH),
    ("ipc-host", "namespaces", "ipc"),
    ("uts-host", "namespaces", "uts"),
    // Docker's default user is root: a writable worktree needs a regular id.
    ("worktree", "host_ids", "0"),
];

fn read(name: &str) -> Value {
    let path = Path::new(FIXTURES).join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// Every `config-<case>.json`, by case.
fn config_fixtures() -> BTreeMap<String, Value> {
    std::fs::read_dir(FIXTURES)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter_map(|name| {
            let case = name
                .strip_prefix("config-")?
                .strip_suffix(".json")?
                .to_string();
            Some((case, read(&name)))
        })
        .collect()
}

fn policy() -> Policy {
    let text = r#"
        [[filesystem.bind]]
        source = "/srv/wt"
        mode = "rw"

        [[filesystem.bind]]
        source = "/usr/bin/docker-init"
        mode = "ro"
    "#;
    Policy::from_toml_str(text, Path::new("test.toml")).unwrap()
}

fn host() -> FakeHost {
    let mut host = FakeHost::new();
    let net = host.host_namespace_id("network").unwrap();
    host.namespaces.insert(PathBuf::from(NET_HOST_PATH), net);
    host
}

fn network_hook() -> Value {
    json!({
        "path": "/usr/local/bin/vibe-shim",
        "args": ["vibe-shim", "hook", "network", NETWORK_HOOK_MARKER],
        "timeout": 10
    })
}

/// The container id, from the engine's own bind (`.../containers/<id>/hosts`).
fn container_id(spec: &Value) -> String {
    spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["destination"] == "/etc/hosts")
        .and_then(|m| Path::new(m["source"].as_str()?).parent()?.file_name())
        .map(|id| id.to_string_lossy().into_owned())
        .expect("fixture has an engine /etc/hosts bind")
}

fn create(spec: &Value) -> Result<Rewrite, Refusal> {
    let ctx = CreateContext {
        container_id: container_id(spec),
        network_hook: Some(network_hook()),
        runtime_path: PathBuf::from("/usr/sbin/runc"),
        ..CreateContext::default()
    };
    enforce_create(spec.clone(), &policy(), &host(), &ctx)
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn assert_process_confined(process: &Value, case: &str) {
    for set in [
        "bounding",
        "effective",
        "inheritable",
        "permitted",
        "ambient",
    ] {
        assert_eq!(process["capabilities"][set], json!([]), "{case}: {set}");
    }
    assert_eq!(process["noNewPrivileges"], json!(true), "{case}");
    for entry in strings(&process["env"]) {
        assert!(
            !entry.starts_with("GITHUB_TOKEN=") && !entry.starts_with("AWS_"),
            "{case}: {entry}"
        );
    }
}

/// `[resources]` defaults: 4 GiB memory+swap, 2 CPUs, 1 GiB per tmpfs,
/// the rlimit table, and no negative OOM score.
fn assert_resources_bounded(spec: &Value, case: &str) {
    let resources = &spec["linux"]["resources"];
    for key in ["limit", "swap"] {
        let bytes = resources["memory"][key].as_i64().unwrap();
        assert!(
            (1..=4 << 30).contains(&bytes),
            "{case}: memory.{key} {bytes}"
        );
    }
    let quota = resources["cpu"]["quota"].as_i64().unwrap();
    let period = resources["cpu"]["period"].as_i64().unwrap();
    assert!(
        quota > 0 && quota <= 2 * period,
        "{case}: cpu {quota}/{period}"
    );
    let process = &spec["process"];
    assert!(process["oomScoreAdj"].as_i64().unwrap() >= 0, "{case}");
    for (kind, max) in [
        ("RLIMIT_NOFILE", 65536),
        ("RLIMIT_RTPRIO", 0),
        ("RLIMIT_NICE", 0),
    ] {
        let entry = process["rlimits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["type"] == kind)
            .unwrap_or_else(|| panic!("{case}: no {kind}"));
        assert!(entry["hard"].as_u64().unwrap() <= max, "{case}: {entry}");
    }
    for mount in spec["mounts"].as_array().unwrap() {
        if mount["type"] == "tmpfs" {
            let sizes: Vec<&str> = strings(&mount["options"])
                .into_iter()
                .filter(|o| o.starts_with("size="))
                .collect();
            assert_eq!(sizes.len(), 1, "{case}: {mount}");
        }
    }
}

fn assert_confined(spec: &Value, case: &str) {
    assert_process_confined(&spec["process"], case);
    let linux = &spec["linux"];

    let limit = linux["resources"]["pids"]["limit"].as_i64().unwrap();
    assert!(
        (1..=DEFAULT_PIDS_LIMIT).contains(&limit),
        "{case}: pids {limit}"
    );
    assert_resources_bounded(spec, case);

    let namespaces = linux["namespaces"].as_array().unwrap();
    for kind in ["pid", "ipc", "uts", "mount", "network", "cgroup"] {
        let entry = namespaces.iter().find(|n| n["type"] == kind);
        assert!(entry.is_some(), "{case}: no {kind} namespace");
        assert!(entry.unwrap().get("path").is_none(), "{case}: {kind} path");
    }

    let seccomp = &linux["seccomp"];
    assert_eq!(seccomp["defaultAction"], json!("SCMP_ACT_ERRNO"), "{case}");
    assert!(seccomp.get("listenerPath").is_none(), "{case}");
    assert!(
        seccomp["syscalls"].as_array().unwrap().len() >= 10,
        "{case}"
    );

    if let Some(sysctls) = linux["sysctl"].as_object() {
        for name in sysctls.keys() {
            assert!(
                vibe_policy::rules::sysctls::SAFE_SYSCTLS.contains(&name.as_str()),
                "{case}: {name}"
            );
        }
    }

    assert_eq!(spec["root"]["readonly"], json!(true), "{case}");

    // Devices: no node beyond the safe character devices, and the cgroup
    // rules deny everything else first.
    for device in linux["devices"].as_array().into_iter().flatten() {
        assert_eq!(device["type"], json!("c"), "{case}: {device}");
        let major = device["major"].as_i64().unwrap();
        assert!([1, 5].contains(&major), "{case}: {device}");
    }
    let rules = linux["resources"]["devices"].as_array().unwrap();
    assert_eq!(rules[0]["allow"], json!(false), "{case}");
    assert!(
        rules[0].get("type").is_none() || rules[0]["type"] == "a",
        "{case}"
    );
    for rule in &rules[1..] {
        if rule["allow"] == json!(true) {
            assert_eq!(rule["type"], json!("c"), "{case}: {rule}");
            let major = rule["major"].as_i64().unwrap();
            assert!([1, 5, 136].contains(&major), "{case}: {rule}");
        }
    }

    // Mounts: no recursive or leaky bind, nothing suid or dev-capable.
    for mount in spec["mounts"].as_array().unwrap() {
        let options = strings(&mount["options"]);
        let kind = mount["type"].as_str().unwrap_or("");
        if kind == "bind" || options.contains(&"bind") || options.contains(&"rbind") {
            assert!(!options.contains(&"rbind"), "{case}: {mount}");
            for leaky in ["shared", "rshared", "slave", "rslave"] {
                assert!(!options.contains(&leaky), "{case}: {mount}");
            }
        }
        if kind == "bind" || kind == "tmpfs" {
            assert!(options.contains(&"nosuid"), "{case}: {mount}");
            if mount["destination"] != "/dev" {
                assert!(options.contains(&"nodev"), "{case}: {mount}");
            }
        }
        if mount["destination"] == "/sys" || mount["destination"] == "/sys/fs/cgroup" {
            assert!(options.contains(&"ro"), "{case}: {mount}");
        }
    }
    let masked = strings(&linux["maskedPaths"]);
    assert!(masked.contains(&"/proc/kcore"), "{case}");
    assert!(
        strings(&linux["readonlyPaths"]).contains(&"/proc/sys"),
        "{case}"
    );

    // Our network hook, once, carrying the TCP memory bound (cgroup v1) at
    // memory_max: one process for both; the engine's hooks kept.
    let bound = vibe_policy::Policy::default()
        .resources
        .memory_max
        .0
        .to_string();
    let carrying = json!({"path": "/usr/local/bin/vibe-shim",
        "args": ["vibe-shim", "hook", "network",
                 vibe_policy::rules::resources::KERNEL_TCP_FLAG, bound, NETWORK_HOOK_MARKER],
        "timeout": 10});
    let ours: Vec<&Value> = spec["hooks"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|list| list.as_array().unwrap())
        .filter(|hook| strings(&hook["args"]).contains(&NETWORK_HOOK_MARKER))
        .collect();
    assert_eq!(ours, [&carrying], "{case}");
    assert_eq!(spec["hooks"]["createRuntime"], json!([carrying]), "{case}");
}

#[test]
fn every_docker_fixture_is_refused_or_confined() {
    let fixtures = config_fixtures();
    assert_eq!(fixtures.len(), 24, "fixture set changed: update REFUSED");
    let mut failures = Vec::new();
    for (case, spec) in &fixtures {
        let expected = REFUSED.iter().find(|(c, _, _)| c == case);
        match (create(spec), expected) {
            (Err(refusal), Some((_, rule, value))) => {
                let denial = &refusal.denial;
                if denial.rule != *rule || denial.value != *value {
                    failures.push(format!("{case}: wrong refusal: {refusal}"));
                }
                let message = refusal.to_string();
                if !message.contains(&format!(": {value})")) {
                    failures.push(format!("{case}: message does not name {value}: {message}"));
                }
            }
            (Err(refusal), None) => failures.push(format!("{case}: refused: {refusal}")),
            (Ok(_), Some(_)) => failures.push(format!("{case}: was not refused")),
            (Ok(rewrite), None) => {
                let result = std::panic::catch_unwind(|| {
                    assert_confined(&rewrite.document, case);
                    assert!(!rewrite.changes.is_empty());
                });
                if let Err(panic) = result {
                    let why = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .unwrap_or_else(|| "panic".to_string());
                    failures.push(format!("{case}: not confined: {why}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn rewritten_specs_are_valid_and_stable() {
    for (case, spec) in config_fixtures() {
        let Ok(first) = create(&spec) else { continue };
        serde_json::from_value::<oci_spec::runtime::Spec>(first.document.clone())
            .unwrap_or_else(|e| panic!("{case}: not a valid spec: {e}"));
        // A second pass (e.g. `restore` of a rewritten bundle) is a no-op.
        let second = create(&first.document).unwrap_or_else(|r| panic!("{case}: {r}"));
        assert_eq!(second.document, first.document, "{case}");
    }
}

#[test]
fn unknown_fields_survive() {
    let mut spec = read("config-default.json");
    spec["x-vendor"] = json!({"keep": true});
    spec["process"]["x-extra"] = json!(1);
    let out = create(&spec).unwrap().document;
    assert_eq!(out["x-vendor"], json!({"keep": true}));
    assert_eq!(out["process"]["x-extra"], json!(1));
    assert_eq!(out["hostname"], spec["hostname"]);
    assert_eq!(out["linux"]["cgroupsPath"], spec["linux"]["cgroupsPath"]);
}

#[test]
fn hostile_flags_are_undone() {
    let fx = config_fixtures();

    let user0 = create(&fx["user0"]).unwrap();
    let env = strings(&user0.document["process"]["env"]);
    let names: Vec<&str> = env.iter().map(|e| e.split('=').next().unwrap()).collect();
    // HOME is the home rule's private tmpfs, added after the env filter.
    let client: Vec<&str> = names.into_iter().filter(|n| *n != "HOME").collect();
    assert_eq!(client, ["PATH", "HOSTNAME", "LANG"]);
    let audit = serde_json::to_string(&user0.changes).unwrap();
    assert!(
        audit.contains("GITHUB_TOKEN"),
        "the audit names what was dropped"
    );
    assert!(
        !audit.contains("=x") && !audit.contains("=y"),
        "no values: {audit}"
    );

    // Docker's default profile, narrowed to the built-in, and no profile at
    // all come out the same.
    let default = create(&fx["default"]).unwrap().document;
    for case in ["privileged", "seccomp-unconfined"] {
        let out = create(&fx[case]).unwrap().document;
        assert_eq!(
            out["linux"]["seccomp"], default["linux"]["seccomp"],
            "{case}"
        );
    }

    let sysctl = create(&fx["sysctl"]).unwrap().document;
    assert!(sysctl["linux"]["sysctl"].get("kernel.msgmax").is_none());
    assert_eq!(
        sysctl["linux"]["sysctl"]["net.ipv4.tcp_syncookies"],
        json!("1")
    );

    let device = create(&fx["device"]).unwrap().document;
    assert!(!device.to_string().contains("/dev/vda"));

    let tty = create(&fx["tty"]).unwrap().document;
    assert!(strings(&tty["process"]["env"]).contains(&"TERM=xterm"));
    assert_eq!(tty["process"]["terminal"], json!(true));

    // libnetwork-setkey kept, run from the engine binary that /proc/<pid>/exe
    // named when judged (client_hooks), not from whatever has that pid later.
    let mut prestart = fx["default"]["hooks"]["prestart"].clone();
    prestart[0]["path"] = json!(vibe_policy::host::FAKE_DOCKERD);
    let out = create(&fx["default"]).unwrap().document;
    assert_eq!(out["hooks"]["prestart"], prestart, "libnetwork-setkey kept");
}

#[test]
fn allowed_binds_are_kept() {
    let fx = config_fixtures();
    let find = |spec: &Value, dest: &str| -> Value {
        spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == dest)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let mut as_user = fx["worktree"].clone();
    as_user["process"]["user"] = json!({"uid": 1000, "gid": 1000});
    let worktree = create(&as_user).unwrap().document;
    let bind = find(&worktree, "/srv/wt");
    assert_eq!(bind["source"], json!("/srv/wt"));
    assert!(!strings(&bind["options"]).contains(&"ro"));

    let init = create(&fx["init"]).unwrap().document;
    let bind = find(&init, "/sbin/docker-init");
    assert_eq!(bind["source"], json!("/usr/bin/docker-init"));
    assert!(strings(&bind["options"]).contains(&"ro"));
    assert_eq!(init["process"]["args"][0], json!("/sbin/docker-init"));
}

#[test]
fn docker_exec_processes_are_confined() {
    let host = host();
    for name in [
        "process-exec-privileged-root-secret.json",
        "process-exec-tty.json",
    ] {
        let process = read(name);
        let out = enforce_process(&process, &policy(), &host).unwrap();
        assert_process_confined(&out.document, name);
        assert_eq!(out.document["args"], process["args"], "{name}");
    }
    let privileged = read("process-exec-privileged-root-secret.json");
    let out = enforce_process(&privileged, &policy(), &host).unwrap();
    assert!(!out.document.to_string().contains("GITHUB_TOKEN"));
    assert!(out
        .changes
        .iter()
        .any(|c| c.field == "/capabilities/bounding"));
}

#[test]
fn exec_into_proc_fd_is_refused() {
    let mut process = read("process-exec-tty.json");
    process["cwd"] = json!("/proc/self/fd/7");
    let refusal = enforce_process(&process, &policy(), &host()).unwrap_err();
    assert_eq!(refusal.denial.rule, "proc_fd");
    assert!(refusal.to_string().contains("/proc/self/fd/7"));
}

#[test]
fn docker_updates_are_clamped() {
    let host = host();
    for name in ["update-pids-unlimited.json", "update-pids-100000.json"] {
        let out = enforce_update(&read(name), &policy(), &host).unwrap();
        let limit = out.document["pids"]["limit"].as_i64().unwrap();
        assert!((1..=DEFAULT_PIDS_LIMIT).contains(&limit), "{name}: {limit}");
    }
    let memory = read("update-memory.json");
    let out = enforce_update(&memory, &policy(), &host).unwrap();
    assert_eq!(out.document, memory);
    assert!(out.document.get("devices").is_none());
    assert!(out.changes.is_empty());
}

#[test]
fn exec_rlimits_and_oom_score_are_clamped() {
    let mut process = read("process-exec-tty.json");
    process["rlimits"] = json!([
        {"type": "RLIMIT_RTPRIO", "hard": 99, "soft": 99},
        {"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576}
    ]);
    process["oomScoreAdj"] = json!(-1000);
    let out = enforce_process(&process, &policy(), &host()).unwrap();
    assert_eq!(
        out.document["rlimits"][0],
        json!({"type": "RLIMIT_RTPRIO", "hard": 0, "soft": 0})
    );
    assert_eq!(out.document["rlimits"][1]["hard"], json!(65536));
    assert_eq!(out.document["oomScoreAdj"], json!(0));
}

#[test]
fn docker_update_of_memory_and_cpus_is_clamped() {
    let mut update = read("update-memory.json");
    update["memory"]["limit"] = json!(64_i64 << 30);
    update["memory"]["swap"] = json!(-1);
    update["cpu"]["quota"] = json!(6_400_000);
    update["cpu"]["period"] = json!(100_000);
    update["cpu"]["shares"] = json!(262_144);
    let out = enforce_update(&update, &policy(), &host()).unwrap();
    assert_eq!(out.document["memory"]["limit"], json!(4_i64 << 30));
    assert_eq!(out.document["memory"]["swap"], json!(4_i64 << 30));
    assert_eq!(
        out.document["cpu"],
        json!({"shares": 1024, "quota": 200_000, "period": 100_000})
    );
}
