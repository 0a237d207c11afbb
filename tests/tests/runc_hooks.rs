//! Client hooks through vibe-shim and the real runc: a hook the policy does
//! not allow never runs (judged by host evidence: a file it would create),
//! and the refusal names the stage and path in the `--log` line. Needs root
//! and runc.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use vibe_shim_tests::bundle::{describe, Bundle};

fn with_hook(bundle: &Bundle, stage: &str, hook: Value) {
    let mut spec = bundle.spec();
    spec["hooks"] = json!({ stage: [hook] });
    bundle.write_spec(&spec);
}

fn log_message(bundle: &Bundle) -> String {
    let line = bundle.last_log_line().expect("a --log line");
    line["msg"].as_str().unwrap_or_default().to_string()
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn a_client_shell_hook_never_runs_on_the_host() {
    for stage in ["prestart", "createRuntime", "poststart"] {
        let bundle = Bundle::busybox(&format!("sh-{stage}"), &["true"], "");
        let evidence = bundle.dir.path().join("hook-ran");
        let command = format!("touch {}", evidence.display());
        with_hook(
            &bundle,
            stage,
            json!({"path": "/bin/sh", "args": ["sh", "-c", command]}),
        );
        let out = bundle.create();
        let started =
            out.status.success() && bundle.shim(&["start", &bundle.id], b"").status.success();
        assert!(
            !evidence.exists(),
            "{stage}: the client's /bin/sh hook ran on the host as root"
        );
        assert!(
            !started,
            "{stage}: create must be refused: {}",
            describe(&out)
        );
        let msg = log_message(&bundle);
        assert!(msg.contains("vibe-shim"), "{msg}");
        assert!(msg.contains(&format!("{stage} hook /bin/sh")), "{msg}");
        assert!(bundle.log_is_all_json());
        assert!(bundle.runc_list().is_empty(), "nothing was created");
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn a_setkey_hook_from_a_pid_that_is_not_the_engine_is_refused() {
    let bundle = Bundle::busybox("setkey", &["true"], "");
    // Any process the client can name: here a sleep, not dockerd.
    let mut sleeper = Command::new("sleep")
        .arg("60")
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn sleep");
    with_hook(
        &bundle,
        "prestart",
        json!({
            "path": format!("/proc/{}/exe", sleeper.id()),
            "args": ["libnetwork-setkey", "-exec-root=/run/docker", bundle.id, "0123456789ab"]
        }),
    );
    let out = bundle.create();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(!out.status.success(), "{}", describe(&out));
    let msg = log_message(&bundle);
    assert!(
        msg.contains(&format!("prestart hook /proc/{}/exe", sleeper.id())),
        "{msg}"
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn an_allowed_hook_runs_from_the_judged_binary() {
    let policy = r#"
        [[hooks.allow]]
        stages = ["prestart"]
        path = "/usr/bin/touch"
        args = ["touch", "{path}"]
    "#;
    let bundle = Bundle::busybox("allowed", &["true"], policy);
    let evidence = bundle.dir.path().join("allowed-ran");
    // /bin/touch names the same file (merged /usr) or a copy of it; either
    // way vibe-shim hands runc the admin's path.
    let named = if Path::new("/bin").is_symlink() {
        "/bin/touch"
    } else {
        "/usr/bin/touch"
    };
    with_hook(
        &bundle,
        "prestart",
        json!({"path": named, "args": ["touch", evidence.to_str().unwrap()]}),
    );
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    assert!(evidence.exists(), "the allowed hook ran");
    let audit = bundle.audit_lines();
    let changes = audit.last().expect("an audit line")["changes"].to_string();
    if named != "/usr/bin/touch" {
        assert!(changes.contains("/hooks/prestart/0/path"), "{changes}");
    }
    // A shape the entry does not allow.
    let bundle = Bundle::busybox("allowed-bad", &["true"], policy);
    let evidence = bundle.dir.path().join("bad-ran");
    with_hook(
        &bundle,
        "prestart",
        json!({"path": "/usr/bin/touch", "args": ["touch", "-r", "/etc/passwd", evidence.to_str().unwrap()]}),
    );
    let out = bundle.create();
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(!evidence.exists());
    assert!(log_message(&bundle).contains("arguments"));
}
