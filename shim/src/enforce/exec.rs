//! `exec`: the exec'd process gets the same process rules as the init, and
//! keeps the container's AppArmor profile and SELinux label.
//!
//! runc hands an exec either `--process FILE` or a process it builds from
//! the bundle's *current* config.json plus flags (`getProcess` in runc's
//! exec.go). The bundle is not ours, so vibe-shim builds that process the
//! same way from the container's *judged* spec (kept in its root-only state
//! directory, see `state_dir`), judges it, and always hands runc
//! `--process /proc/self/fd/N` (a sealed memfd). The flags that build a
//! process, and the trailing command, are dropped from argv: runc ignores
//! them once `--process` is given, and nothing unjudged should reach it.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use serde_json::Value;
use vibe_policy::runc::process::{get_process, ExecFlags};
use vibe_policy::{Change, Denial, Refusal};

use super::{lossy, min_private_fd, refusal, Ctx, Outcome};
use crate::runc_argv::{ExecArgs, Item};
use crate::sys::memfd::sealed_memfd;
use crate::sys::state_dir;

/// runc exec flags that only say how to run the process, not what it is;
/// they are handed on as given (`--pid-file` judged and resolved, see
/// `host_paths`). Every other exec flag builds the process.
const KEPT_FLAGS: &[&str] = &[
    "console-socket",
    "pidfd-socket",
    "detach",
    "preserve-fds",
    "cgroup",
    "ignore-paused",
];

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("container was not created through vibe-shim (no judged spec at {0})")]
    NotOurs(String),
    #[error("cannot read the container's judged spec {path}: {source}")]
    JudgedRead {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot read the container's judged spec {path}: {source}")]
    JudgedJson {
        path: String,
        source: serde_json::Error,
    },
    #[error("cannot read the container's judged spec {path}: it has no process object")]
    JudgedNoProcess { path: String },
    #[error("not UTF-8; a process JSON cannot carry it")]
    NotUtf8,
    #[error("runc would fail: {0}")]
    Runc(String),
    #[error("only a sub-cgroup of the container's may be named (no '..')")]
    CgroupEscape,
}

pub fn prepare(ctx: &Ctx, args: &[OsString], parsed: &ExecArgs) -> Outcome {
    let container_id = lossy(&parsed.id);
    let result = judged_spec(ctx, &container_id)
        .and_then(|container| rewrite(ctx, args, parsed, &container_id, &container));
    Outcome {
        container_id,
        result,
        notice: None,
        assurance: None,
    }
}

/// The spec vibe-shim judged at create (with a `process`). Missing means the
/// container was not created through vibe-shim (or `--root` points at a
/// state directory someone else wrote): refused.
fn judged_spec(ctx: &Ctx, id: &str) -> Result<Value, Refusal> {
    let root = state_dir::runc_root(ctx.root.as_deref());
    let dir = state_dir::container_dir(&root, id).map_err(|e| {
        refusal(Denial::new(
            "exec",
            "container",
            id.to_string(),
            e.to_string(),
        ))
    })?;
    read_judged_spec(&dir.join("config.json")).map_err(|e| {
        refusal(Denial::new(
            "exec",
            "container",
            id.to_string(),
            e.to_string(),
        ))
    })
}

fn read_judged_spec(path: &Path) -> Result<Value, ExecError> {
    let shown = || path.display().to_string();
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ExecError::NotOurs(shown()))
        }
        Err(source) => {
            return Err(ExecError::JudgedRead {
                path: shown(),
                source,
            })
        }
    };
    let spec: Value = serde_json::from_slice(&bytes).map_err(|source| ExecError::JudgedJson {
        path: shown(),
        source,
    })?;
    match spec.get("process") {
        Some(Value::Object(_)) => Ok(spec),
        _ => Err(ExecError::JudgedNoProcess { path: shown() }),
    }
}

fn rewrite(
    ctx: &Ctx,
    args: &[OsString],
    parsed: &ExecArgs,
    id: &str,
    container: &Value,
) -> Result<(Vec<OsString>, Vec<Change>), Refusal> {
    check_cgroups(&parsed.cgroups)?;
    let pid_file = match &parsed.pid_file {
        Some(value) => {
            let root = state_dir::runc_root(ctx.root.as_deref());
            let bundle = state_dir::container_dir(&root, id)
                .ok()
                .and_then(|dir| super::create::recorded_engine_bundle(&dir));
            let dirs = &ctx.policy.runtime.pid_file_dirs;
            Some(super::host_paths::pid_file(value, bundle.as_deref(), dirs).map_err(refusal)?)
        }
        None => None,
    };
    let process = match &parsed.process {
        Some(path) => read_process_file(path)?,
        None => {
            let flags = exec_flags(parsed)?;
            get_process(&container["process"], &flags).map_err(|e| {
                refusal(Denial::new(
                    "exec",
                    "argv",
                    flags.args.join(" "),
                    e.to_string(),
                ))
            })?
        }
    };
    let rewrite = vibe_policy::engine::enforce_exec(&process, container, &ctx.policy, &ctx.host)?;
    let denial = |reason: String| refusal(Denial::new("exec", "--process", "", reason));
    let out = serde_json::to_vec(&rewrite.document)
        .map_err(|e| denial(format!("cannot serialise process: {e}")))?;
    let min_fd = min_private_fd(parsed.preserve_fds.as_ref());
    let path = sealed_memfd(&out, min_fd).map_err(|e| denial(e.to_string()))?;
    let mut out = runc_args(args, &parsed.items, &path, id);
    if let Some(pid_file) = pid_file {
        let at = out.len() - 2;
        out.splice(
            at..at,
            [OsString::from("--pid-file"), pid_file.into_os_string()],
        );
    }
    Ok((out, rewrite.changes))
}

/// `--process PATH`, the flags in [`KEPT_FLAGS`] as given, then `-- ID`
/// (`--` so even an id starting with `-` stays the id).
fn runc_args(args: &[OsString], items: &[Item], process: &Path, id: &str) -> Vec<OsString> {
    let mut out = vec![OsString::from("--process"), process.as_os_str().to_owned()];
    for item in items {
        if let Item::Flag {
            name,
            flag_index,
            value_index,
            ..
        } = item
        {
            if KEPT_FLAGS.contains(&name.as_str()) {
                out.push(args[*flag_index].clone());
                out.extend(value_index.map(|i| args[i].clone()));
            }
        }
    }
    out.push(OsString::from("--"));
    out.push(OsString::from(id));
    out
}

fn read_process_file(path: &OsStr) -> Result<Value, Refusal> {
    let denial = |reason: String| refusal(Denial::new("exec", "--process", lossy(path), reason));
    let bytes =
        std::fs::read(path).map_err(|e| denial(format!("cannot read process file: {e}")))?;
    vibe_policy::lang::gojson::process_from_slice(&bytes).map_err(|e| match e {
        vibe_policy::lang::gojson::Error::Key(key) => refusal(key),
        vibe_policy::lang::gojson::Error::Syntax(e) => {
            denial(format!("process file is not JSON: {e}"))
        }
    })
}

/// `--cgroup [CONTROLLERS:]PATH` (runc joins PATH to the container's
/// cgroup and checks only a string prefix): no `..`, so it stays below.
fn check_cgroups(cgroups: &[OsString]) -> Result<(), Refusal> {
    for value in cgroups {
        let denial =
            |e: ExecError| refusal(Denial::new("exec", "--cgroup", lossy(value), e.to_string()));
        let text = value.to_str().ok_or_else(|| denial(ExecError::NotUtf8))?;
        let parts: Vec<&str> = text.splitn(3, ':').collect();
        if parts.len() > 2 {
            return Err(denial(ExecError::Runc(format!(
                "invalid --cgroup argument: {text}"
            ))));
        }
        let path = parts.last().copied().unwrap_or_default();
        if path.split('/').any(|part| part == "..") {
            return Err(denial(ExecError::CgroupEscape));
        }
    }
    Ok(())
}

/// The flags `getProcess` reads, from exec's classified argv; a value
/// that is not UTF-8 is refused (a process JSON cannot carry it).
fn exec_flags(parsed: &ExecArgs) -> Result<ExecFlags, Refusal> {
    let text = |flag: &str, value: &OsStr| -> Result<String, Refusal> {
        value.to_str().map(str::to_string).ok_or_else(|| {
            refusal(Denial::new(
                "exec",
                format!("--{flag}"),
                lossy(value),
                ExecError::NotUtf8.to_string(),
            ))
        })
    };
    let last = |flag: &str, value: &Option<OsString>| -> Result<String, Refusal> {
        value
            .as_deref()
            .map_or(Ok(String::new()), |v| text(flag, v))
    };
    let all = |flag: &str, values: &[OsString]| -> Result<Vec<String>, Refusal> {
        values.iter().map(|v| text(flag, v)).collect()
    };
    let args = all("args", &parsed.command)?;
    Ok(ExecFlags {
        args,
        cwd: last("cwd", &parsed.cwd)?,
        apparmor: last("apparmor", &parsed.apparmor)?,
        process_label: last("process-label", &parsed.process_label)?,
        caps: all("cap", &parsed.caps)?,
        env: all("env", &parsed.env)?,
        tty: parsed.tty,
        no_new_privs: parsed.no_new_privs,
        user: last("user", &parsed.user)?,
        additional_gids: parsed.additional_gids.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runc_argv::classify_verb;
    use serde_json::json;
    use vibe_policy::Policy;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn flags(args: &[&str]) -> ExecFlags {
        let items = classify_verb("exec", &os(args)).unwrap();
        exec_flags(&ExecArgs::from_items(items)).unwrap()
    }

    /// A container's process as the default policy judged it (no
    /// capabilities, nnp, no secret): what these execs start from.
    fn judged() -> Value {
        let no_caps = [
            "bounding",
            "effective",
            "inheritable",
            "permitted",
            "ambient",
        ]
        .map(|set| (set.to_string(), json!([])));
        json!({
            "user": {"uid": 1000, "gid": 1000},
            "args": ["sleep", "1000"],
            "env": ["PATH=/usr/bin:/bin", "HOME=/home/u"],
            "cwd": "/work",
            "capabilities": serde_json::Map::from_iter(no_caps),
            "noNewPrivileges": true,
            "apparmorProfile": "docker-default"
        })
    }

    #[test]
    fn exec_flags_read_argv_as_runc_hands_it_to_get_process() {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let f = flags(&[
            "-e",
            "A=1",
            "-e",
            "B=2",
            "-t",
            "--cwd",
            "/tmp",
            "-u",
            "5:6",
            "-g",
            "7",
            "--cap",
            "CAP_CHOWN",
            "--no-new-privs=false",
            "ctr",
            "sh",
            "-c",
            "id",
        ]);
        assert_eq!(f.args, ["sh", "-c", "id"]);
        assert_eq!((f.cwd.as_str(), f.user.as_str()), ("/tmp", "5:6"));
        assert_eq!(f.caps, strings(&["CAP_CHOWN"]));
        assert_eq!(f.env, strings(&["A=1", "B=2"]));
        assert_eq!((f.tty, f.no_new_privs), (true, Some(false)));
        assert_eq!(f.additional_gids, [7]);
        assert!(f.apparmor.is_empty() && f.process_label.is_empty());
        // -e and --env are two forms of one flag: runc refuses that.
        assert!(classify_verb("exec", &os(&["-e", "A=1", "--env", "B", "c", "x"])).is_err());
        // `--tty=false` and an empty --cwd are what runc reads as unset.
        let f = flags(&["--tty=false", "--cwd=", "-u=-1:+2", "ctr", "x"]);
        assert_eq!(
            (f.tty, f.cwd.as_str(), f.user.as_str()),
            (false, "", "-1:+2")
        );
        assert_eq!(flags(&["-g", "-1", "c", "x"]).additional_gids, [-1]);
    }

    fn ctx(policy: Policy) -> Ctx {
        Ctx {
            config_path: "/etc/vibe-shim/config.toml".into(),
            policy,
            runtime: "/usr/sbin/runc".into(),
            root: None,
            systemd_cgroup: false,
            host: crate::sys::host::RealHost::new(),
        }
    }

    fn run(
        policy: Policy,
        args: &[&str],
        container: &Value,
    ) -> Result<(Vec<String>, Value), Refusal> {
        let args = os(args);
        let parsed = ExecArgs::from_items(classify_verb("exec", &args).unwrap());
        let id = parsed.id.to_str().unwrap().to_string();
        let spec = json!({ "process": container });
        let (out, _) = rewrite(&ctx(policy), &args, &parsed, &id, &spec)?;
        let out: Vec<String> = out.iter().map(|a| lossy(a)).collect();
        let process = serde_json::from_slice(&std::fs::read(&out[1]).unwrap()).unwrap();
        Ok((out, process))
    }

    #[test]
    fn flags_build_a_judged_process_file() {
        let state = tempfile::tempdir().unwrap();
        let state_dir = std::fs::canonicalize(state.path()).unwrap();
        let pid_arg = format!("--pid-file={}/e1.pid", state_dir.display());
        let mut policy = Policy::default();
        policy.runtime.pid_file_dirs = vec![state_dir.clone()];
        let (args, p) = run(
            policy,
            &[
                "--detach",
                "-e",
                "GITHUB_TOKEN=secret",
                "--cap",
                "CAP_SYS_ADMIN",
                "-u",
                "0",
                &pid_arg,
                "--no-new-privs=false",
                "ctr",
                "sh",
                "-c",
                "env",
            ],
            &judged(),
        )
        .unwrap();
        assert_eq!(args[0], "--process");
        assert!(args[1].starts_with("/proc/self/fd/"), "{args:?}");
        let pid_file = format!("{}/e1.pid", state_dir.display());
        assert_eq!(
            &args[2..],
            ["--detach", "--pid-file", pid_file.as_str(), "--", "ctr"]
        );
        // Outside the engines' state: refused.
        let err = run(
            Policy::default(),
            &["--pid-file", "/etc/shadow", "-d", "ctr", "true"],
            &judged(),
        )
        .unwrap_err();
        assert_eq!(err.denial.rule, "pid_file");
        assert_eq!(p["args"], json!(["sh", "-c", "env"]));
        assert!(!p.to_string().contains("secret"));
        assert_eq!(p["capabilities"]["bounding"], json!([]));
        assert_eq!(p["noNewPrivileges"], true);
        assert_eq!(p["apparmorProfile"], "docker-default");
    }

    #[test]
    fn lsm_cgroup_and_proc_fd_are_judged() {
        let refused = |args: &[&str]| run(Policy::default(), args, &judged()).unwrap_err();
        assert_eq!(
            refused(&["--apparmor", "unconfined", "c", "x"]).denial.rule,
            "lsm"
        );
        assert_eq!(
            refused(&["--process-label", "spc_t", "c", "x"]).denial.rule,
            "lsm"
        );
        assert_eq!(
            refused(&["--cgroup", "../../..", "c", "x"]).denial.field,
            "--cgroup"
        );
        assert_eq!(
            refused(&["--cgroup", "pids:a/../../b", "c", "x"])
                .denial
                .field,
            "--cgroup"
        );
        assert!(run(
            Policy::default(),
            &["--cgroup", "pids:sub", "c", "x"],
            &judged()
        )
        .is_ok());
        assert!(run(
            Policy::default(),
            &["--cwd", "/proc/self/fd/3", "c", "x"],
            &judged()
        )
        .is_err());
        assert!(run(Policy::default(), &["c", "/proc/1/fd/5"], &judged()).is_err());
        // The container's own profile may be named.
        assert!(run(
            Policy::default(),
            &["--apparmor=docker-default", "c", "x"],
            &judged()
        )
        .is_ok());
    }

    #[test]
    fn process_file_is_judged_and_ignored_flags_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("process.json");
        let original = json!({
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/bin", "GITHUB_TOKEN=secret"],
            "cwd": "/",
            "capabilities": {"bounding": ["CAP_SYS_ADMIN"], "effective": ["CAP_SYS_ADMIN"]},
            "apparmorProfile": "",
            "unknownField": 7
        });
        std::fs::write(&file, original.to_string()).unwrap();
        let path = file.to_str().unwrap();
        let (args, p) = run(
            Policy::default(),
            &["--process", path, "-e", "X=1", "--detach", "ctr", "ignored"],
            &judged(),
        )
        .unwrap();
        assert_eq!(&args[2..], ["--detach", "--", "ctr"]);
        assert!(!p.to_string().contains("secret"));
        assert_eq!(p["unknownField"], 7);
        assert_eq!(p["args"], json!(["sh"]));
        assert_eq!(p["apparmorProfile"], "docker-default");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            original.to_string()
        );
        let err = run(
            Policy::default(),
            &["-p", "/nonexistent/p.json", "ctr"],
            &judged(),
        )
        .unwrap_err();
        assert!(err.denial.value.contains("/nonexistent/p.json"));
    }

    #[test]
    fn missing_judged_spec_means_not_ours() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_judged_spec(&dir.path().join("config.json")).unwrap_err();
        assert!(matches!(err, ExecError::NotOurs(_)));
        assert!(err.to_string().contains("not created through vibe-shim"));
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"process":{"args":["x"]}}"#,
        )
        .unwrap();
        assert_eq!(
            read_judged_spec(&dir.path().join("config.json")).unwrap()["process"],
            json!({"args": ["x"]})
        );
    }
}
