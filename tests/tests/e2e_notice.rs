//! End-to-end: what vibe-shim changed, said from inside and on the host,
//! through the private test dockerd under `tests/policies/notice.toml`
//! (uid 1000 forced, pids 4096, memory 4g, GH_TOKEN not allowed). The
//! container reads its notice at /etc/vibe-shim/notice; `vibe-shim explain
//! <id>` prints the same text for the `docker run` container's id; the
//! audit line carries the same facts. And an image whose passwd puts uid
//! 1000 at /home/agent gets HOME=/home/agent, in the init and in an exec.
//! Run with `tests/run.sh` (needs tests/env/up.sh).

use std::time::Duration;

use vibe_shim_tests::docker::{docker, docker_with, runtime_for, Container, IMAGE};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::{program, unique_name, Output};

const SECRET: &str = "ghp_e2eNoticeSecretValue123";

fn notice_runtime() -> String {
    runtime_for("notice")
}

/// A detached container of `image` under the notice policy, up until removed.
fn start(c: &Container, flags: &[&str], image: &str) {
    let rt = notice_runtime();
    let mut args = vec!["run", "-d", "--name", &c.name, "--runtime", &rt];
    args.extend_from_slice(flags);
    args.extend([
        image,
        "sh",
        "-c",
        "trap 'exit 0' TERM; while :; do sleep 1; done",
    ]);
    let out = docker_with(&args, None, Duration::from_secs(120));
    assert!(out.success(), "docker run: {out:?}");
}

fn exec(c: &Container, script: &str) -> Output {
    let out = docker_with(
        &["exec", &c.name, "sh", "-c", script],
        None,
        Duration::from_secs(60),
    );
    assert!(out.success(), "docker exec {script}: {out:?}");
    out
}

/// `vibe-shim explain <id>` on the engine's host (the sid stack's tree:
/// where its vibe-shim keeps the state).
fn explain(id: &str) -> Output {
    let env = env();
    let shim = env.shim_bin.display().to_string();
    let full = env.in_engine_ns(&[&shim, "explain", id]);
    program(full[0], &full[1..], Duration::from_secs(30))
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn the_notice_names_dropped_env_clamps_and_user_inside_and_on_the_host() {
    let c = Container::new("notice");
    let token = format!("GH_TOKEN={SECRET}");
    start(
        &c,
        &["-e", &token, "--pids-limit", "999999", "-m", "64g"],
        IMAGE,
    );
    let inside = exec(&c, "cat /etc/vibe-shim/notice").stdout;
    eprintln!("{inside}");
    for want in [
        "env dropped (names only; not in [process] env_allow): GH_TOKEN",
        "pids 999999 -> 4096",
        "memory 64g -> 4g",
        "user: 0:0 -> 1000:1000 (forced by [process] user)",
        "limits: pids 4096, memory 4g",
        "network: none",
        "notice.toml",
    ] {
        assert!(inside.contains(want), "missing {want:?} in:\n{inside}");
    }
    assert!(!inside.contains(SECRET), "{inside}");
    assert!(inside.lines().count() <= 14, "{inside}");
    // Read-only, even for the container's root-less user.
    let forged = docker(&[
        "exec",
        &c.name,
        "sh",
        "-c",
        "echo x > /etc/vibe-shim/notice",
    ]);
    assert!(!forged.success(), "the notice is writable: {forged:?}");

    // The host: the docker run id (full, and a unique prefix) shows the same.
    let id = c.id().expect("container id");
    assert_eq!(id.len(), 64, "{id}");
    let out = explain(&id);
    assert!(out.success(), "explain: {out:?}");
    assert_eq!(out.stdout, inside);
    assert!(inside.contains(&id), "{inside}");
    let out = explain(&id[..12]);
    assert!(out.success(), "explain by prefix: {out:?}");
    assert_eq!(out.stdout, inside);

    // The audit line: the same facts, as JSON, without the value.
    let audit = std::fs::read_to_string(env().var("VIBE_TEST_AUDIT")).expect("audit log");
    let line = audit
        .lines()
        .rev()
        .find(|l| l.contains(&id) && l.contains("\"verb\":\"create\""))
        .expect("the create's audit line");
    assert!(!line.contains(SECRET), "{line}");
    let record: serde_json::Value = serde_json::from_str(line).unwrap();
    let notice = &record["notice"];
    assert_eq!(notice["env_dropped"], serde_json::json!(["GH_TOKEN"]));
    assert_eq!(notice["user"]["given"], "1000:1000");
    let clamps = notice["clamped"].as_array().expect("clamps");
    assert!(
        clamps
            .iter()
            .any(|c| c["limit"] == "pids" && c["asked"] == "999999" && c["given"] == "4096"),
        "{notice}"
    );

    // Gone with the container: one line, exit 1.
    drop(c);
    let out = explain(&id);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.starts_with("vibe-shim: explain: no container"),
        "{out:?}"
    );
}

/// An image imported for this test, removed on drop.
struct TestImage {
    tag: String,
}

impl Drop for TestImage {
    fn drop(&mut self) {
        let _ = docker(&["rmi", "-f", &self.tag]);
    }
}

/// The test busybox rootfs with an /etc/passwd that puts uid 1000 at
/// /home/agent (which the image does not even have).
fn image_with_agent_passwd() -> TestImage {
    let work = tempfile::tempdir().unwrap();
    let tar = work.path().join("rootfs.tar");
    let extra = work.path().join("extra");
    std::fs::create_dir_all(extra.join("etc")).unwrap();
    std::fs::write(
        extra.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:Agent:/home/agent:/bin/sh\n",
    )
    .unwrap();
    let tar_text = tar.display().to_string();
    let owner = ["--numeric-owner", "--owner=0", "--group=0"];
    let rootfs = env().var("VIBE_TEST_ROOTFS");
    let mut create: Vec<&str> = owner.to_vec();
    create.extend(["-C", rootfs, "-cf", &tar_text, "."]);
    let out = program("tar", &create, Duration::from_secs(60));
    assert!(out.success(), "tar: {out:?}");
    let extra_text = extra.display().to_string();
    let mut append: Vec<&str> = owner.to_vec();
    append.extend(["-C", &extra_text, "-rf", &tar_text, "./etc/passwd"]);
    let out = program("tar", &append, Duration::from_secs(60));
    assert!(out.success(), "tar: {out:?}");
    let image = TestImage {
        tag: format!("{}:latest", unique_name("agentpasswd")),
    };
    let out = docker_with(
        &["import", &tar_text, &image.tag],
        None,
        Duration::from_secs(120),
    );
    assert!(out.success(), "docker import: {out:?}");
    image
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn the_images_passwd_home_is_home_in_the_init_and_in_an_exec() {
    let image = image_with_agent_passwd();
    let c = Container::new("agenthome");
    start(&c, &[], &image.tag);
    let init = exec(&c, "tr '\\0' '\\n' < /proc/1/environ | grep '^HOME='").stdout;
    assert_eq!(init, "HOME=/home/agent\n");
    let out = exec(
        &c,
        "echo \"HOME=$HOME\"; id -u; touch \"$HOME/.agent-login\" && echo home-write-ok; \
         stat -c '%u %a' \"$HOME\"",
    )
    .stdout;
    for line in ["HOME=/home/agent", "1000", "home-write-ok", "1000 700"] {
        assert!(
            out.lines().any(|l| l == line),
            "missing {line:?} in:\n{out}"
        );
    }
    let notice = exec(&c, "cat /etc/vibe-shim/notice").stdout;
    assert!(
        notice.contains("HOME: /home/agent (from the image's /etc/passwd for uid 1000)"),
        "{notice}"
    );
}
