//! `[userns] mode = "private"` against the host's real runc 1.1.5, which
//! has user namespaces but cannot id-map a bind mount (runc >= 1.2 can):
//! the create is refused naming what is missing, and nothing is left
//! allocated; only `unsupported = "run-without"` runs the container, and
//! then without a user namespace. Judged from inside. Needs root and runc.

use std::process::Command;

use vibe_shim_tests::bundle::{describe, runc_bin, Bundle};

const PRIVATE: &str = "[process]\npids_limit = 64\nuser = \"1000:1000\"\n\
    [userns]\nmode = \"private\"\nrange_start = 1879048192\nrange_size = 655360\n";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// This suite pins the refusal of a runc without id-mapped mounts: on a
/// runc that has them it must fail loudly, never pass.
fn require_runc_without_idmap() {
    let out = Command::new(runc_bin())
        .arg("features")
        .output()
        .expect("runc features");
    let features = text(&out.stdout);
    assert!(
        !features.contains("\"idmap\""),
        "{} reports id-mapped mounts: this suite pins the refusal of runc < 1.2 \
         (the sid stack's e2e_userns covers runc >= 1.2)",
        runc_bin().display()
    );
}

fn record_of(bundle: &Bundle) -> std::path::PathBuf {
    let escaped = vibe_hooks::egress::records::escape_root(&bundle.root_dir());
    std::path::Path::new("/run/vibe-shim/userns")
        .join(escaped)
        .join(&bundle.id)
}

#[test]
#[ignore = "needs root and runc: run tests/run.sh"]
fn private_mode_on_runc_without_idmapped_mounts_is_refused_naming_what_is_missing() {
    require_runc_without_idmap();
    let bundle = Bundle::busybox("userns-refused", &["cat", "/proc/self/uid_map"], PRIVATE);
    let out = bundle.create();
    assert!(!out.status.success(), "must be refused: {}", describe(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("vibe-shim: userns: "), "{stderr}");
    for needle in [
        "cannot give the container a private user namespace",
        "cannot id-map bind mounts",
        "runc >= 1.2",
        "unsupported = \"run-without\"",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    let last = bundle.last_log_line().expect("a --log line");
    assert!(last["msg"]
        .as_str()
        .unwrap()
        .starts_with("vibe-shim: userns: "));
    // runc never ran, and no block is held for the container.
    assert!(bundle.runc_list().is_empty());
    assert!(
        !record_of(&bundle).exists(),
        "{}",
        record_of(&bundle).display()
    );
}

#[test]
#[ignore = "needs root and runc: run tests/run.sh"]
fn run_without_is_the_hosts_namespace_only_when_the_policy_says_so() {
    require_runc_without_idmap();
    let policy = format!("{PRIVATE}unsupported = \"run-without\"\n");
    let bundle = Bundle::busybox("userns-without", &["cat", "/proc/self/uid_map"], &policy);
    let out = bundle.shim(
        &[
            "run",
            "--bundle",
            &bundle.bundle_dir().to_string_lossy(),
            &bundle.id,
        ],
        b"",
    );
    assert!(out.status.success(), "{}", describe(&out));
    // The initial user namespace: every id is the host's.
    let map: Vec<String> = text(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(map, ["0", "0", "4294967295"], "{}", describe(&out));
    assert!(!record_of(&bundle).exists());
}
