//! Refuses a `cwd` or executable that points into a `/proc` fd directory or
//! magic link. Those resolve to host files that a leaked runc fd can reach
//! (CVE-2024-21626 class; this machine's runc 1.1.5 is vulnerable).

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::{clean_path, str_field};

const RULE: &str = "proc_fd";

pub fn apply(process: &mut Value, cx: &RuleContext, _rec: &mut Record) -> Result<(), Denial> {
    let cwd = str_field(process, "cwd");
    if let Some(what) = proc_escape(&clean_path(cwd)) {
        return Err(refusal(format!("{}/cwd", cx.process_field), cwd, what));
    }
    let arg0 = process
        .get("args")
        .and_then(Value::as_array)
        .and_then(|args| args.first())
        .and_then(Value::as_str)
        .unwrap_or("");
    // runc uses an args[0] containing a slash as a path, relative to cwd.
    if arg0.contains('/') {
        let path = if arg0.starts_with('/') {
            arg0.to_string()
        } else {
            format!("{cwd}/{arg0}")
        };
        if let Some(what) = proc_escape(&clean_path(&path)) {
            return Err(refusal(format!("{}/args/0", cx.process_field), arg0, what));
        }
    }
    Ok(())
}

fn refusal(field: String, value: &str, what: &str) -> Denial {
    Denial::new(
        RULE,
        field,
        value,
        format!(
            "{what} can reach host files through a leaked file descriptor \
             (CVE-2024-21626 class; runc 1.1.5 is vulnerable)"
        ),
    )
}

/// Describes why a cleaned absolute path is dangerous, or `None`.
/// Matches `/proc/<x>/{fd,cwd,root,exe,map_files}` and the same under
/// `/proc/<x>/task/<y>/` (`<x>` includes `self` and `thread-self`).
fn proc_escape(clean: &str) -> Option<&'static str> {
    let parts: Vec<&str> = clean.split('/').filter(|p| !p.is_empty()).collect();
    let link = match parts.as_slice() {
        ["proc", _, "task", _, link, ..] => link,
        ["proc", _, link, ..] => link,
        _ => return None,
    };
    match *link {
        "fd" | "map_files" => Some("a path under a /proc/<pid>/fd directory"),
        "cwd" | "root" | "exe" => Some("a /proc/<pid> magic link"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::host::FakeHost;
    use serde_json::json;

    fn run(process: Value, field: &str) -> Result<(), Denial> {
        let (policy, host) = (Policy::default(), FakeHost::new());
        let cx = RuleContext {
            policy: &policy,
            host: &host,
            create: None,
            process_field: field,
        };
        apply(&mut process.clone(), &cx, &mut Record::default())
    }

    #[test]
    fn docker_fixtures_pass() {
        let spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-init.json"
        ))
        .unwrap();
        assert!(run(spec["process"].clone(), "/process").is_ok());
        let exec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/process-exec-privileged-root-secret.json"
        ))
        .unwrap();
        assert!(run(exec, "").is_ok());
    }

    #[test]
    fn refuses_fd_cwd() {
        for cwd in [
            "/proc/self/fd/7",
            "/proc/1/fd/8",
            "/proc/thread-self/fd/3",
            "/proc/self/task/1/fd/4",
            "//proc/./self/fd/",
            "/tmp/../proc/self/fd/7",
            "/proc/self/cwd",
            "/proc/1/root/etc",
        ] {
            let err = run(json!({"cwd": cwd, "args": ["sh"]}), "/process").unwrap_err();
            assert_eq!(err.field, "/process/cwd");
            assert_eq!(err.value, cwd);
            assert!(err.reason.contains("CVE-2024-21626"), "{err}");
        }
    }

    #[test]
    fn refuses_fd_executable() {
        let err = run(json!({"cwd": "/", "args": ["/proc/self/fd/7"]}), "").unwrap_err();
        assert_eq!(
            (err.field.as_str(), err.value.as_str()),
            ("/args/0", "/proc/self/fd/7")
        );
        let err = run(json!({"cwd": "/proc", "args": ["self/fd/7"]}), "").unwrap_err();
        assert_eq!(err.field, "/args/0");
    }

    #[test]
    fn allows_ordinary_proc_paths() {
        for cwd in ["/", "/proc", "/proc/self", "/proc/1/status", "/work/fd"] {
            assert!(
                run(json!({"cwd": cwd, "args": ["sh"]}), "").is_ok(),
                "{cwd}"
            );
        }
        assert!(run(json!({"cwd": "/", "args": ["fd"]}), "").is_ok());
    }
}
