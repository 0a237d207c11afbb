//! vibe-shim's own command line, as a user meets it: its own help and verbs,
//! their usage and exit codes, and runc's help left for runc's verbs. Runs
//! the built binary; needs no root and no engine.

use std::process::{Command, Output};

use vibe_shim_tests::bundle::shim_bin;

fn shim(args: &[&str]) -> Output {
    Command::new(shim_bin())
        .args(args)
        .output()
        .expect("run vibe-shim")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `vibe-shim --help` (and `-h`, `help`, no argument) is vibe-shim's own:
/// its verbs, and the line that runc's verbs pass through.
#[test]
fn the_top_level_help_is_vibe_shims_own() {
    for args in [&["--help"][..], &["-h"], &["help"], &[]] {
        let o = shim(args);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {out}");
        assert!(out.starts_with("vibe-shim:"), "{args:?}: {out}");
        for verb in [
            "policy",
            "install",
            "uninstall",
            "egress",
            "authz",
            "doctor",
            "explain",
            "probe",
            "hook",
        ] {
            assert!(
                out.contains(&format!("\n  {verb} ")),
                "{args:?}: {verb}: {out}"
            );
        }
        assert!(out.contains("pass through to\nthe real runc"), "{out}");
        assert!(!out.contains("Open Container Initiative runtime"), "{out}");
    }
}

/// runc's verbs keep runc's help.
#[test]
fn runc_verbs_keep_runcs_help() {
    let runc = ["/usr/sbin/runc", "/usr/bin/runc"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(_) = runc else {
        panic!("no runc installed: this test needs runc's own help to compare");
    };
    let o = shim(&["create", "--help"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("runc create"), "{out}");
    let o = shim(&["help", "create"]);
    assert!(stdout(&o).contains("runc create"), "{}", stdout(&o));
}

/// Every own verb answers `--help` on stdout with exit 0, and a bad option
/// with its usage code on stderr.
#[test]
fn every_own_verb_has_help_and_usage_codes() {
    for verb in [
        "policy",
        "install",
        "uninstall",
        "egress",
        "authz",
        "doctor",
        "explain",
        "probe",
        "hook",
    ] {
        let o = shim(&[verb, "--help"]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{verb} --help: {out}");
        assert!(
            out.contains(&format!("Usage: vibe-shim {verb}")),
            "{verb}: {out}"
        );
        let o = shim(&[verb, "--bogus-option"]);
        assert_ne!(o.status.code(), Some(0), "{verb} --bogus-option");
        assert!(!o.stderr.is_empty(), "{verb}: usage error on stderr");
    }
}

/// `explain` of an id vibe-shim holds no state for: one line naming
/// vibe-shim and the id, exit 1; a malformed id is refused the same way.
#[test]
fn explain_of_an_unknown_container_is_one_line_and_exit_1() {
    for id in [
        "0000000000000000000000000000000000000000000000000000000000000000",
        "../etc",
    ] {
        let o = shim(&["explain", id]);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "{id}: {err}");
        assert!(err.starts_with("vibe-shim: explain: "), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(o.stdout.is_empty());
    }
    let o = shim(&["explain"]);
    assert_eq!(o.status.code(), Some(2));
}

fn policy_file(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), text).unwrap();
    f
}

/// `policy check`: a short summary, warnings first; `--json` the whole
/// policy; `--strict` exits 1 on a warning.
#[test]
fn policy_check_summarises_and_strict_fails_on_a_warning() {
    let f = policy_file("[process]\nuser = \"61000:61000\"\nenv_allow = [\"LC_*\"]\n");
    let path = f.path().to_str().unwrap();
    let o = shim(&["policy", "check", "--config", path]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.starts_with("warning: "), "{out}");
    assert!(out.lines().count() < 25, "{out}");
    let o = shim(&["policy", "check", "--strict", "--config", path]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let o = shim(&["policy", "check", "--json", "--config", path]);
    let out = stdout(&o);
    assert!(
        out.starts_with("# warning: ") && out.contains("\"pids_limit\""),
        "{out}"
    );
    let clean = policy_file("[process]\nuser = \"61000:61000\"\n");
    let o = shim(&[
        "policy",
        "check",
        "--strict",
        "--config",
        clean.path().to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

/// `install docker` writes this binary's own path by default, and refuses
/// a `--path` that does not exist (dockerd would fail every container).
#[test]
fn install_docker_writes_its_own_path_and_refuses_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let dj = dir.path().join("daemon.json");
    let state = dir.path().join("state");
    let (dj, state) = (dj.to_str().unwrap(), state.to_str().unwrap());
    let o = shim(&[
        "install",
        "docker",
        "--daemon-json",
        dj,
        "--state-dir",
        state,
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(dj).unwrap()).unwrap();
    let me = std::fs::canonicalize(shim_bin()).unwrap();
    assert_eq!(v["runtimes"]["vibe-shim"]["path"], me.to_str().unwrap());
    let other = dir.path().join("other.json");
    let o = shim(&[
        "install",
        "docker",
        "--daemon-json",
        other.to_str().unwrap(),
        "--state-dir",
        state,
        "--path",
        "/usr/bin/vibe-shim-not-installed",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("does not exist"), "{err}");
    assert!(!other.exists());
}
