//! HOME from the image's passwd and the notice, through vibe-shim and the
//! real runc. The policy forces uid 1000; the image's /etc/passwd says uid
//! 1000 is at /home/agent. Judged from inside (the init's environ, a write
//! in HOME, the notice file) and by the host's `vibe-shim explain`.
//! Needs root and runc.

use std::path::Path;

use serde_json::{json, Value};
use vibe_shim_tests::bundle::{describe, shim_bin, Bundle};

const POLICY: &str = "[process]\nuser = \"1000:1000\"\n";
const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:Agent:/home/agent:/bin/sh\n";

/// What the probe prints: the init's HOME, whether HOME is writable and
/// what is mounted there, then the notice, and whether it can be written.
const PROBE: &str = "tr '\\0' '\\n' < /proc/1/environ | grep '^HOME='; \
     touch \"$HOME/x\" && echo home-write-ok; \
     stat -c 'home-stat %u %a' \"$HOME\"; \
     echo BEGIN-NOTICE; cat /etc/vibe-shim/notice; echo END-NOTICE; \
     (echo forged > /etc/vibe-shim/notice) 2>/dev/null && echo notice-writable";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Starts the bundle's container (after `shape` edits its rootfs and
/// `spec`), runs the probe as an exec, and returns its output.
fn probe(bundle: &Bundle, shape: impl FnOnce(&Path, &mut Value)) -> String {
    let mut spec = bundle.spec();
    shape(&bundle.bundle_dir().join("rootfs"), &mut spec);
    bundle.write_spec(&spec);
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(out.status.success(), "start: {}", describe(&out));
    let out = bundle.exec(&["sh", "-c", PROBE]);
    let stdout = text(&out.stdout);
    eprintln!("{}: {stdout}", bundle.id);
    stdout
}

fn notice_in(stdout: &str) -> String {
    let start = stdout.find("BEGIN-NOTICE\n").expect("notice begins") + "BEGIN-NOTICE\n".len();
    let end = stdout.find("END-NOTICE").expect("notice ends");
    stdout[start..end].to_string()
}

fn has_line(stdout: &str, line: &str) -> bool {
    stdout.lines().any(|l| l == line)
}

/// `vibe-shim explain <id>` on the host: its stdout.
fn explain(id: &str) -> String {
    let out = std::process::Command::new(shim_bin())
        .args(["explain", id])
        .output()
        .expect("run vibe-shim explain");
    assert!(out.status.success(), "explain: {}", text(&out.stderr));
    text(&out.stdout)
}

fn set_env(spec: &mut Value, env: &[&str]) {
    spec["process"]["env"] = json!(env);
}

#[test]
#[ignore = "needs root and runc"]
fn the_images_passwd_home_is_home_writable_and_named_in_the_notice() {
    // Docker 20.10: no HOME in the spec; Docker 28: HOME for the client's root.
    for (name, env) in [
        ("home-nohome", &["PATH=/bin"][..]),
        ("home-roothome", &["PATH=/bin", "HOME=/root"][..]),
    ] {
        let bundle = Bundle::busybox(name, &["sleep", "300"], POLICY);
        let out = probe(&bundle, |rootfs, spec| {
            std::fs::write(rootfs.join("etc/passwd"), PASSWD).unwrap();
            set_env(spec, env);
        });
        for line in ["HOME=/home/agent", "home-write-ok", "home-stat 1000 700"] {
            assert!(has_line(&out, line), "{name}: missing {line:?} in:\n{out}");
        }
        let notice = notice_in(&out);
        assert!(
            notice.contains("HOME: /home/agent (from the image's /etc/passwd for uid 1000)"),
            "{name}: {notice}"
        );
        assert!(notice.contains("user: 0:0 -> 1000:1000"), "{notice}");
        assert!(!out.contains("notice-writable"), "{out}");
        // The host's explain prints the same text, by id and by prefix.
        assert_eq!(explain(&bundle.id), notice);
        assert_eq!(explain(&bundle.id[..bundle.id.len() - 2]), notice);
        // The audit line carries the same facts.
        let audit = bundle.audit_lines();
        let create = audit.iter().find(|l| l["verb"] == "create").expect("audit");
        assert_eq!(create["notice"]["home"]["dir"], "/home/agent");
        assert_eq!(create["notice"]["home"]["source"], "passwd");
    }
}

/// The door: a client's image whose /etc/passwd is a symlink to a host
/// file (absolute, or climbing with `..`) must not make vibe-shim, which
/// reads it as root before runc, take a home from the host's file.
#[test]
#[ignore = "needs root and runc"]
fn a_symlinked_passwd_pointing_out_of_the_rootfs_is_not_followed() {
    let host = tempfile::tempdir().unwrap();
    let host_passwd = host.path().join("passwd");
    std::fs::write(
        &host_passwd,
        "agent:x:1000:1000::/home/host-secret:/bin/sh\n",
    )
    .unwrap();
    let climb = format!("../../../../../../../..{}", host_passwd.display());
    for (name, target) in [
        ("home-abs-link", host_passwd.display().to_string()),
        ("home-climb-link", climb),
    ] {
        let bundle = Bundle::busybox(name, &["sleep", "300"], POLICY);
        let out = probe(&bundle, |rootfs, spec| {
            std::os::unix::fs::symlink(&target, rootfs.join("etc/passwd")).unwrap();
            set_env(spec, &["PATH=/bin"]);
        });
        assert!(!out.contains("host-secret"), "{name}: {out}");
        for line in ["HOME=/home/user", "home-write-ok"] {
            assert!(has_line(&out, line), "{name}: missing {line:?} in:\n{out}");
        }
        assert!(
            notice_in(&out).contains("HOME: /home/user (no usable entry"),
            "{out}"
        );
    }
}

/// The persistent home: a bind the policy allows read-write, at the HOME
/// the image's passwd names, is HOME itself: no tmpfs covers it, and what
/// the agent writes there is on the host after the container is gone.
#[test]
#[ignore = "needs root and runc"]
fn an_allowed_bind_at_home_is_a_persistent_home() {
    let work = tempfile::Builder::new()
        .prefix("vibe-home-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let homes = work.path().join("homes");
    let home = homes.join("a1");
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(1000), Some(1000)).unwrap();
    let policy = format!(
        "{POLICY}\n[[filesystem.bind]]\nsource = \"{}\"\nmode = \"rw\"\n",
        homes.display()
    );
    let bundle = Bundle::busybox("home-persist", &["sleep", "300"], &policy);
    let out = probe(&bundle, |rootfs, spec| {
        std::fs::write(rootfs.join("etc/passwd"), PASSWD).unwrap();
        set_env(spec, &["PATH=/bin"]);
        spec["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/home/agent", "type": "bind",
            "source": home.to_str().unwrap(), "options": ["rbind", "rw"]
        }));
    });
    assert!(has_line(&out, "HOME=/home/agent"), "{out}");
    assert!(has_line(&out, "home-write-ok"), "{out}");
    assert!(
        notice_in(&out).contains("a bind mount: kept after exit"),
        "{out}"
    );
    assert!(home.join("x").exists(), "the write reached the host's home");
}
