//! End-to-end: the doors around the runtime flag (a client naming plain
//! runc, or an engine that runs `runc` from PATH), with lockdown off and on.
//! Each canary is judged from inside the container:
//! CapEff and NoNewPrivs from /proc/self/status, a write to `/`, and a read
//! of the host's shadow file through `-v /etc:/x`.
//!
//! `VIBE_LOCKDOWN=on` says `runc`, as the engines resolve it, is vibe-shim
//! (tests/run.sh's lockdown step installs it for real, with the test policy
//! as /etc/vibe-shim/config.toml); otherwise the same canaries must show
//! the doors OPEN, which is the attack this section closes. Run against the
//! test env (tests/env/up.sh), or any env file via VIBE_TEST_STATE:
//!
//!   VIBE_LOCKDOWN=on cargo test --release -p vibe-shim-tests --test e2e_lockdown -- --ignored --test-threads=2
//!
//! On the sid stack (Docker 28), tests/env/sid-lockdown.sh diverts the
//! tree's own runc and runs this file with VIBE_LOCKDOWN=on; the BuildKit
//! tests build with the tree's docker CLI + buildx (`VIBE_TEST_DOCKER`).

use std::process::Command;
use std::time::Duration;

use vibe_shim_tests::docker::{
    ctr, ctr_import_image, docker, docker_with, require_docker, Container, CTR_IMAGE, IMAGE,
};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::{run_bounded, unique_name, Output};

/// containerd namespace for the ctr canary (not dockerd's "moby").
const CTR_NS: &str = "vibe-lockdown";

fn lockdown_on() -> bool {
    std::env::var("VIBE_LOCKDOWN").is_ok_and(|v| v == "on")
}

/// One argv word for every engine: what the canary sees from inside.
const PROBE: &str = "grep -E '^(CapEff|NoNewPrivs):' /proc/self/status; \
    if cat /x/shadow >/dev/null 2>&1; then echo SHADOW=read; else echo SHADOW=no; fi; \
    if touch /.vibe-lockdown-w 2>/dev/null; then echo ROOTW=yes; rm -f /.vibe-lockdown-w; \
    else echo ROOTW=no; fi; echo PROBE=done";

#[derive(Debug)]
struct Seen {
    cap_eff: u64,
    no_new_privs: bool,
    shadow_read: bool,
    root_writable: bool,
}

fn parse(stdout: &str) -> Option<Seen> {
    let field = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_string())
    };
    field("PROBE=")?;
    Some(Seen {
        cap_eff: u64::from_str_radix(&field("CapEff:")?, 16).ok()?,
        no_new_privs: field("NoNewPrivs:")? == "1",
        shadow_read: field("SHADOW=")? == "read",
        root_writable: field("ROOTW=")? == "yes",
    })
}

/// Lockdown on: refused by vibe-shim, or ran confined. Off: ran with the
/// client's flags (the door is open).
fn judge(out: &Output, expect_bind_read: bool) {
    let seen = parse(&out.stdout);
    if lockdown_on() {
        match seen {
            None => {
                assert!(!out.success(), "no probe output and no refusal: {out}");
                assert!(
                    out.stderr.contains("vibe-shim"),
                    "refusal does not name vibe-shim: {out}"
                );
            }
            Some(s) => {
                assert_eq!(s.cap_eff, 0, "capabilities under lockdown: {out}");
                assert!(s.no_new_privs, "NoNewPrivs off under lockdown: {out}");
                assert!(!s.shadow_read, "host shadow readable under lockdown: {out}");
                assert!(!s.root_writable, "writable root under lockdown: {out}");
            }
        }
    } else {
        let s = seen.unwrap_or_else(|| panic!("lockdown off: the canary should run: {out}"));
        assert_ne!(
            s.cap_eff, 0,
            "lockdown off: expected the client's capabilities: {out}"
        );
        assert!(
            s.root_writable,
            "lockdown off: expected a writable root: {out}"
        );
        if expect_bind_read {
            assert!(s.shadow_read, "lockdown off: expected the door open: {out}");
        }
    }
}

fn canary(runtime_flags: &[&str], client_flags: &[&str]) -> Output {
    let c = Container::new("lockdown");
    let mut args: Vec<&str> = vec!["run", "--rm", "--name", &c.name, "--network", "none"];
    args.extend_from_slice(runtime_flags);
    args.extend_from_slice(client_flags);
    args.extend_from_slice(&[IMAGE, "sh", "-c", PROBE]);
    docker_with(&args, None, Duration::from_secs(120))
}

/// `--privileged`/`--cap-add ALL` cannot run on hosts whose bounding set
/// lacks a capability (the test VM lacks CAP_SYS_RESOURCE), so the canary
/// asks for the one that matters most.
const HOSTILE: &[&str] = &["--cap-add", "SYS_ADMIN", "-u", "0", "-v", "/etc:/x"];

#[test]
#[ignore = "needs root and the test env: run tests/run.sh"]
fn runtime_runc_reads_host_shadow_only_without_lockdown() {
    judge(&canary(&["--runtime=runc"], HOSTILE), true);
}

#[test]
#[ignore = "needs root and the test env: run tests/run.sh"]
fn no_runtime_flag_is_confined_under_lockdown() {
    judge(&canary(&[], HOSTILE), true);
    // Without a bind: it must run (confined), not only be refused.
    let out = canary(&[], &["--cap-add", "SYS_ADMIN", "-u", "0"]);
    if lockdown_on() {
        let s = parse(&out.stdout).unwrap_or_else(|| panic!("should run confined: {out}"));
        assert_eq!(s.cap_eff, 0, "{out}");
        assert!(s.no_new_privs && !s.root_writable, "{out}");
    } else {
        judge(&out, false);
    }
}

#[test]
#[ignore = "needs root, the test env and Docker >= 23: run tests/run.sh"]
fn dotted_runc_v2_runtimes_are_confined_under_lockdown() {
    // Docker 20.10 refuses dotted runtime names.
    require_docker(23, "dotted runtime names");
    for runtime in ["io.containerd.runc.v2", "x.runc.v2"] {
        judge(&canary(&[&format!("--runtime={runtime}")], HOSTILE), true);
    }
}

#[test]
#[ignore = "needs root and the test env: run tests/run.sh"]
fn ctr_run_without_runc_binary_is_confined_under_lockdown() {
    ctr_import_image(CTR_NS);
    let id = unique_name("ctr-lockdown");
    let out = ctr(
        CTR_NS,
        &[
            "run",
            "--rm",
            "--privileged",
            "--mount",
            "type=bind,src=/etc,dst=/x,options=rbind:ro",
            CTR_IMAGE,
            &id,
            "sh",
            "-c",
            PROBE,
        ],
        Duration::from_secs(120),
    );
    let t = Duration::from_secs(20);
    let _ = ctr(CTR_NS, &["tasks", "kill", "-s", "SIGKILL", &id], t);
    let _ = ctr(CTR_NS, &["tasks", "rm", "-f", &id], t);
    let _ = ctr(CTR_NS, &["containers", "rm", &id], t);
    // ctr prints the runtime's error on its stderr; a refusal names vibe-shim.
    judge(&out, true);
}

/// Where lockdown diverts the packaged runc, as the engine sees it (the
/// host's, or the sid tree's own).
const REAL_RUNC: &str = "/usr/sbin/runc.vibe-shim-real";

/// A containerd client naming its own runc binary: the real one, by path.
/// Under lockdown it has no execute bit, so the shim's exec of it fails
/// (root included); without, `/usr/sbin/runc` is the real one and runs the
/// client's flags.
#[test]
#[ignore = "needs root and the test env: run tests/run.sh"]
fn ctr_run_naming_the_real_runc_is_refused_under_lockdown() {
    ctr_import_image(CTR_NS);
    let id = unique_name("ctr-runc-binary");
    let binary = if lockdown_on() {
        REAL_RUNC
    } else {
        "/usr/sbin/runc"
    };
    let out = ctr(
        CTR_NS,
        &[
            "run",
            "--rm",
            "--runc-binary",
            binary,
            "--privileged",
            "--mount",
            "type=bind,src=/etc,dst=/x,options=rbind:ro",
            CTR_IMAGE,
            &id,
            "sh",
            "-c",
            PROBE,
        ],
        Duration::from_secs(120),
    );
    let t = Duration::from_secs(20);
    let _ = ctr(CTR_NS, &["tasks", "kill", "-s", "SIGKILL", &id], t);
    let _ = ctr(CTR_NS, &["tasks", "rm", "-f", &id], t);
    let _ = ctr(CTR_NS, &["containers", "rm", &id], t);
    if lockdown_on() {
        assert!(!out.success(), "the real runc ran by path: {out}");
        assert!(parse(&out.stdout).is_none(), "{out}");
        let err = out.stderr.to_lowercase();
        assert!(
            err.contains("permission denied") && err.contains(REAL_RUNC),
            "not the kernel's refusal to exec {REAL_RUNC}: {out}"
        );
    } else {
        judge(&out, true);
    }
}

/// `docker build` of `dockerfile` (no context) with the given builder.
fn build(dockerfile: &str, buildkit: bool) -> Output {
    let tag = format!("vibe-lockdown-build:{}", unique_name("b").to_lowercase());
    let mut cmd = Command::new("docker");
    cmd.env_remove("DOCKER_CONTEXT")
        .env_remove("DOCKER_CONFIG")
        .env("DOCKER_BUILDKIT", if buildkit { "1" } else { "0" })
        .args([
            "-H",
            &env().docker_host,
            "build",
            "--no-cache",
            "--force-rm",
        ])
        .args(["--network", "none", "-t", &tag, "-"]);
    if buildkit {
        cmd.arg("--progress=plain");
    }
    let out = run_bounded(cmd, Some(dockerfile.as_bytes()), Duration::from_secs(300));
    let _ = docker(&["rmi", "-f", &tag]);
    out
}

fn from_image(lines: &str) -> String {
    format!("FROM {IMAGE}\n{lines}\n")
}

/// Docker 20.10's legacy builder creates RUN-step containers through the
/// same path as `docker run`, with nothing a client could not forge (see
/// policy/src/profiles.rs), so no build profile can be selected: under
/// lockdown its RUN steps get the main policy, read-only root included.
#[test]
#[ignore = "needs root and the test env: run tests/run.sh"]
fn legacy_builder_run_steps_are_confined_under_lockdown() {
    let caps = build(
        &from_image("RUN grep -E '^(CapEff|NoNewPrivs):' /proc/self/status"),
        false,
    );
    assert!(caps.success(), "{caps}");
    let all = format!("{}{}", caps.stdout, caps.stderr);
    let cap_eff = all
        .lines()
        .find_map(|l| l.trim().strip_prefix("CapEff:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap_or(u64::MAX))
        .unwrap_or_else(|| panic!("no CapEff line in the build output: {caps}"));
    let write = build(&from_image("RUN echo ok > /f && cat /f"), false);
    let mount = build(&from_image("RUN mount -t tmpfs none /mnt"), false);
    assert!(!mount.success(), "mount in a RUN step worked: {mount}");
    if lockdown_on() {
        assert_eq!(cap_eff, 0, "{caps}");
        assert!(all.contains("NoNewPrivs:\t1"), "{caps}");
        // What lockdown costs the legacy builder: no writable root.
        assert!(
            !write.success(),
            "legacy RUN wrote / under lockdown: {write}"
        );
    } else {
        assert_ne!(cap_eff, 0, "{caps}");
        assert!(write.success(), "{write}");
    }
}

/// `docker buildx build` of `dockerfile` (no context) with the stack's own
/// CLI (the sid tree's docker-cli + docker-buildx run inside the tree's
/// mount namespace, against the sid dockerd's embedded BuildKit), on build
/// network `network`. Only Docker >= 23 runs RUN steps in BuildKit's own
/// executor; a stack that has it but no buildx fails the test.
fn buildkit_build(dockerfile: &str, network: &str) -> Output {
    let env = env();
    require_docker(23, "BuildKit's executor");
    let cli = env.tool("docker");
    let mut probe = Command::new(&cli);
    probe.args(["buildx", "version"]);
    let has_buildx = run_bounded(probe, None, Duration::from_secs(30));
    assert!(
        has_buildx.success(),
        "docker buildx is required on a Docker >= 23 stack ({}: the sid tree's SID_PACKAGES, \
         or apt-get install docker-buildx): {has_buildx}",
        env.stack()
    );
    let tag = format!("vibe-lockdown-build:{}", unique_name("bk").to_lowercase());
    let mut cmd = Command::new(&cli);
    cmd.env_remove("DOCKER_CONTEXT")
        .env_remove("DOCKER_CONFIG")
        .env_remove("BUILDX_BUILDER")
        .args([
            "-H",
            &env.docker_host,
            "buildx",
            "build",
            "--builder",
            "default",
        ])
        .args(["--no-cache", "--progress=plain", "--network", network]);
    if network == "host" {
        cmd.args(["--allow", "network.host"]);
    }
    cmd.args(["-t", &tag, "-"]);
    let out = run_bounded(cmd, Some(dockerfile.as_bytes()), Duration::from_secs(300));
    let _ = docker(&["rmi", "-f", &tag]);
    out
}

/// What the RUN steps printed: BuildKit's plain progress prefixes each
/// output line with `#<step> <seconds> ` (other lines, such as the echoed
/// RUN command, are not the step's output).
fn run_output(out: &Output) -> Vec<String> {
    format!("{}\n{}", out.stdout, out.stderr)
        .lines()
        .filter_map(|l| {
            let (step, rest) = l.strip_prefix('#')?.split_once(' ')?;
            let (secs, text) = rest.split_once(' ')?;
            let timed = step.bytes().all(|b| b.is_ascii_digit())
                && secs.contains('.')
                && secs.bytes().all(|b| b.is_ascii_digit() || b == b'.');
            timed.then(|| text.to_string())
        })
        .collect()
}

/// The first RUN output line starting with `key`: the rest of it.
fn build_field(out: &Output, key: &str) -> Option<String> {
    run_output(out)
        .iter()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
}

/// The host's first disk (`/sys/block`, not loop/ram/zram) as `major minor`.
fn host_disk() -> String {
    let mut disks: Vec<(String, String)> = std::fs::read_dir("/sys/block")
        .expect("/sys/block")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            !["loop", "ram", "zram", "nbd"]
                .iter()
                .any(|p| n.starts_with(p))
        })
        .filter_map(|n| {
            let dev = std::fs::read_to_string(format!("/sys/block/{n}/dev")).ok()?;
            Some((n, dev.trim().replace(':', " ")))
        })
        .collect();
    disks.sort();
    disks
        .into_iter()
        .next()
        .map(|(_, dev)| dev)
        .expect("no disk in /sys/block")
}

/// One RUN step that tries each thing a build step must not do under
/// lockdown and says what worked; it always exits 0 so the build log
/// carries every answer.
fn attack_step(disk: &str) -> String {
    from_image(&format!(
        "RUN grep -E '^(CapEff|NoNewPrivs):' /proc/self/status; \
         if echo ok > /f && [ \"$(cat /f)\" = ok ]; then echo ROOTW=yes; else echo ROOTW=no; fi; \
         if mount -t tmpfs none /mnt 2>/dev/null; then echo MOUNT=yes; else echo MOUNT=no; fi; \
         if mknod /tmp/disk b {disk} 2>/dev/null; then echo MKNOD=yes; else echo MKNOD=no; fi; \
         n=$(head -c 512 /tmp/disk 2>/dev/null | wc -c); echo RAWREAD=$n; \
         echo BLOCKDEVS=$(find /dev -type b 2>/dev/null | wc -l); echo PROBE=done"
    ))
}

/// BuildKit (dockerd >= 23, e.g. the sid stack's 28) execs `runc` from
/// PATH for every RUN step, from a bundle in its executor directory: under
/// lockdown that is vibe-shim with the build profile (writable root, no
/// capabilities, no devices), from inside. Without lockdown the door is
/// open: the step runs with Docker's default capabilities and can make
/// device nodes.
#[test]
#[ignore = "needs root, the test env and Docker >= 23: run tests/run.sh"]
fn buildkit_run_steps_use_the_build_profile_under_lockdown() {
    let disk = host_disk();
    let out = buildkit_build(&attack_step(&disk), "none");
    println!("{out}");
    assert!(out.success(), "the RUN step must run: {out}");
    assert_eq!(
        build_field(&out, "PROBE=").as_deref(),
        Some("done"),
        "{out}"
    );
    let field = |k: &str| build_field(&out, k).unwrap_or_else(|| panic!("no {k} in {out}"));
    let cap_eff = u64::from_str_radix(&field("CapEff:"), 16).expect("CapEff is hex");
    // The build profile: `RUN echo ok > /f` works.
    assert_eq!(field("ROOTW="), "yes", "{out}");
    // mount needs CAP_SYS_ADMIN, which no BuildKit step gets either way.
    assert_eq!(field("MOUNT="), "no", "mount in a RUN step worked: {out}");
    // No raw read of the host's disk ({disk}), and no block device in /dev.
    assert_eq!(field("RAWREAD="), "0", "read the host disk {disk}: {out}");
    assert_eq!(field("BLOCKDEVS="), "0", "{out}");
    if lockdown_on() {
        assert_eq!(
            cap_eff, 0,
            "capabilities in a RUN step under lockdown: {out}"
        );
        assert_eq!(field("NoNewPrivs:"), "1", "{out}");
        assert_eq!(field("MKNOD="), "no", "mknod under lockdown: {out}");
    } else {
        // The door: Docker's default capabilities, CAP_MKNOD among them.
        assert_ne!(cap_eff, 0, "lockdown off: expected capabilities: {out}");
        assert_eq!(field("NoNewPrivs:"), "0", "{out}");
        assert_eq!(
            field("MKNOD="),
            "yes",
            "lockdown off: expected mknod: {out}"
        );
    }
}

/// `docker buildx build --network host --allow network.host` (dockerd
/// grants the entitlement by default): without lockdown the RUN step sees
/// the host's interfaces (the stack's own bridge); under lockdown vibe-shim
/// refuses a step without its own network namespace.
#[test]
#[ignore = "needs root, the test env and Docker >= 23: run tests/run.sh"]
fn buildkit_host_network_is_refused_under_lockdown() {
    let env = env();
    let bridge = env.var("VIBE_TEST_BRIDGE").to_string();
    let step = from_image("RUN cat /proc/net/dev; ip -o addr 2>/dev/null; echo PROBE=done");
    let out = buildkit_build(&step, "host");
    println!("{out}");
    // /proc/net/dev lines are `  <name>: counters`; `ip -o addr` `<n>: <name> inet`.
    let sees_host = run_output(&out).iter().any(|l| {
        l.trim_start().starts_with(&format!("{bridge}:")) || l.contains(&format!(" {bridge} "))
    });
    if lockdown_on() {
        assert!(
            !sees_host,
            "host network ({bridge}) seen under lockdown: {out}"
        );
        if !out.success() {
            assert!(
                out.stderr.contains("vibe-shim"),
                "refusal must name vibe-shim: {out}"
            );
        }
    } else {
        assert!(out.success(), "{out}");
        assert!(
            sees_host,
            "lockdown off: expected the host's {bridge}: {out}"
        );
    }
}
