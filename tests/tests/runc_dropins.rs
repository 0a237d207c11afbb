//! Policy drop-ins (`<stem>.d/*.toml`) through the built vibe-shim and the
//! real runc: a drop-in's values reach the container, `policy check` says
//! which file set them, and a drop-in others can write fails the create.
//! Needs root and runc.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use vibe_shim_tests::bundle::{describe, Bundle};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The bundle's policy file is `policy.toml`, so its drop-ins are `policy.d/`.
fn dropin(bundle: &Bundle, name: &str, body: &str, mode: u32) -> PathBuf {
    let dir = bundle.dir.path().join("policy.d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[test]
#[ignore = "needs root and runc"]
fn a_drop_in_reaches_the_container_and_policy_check_names_it() {
    let bundle = Bundle::busybox(
        "dropin",
        &["sleep", "300"],
        "[process]\nuser = \"1000:1000\"\n",
    );
    dropin(
        &bundle,
        "10-cache.toml",
        "[filesystem]\ntmpfs = [{ path = \"/cache\", mode = \"0750\" }]\n",
        0o644,
    );
    dropin(&bundle, ".ignored.toml", "bogus = 1\n", 0o644);
    let out = bundle.shim(&["policy", "check"], b"");
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = text(&out.stdout);
    assert!(
        stdout.lines().any(|l| l.trim()
            == "filesystem.tmpfs += [{ mode = \"0750\", path = \"/cache\" }]  (policy.d/10-cache.toml)"),
        "{stdout}"
    );
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(out.status.success(), "start: {}", describe(&out));
    // The main file's default /tmp stays; the drop-in's /cache is added.
    let out = bundle.exec(&["stat", "-c", "%n %a %u", "/tmp", "/cache"]);
    assert_eq!(
        text(&out.stdout),
        "/tmp 1777 0\n/cache 750 0\n",
        "{}",
        describe(&out)
    );
}

#[test]
#[ignore = "needs root and runc"]
fn a_group_writable_drop_in_fails_the_create() {
    let bundle = Bundle::busybox("dropinw", &["true"], "");
    dropin(
        &bundle,
        "10-net.toml",
        "[network]\nmode = \"open\"\n",
        0o664,
    );
    let out = bundle.create();
    assert!(
        !out.status.success(),
        "create must fail: {}",
        describe(&out)
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("vibe-shim: ") && stderr.contains("policy.d/10-net.toml"),
        "{stderr}"
    );
    assert!(bundle.runc_list().is_empty(), "a container was left");
}
