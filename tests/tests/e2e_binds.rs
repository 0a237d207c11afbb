//! End-to-end: the bind-source race through the private test dockerd. A host
//! process (standing in for a container that can write in the worktree
//! root) flips `<worktree>/x` between a real directory and a symlink to `/`
//! while `docker run --mount type=bind,src=<worktree>/x,dst=/x` starts.
//! Judged from inside: a marker file in the host's `/` must never show up at
//! `/x`, and every refusal is vibe-shim's. Run with `tests/run.sh` (needs
//! tests/env/up.sh).

use std::time::Duration;

use vibe_shim_tests::docker::{docker_with, runtime, Container, IMAGE};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::unique_name;
use vibe_shim_tests::race::{Flipper, HostMarker};

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn docker_bind_source_flipped_to_root_never_escapes() {
    let marker = HostMarker::new("docker", "HOST-SECRET\n");
    let dir = env()
        .policy("default")
        .worktree_root()
        .join(unique_name("flip"));
    let real = dir.join("x");
    let decoy = dir.join("y");
    std::fs::create_dir_all(&real).unwrap();
    std::fs::write(real.join("inside"), "").unwrap();
    std::os::unix::fs::symlink("/", &decoy).unwrap();
    let runs: usize = std::env::var("VIBE_BINDS_DOCKER_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let mount = format!("type=bind,src={},dst=/x", real.display());
    let run = || {
        let c = Container::new("flip");
        let rt = runtime();
        let args = [
            "run",
            "--rm",
            "--name",
            &c.name,
            "--runtime",
            &rt,
            // A writable bind needs a regular id (host_ids).
            "-u",
            "1000:1000",
            "--mount",
            &mount,
            IMAGE,
            "ls",
            "/x",
        ];
        docker_with(&args, None, Duration::from_secs(120))
    };
    // Unflipped, the bind works: the race runs below judge a mount that runs.
    let control = run();
    assert!(
        control.success() && control.stdout.contains("inside"),
        "the unflipped bind did not run: {control}"
    );
    let (mut escaped, mut inside, mut refused) = (0, 0, 0);
    let flipper = Flipper::start(&real, &decoy);
    for _ in 0..runs {
        let out = run();
        if !out.success() {
            // vibe-shim's checks see the flip (a source resolving to /, a
            // symlink on the way, a mount that differs at start), most runs
            // on Docker 28: each refusal must be one of them.
            assert!(
                out.stderr.contains("vibe-shim: "),
                "refused by other than vibe-shim: {out}"
            );
            refused += 1;
        } else if out.stdout.contains(&marker.name()) {
            escaped += 1;
        } else if out.stdout.contains("inside") {
            inside += 1;
        }
    }
    drop(flipper);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("docker flip: {runs} runs: escaped {escaped}, real {inside}, refused {refused}");
    assert_eq!(escaped, 0, "host / reached the container");
}
