//! `exec`: the exec'd process gets the same process rules as the init.
//! A `--process FILE` is rewritten into a private sealed memfd; without it
//! the process flags are rewritten (`-e`, `--cap`, `-u`, `-g`,
//! `--no-new-privs`) and `--cwd`/args are judged by the policy's rules.

use std::ffi::{OsStr, OsString};

use serde_json::{json, Value};
use vibe_policy::config::normalise_capability;
use vibe_policy::{enforce_process, Change, Denial, Policy, Record};

use super::{lossy, min_private_fd, refusal, Ctx, Outcome};
use crate::args::{first_positional, flag_value, scan_verb, Edits, Item, EXEC_FLAGS};
use crate::private_file::sealed_memfd;

pub fn prepare(ctx: &Ctx, args: &[OsString]) -> Outcome {
    let items = scan_verb(args, EXEC_FLAGS, true);
    let container_id = first_positional(&items)
        .map(|v| lossy(v))
        .unwrap_or_default();
    let result = rewrite(ctx, args, &items);
    Outcome {
        container_id,
        result,
    }
}

fn rewrite(
    ctx: &Ctx,
    args: &[OsString],
    items: &[Item],
) -> Result<(Vec<OsString>, Vec<Change>), vibe_policy::Refusal> {
    let mut edits = Edits::default();
    let mut changes = Vec::new();
    if let Some((last, path)) = edits.keep_last_flag(items, "process") {
        let (new_path, process_changes) = rewrite_process_file(ctx, &path, items)?;
        edits.set_flag_value(last, new_path.as_os_str());
        changes.extend(process_changes);
    } else {
        check_process_flags(ctx, items)?;
    }
    // runc ignores these flags when --process is given, but they are cheap
    // to confine either way, and then no reading of runc's code is needed.
    let mut record = Record::default();
    rewrite_flags(&ctx.policy, items, &mut edits, &mut record);
    changes.extend(record.changes);
    Ok((edits.apply(args), changes))
}

fn rewrite_process_file(
    ctx: &Ctx,
    path: &OsStr,
    items: &[Item],
) -> Result<(std::path::PathBuf, Vec<Change>), vibe_policy::Refusal> {
    let denial = |reason: String| refusal(Denial::new("exec", "--process", lossy(path), reason));
    let bytes =
        std::fs::read(path).map_err(|e| denial(format!("cannot read process file: {e}")))?;
    let process = vibe_policy::gojson::process_from_slice(&bytes).map_err(|e| match e {
        vibe_policy::gojson::Error::Key(key) => refusal(key),
        vibe_policy::gojson::Error::Syntax(e) => denial(format!("process file is not JSON: {e}")),
    })?;
    let rewrite = enforce_process(&process, &ctx.policy, &ctx.host)?;
    let out = serde_json::to_vec(&rewrite.document)
        .map_err(|e| denial(format!("cannot serialise process: {e}")))?;
    let min_fd = min_private_fd(flag_value(items, "preserve-fds"));
    let new_path = sealed_memfd(&out, min_fd).map_err(|e| denial(e.to_string()))?;
    Ok((new_path, rewrite.changes))
}

/// Without `--process`, runc builds the process from the container's
/// (already confined) config plus these flags. The cwd and args are judged
/// by running the policy's process rules over an equivalent process.
fn check_process_flags(ctx: &Ctx, items: &[Item]) -> Result<(), vibe_policy::Refusal> {
    let process_args: Vec<String> = items
        .iter()
        .filter_map(|item| match item {
            Item::Positional { value, .. } => Some(lossy(value)),
            _ => None,
        })
        .skip(1) // the container id
        .collect();
    let cwd = flag_value(items, "cwd")
        .map(|v| lossy(v))
        .unwrap_or_else(|| "/".into());
    let process = json!({
        "user": {"uid": 0, "gid": 0},
        "args": process_args,
        "env": [],
        "cwd": cwd,
    });
    enforce_process(&process, &ctx.policy, &ctx.host).map(|_| ())
}

/// Applies the process policy to the exec flags: env names through the
/// allowlist, capabilities limited to the policy's, the forced user, and
/// `--no-new-privs`. Env values are never recorded.
fn rewrite_flags(policy: &Policy, items: &[Item], edits: &mut Edits, rec: &mut Record) {
    let forced_user = policy.process.forced_user();
    let mut saw_user = false;
    for item in items {
        let Item::Flag { name, value, .. } = item else {
            continue;
        };
        let text = value.as_deref().map(lossy).unwrap_or_default();
        match name.as_str() {
            "env" => {
                let var = text.split('=').next().unwrap_or_default();
                let utf8 = value.as_deref().is_some_and(|v| v.to_str().is_some());
                if !utf8 || !policy.process.env_allowed(var) {
                    edits.remove_flag(item);
                    rec.change("env", "--env", json!(var), Value::Null);
                }
            }
            "cap" => {
                let allowed = normalise_capability(&text)
                    .is_some_and(|cap| policy.process.capabilities.contains(&cap));
                if !allowed {
                    edits.remove_flag(item);
                    rec.change("capabilities", "--cap", json!(text), Value::Null);
                }
            }
            "user" => {
                saw_user = true;
                if let Some((uid, gid)) = forced_user {
                    let forced = format!("{uid}:{gid}");
                    edits.set_flag_value(item, OsStr::new(&forced));
                    rec.change("user", "--user", json!(text), json!(forced));
                }
            }
            "additional-gids" if forced_user.is_some() => {
                edits.remove_flag(item);
                rec.change("user", "--additional-gids", json!(text), Value::Null);
            }
            "no-new-privs" if policy.process.no_new_privileges => {
                // Possibly `--no-new-privs=false`: replaced by ours below.
                edits.remove_flag(item);
            }
            _ => {}
        }
    }
    if let (Some((uid, gid)), false) = (forced_user, saw_user) {
        let forced = format!("{uid}:{gid}");
        rec.change("user", "--user", Value::Null, json!(forced));
        edits.prepend([OsString::from("--user"), OsString::from(forced)]);
    }
    if policy.process.no_new_privileges {
        edits.prepend([OsString::from("--no-new-privs")]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn run_flags(policy: &Policy, args: &[&str]) -> (Vec<String>, Vec<Change>) {
        let args = os(args);
        let items = scan_verb(&args, EXEC_FLAGS, true);
        let mut edits = Edits::default();
        let mut rec = Record::default();
        rewrite_flags(policy, &items, &mut edits, &mut rec);
        let out = edits.apply(&args).iter().map(|a| lossy(a)).collect();
        (out, rec.changes)
    }

    #[test]
    fn env_caps_and_nnp_are_confined() {
        let policy = Policy::default();
        let (out, changes) = run_flags(
            &policy,
            &[
                "-e",
                "PATH=/bin",
                "--env=GITHUB_TOKEN=secret",
                "--cap",
                "CAP_SYS_ADMIN",
                "-c=net_admin",
                "--no-new-privs=false",
                "-t",
                "ctr",
                "sh",
                "-e",
                "x",
            ],
        );
        assert_eq!(
            out,
            [
                "--no-new-privs",
                "-e",
                "PATH=/bin",
                "-t",
                "ctr",
                "sh",
                "-e",
                "x"
            ]
        );
        let text = serde_json::to_string(&changes).unwrap();
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("GITHUB_TOKEN"), "{text}");
    }

    #[test]
    fn allowed_caps_stay_and_user_is_forced() {
        let mut policy = Policy::default();
        policy.process.capabilities = vec!["CAP_NET_BIND_SERVICE".into()];
        policy.process.user = Some("1000:1000".into());
        let (out, _) = run_flags(
            &policy,
            &[
                "--cap",
                "net_bind_service",
                "-u",
                "0",
                "-g",
                "0",
                "--user=root",
                "ctr",
                "id",
            ],
        );
        assert_eq!(
            out,
            [
                "--no-new-privs",
                "--cap",
                "net_bind_service",
                "-u",
                "1000:1000",
                "--user=1000:1000",
                "ctr",
                "id"
            ]
        );
        let (out, _) = run_flags(&policy, &["ctr", "id", "-u", "0"]);
        assert_eq!(
            out,
            [
                "--user",
                "1000:1000",
                "--no-new-privs",
                "ctr",
                "id",
                "-u",
                "0"
            ]
        );
    }

    #[test]
    fn nothing_is_added_when_the_policy_does_not_ask() {
        let mut policy = Policy::default();
        policy.process.no_new_privileges = false;
        let (out, changes) = run_flags(&policy, &["--detach", "--pid-file", "/p", "ctr", "true"]);
        assert_eq!(out, ["--detach", "--pid-file", "/p", "ctr", "true"]);
        assert!(changes.is_empty());
    }

    fn ctx(policy: Policy) -> Ctx {
        Ctx {
            config_path: "/etc/vibe-shim/config.toml".into(),
            policy,
            runtime: "/usr/sbin/runc".into(),
            root: None,
            host: crate::host::RealHost::new(),
        }
    }

    fn prepare_strs(policy: Policy, args: &[&str]) -> Outcome {
        prepare(&ctx(policy), &os(args))
    }

    #[test]
    fn proc_fd_cwd_and_args_are_refused_without_process_file() {
        let mut policy = Policy::default();
        policy.process.user = Some("1000:1000".into());
        let out = prepare_strs(policy.clone(), &["--cwd", "/proc/self/fd/3", "ctr", "true"]);
        assert_eq!(out.container_id, "ctr");
        assert!(out.result.is_err());
        let out = prepare_strs(policy.clone(), &["ctr", "/proc/1/fd/5"]);
        assert!(out.result.is_err());
        let out = prepare_strs(policy, &["--cwd", "/work", "-u", "0", "ctr", "id"]);
        let (args, _) = out.result.unwrap();
        let args: Vec<String> = args.iter().map(|a| lossy(a)).collect();
        assert_eq!(
            args,
            [
                "--no-new-privs",
                "--cwd",
                "/work",
                "-u",
                "1000:1000",
                "ctr",
                "id"
            ]
        );
    }

    #[test]
    fn process_file_is_rewritten_into_a_private_memfd() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("process.json");
        let original = json!({
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/bin", "GITHUB_TOKEN=secret"],
            "cwd": "/",
            "capabilities": {"bounding": ["CAP_SYS_ADMIN"], "effective": ["CAP_SYS_ADMIN"]},
            "unknownField": 7
        });
        std::fs::write(&file, original.to_string()).unwrap();
        let path = file.to_str().unwrap();
        let out = prepare_strs(Policy::default(), &["--process", path, "--detach", "ctr"]);
        let (args, changes) = out.result.unwrap();
        let args: Vec<String> = args.iter().map(|a| lossy(a)).collect();
        assert_eq!(args[0], "--no-new-privs");
        assert_eq!(args[1], "--process");
        assert!(args[2].starts_with("/proc/self/fd/"), "{args:?}");
        assert_eq!(&args[3..], ["--detach", "ctr"]);
        let rewritten: Value = serde_json::from_slice(&std::fs::read(&args[2]).unwrap()).unwrap();
        assert!(!rewritten.to_string().contains("secret"));
        assert_eq!(rewritten["unknownField"], 7);
        assert!(!changes.is_empty());
        // The caller's file is untouched.
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            original.to_string()
        );
        let out = prepare_strs(Policy::default(), &["-p", "/nonexistent/p.json", "ctr"]);
        assert!(out
            .result
            .unwrap_err()
            .denial
            .value
            .contains("/nonexistent/p.json"));
    }
}
