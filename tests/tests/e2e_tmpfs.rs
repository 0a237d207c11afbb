//! End-to-end: the policy's tmpfs modes through the private test dockerd.
//! The image's /tmp and /home/user are 0755, which runc
//! copies onto the tmpfs it mounts there; vibe-shim's createContainer hook
//! must leave /tmp 1777 root-owned and HOME 0700 owned by the user. Judged
//! from inside, as uid 1000. Run with `tests/run.sh` (needs tests/env/up.sh).

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use vibe_shim_tests::docker::{docker, docker_with, runtime, Container};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::{program, unique_name};

/// An image imported for this test, removed on drop.
struct TestImage {
    tag: String,
}

impl Drop for TestImage {
    fn drop(&mut self) {
        let _ = docker(&["rmi", "-f", &self.tag]);
    }
}

/// The busybox rootfs up.sh imports, with `/tmp`, `/run` and `/home/user`
/// at 0755.
fn image_with_tmp_0755() -> TestImage {
    let work = tempfile::tempdir().unwrap();
    let tar = work.path().join("rootfs.tar");
    let extra = work.path().join("extra");
    for dir in ["tmp", "run", "home/user"] {
        let path = extra.join(dir);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let tar_text = tar.display().to_string();
    let extra_text = extra.display().to_string();
    let owner = ["--numeric-owner", "--owner=0", "--group=0"];
    // up.sh's rootfs has /tmp at 1777: leave it and /run out, add 0755 ones.
    for args in [
        &[
            "-C",
            env().var("VIBE_TEST_ROOTFS"),
            "--exclude=./tmp",
            "--exclude=./run",
        ][..],
        &["-C", &extra_text][..],
    ] {
        let (verb, members) = if args.len() > 2 {
            ("-cf", &["."][..])
        } else {
            ("-rf", &["./tmp", "./run", "./home"][..])
        };
        let mut argv: Vec<&str> = owner.to_vec();
        argv.extend_from_slice(args);
        argv.extend([verb, &tar_text]);
        argv.extend_from_slice(members);
        let out = program("tar", &argv, Duration::from_secs(60));
        assert!(out.success(), "tar: {out:?}");
    }
    let tag = format!("{}:latest", unique_name("tmp0755"));
    let image = TestImage { tag };
    let out = docker_with(
        &["import", &tar.display().to_string(), &image.tag],
        None,
        Duration::from_secs(120),
    );
    assert!(out.success(), "docker import: {out:?}");
    image
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn tmp_is_1777_and_home_0700_for_a_non_root_user() {
    let image = image_with_tmp_0755();
    let c = Container::new("tmpmode");
    let rt = runtime();
    let probe = "stat -c 'tmp %a %u %g' /tmp; touch /tmp/x && echo 'tmp-write ok'; \
                 stat -c 'home %a %u %g' \"$HOME\"; touch \"$HOME/y\" && echo 'home-write ok'; \
                 echo \"id $(id -u):$(id -g)\"";
    let out = docker_with(
        &[
            "run",
            "--rm",
            "--name",
            &c.name,
            "--runtime",
            &rt,
            "--user",
            "1000:1000",
            &image.tag,
            "sh",
            "-c",
            probe,
        ],
        None,
        Duration::from_secs(120),
    );
    assert!(out.success(), "docker run: {out:?}");
    for line in [
        "id 1000:1000",
        "tmp 1777 0 0",
        "tmp-write ok",
        "home 700 1000 1000",
        "home-write ok",
    ] {
        assert!(
            out.stdout.lines().any(|l| l == line),
            "missing {line:?} in:\n{}",
            out.stdout
        );
    }
}
