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

use serde_json::{json, Value};
use vibe_policy::{Change, Denial, Refusal};

use super::{lossy, min_private_fd, refusal, Ctx, Outcome};
use crate::args::{
    flag_bool, flag_value, flag_values, parse_go_int64, positionals, scan_verb, Item, EXEC_FLAGS,
};
use crate::private_file::sealed_memfd;
use crate::state_dir;

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

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ExecError {
    #[error("container was not created through vibe-shim (no judged spec at {0})")]
    NotOurs(String),
    #[error("cannot read the container's judged spec {path}: {reason}")]
    Judged { path: String, reason: String },
    #[error("not UTF-8; a process JSON cannot carry it")]
    NotUtf8,
    #[error("runc would fail: {0}")]
    Runc(String),
    #[error("only a sub-cgroup of the container's may be named (no '..')")]
    CgroupEscape,
}

pub fn prepare(ctx: &Ctx, args: &[OsString]) -> Outcome {
    let items = scan_verb(args, EXEC_FLAGS, true);
    let container_id = positionals(&items)
        .first()
        .map(|v| lossy(v))
        .unwrap_or_default();
    let result = judged_spec(ctx, &container_id)
        .and_then(|container| rewrite(ctx, args, &items, &container_id, &container));
    Outcome {
        container_id,
        result,
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
    let judged = |reason: String| ExecError::Judged {
        path: path.display().to_string(),
        reason,
    };
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ExecError::NotOurs(path.display().to_string()))
        }
        Err(e) => return Err(judged(e.to_string())),
    };
    let spec: Value = serde_json::from_slice(&bytes).map_err(|e| judged(e.to_string()))?;
    match spec.get("process") {
        Some(Value::Object(_)) => Ok(spec),
        _ => Err(judged("it has no process object".into())),
    }
}

fn rewrite(
    ctx: &Ctx,
    args: &[OsString],
    items: &[Item],
    id: &str,
    container: &Value,
) -> Result<(Vec<OsString>, Vec<Change>), Refusal> {
    check_cgroups(items)?;
    let pid_file = match flag_value(items, "pid-file").filter(|v| !v.is_empty()) {
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
    let process = match flag_value(items, "process").filter(|p| !p.is_empty()) {
        Some(path) => read_process_file(path)?,
        None => {
            let flags = ExecFlags::from_items(items)?;
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
    let min_fd = min_private_fd(flag_value(items, "preserve-fds"));
    let path = sealed_memfd(&out, min_fd).map_err(|e| denial(e.to_string()))?;
    let mut out = runc_args(args, items, &path, id);
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
fn check_cgroups(items: &[Item]) -> Result<(), Refusal> {
    for value in flag_values(items, "cgroup") {
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

/// The flags `getProcess` reads, as urfave/cli hands them to it.
#[derive(Debug, Default, PartialEq)]
pub struct ExecFlags {
    pub args: Vec<String>,
    pub cwd: String,
    pub apparmor: String,
    pub process_label: String,
    pub caps: Vec<String>,
    pub env: Vec<String>,
    pub tty: bool,
    /// `IsSet("no-new-privs")`: only then does it override the spec.
    pub no_new_privs: Option<bool>,
    pub user: String,
    pub additional_gids: Vec<i64>,
}

impl ExecFlags {
    fn from_items(items: &[Item]) -> Result<ExecFlags, Refusal> {
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
        let last = |flag: &str| -> Result<String, Refusal> {
            flag_value(items, flag).map_or(Ok(String::new()), |v| text(flag, v))
        };
        let all = |flag: &str| -> Result<Vec<String>, Refusal> {
            flag_values(items, flag)
                .into_iter()
                .map(|v| text(flag, v))
                .collect()
        };
        let args = positionals(items)
            .into_iter()
            .skip(1)
            .map(|v| text("args", v))
            .collect::<Result<_, _>>()?;
        Ok(ExecFlags {
            args,
            cwd: last("cwd")?,
            apparmor: last("apparmor")?,
            process_label: last("process-label")?,
            caps: all("cap")?,
            env: all("env")?,
            tty: flag_bool(items, "tty").unwrap_or(false),
            no_new_privs: flag_bool(items, "no-new-privs"),
            user: last("user")?,
            // Classified already: every value parses (strconv.ParseInt base 10).
            additional_gids: flag_values(items, "additional-gids")
                .into_iter()
                .filter_map(|v| parse_go_int64(v))
                .collect(),
        })
    }
}

/// Go's `strconv.Atoi` (64-bit) then `uint32(...)`: out-of-range ids wrap,
/// so `4294967296` is uid 0, exactly as runc computes it.
fn go_atoi_u32(text: &str, what: &str) -> Result<u32, ExecError> {
    let n: i64 = text
        .parse()
        .map_err(|_| ExecError::Runc(format!("bad {what}: {text:?}")))?;
    Ok(n as u32)
}

/// An array member of a JSON object, created if absent or null (Go's
/// `append` on a nil slice).
fn array_at<'a>(object: &'a mut Value, key: &str) -> Result<&'a mut Vec<Value>, ExecError> {
    let map = object
        .as_object_mut()
        .ok_or_else(|| ExecError::Runc(format!("{key}: parent is not an object")))?;
    let slot = map.entry(key.to_string()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = json!([]);
    }
    slot.as_array_mut()
        .ok_or_else(|| ExecError::Runc(format!("{key} is not an array")))
}

/// runc's `getProcess` without `--process` (exec.go, runc 1.1-1.3): the
/// container's process with the flags applied. Where versions differ,
/// 1.2+ is followed: `--cap` reaches ambient only if the spec has an
/// inheritable set (1.1 always added it, and then failed to raise it).
pub fn get_process(container: &Value, flags: &ExecFlags) -> Result<Value, ExecError> {
    let mut p = container.clone();
    if !p.is_object() {
        return Err(ExecError::Runc("the spec has no process".into()));
    }
    if flags.args.is_empty() {
        return Err(ExecError::Runc("exec args cannot be empty".into()));
    }
    p["args"] = json!(flags.args);
    if !flags.cwd.is_empty() {
        p["cwd"] = json!(flags.cwd);
    }
    if !flags.apparmor.is_empty() {
        p["apparmorProfile"] = json!(flags.apparmor);
    }
    if !flags.process_label.is_empty() {
        p["selinuxLabel"] = json!(flags.process_label);
    }
    if !flags.caps.is_empty() {
        let caps = match p.get_mut("capabilities") {
            Some(caps @ Value::Object(_)) => caps,
            // Go dereferences a nil *LinuxCapabilities here and panics.
            _ => {
                return Err(ExecError::Runc(
                    "--cap on a process without capabilities".into(),
                ))
            }
        };
        let ambient = caps.get("inheritable").is_some_and(|v| !v.is_null());
        for cap in &flags.caps {
            for set in ["bounding", "effective", "permitted"] {
                array_at(caps, set)?.push(json!(cap));
            }
            if ambient {
                array_at(caps, "ambient")?.push(json!(cap));
            }
        }
    }
    array_at(&mut p, "env")?.extend(flags.env.iter().map(|e| json!(e)));
    p["terminal"] = json!(flags.tty);
    if let Some(nnp) = flags.no_new_privs {
        p["noNewPrivileges"] = json!(nnp);
    }
    if !flags.user.is_empty() || !flags.additional_gids.is_empty() {
        if p.get("user").is_none_or(Value::is_null) {
            p["user"] = json!({});
        }
        if !p["user"].is_object() {
            return Err(ExecError::Runc("user is not an object".into()));
        }
    }
    if !flags.user.is_empty() {
        let (uid, gid) = match flags.user.split_once(':') {
            Some((uid, gid)) => (uid, Some(gid)),
            None => (flags.user.as_str(), None),
        };
        if let Some(gid) = gid {
            p["user"]["gid"] = json!(go_atoi_u32(gid, "gid")?);
        }
        p["user"]["uid"] = json!(go_atoi_u32(uid, "uid")?);
    }
    for &gid in &flags.additional_gids {
        if gid < 0 {
            return Err(ExecError::Runc(format!(
                "additional-gids must be a positive number {gid}"
            )));
        }
        array_at(&mut p["user"], "additionalGids")?.push(json!(gid as u32));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::classify_verb;
    use vibe_policy::Policy;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn flags(args: &[&str]) -> ExecFlags {
        let items = classify_verb("exec", &os(args)).unwrap();
        ExecFlags::from_items(&items).unwrap()
    }

    /// The process of a Docker 20.10 container as judged by the default
    /// policy (no capabilities, nnp, no secret).
    fn judged() -> Value {
        json!({
            "user": {"uid": 1000, "gid": 1000},
            "args": ["sleep", "1000"],
            "env": ["PATH=/usr/bin:/bin", "HOME=/home/u"],
            "cwd": "/work",
            "capabilities": {
                "bounding": [], "effective": [], "inheritable": [],
                "permitted": [], "ambient": []
            },
            "noNewPrivileges": true,
            "apparmorProfile": "docker-default",
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "oomScoreAdj": 0
        })
    }

    #[test]
    fn get_process_applies_flags_like_runc() {
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
        assert!(f.args == ["sh", "-c", "id"]);
        let p = get_process(&judged(), &f);
        // -e and --env are two forms of one flag: runc refuses that.
        assert!(classify_verb("exec", &os(&["-e", "A=1", "--env", "B", "c", "x"])).is_err());
        let p = p.unwrap();
        assert_eq!(p["args"], json!(["sh", "-c", "id"]));
        assert_eq!(
            p["env"],
            json!(["PATH=/usr/bin:/bin", "HOME=/home/u", "A=1", "B=2"])
        );
        assert_eq!(p["cwd"], "/tmp");
        assert_eq!(p["terminal"], true);
        assert_eq!(
            p["user"],
            json!({"uid": 5, "gid": 6, "additionalGids": [7]})
        );
        assert_eq!(p["noNewPrivileges"], false);
        for set in ["bounding", "effective", "permitted", "ambient"] {
            assert_eq!(p["capabilities"][set], json!(["CAP_CHOWN"]), "{set}");
        }
        assert_eq!(p["capabilities"]["inheritable"], json!([]));
        // Untouched: everything the flags don't name.
        assert_eq!(p["rlimits"], judged()["rlimits"]);
        assert_eq!(p["apparmorProfile"], "docker-default");
    }

    #[test]
    fn get_process_defaults_and_go_integer_quirks() {
        let p = get_process(&judged(), &flags(&["ctr", "true"])).unwrap();
        let mut want = judged();
        want["args"] = json!(["true"]);
        want["terminal"] = json!(false);
        assert_eq!(p, want);
        // Atoi then uint32: 4294967296 wraps to uid 0, as in runc.
        let p = get_process(&judged(), &flags(&["-u", "4294967296", "ctr", "id"])).unwrap();
        assert_eq!(p["user"]["uid"], 0);
        assert_eq!(p["user"]["gid"], 1000);
        let p = get_process(&judged(), &flags(&["-u=-1:+2", "ctr", "id"])).unwrap();
        assert_eq!(p["user"], json!({"uid": u32::MAX, "gid": 2}));
        for bad in [
            &["-u", "0:", "c", "x"][..],
            &["-u", "root", "c", "x"],
            &["-g", "-1", "c", "x"],
        ] {
            assert!(get_process(&judged(), &flags(bad)).is_err(), "{bad:?}");
        }
        // `--tty=false` and an empty --cwd change nothing.
        let p = get_process(&judged(), &flags(&["--tty=false", "--cwd=", "ctr", "x"])).unwrap();
        assert_eq!(
            (p["terminal"].clone(), p["cwd"].clone()),
            (json!(false), json!("/work"))
        );
    }

    #[test]
    fn cap_without_inheritable_skips_ambient_and_nil_caps_fail() {
        let mut container = judged();
        container["capabilities"] = json!({"bounding": ["CAP_KILL"]});
        let p = get_process(&container, &flags(&["-c", "CAP_CHOWN", "ctr", "x"])).unwrap();
        assert_eq!(
            p["capabilities"]["bounding"],
            json!(["CAP_KILL", "CAP_CHOWN"])
        );
        assert_eq!(p["capabilities"]["permitted"], json!(["CAP_CHOWN"]));
        assert!(p["capabilities"].get("ambient").is_none());
        container.as_object_mut().unwrap().remove("capabilities");
        assert!(get_process(&container, &flags(&["-c", "CAP_CHOWN", "ctr", "x"])).is_err());
    }

    fn ctx(policy: Policy) -> Ctx {
        Ctx {
            config_path: "/etc/vibe-shim/config.toml".into(),
            policy,
            runtime: "/usr/sbin/runc".into(),
            root: None,
            systemd_cgroup: false,
            host: crate::host::RealHost::new(),
        }
    }

    fn run(
        policy: Policy,
        args: &[&str],
        container: &Value,
    ) -> Result<(Vec<String>, Value), Refusal> {
        let args = os(args);
        let items = classify_verb("exec", &args).unwrap();
        let id = positionals(&items)[0].to_str().unwrap().to_string();
        let spec = json!({ "process": container });
        let (out, _) = rewrite(&ctx(policy), &args, &items, &id, &spec)?;
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
