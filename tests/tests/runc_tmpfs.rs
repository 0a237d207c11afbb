//! The policy's tmpfs modes through vibe-shim and the real runc. runc chmods a new tmpfs to the mode of the image directory it
//! covers, so without vibe-shim's createContainer hook an image whose /tmp
//! is 0755 gives a /tmp the policy's user cannot write. Judged from inside,
//! as the policy's user. Needs root and runc.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use vibe_shim_tests::bundle::{describe, Bundle};

const POLICY: &str = "[process]\nuser = \"1000:1000\"\n";

/// What the probe prints: `/tmp`'s mode and owner, whether the user could
/// write there, and HOME's mode and owner.
const PROBE: &str = "stat -L -c 'tmp %a %u %g' /tmp; \
     touch /tmp/x && echo 'tmp-write ok'; \
     stat -c 'home %a %u %g' \"$HOME\"; \
     touch \"$HOME/y\" && echo 'home-write ok'; \
     stat -c 'run %a %u %g' /run";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A started busybox container whose rootfs was shaped by `shape`; returns
/// the probe's output, run as the policy's user through `exec`.
fn probe(name: &str, shape: impl FnOnce(&Path)) -> String {
    let bundle = Bundle::busybox(name, &["sleep", "300"], POLICY);
    shape(&bundle.bundle_dir().join("rootfs"));
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(out.status.success(), "start: {}", describe(&out));
    let out = bundle.exec(&["sh", "-c", PROBE]);
    let stdout = text(&out.stdout);
    eprintln!("{name}: {stdout}");
    stdout
}

fn assert_usable(stdout: &str) {
    for line in [
        "tmp 1777 0 0",
        "tmp-write ok",
        "home 700 1000 1000",
        "home-write ok",
        "run 1777 0 0",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing {line:?} in:\n{stdout}"
        );
    }
}

#[test]
#[ignore = "needs root and runc"]
fn image_tmp_0755_becomes_1777() {
    assert_usable(&probe("tmp755", |rootfs| {
        chmod(&rootfs.join("tmp"), 0o755);
        std::fs::create_dir_all(rootfs.join("run")).unwrap();
        chmod(&rootfs.join("run"), 0o755);
        // An image HOME that exists: runc would copy its 0755 too.
        std::fs::create_dir_all(rootfs.join("home/user")).unwrap();
        chmod(&rootfs.join("home/user"), 0o755);
    }));
}

#[test]
#[ignore = "needs root and runc"]
fn image_tmp_0700_becomes_1777() {
    assert_usable(&probe("tmp700", |rootfs| {
        chmod(&rootfs.join("tmp"), 0o700);
    }));
}

#[test]
#[ignore = "needs root and runc"]
fn missing_image_tmp_is_1777() {
    assert_usable(&probe("tmpnone", |rootfs| {
        std::fs::remove_dir(rootfs.join("tmp")).unwrap();
    }));
}

#[test]
#[ignore = "needs root and runc"]
fn explicit_modes_from_the_policy() {
    let policy = format!(
        "{POLICY}[filesystem]\ntmpfs = [\"/tmp\", {{ path = \"/cache\", mode = \"0750\" }}]\n"
    );
    let bundle = Bundle::busybox("modes", &["sleep", "300"], &policy);
    std::fs::create_dir_all(bundle.bundle_dir().join("rootfs/cache")).unwrap();
    chmod(&bundle.bundle_dir().join("rootfs/cache"), 0o700);
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(out.status.success(), "start: {}", describe(&out));
    let out = bundle.exec(&["stat", "-c", "%a %u", "/tmp", "/cache"]);
    assert_eq!(text(&out.stdout), "1777 0\n750 0\n", "{}", describe(&out));
}

/// An image whose /tmp is a symlink: runc mounts the tmpfs where it points
/// (inside the rootfs), and the hook follows it the same way.
#[test]
#[ignore = "needs root and runc"]
fn symlinked_image_tmp_is_set_where_runc_mounted_it() {
    let stdout = probe("tmplink", |rootfs| {
        std::fs::remove_dir(rootfs.join("tmp")).unwrap();
        std::fs::create_dir_all(rootfs.join("var/tmp")).unwrap();
        chmod(&rootfs.join("var/tmp"), 0o755);
        std::os::unix::fs::symlink("/var/tmp", rootfs.join("tmp")).unwrap();
    });
    assert_usable(&stdout);
}

/// The hook itself, on a host tmpfs that is mounted twice (as a bind of a
/// host tmpfs would be): it refuses, naming vibe-shim, and changes nothing.
#[test]
#[ignore = "needs root and util-linux unshare"]
fn hook_refuses_a_tmpfs_mounted_elsewhere_too() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rootfs");
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    std::fs::create_dir_all(dir.path().join("host")).unwrap();
    let script = format!(
        "set -e; mount -t tmpfs -o mode=0755 vibe-host {host}; mount --bind {host} {tmp}; \
         if {shim} hook tmpfs-modes {marker} {root} 1777:0:0:/tmp </dev/null; then echo CHANGED; fi; \
         stat -c %a {host}",
        host = dir.path().join("host").display(),
        tmp = root.join("tmp").display(),
        shim = vibe_shim_tests::bundle::shim_bin().display(),
        marker = vibe_policy::TMPFS_MODES_HOOK_MARKER,
        root = root.display(),
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(text(&out.stdout), "755\n", "{}", describe(&out));
    assert!(
        stderr.starts_with("vibe-shim: tmpfs-modes: /tmp: ") && stderr.contains("mounted 2 times"),
        "{stderr}"
    );
}

/// `/` as the rootfs is refused before anything is opened: the hook's
/// paths would be the host's own (`/run`, `/dev/shm`).
#[test]
#[ignore = "needs root"]
fn hook_refuses_slash_as_the_rootfs() {
    let out = std::process::Command::new(vibe_shim_tests::bundle::shim_bin())
        .args([
            "hook",
            "tmpfs-modes",
            vibe_policy::TMPFS_MODES_HOOK_MARKER,
            "/",
        ])
        .arg("0777:1000:1000:/run")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("cannot be /"),
        "{}",
        describe(&out)
    );
}
