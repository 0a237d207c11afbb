//! The docker CLI against the private test dockerd, containers and volumes
//! that clean up after themselves, and the host evidence a refusal must
//! leave (nothing running, no runc state); `ctr` for the stack's containerd.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::env::env;
use crate::harness::{program, run_bounded, unique_name, Output};

/// The image `up.sh` imports: busybox only, no PATH in its config.
pub const IMAGE: &str = "vibe-busybox:latest";
/// [`IMAGE`] as containerd names it after [`ctr_import_image`].
pub const CTR_IMAGE: &str = "docker.io/library/vibe-busybox:latest";
/// The runtime registered with `tests/policies/default.toml`: `vibe-shim`.
/// `VIBE_TEST_RUNTIME` overrides it only to try the probes against another
/// runtime by hand (tests/run.sh never sets it).
pub fn runtime() -> String {
    std::env::var("VIBE_TEST_RUNTIME").unwrap_or_else(|_| "vibe-shim".to_string())
}
/// The runtime registered with `tests/policies/<stem>.toml`:
/// `vibe-shim-<stem>`, or `$VIBE_TEST_RUNTIME-<stem>` when that is set.
pub fn runtime_for(stem: &str) -> String {
    format!("{}-{stem}", runtime())
}
/// Default bound for one docker client call.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// The test dockerd's version as (major, minor), from `docker version`.
pub fn server_version() -> (u32, u32) {
    static VERSION: OnceLock<(u32, u32)> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = docker(&["version", "--format", "{{.Server.Version}}"]).ok();
        let text = out.stdout.trim().to_string();
        let mut parts = text.split(|c: char| !c.is_ascii_digit());
        let mut next = || parts.next().and_then(|p| p.parse::<u32>().ok());
        match (next(), next()) {
            (Some(major), Some(minor)) => (major, minor),
            _ => panic!("cannot read the test dockerd's version from {text:?}"),
        }
    })
}

/// Fails the test unless the test dockerd is at least `major`: `what` needs
/// it. The runners leave such a test out on older stacks by its #[ignore]
/// reason ("Docker >= N", tests/env/filter.sh), so reaching this panic
/// means it was run by hand against the wrong stack, never a silent pass.
pub fn require_docker(major: u32, what: &str) {
    let (have, minor) = server_version();
    assert!(
        have >= major,
        "{what}: this test needs Docker >= {major}, the test dockerd is {have}.{minor}; \
         tests/run.sh leaves it out on this stack (tests/env/filter.sh)"
    );
}

/// `docker -H <test daemon> args...`, bounded by [`TIMEOUT`].
pub fn docker<S: AsRef<str>>(args: &[S]) -> Output {
    docker_with(args, None, TIMEOUT)
}

/// `docker` with stdin and an explicit bound.
pub fn docker_with<S: AsRef<str>>(args: &[S], input: Option<&[u8]>, timeout: Duration) -> Output {
    let env = env();
    let mut cmd = Command::new("docker");
    cmd.env_remove("DOCKER_CONTEXT")
        .env_remove("DOCKER_CONFIG")
        .arg("-H")
        .arg(&env.docker_host)
        .args(args.iter().map(|a| a.as_ref()));
    run_bounded(cmd, input, timeout)
}

/// Owns a container name; `docker rm -f` on drop, even when the test panics.
#[derive(Debug)]
pub struct Container {
    pub name: String,
}

impl Container {
    pub fn new(tag: &str) -> Container {
        Container {
            name: unique_name(tag),
        }
    }

    /// The full container id, if Docker knows the name.
    pub fn id(&self) -> Option<String> {
        let out = docker(&[
            "ps",
            "-a",
            "-q",
            "--no-trunc",
            "--filter",
            &format!("name=^/?{}$", self.name),
        ]);
        out.stdout
            .lines()
            .next()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// `docker inspect -f <format>`.
    pub fn inspect(&self, format: &str) -> String {
        docker(&["inspect", "-f", format, &self.name])
            .ok()
            .stdout
            .trim()
            .to_string()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker_with(&["rm", "-f", &self.name], None, Duration::from_secs(30));
    }
}

/// A named volume removed on drop.
#[derive(Debug)]
pub struct Volume {
    pub name: String,
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = docker_with(
            &["volume", "rm", "-f", &self.name],
            None,
            Duration::from_secs(30),
        );
    }
}

/// A refusal must reach the docker client and name vibe-shim.
pub fn assert_refused_by_shim(out: &Output) {
    assert!(!out.timed_out, "timed out instead of refusing: {out}");
    assert!(out.code != Some(0), "expected non-zero exit: {out}");
    assert!(
        out.stderr.contains("vibe-shim"),
        "refusal does not name vibe-shim on docker's stderr: {out}"
    );
}

/// The runc state roots dockerd's containerd uses
/// (`<exec-root>/runtime-*/moby`), found on disk.
pub fn runc_roots() -> Vec<PathBuf> {
    let env = env();
    let mut roots = Vec::new();
    let Ok(entries) = std::fs::read_dir(&env.state) else {
        return roots;
    };
    for top in entries.flatten() {
        let Ok(inner) = std::fs::read_dir(top.path()) else {
            continue;
        };
        for e in inner.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let moby = e.path().join("moby");
            if name.starts_with("runtime-") && moby.is_dir() {
                roots.push(moby);
            }
        }
    }
    roots
}

/// Every container id `runc list` shows under the given roots.
pub fn runc_list(roots: &[PathBuf]) -> String {
    let mut all = String::new();
    for root in roots {
        let root = root.display().to_string();
        let out = program(
            &env().tool("runc"),
            &["--root", root.as_str(), "list", "-q"],
            Duration::from_secs(30),
        )
        .ok();
        all.push_str(&out.stdout);
    }
    all
}

/// After a refusal: nothing running for this name, and runc lists no id.
pub fn assert_nothing_left(c: &Container) {
    let running = docker(&[
        "ps",
        "-a",
        "-q",
        "--filter",
        "status=running",
        "--filter",
        &format!("name=^/?{}$", c.name),
    ])
    .ok();
    assert!(
        running.stdout.trim().is_empty(),
        "refused container {} still running: {running}",
        c.name
    );
    if let Some(id) = c.id() {
        let listed = runc_list(&runc_roots());
        assert!(
            !listed.lines().any(|l| l.trim() == id),
            "runc still lists refused container {id}"
        );
    }
}

/// The stack's own `ctr` (the sid tree's runs in that tree's mounts) on the
/// test containerd, in namespace `ns`.
pub fn ctr<S: AsRef<str>>(ns: &str, args: &[S], timeout: Duration) -> Output {
    let env = env();
    let mut full: Vec<String> = vec![
        "--address".into(),
        env.containerd_address.clone(),
        "-n".into(),
        ns.into(),
    ];
    full.extend(args.iter().map(|a| a.as_ref().to_string()));
    program(&env.tool("ctr"), &full, timeout)
}

/// Puts [`IMAGE`] into containerd namespace `ns` as [`CTR_IMAGE`]
/// (`docker save`, then `ctr images import`).
pub fn ctr_import_image(ns: &str) {
    let dir = tempfile::tempdir().unwrap();
    let tar = dir.path().join("busybox.tar");
    let tar_s = tar.to_str().unwrap();
    docker_with(
        &["save", "-o", tar_s, IMAGE],
        None,
        Duration::from_secs(120),
    )
    .ok();
    ctr(ns, &["images", "import", tar_s], Duration::from_secs(120)).ok();
}
