//! End-to-end: `vibe-shim doctor` against the test dockerd. It has no
//! lockdown and no authz plugin, so the `--runtime=runc` door must be
//! reported OPEN and doctor must exit non-zero; with every run and create
//! sent through vibe-shim (a docker wrapper standing in for lockdown), the
//! runtime doors must read closed from inside while `docker cp` and the
//! bind-source door, which only the authz plugin closes, stay OPEN.
//! Either way the build row (a legacy-builder RUN step) and the lockdown
//! row are OPEN, and no canary, image or created bind source may be left.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use vibe_shim_tests::docker::{docker, runtime, server_version, IMAGE};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::{program, Output};

const DOCTOR_TIMEOUT: Duration = Duration::from_secs(600);

fn doctor(extra: &[&str]) -> Output {
    let env = env();
    let mut args = vec!["doctor", "-H", env.docker_host.as_str(), "--image", IMAGE];
    args.extend_from_slice(extra);
    program(env.shim_bin.to_str().unwrap(), &args, DOCTOR_TIMEOUT)
}

/// door -> (result, evidence), from doctor's table.
fn rows(out: &Output) -> BTreeMap<String, (String, String)> {
    out.stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("DOOR"))
        .filter_map(|l| {
            let (door, rest) = l.split_once("  ")?;
            let rest = rest.trim_start();
            let (result, evidence) = rest.split_once(' ').unwrap_or((rest, ""));
            Some((
                door.trim().to_string(),
                (result.to_string(), evidence.trim().to_string()),
            ))
        })
        .collect()
}

/// The canary prefix doctor announces, then: nothing of it is left.
fn assert_no_leftovers(out: &Output) {
    let prefix = out
        .stdout
        .lines()
        .find_map(|l| l.split("canaries ").nth(1))
        .and_then(|p| p.strip_suffix("-*"))
        .unwrap_or_else(|| panic!("no canary prefix in {out}"));
    let left = docker(&["ps", "-a", "--format", "{{.Names}}"]).ok();
    assert!(
        !left.stdout.contains(prefix),
        "canaries left behind: {}",
        left.stdout
    );
    let dir = format!("/var/tmp/{prefix}");
    assert!(
        !std::path::Path::new(&dir).exists(),
        "{dir} left on the host"
    );
}

#[test]
#[ignore = "needs the test dockerd (tests/run.sh)"]
fn doctor_reports_the_runc_door_open_without_lockdown() {
    let out = doctor(&[]);
    println!("{out}");
    assert_eq!(out.code, Some(1), "doctor must exit non-zero: {out}");
    let rows = rows(&out);
    let (result, evidence) = &rows["--runtime=runc"];
    assert_eq!(result, "OPEN", "{out}");
    // Judged from inside: the canary read the host's shadow file.
    assert!(evidence.contains("/x/shadow=read"), "{out}");
    // Docker < 23 does not pass dotted names to containerd; later ones do,
    // straight to runc.
    let dotted = if server_version().0 >= 23 {
        "OPEN"
    } else {
        "n/a"
    };
    assert_eq!(rows["--runtime=x.runc.v2"].0, dotted, "{out}");
    assert_eq!(
        rows["docker create -v /etc:/x + docker cp"].0, "OPEN",
        "{out}"
    );
    // A legacy-builder RUN step on plain runc: Docker's default caps.
    let (result, evidence) = &rows["docker build (legacy builder) RUN step"];
    assert_eq!(result, "OPEN", "{out}");
    assert!(evidence.contains("NoNewPrivs=0"), "{out}");
    // runc, as the engines resolve it, is the real one: judged by running it.
    let (result, evidence) = &rows["lockdown: runc as the engines resolve it"];
    assert_eq!(result, "OPEN", "{out}");
    assert!(evidence.contains("not vibe-shim"), "{out}");
    assert_eq!(
        rows["ctr --runc-binary / podman --runtime <real runc>"].0, "OPEN",
        "{out}"
    );
    // doctor looks for the created source in its own mount namespace; the
    // sid stack's dockerd creates it inside its tree, out of doctor's sight:
    // there doctor must not call the door closed (it cannot see it).
    if env().stack() == "host" {
        assert_eq!(rows["bind source that does not exist"].0, "OPEN", "{out}");
    } else {
        assert_ne!(rows["bind source that does not exist"].0, "closed", "{out}");
    }
    assert_no_leftovers(&out);
}

#[test]
#[ignore = "needs the test dockerd (tests/run.sh)"]
fn doctor_sees_runtime_doors_closed_when_every_run_goes_through_vibe_shim() {
    let env = env();
    let dir = env.state.join("e2e-doctor");
    std::fs::create_dir_all(&dir).unwrap();
    let wrapper = dir.join(format!("docker-{}.sh", std::process::id()));
    // Every run/create names the vibe-shim runtime, as lockdown makes it.
    let script = format!(
        r#"#!/bin/bash
out=()
done=
for a in "$@"; do
    case $a in --runtime=*) continue ;; esac
    out+=("$a")
    if [ -z "$done" ] && {{ [ "$a" = run ] || [ "$a" = create ]; }}; then
        out+=("--runtime={}")
        done=1
    fi
done
exec docker "${{out[@]}}"
"#,
        runtime()
    );
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = doctor(&["--docker", wrapper.to_str().unwrap()]);
    let _ = std::fs::remove_file(&wrapper);
    println!("{out}");
    let rows = rows(&out);
    for door in ["--runtime=runc", "(no --runtime)", "--privileged"] {
        let (result, evidence) = &rows[door];
        assert_eq!(result, "closed", "{door}: {out}");
        assert!(evidence.contains("vibe-shim"), "{door}: {out}");
        // The bind refused, a canary without it was judged from inside.
        assert!(
            evidence.contains("CapEff=0000000000000000"),
            "{door}: {out}"
        );
    }
    // Only the API gate closes these: doctor must still fail.
    assert_eq!(
        rows["docker create -v /etc:/x + docker cp"].0, "OPEN",
        "{out}"
    );
    assert_eq!(out.code, Some(1), "{out}");
    assert_no_leftovers(&out);
}
