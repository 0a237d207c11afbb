//! `update`: the resources (stdin `-`, a file, or flags) are run through the
//! policy's update rules, so `--pids-limit -1` never lifts the limit. The
//! rewritten JSON reaches runc through a private sealed memfd. Reading
//! `--resources -` is the only time vibe-shim reads stdin.

use std::ffi::{OsStr, OsString};
use std::io::Read;

use serde_json::Value;
use vibe_policy::runc::update::{clamp_pids_flag, judge_resource_flags, FlagEdit, RESOURCE_FLAGS};
use vibe_policy::{enforce_update, Change, Denial, Record, Refusal};

use super::{lossy, refusal, Ctx, Outcome};
use crate::runc_argv::{Edits, Item, UpdateArgs};
use crate::sys::memfd::sealed_memfd;

pub fn prepare(ctx: &Ctx, args: &[OsString], parsed: &UpdateArgs) -> Outcome {
    let container_id = lossy(&parsed.id);
    let result = rewrite(ctx, args, &parsed.items, &mut std::io::stdin().lock());
    Outcome {
        container_id,
        result,
        notice: None,
        assurance: None,
    }
}

fn rewrite(
    ctx: &Ctx,
    args: &[OsString],
    items: &[Item],
    stdin: &mut dyn Read,
) -> Result<(Vec<OsString>, Vec<Change>), Refusal> {
    let mut edits = Edits::default();
    let mut changes = Vec::new();
    for flag in ["l3-cache-schema", "mem-bw-schema"] {
        if let Some((_, value)) = edits.keep_last_flag(items, flag) {
            return Err(refusal(Denial::new(
                vibe_policy::rules::intel_rdt::RULE,
                format!("--{flag}"),
                lossy(&value),
                vibe_policy::rules::intel_rdt::REASON,
            )));
        }
    }
    if let Some((last, source)) = edits.keep_last_flag(items, "resources") {
        let denial =
            |reason: String| refusal(Denial::new("update", "--resources", lossy(&source), reason));
        let bytes = read_resources(&source, stdin).map_err(|e| denial(e.to_string()))?;
        let doc: Value =
            vibe_policy::lang::gojson::resources_from_slice(&bytes).map_err(|e| match e {
                vibe_policy::lang::gojson::Error::Key(key) => refusal(key),
                vibe_policy::lang::gojson::Error::Syntax(e) => {
                    denial(format!("resources are not JSON: {e}"))
                }
            })?;
        let rewrite = enforce_update(&doc, &ctx.policy, &ctx.host)?;
        let out = serde_json::to_vec(&rewrite.document)
            .map_err(|e| denial(format!("cannot serialise resources: {e}")))?;
        let path = sealed_memfd(&out, 3).map_err(|e| denial(e.to_string()))?;
        edits.set_flag_value(last, path.as_os_str());
        changes.extend(rewrite.changes);
    }
    let mut record = Record::default();
    clamp_pids_flags(
        ctx.policy.process.pids_limit,
        items,
        &mut edits,
        &mut record,
    );
    changes.extend(record.changes);
    changes.extend(clamp_resource_flags(ctx, items, &mut edits)?);
    Ok((edits.apply(args), changes))
}

/// The memory and CPU flags, judged as the resources document runc builds
/// from them (`vibe_policy::runc::update`): only the last of each reaches
/// runc, and a flag the rules add is put before the container id.
fn clamp_resource_flags(
    ctx: &Ctx,
    items: &[Item],
    edits: &mut Edits,
) -> Result<Vec<Change>, Refusal> {
    let mut given = Vec::new();
    let mut last = Vec::new();
    for &(flag, ..) in RESOURCE_FLAGS {
        if let Some((item, text)) = edits.keep_last_flag(items, flag) {
            given.push((flag, lossy(&text)));
            last.push((flag, item));
        }
    }
    let (flag_edits, changes) = judge_resource_flags(&given, &ctx.policy, &ctx.host)?;
    for edit in flag_edits {
        match edit {
            FlagEdit::Set { flag, value } => {
                if let Some((_, item)) = last.iter().find(|(f, _)| *f == flag) {
                    edits.set_flag_value(item, OsStr::new(&value));
                }
            }
            FlagEdit::Add { flag, value } => {
                edits.prepend([OsString::from(format!("--{flag}={value}"))]);
            }
        }
    }
    Ok(changes)
}

fn read_resources(source: &OsStr, stdin: &mut dyn Read) -> std::io::Result<Vec<u8>> {
    if source == "-" {
        let mut bytes = Vec::new();
        stdin.read_to_end(&mut bytes)?;
        Ok(bytes)
    } else {
        std::fs::read(source)
    }
}

/// Every `--pids-limit` given gets the policy's clamp
/// (`vibe_policy::runc::update::clamp_pids_flag`).
fn clamp_pids_flags(max: i64, items: &[Item], edits: &mut Edits, rec: &mut Record) {
    for item in items {
        let Item::Flag { name, value, .. } = item else {
            continue;
        };
        if name != "pids-limit" {
            continue;
        }
        let text = value.as_deref().map(lossy).unwrap_or_default();
        if let Some(clamped) = clamp_pids_flag(&text, max, rec) {
            edits.set_flag_value(item, OsStr::new(&clamped.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runc_argv::{scan_verb, UPDATE_FLAGS};
    use crate::sys::host::RealHost;
    use serde_json::json;
    use vibe_policy::Policy;

    fn ctx() -> Ctx {
        Ctx {
            config_path: "/etc/vibe-shim/config.toml".into(),
            policy: Policy::default(),
            runtime: "/usr/sbin/runc".into(),
            root: None,
            systemd_cgroup: false,
            host: RealHost::new(),
        }
    }

    fn run(args: &[&str], stdin: &str) -> (Vec<String>, Vec<Change>) {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let items = scan_verb(&args, UPDATE_FLAGS, false);
        let (out, changes) = rewrite(&ctx(), &args, &items, &mut stdin.as_bytes()).unwrap();
        (out.iter().map(|a| lossy(a)).collect(), changes)
    }

    #[test]
    fn pids_limit_flag_is_clamped_in_every_form() {
        let (out, changes) = run(&["--pids-limit", "-1", "ctr"], "");
        assert_eq!(out, ["--pids-limit", "4096", "ctr"]);
        assert_eq!(changes.len(), 1);
        let (out, _) = run(&["--pids-limit=100000", "--memory", "1g", "ctr"], "");
        assert_eq!(out, ["--pids-limit=4096", "--memory", "1g", "ctr"]);
        let (out, changes) = run(&["-pids-limit=100", "ctr"], "");
        assert_eq!(out, ["-pids-limit=100", "ctr"]);
        assert!(changes.is_empty());
        let (out, _) = run(&["ctr", "--pids-limit", "0"], "");
        assert_eq!(out, ["ctr", "--pids-limit", "4096"]);
    }

    #[test]
    fn memory_and_cpu_flags_are_clamped() {
        let (out, changes) = run(
            &[
                "--memory",
                "64g",
                "--memory-swap=-1",
                "--cpu-quota",
                "6400000",
                "ctr",
            ],
            "",
        );
        let max = (4u64 << 30).to_string();
        assert_eq!(
            out,
            [
                "--cpu-period=100000",
                "--memory",
                &max,
                &format!("--memory-swap={max}"),
                "--cpu-quota",
                "200000",
                "ctr"
            ]
        );
        assert_eq!(changes.len(), 4, "{changes:?}");
        let (out, _) = run(
            &["--cpu-share", "262144", "--cpu-period", "1000", "ctr"],
            "",
        );
        assert_eq!(
            out,
            [
                "--cpu-quota=2000",
                "--cpu-share",
                "1024",
                "--cpu-period",
                "1000",
                "ctr"
            ]
        );
        // runc ignores it, but a runc that did not would get the bound.
        let (out, changes) = run(&["--kernel-memory-tcp", "-1", "ctr"], "");
        assert_eq!(out, ["--kernel-memory-tcp", &max, "ctr"]);
        assert_eq!(changes.len(), 1, "{changes:?}");
        let (out, changes) = run(&["--kernel-memory-tcp=1m", "ctr"], "");
        assert_eq!(out, ["--kernel-memory-tcp=1m", "ctr"]);
        assert!(changes.is_empty(), "{changes:?}");
        // Within the policy: untouched.
        let (out, changes) = run(
            &["--memory", "64m", "--memory-reservation", "32m", "ctr"],
            "",
        );
        assert_eq!(
            out,
            ["--memory", "64m", "--memory-reservation", "32m", "ctr"]
        );
        assert!(changes.is_empty());
        // Repeated: only the last reaches runc, and it is the one judged.
        let (out, _) = run(&["--memory", "1m", "--memory", "64g", "ctr"], "");
        assert_eq!(out, ["--memory", &max, "ctr"]);
    }

    #[test]
    fn intel_rdt_flags_are_refused() {
        for args in [
            &["--l3-cache-schema", "L3:0=fffff", "ctr"][..],
            &["--mem-bw-schema=MB:0=100", "ctr"][..],
            &["-l3-cache-schema=L3:0=f", "ctr"][..],
        ] {
            let args: Vec<OsString> = args.iter().map(OsString::from).collect();
            let items = scan_verb(&args, UPDATE_FLAGS, false);
            let refused = rewrite(&ctx(), &args, &items, &mut std::io::empty()).unwrap_err();
            assert_eq!(refused.denial.rule, "intel_rdt", "{args:?}");
        }
    }

    #[test]
    fn unreadable_resource_flags_are_refused() {
        for bad in [
            ["--memory", "1.5g"],
            ["--cpu-quota", "lots"],
            ["--memory-swap", "0x10"],
        ] {
            let args: Vec<OsString> = bad.iter().chain(&["ctr"]).map(OsString::from).collect();
            let items = scan_verb(&args, UPDATE_FLAGS, false);
            let err = rewrite(&ctx(), &args, &items, &mut "".as_bytes()).unwrap_err();
            assert_eq!(err.denial.rule, "resources");
            assert_eq!(err.denial.field, bad[0]);
        }
    }

    #[test]
    fn resources_document_memory_and_cpus_are_clamped() {
        let stdin = r#"{"memory":{"limit":68719476736,"swap":-1},"cpu":{"quota":6400000,"period":100000,"shares":262144}}"#;
        let (out, changes) = run(&["--resources", "-", "ctr"], stdin);
        let written: Value = serde_json::from_slice(&std::fs::read(&out[1]).unwrap()).unwrap();
        assert_eq!(written["memory"]["limit"], 4u64 << 30);
        assert_eq!(written["memory"]["swap"], 4u64 << 30);
        assert_eq!(
            written["cpu"],
            json!({"quota": 200000, "period": 100000, "shares": 1024})
        );
        assert_eq!(changes.len(), 4);
    }

    #[test]
    fn resources_from_stdin_go_through_a_private_memfd() {
        let stdin = r#"{"memory":{"limit":1000000},"pids":{"limit":-1}}"#;
        let (out, _changes) = run(&["--resources", "-", "ctr"], stdin);
        assert_eq!(out[0], "--resources");
        assert!(out[1].starts_with("/proc/self/fd/"), "{out:?}");
        let written: Value = serde_json::from_slice(&std::fs::read(&out[1]).unwrap()).unwrap();
        assert_eq!(written["memory"]["limit"], 1_000_000);
        assert_eq!(written["pids"]["limit"], 4096);
        assert_eq!(out[2], "ctr");
    }

    #[test]
    fn resources_from_a_file_and_bad_json_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.json");
        std::fs::write(&file, r#"{"pids":{"limit":100}}"#).unwrap();
        let arg = format!("-r={}", file.display());
        let (out, _) = run(&[&arg, "ctr"], "");
        assert!(out[0].starts_with("-r=/proc/self/fd/"), "{out:?}");
        let args: Vec<OsString> = ["--resources", "-", "ctr"]
            .iter()
            .map(OsString::from)
            .collect();
        let items = scan_verb(&args, UPDATE_FLAGS, false);
        let err = rewrite(&ctx(), &args, &items, &mut "nope".as_bytes()).unwrap_err();
        assert_eq!(err.denial.rule, "update");
    }
}
