//! The process runc builds for `runc exec` without `--process`: runc's
//! `getProcess` (exec.go, runc 1.1-1.3) over the container's judged process
//! and the exec flags, so that what is judged is what runc would run.

use serde_json::{json, Value};

/// Why runc would refuse to build the process (or would crash building it).
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("runc would fail: {0}")]
pub struct ProcessError(String);

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

/// Go's `strconv.Atoi` (64-bit) then `uint32(...)`: out-of-range ids wrap,
/// so `4294967296` is uid 0, exactly as runc computes it.
fn go_atoi_u32(text: &str, what: &str) -> Result<u32, ProcessError> {
    let n: i64 = text
        .parse()
        .map_err(|_| ProcessError(format!("bad {what}: {text:?}")))?;
    Ok(n as u32)
}

/// An array member of a JSON object, created if absent or null (Go's
/// `append` on a nil slice).
fn array_at<'a>(object: &'a mut Value, key: &str) -> Result<&'a mut Vec<Value>, ProcessError> {
    let map = object
        .as_object_mut()
        .ok_or_else(|| ProcessError(format!("{key}: parent is not an object")))?;
    let slot = map.entry(key.to_string()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = json!([]);
    }
    slot.as_array_mut()
        .ok_or_else(|| ProcessError(format!("{key} is not an array")))
}

/// runc's `getProcess` without `--process` (exec.go, runc 1.1-1.3): the
/// container's process with the flags applied. Where versions differ,
/// 1.2+ is followed: `--cap` reaches ambient only if the spec has an
/// inheritable set (1.1 always added it, and then failed to raise it).
pub fn get_process(container: &Value, flags: &ExecFlags) -> Result<Value, ProcessError> {
    let mut p = container.clone();
    if !p.is_object() {
        return Err(ProcessError("the spec has no process".into()));
    }
    if flags.args.is_empty() {
        return Err(ProcessError("exec args cannot be empty".into()));
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
                return Err(ProcessError(
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
            return Err(ProcessError("user is not an object".into()));
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
            return Err(ProcessError(format!(
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

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn flags(args: &[&str]) -> ExecFlags {
        ExecFlags {
            args: strings(args),
            ..ExecFlags::default()
        }
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
        // `-e A=1 -e B=2 -t --cwd /tmp -u 5:6 -g 7 --cap CAP_CHOWN
        // --no-new-privs=false ctr sh -c id`
        let f = ExecFlags {
            args: strings(&["sh", "-c", "id"]),
            cwd: "/tmp".into(),
            caps: strings(&["CAP_CHOWN"]),
            env: strings(&["A=1", "B=2"]),
            tty: true,
            no_new_privs: Some(false),
            user: "5:6".into(),
            additional_gids: vec![7],
            ..ExecFlags::default()
        };
        let p = get_process(&judged(), &f).unwrap();
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
        let p = get_process(&judged(), &flags(&["true"])).unwrap();
        let mut want = judged();
        want["args"] = json!(["true"]);
        want["terminal"] = json!(false);
        assert_eq!(p, want);
        let user = |user: &str| ExecFlags {
            user: user.into(),
            ..flags(&["id"])
        };
        // Atoi then uint32: 4294967296 wraps to uid 0, as in runc.
        let p = get_process(&judged(), &user("4294967296")).unwrap();
        assert_eq!(p["user"]["uid"], 0);
        assert_eq!(p["user"]["gid"], 1000);
        let p = get_process(&judged(), &user("-1:+2")).unwrap();
        assert_eq!(p["user"], json!({"uid": u32::MAX, "gid": 2}));
        let negative_gid = ExecFlags {
            additional_gids: vec![-1],
            ..flags(&["x"])
        };
        for bad in [user("0:"), user("root"), negative_gid, flags(&[])] {
            assert!(get_process(&judged(), &bad).is_err(), "{bad:?}");
        }
        // An empty --cwd changes nothing.
        let p = get_process(&judged(), &flags(&["x"])).unwrap();
        assert_eq!(
            (p["terminal"].clone(), p["cwd"].clone()),
            (json!(false), json!("/work"))
        );
    }

    #[test]
    fn cap_without_inheritable_skips_ambient_and_nil_caps_fail() {
        let mut container = judged();
        container["capabilities"] = json!({"bounding": ["CAP_KILL"]});
        let cap = ExecFlags {
            caps: strings(&["CAP_CHOWN"]),
            ..flags(&["x"])
        };
        let p = get_process(&container, &cap).unwrap();
        assert_eq!(
            p["capabilities"]["bounding"],
            json!(["CAP_KILL", "CAP_CHOWN"])
        );
        assert_eq!(p["capabilities"]["permitted"], json!(["CAP_CHOWN"]));
        assert!(p["capabilities"].get("ambient").is_none());
        container.as_object_mut().unwrap().remove("capabilities");
        assert!(get_process(&container, &cap).is_err());
    }
}
