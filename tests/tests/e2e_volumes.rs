//! End-to-end: engine volumes through the private test dockerd. Under
//! `tests/policies/volumes.toml` (`filesystem.volumes = "private"`, runtime
//! `vibe-shim-volumes`) a named volume, an anonymous `-v /data` and an
//! image's `VOLUME` work, each judged from inside (what a second run reads,
//! the mount's flags in mountinfo); a second container naming the first
//! one's volume is refused, and so is a local volume that binds `/etc`.
//! Under `tests/policies/default.toml` (volumes off) the refusal says
//! *volume*, names it and names the key. Run with `tests/run.sh` (needs
//! tests/env/up.sh).

use std::path::{Path, PathBuf};
use std::time::Duration;

use vibe_shim_tests::docker::{
    assert_nothing_left, assert_refused_by_shim, docker, docker_with, runtime, runtime_for,
    Container, Volume, IMAGE,
};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::{unique_name, Output};

const POLICY: &str = "volumes";
/// The claim ledger (shim/src/sys/volume_ledger.rs).
const LEDGER: &str = "/var/lib/vibe-shim/volumes";

/// The runtime with volumes on.
fn volumes_runtime() -> String {
    checked_runtime(POLICY)
}

/// The runtime of `tests/policies/<stem>.toml`, after checking that the
/// policy file it runs with names this dockerd's volume directory: a test
/// env on another data-root must say so loudly, not refuse every volume
/// for the wrong reason.
fn checked_runtime(stem: &str) -> String {
    checked_policy(stem).0
}

/// [`checked_runtime`]'s name and the policy file it runs with.
fn checked_policy(stem: &str) -> (String, String) {
    let name = runtime_for(stem);
    let root = docker(&["info", "--format", "{{.DockerRootDir}}"])
        .ok()
        .stdout
        .trim()
        .to_string();
    let runtimes = docker(&["info", "--format", "{{json .Runtimes}}"])
        .ok()
        .stdout;
    let runtimes: serde_json::Value = serde_json::from_str(runtimes.trim())
        .unwrap_or_else(|e| panic!("docker info runtimes are not JSON ({e}): {runtimes}"));
    let args = runtimes[&name]["runtimeArgs"]
        .as_array()
        .unwrap_or_else(|| panic!("runtime {name} is not registered: {runtimes}"));
    let config = args
        .iter()
        .skip_while(|a| a.as_str() != Some("--config"))
        .nth(1)
        .and_then(|a| a.as_str())
        .unwrap_or_else(|| panic!("runtime {name} has no --config: {runtimes}"));
    let text = std::fs::read_to_string(config).unwrap_or_else(|e| panic!("{config}: {e}"));
    let policy = vibe_policy::Policy::from_toml_str(&text, Path::new(config))
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = PathBuf::from(&root).join("volumes");
    assert!(
        policy.filesystem.volume_dirs.contains(&dir),
        "{config} (runtime {name}) does not list this dockerd's volume directory {}: \
         start the env with the default data-root, or point VIBE_TEST_POLICY_DIR at \
         policies whose {stem}.toml names it",
        dir.display()
    );
    (name, config.to_string())
}

/// A named volume, removed on drop together with its ledger claim.
struct TestVolume(Volume);

impl TestVolume {
    fn create(tag: &str, opts: &[&str]) -> TestVolume {
        let name = unique_name(tag);
        let mut args = vec!["volume", "create"];
        args.extend_from_slice(opts);
        args.push(&name);
        docker(&args).ok();
        TestVolume(Volume { name })
    }

    fn name(&self) -> &str {
        &self.0.name
    }
}

impl Drop for TestVolume {
    fn drop(&mut self) {
        // The claims of this name (the volume itself is removed after).
        remove_claims(&self.0.name);
    }
}

/// Removes this test's claim files (`<escaped dir>/<name>@...`).
fn remove_claims(name: &str) {
    let prefix = format!("{name}@");
    for dir in std::fs::read_dir(LEDGER).into_iter().flatten().flatten() {
        for claim in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if claim.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(claim.path());
            }
        }
    }
}

fn run(c: &Container, rt: &str, opts: &[&str], image: &str, script: &str) -> Output {
    let mut args = vec!["run", "--name", &c.name, "--runtime", rt];
    args.extend_from_slice(opts);
    args.extend_from_slice(&[image, "sh", "-c", script]);
    docker_with(&args, None, Duration::from_secs(120))
}

/// The mountinfo line of `dest` as the container sees it.
const MOUNT_OF_DATA: &str = "grep ' /data ' /proc/self/mountinfo";

/// A refusal that names vibe-shim, says volume and names the volume.
fn assert_volume_refusal(out: &Output, name: &str, words: &[&str]) {
    assert_refused_by_shim(out);
    assert!(
        out.stderr.contains(&format!("volumes: volume \"{name}\"")),
        "the refusal does not say volume and name {name}: {out}"
    );
    for word in words {
        assert!(out.stderr.contains(word), "refusal lacks {word:?}: {out}");
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn named_volume_keeps_its_data_across_stop_and_start() {
    let rt = volumes_runtime();
    let vol = TestVolume::create("named", &[]);
    let c = Container::new("named");
    let mount = format!("{}:/data", vol.name());
    // Each run shows what the last one left, then adds a line.
    let script = format!("cat /data/log 2>/dev/null; echo run >> /data/log; {MOUNT_OF_DATA}");
    let first = run(&c, &rt, &["-v", &mount], IMAGE, &script).ok();
    assert!(
        !first.stdout.contains("run\n"),
        "a fresh volume had data: {first}"
    );
    let line = first.stdout.lines().last().unwrap_or_default();
    assert!(
        line.contains("nosuid") && line.contains("nodev") && line.contains(" rw"),
        "the volume is not mounted rw,nosuid,nodev: {first}"
    );
    // `docker start` creates the container again (runc's delete ran at its
    // stop): the holder keeps its volume, and the data is still there.
    let again = docker_with(&["start", "-a", &c.name], None, Duration::from_secs(120)).ok();
    assert!(
        again.stdout.starts_with("run\n"),
        "the data is gone: {again}"
    );
    // A long-running one, stopped and started.
    let c2 = Container::new("namedlong");
    let vol2 = TestVolume::create("namedlong", &[]);
    let mount2 = format!("{}:/data", vol2.name());
    docker(&[
        "run",
        "-d",
        "--name",
        &c2.name,
        "--runtime",
        &rt,
        "-v",
        &mount2,
        IMAGE,
        "sh",
        "-c",
        "echo kept > /data/f; exec sleep 600",
    ])
    .ok();
    docker(&["stop", "-t", "1", &c2.name]).ok();
    docker(&["start", &c2.name]).ok();
    let read = docker(&["exec", &c2.name, "cat", "/data/f"]).ok();
    assert_eq!(read.stdout.trim(), "kept", "{read}");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn anonymous_volume_works() {
    let rt = volumes_runtime();
    let c = Container::new("anon");
    let out = run(
        &c,
        &rt,
        &["-v", "/data"],
        IMAGE,
        &format!("echo x > /data/f && cat /data/f && {MOUNT_OF_DATA}"),
    )
    .ok();
    assert!(out.stdout.starts_with("x\n"), "{out}");
    let anonymous = c.inspect("{{range .Mounts}}{{.Name}}{{end}}");
    let _ = docker(&["rm", "-f", &c.name]);
    let _ = docker(&["volume", "rm", "-f", &anonymous]);
    remove_claims(&anonymous);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn image_volume_works_and_is_refused_without_volumes() {
    let rt = volumes_runtime();
    let image = "vibe-busybox-volume:latest";
    if !docker(&["image", "inspect", image]).success() {
        let tar = env().var("VIBE_TEST_ROOTFS_TAR").to_string();
        docker(&["import", "--change", "VOLUME /data", &tar, image]).ok();
    }
    let c = Container::new("imgvol");
    let out = run(&c, &rt, &[], image, "echo y > /data/f && cat /data/f").ok();
    assert_eq!(out.stdout.trim(), "y", "{out}");
    let anonymous = c.inspect("{{range .Mounts}}{{.Name}}{{end}}");
    let _ = docker(&["rm", "-f", &c.name]);
    let _ = docker(&["volume", "rm", "-f", &anonymous]);
    remove_claims(&anonymous);
    // Under the default test policy, the image's volume is refused as one.
    let c = Container::new("imgvoloff");
    let out = run(&c, &runtime(), &["--rm"], image, "true");
    assert_refused_by_shim(&out);
    assert!(out.stderr.contains("volumes: volume \""), "{out}");
    assert!(out.stderr.contains("volumes = \"private\""), "{out}");
    assert_nothing_left(&c);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn second_container_is_refused_the_first_ones_volume() {
    let rt = volumes_runtime();
    let vol = TestVolume::create("shared", &[]);
    let mount = format!("{}:/data", vol.name());
    let first = Container::new("owner");
    run(&first, &rt, &["-v", &mount], IMAGE, "echo secret > /data/f").ok();
    let owner = first.id().expect("the first container's id");
    let second = Container::new("thief");
    let out = run(&second, &rt, &["--rm", "-v", &mount], IMAGE, "cat /data/f");
    assert_volume_refusal(&out, vol.name(), &[&owner, "filesystem.volumes"]);
    assert!(!out.stdout.contains("secret"), "{out}");
    assert_nothing_left(&second);
    // Read-only asks for the same volume: refused too.
    let ro = format!("{mount}:ro");
    let third = Container::new("thiefro");
    let out = run(&third, &rt, &["--rm", "-v", &ro], IMAGE, "cat /data/f");
    assert_volume_refusal(&out, vol.name(), &[&owner]);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn racing_starts_of_one_new_volume_have_one_winner() {
    let rt = volumes_runtime();
    let vol = TestVolume::create("race", &[]);
    let mount = format!("{}:/data", vol.name());
    let names: Vec<Container> = (0..4)
        .map(|i| Container::new(&format!("race{i}")))
        .collect();
    for c in &names {
        docker(&[
            "create",
            "--name",
            &c.name,
            "--runtime",
            &rt,
            "-v",
            &mount,
            IMAGE,
            "true",
        ])
        .ok();
    }
    let outs: Vec<Output> = std::thread::scope(|s| {
        let handles: Vec<_> = names
            .iter()
            .map(|c| {
                s.spawn(move || {
                    docker_with(&["start", "-a", &c.name], None, Duration::from_secs(120))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let won = outs.iter().filter(|o| o.success()).count();
    assert_eq!(won, 1, "{outs:#?}");
    for out in outs.iter().filter(|o| !o.success()) {
        assert_volume_refusal(out, vol.name(), &["belongs to container"]);
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn local_volume_that_binds_etc_is_refused_as_a_volume() {
    let rt = volumes_runtime();
    let vol = TestVolume::create(
        "voletc",
        &[
            "--driver",
            "local",
            "--opt",
            "type=none",
            "--opt",
            "o=bind",
            "--opt",
            "device=/etc",
        ],
    );
    let mount = format!("{}:/x", vol.name());
    let c = Container::new("voletc");
    let out = run(&c, &rt, &["--rm", "-v", &mount], IMAGE, "cat /x/hostname");
    assert_volume_refusal(&out, vol.name(), &["mount of its own"]);
    assert_nothing_left(&c);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn without_volumes_the_refusal_says_volume() {
    let off = checked_runtime("volumes-off");
    let vol = TestVolume::create("off", &[]);
    let mount = format!("{}:/data", vol.name());
    let c = Container::new("voloff");
    let out = run(&c, &off, &["--rm", "-v", &mount], IMAGE, "true");
    assert_volume_refusal(
        &out,
        vol.name(),
        &["allows no volumes", "volumes = \"private\""],
    );
    assert!(!out.stderr.contains("filesystem.bind"), "{out}");
    assert_nothing_left(&c);
    let c = Container::new("anonoff");
    let out = run(&c, &off, &["--rm", "-v", "/data"], IMAGE, "true");
    assert_refused_by_shim(&out);
    assert!(out.stderr.contains("volumes: volume \""), "{out}");
    assert!(out.stderr.contains("allows no volumes"), "{out}");
    assert_nothing_left(&c);
    // The default test policy (no volumes, the built-in volume_dirs) says
    // volume too: where the engine's volume directory is not among the
    // built-in ones (the host stack's private data-root) it names
    // volume_dirs; where it is (the sid tree's /var/lib/docker), that this
    // policy allows no volumes.
    let c = Container::new("unlisted");
    let out = run(&c, &runtime(), &["--rm", "-v", &mount], IMAGE, "true");
    let listed = out.stderr.contains("/var/lib/docker/volumes/");
    let words: &[&str] = match listed {
        true => &["allows no volumes", "volumes = \"private\""],
        false => &["filesystem.volume_dirs", "volumes = \"private\""],
    };
    assert_volume_refusal(&out, vol.name(), words);
    assert_nothing_left(&c);
}

/// The same rule under podman (root storage of the test env's own, so its
/// volumes live in `$STATE/podman/root/volumes`): a named volume keeps its
/// data across a restart, a second container is refused.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn podman_named_volume_is_private_too() {
    let env = env();
    let (_, config) = checked_policy(POLICY);
    let root = env.state.join("podman");
    let text = std::fs::read_to_string(&config).unwrap();
    let policy = vibe_policy::Policy::from_toml_str(&text, Path::new(&config)).unwrap();
    let dir = root.join("root/volumes");
    assert!(
        policy.filesystem.volume_dirs.contains(&dir),
        "{config} does not list podman's volume directory {}",
        dir.display()
    );
    let base: Vec<String> = vec![
        "--root".into(),
        root.join("root").display().to_string(),
        "--runroot".into(),
        root.join("run").display().to_string(),
        "--runtime".into(),
        env.shim_bin.display().to_string(),
        "--runtime-flag".into(),
        format!("config={config}"),
    ];
    let podman = |args: &[&str]| {
        let mut cmd = std::process::Command::new(env.tool("podman"));
        cmd.args(&base).args(args);
        vibe_shim_tests::harness::run_bounded(cmd, None, Duration::from_secs(120))
    };
    let image = "localhost/vibe-busybox:latest";
    if !podman(&["image", "exists", image]).success() {
        let tar = env.var("VIBE_TEST_ROOTFS_TAR").to_string();
        podman(&["import", &tar, image]).ok();
    }
    let vol = unique_name("pvol");
    let (first, second) = (unique_name("powner"), unique_name("pthief"));
    let mount = format!("{vol}:/data");
    // podman on this VM needs these ulimits (docs/dev/limits.md).
    let run = |name: &str| {
        podman(&[
            "run",
            "--name",
            name,
            "--network",
            "none",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            "-v",
            &mount,
            image,
            "sh",
            "-c",
            "cat /data/log 2>/dev/null; echo run >> /data/log",
        ])
    };
    let out = run(&first);
    let again = podman(&["start", "-a", &first]);
    let refused = run(&second);
    let _ = podman(&["rm", "-f", &first, &second]);
    let _ = podman(&["volume", "rm", "-f", &vol]);
    remove_claims(&vol);
    let out = out.ok();
    assert!(!out.stdout.contains("run"), "{out}");
    let again = again.ok();
    assert!(again.stdout.starts_with("run"), "the data is gone: {again}");
    assert!(!refused.success(), "{refused}");
    assert!(
        refused.stderr.contains(&format!(
            "vibe-shim: volumes: volume \"{vol}\" belongs to container"
        )),
        "{refused}"
    );
}
