//! End-to-end: the network hook under the ordering the engine really has.
//! Docker < 28 configures the container's interface in a prestart hook
//! during `runc create`; Docker >= 28 only after `runc create` returns, so at
//! the `createRuntime` hook the namespace holds only `lo`. The runtime
//! `ordering` (tests/policies/ordering.toml) runs the real runc behind a
//! wrapper that records, right after `runc create` and after `runc start`,
//! the container's interfaces and its `inet vibe_shim` table: host evidence,
//! taken from the container's own namespace.

use std::path::{Path, PathBuf};
use std::time::Duration;

use vibe_shim_tests::docker::{docker, docker_with, runtime_for, server_version, Container, IMAGE};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::program;

/// Where ordering.toml points `[runtime] path`, and the records' directory.
const DIR: &str = "/var/tmp/vibe-test/ordering";

const WRAPPER: &str = r#"#!/bin/sh
# Written by tests/tests/e2e_ordering.rs: the real runc, then a record.
runc=/usr/sbin/runc
[ -x "$runc" ] || runc=/usr/bin/runc
verb= pidfile= id=
prev=
for a in "$@"; do
    case $prev in --pid-file) pidfile=$a ;; esac
    case $a in
    --pid-file=*) pidfile=${a#--pid-file=} ;;
    create | start) [ -z "$verb" ] && verb=$a ;;
    esac
    prev=$a
    id=$a
done
"$runc" "$@"
rc=$?
if [ "$rc" = 0 ] && [ -n "$verb" ]; then
    out=/var/tmp/vibe-test/ordering/$id.$verb
    if [ "$verb" = create ]; then
        cat "$pidfile" > "$out.pid" 2>/dev/null
    fi
    pid=$(cat "$out.pid" 2>/dev/null || cat "/var/tmp/vibe-test/ordering/$id.create.pid")
    { nsenter -t "$pid" -n ip -o link show | awk -F': ' '{ print "link " $2 }'
      nsenter -t "$pid" -n nft list table inet vibe_shim; } > "$out.tmp" 2>&1
    mv "$out.tmp" "$out"
fi
exit "$rc"
"#;

fn install_wrapper() {
    std::fs::create_dir_all(DIR).unwrap();
    let path = Path::new(DIR).join("runc");
    let tmp = Path::new(DIR).join("runc.tmp");
    std::fs::write(&tmp, WRAPPER).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
}

fn record(id: &str, verb: &str) -> String {
    let path = PathBuf::from(DIR).join(format!("{id}.{verb}"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no record {} from the wrapper: {e}", path.display()))
}

fn links(record: &str) -> Vec<String> {
    record
        .lines()
        .filter_map(|l| l.strip_prefix("link "))
        .map(|l| l.split('@').next().unwrap_or(l).to_string())
        .collect()
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn network_hook_runs_with_the_engines_real_ordering() {
    install_wrapper();
    let (major, minor) = server_version();
    let c = Container::new("ordering");
    let out = docker_with(
        &[
            "run",
            "--name",
            &c.name,
            "--runtime",
            &runtime_for("ordering"),
            IMAGE,
            // Alive while the wrapper reads its namespace after start.
            "sleep",
            "2",
        ],
        None,
        Duration::from_secs(120),
    );
    assert!(out.success(), "the container did not run: {out}");
    let id = c.id().expect("container id");
    let created = record(&id, "create");
    let started = record(&id, "start");
    let _ = docker(&["rm", "-f", &c.name]);
    for verb in ["create", "start", "create.pid"] {
        let _ = std::fs::remove_file(PathBuf::from(DIR).join(format!("{id}.{verb}")));
    }
    eprintln!("Docker {major}.{minor}\n--- after create:\n{created}\n--- after start:\n{started}");

    // The wall is in place at create time on every engine.
    assert!(
        created.contains("reject with icmpx admin-prohibited"),
        "no vibe_shim table after create: {created}"
    );
    let at_create = links(&created);
    if major >= 28 {
        // The network comes after `runc create`: only lo at hook time ...
        assert_eq!(at_create, ["lo"], "Docker {major}.{minor}: {created}");
        // ... and the engine's neighbour advertisement is let out until
        // start, which installs the strict table.
        assert!(created.contains("until start"), "{created}");
    } else {
        assert!(
            at_create.iter().any(|l| l != "lo"),
            "Docker {major}.{minor} configures the network in runc create: {created}"
        );
    }
    assert!(
        links(&started).iter().any(|l| l != "lo"),
        "no interface besides lo after start: {started}"
    );
    assert!(
        started.contains("reject with icmpx admin-prohibited"),
        "no vibe_shim table after start: {started}"
    );
    // The create-time rule is closed by the gate right in front of it.
    let gate = format!(
        "icmpv6 type nd-neighbor-advert reject with icmpx admin-prohibited comment \"{}\"\n\t\ticmpv6 type nd-neighbor-advert accept comment \"{}\"",
        vibe_policy::network::ruleset::FROM_START_TAG,
        vibe_policy::network::ruleset::UNTIL_START_TAG
    );
    assert!(
        started.contains(&gate),
        "the create-time rule is not closed after start: {started}"
    );
}

/// `features` and `--version` reach the stack's own runc unchanged, run
/// where the engine runs its runtimes: Docker 25 and later run
/// `<runtime> features` at daemon start.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn features_and_version_pass_through_to_the_stacks_runc() {
    let env = env();
    let shim = env.shim_bin.display().to_string();
    let config = env.policy_path("default").display().to_string();
    let run = |argv: &[&str]| {
        let full = env.in_engine_ns(argv);
        program(full[0], &full[1..], Duration::from_secs(30)).ok()
    };
    for verb in ["features", "--version"] {
        let through = run(&[&shim, "--config", &config, verb]);
        let real = run(&["runc", verb]);
        if verb == "features" {
            let parse = |s: &str| -> serde_json::Value {
                serde_json::from_str(s).unwrap_or_else(|e| panic!("features not JSON ({e}): {s}"))
            };
            assert_eq!(parse(&through.stdout), parse(&real.stdout), "{through}");
        } else {
            assert_eq!(through.stdout, real.stdout, "{through}");
        }
    }
    // The daemon ran it at start without complaint (Docker >= 25 only).
    let log = std::fs::read_to_string(env.state.join("dockerd.log")).unwrap_or_default();
    let shim_failed = log
        .lines()
        .filter(|l| l.contains("features]") && l.contains("Failed to run"))
        .filter(|l| !l.contains("norunc") && !l.contains("ordering"))
        .collect::<Vec<_>>();
    assert!(
        shim_failed.is_empty(),
        "dockerd could not run features: {shim_failed:?}"
    );
}
