//! With `filesystem.probe` set, every container gets the admin's static
//! probe bound at [`PROBE_PATH`], so that anyone inside can judge the
//! sandbox (`/vibe-shim-probe`). Any other mount there (a client's, an
//! earlier create's fed back) is dropped first: the path is the admin's.
//! The bind is then judged by the binds rule as an init binary is
//! (read-only, nosuid, nodev, the file root's alone), so a probe that is
//! missing or writable by others refuses the create.

use serde_json::Value;

use crate::config::PROBE_PATH;
use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::rules::kernel_mounts::{push_bind, remove_mounts_at};

const RULE: &str = "probe";

/// The options the probe's bind gets (executable: it is a program).
const OPTIONS: [&str; 4] = ["bind", "ro", "nosuid", "nodev"];

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some(probe) = &cx.policy.filesystem.probe else {
        return Ok(());
    };
    let source = probe.to_str().ok_or_else(|| {
        Denial::new(
            RULE,
            "/mounts",
            probe.display().to_string(),
            "filesystem.probe is not UTF-8",
        )
    })?;
    remove_mounts_at(spec, PROBE_PATH, RULE, rec);
    push_bind(spec, RULE, PROBE_PATH, source, &OPTIONS, rec);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::rules::run_rule_with;
    use crate::FakeHost;
    use serde_json::json;
    use std::path::PathBuf;

    const PROBE: &str = "/usr/lib/vibe-shim/vibe-shim-probe";

    fn policy() -> Policy {
        let mut policy = Policy::default();
        policy.filesystem.probe = Some(PathBuf::from(PROBE));
        policy
    }

    /// The probe rule, then the binds rule, as the chain runs them.
    fn run(spec: &mut Value, policy: &Policy, host: &FakeHost) -> Result<Record, Denial> {
        let mut rec = run_rule_with(apply, spec, policy, host, None)?;
        let binds = run_rule_with(crate::rules::binds::apply, spec, policy, host, None)?;
        rec.changes.extend(binds.changes);
        Ok(rec)
    }

    #[test]
    fn the_probe_is_bound_read_only_and_replaces_a_client_mount() {
        let mut spec = json!({"mounts": [
            {"destination": PROBE_PATH, "type": "bind", "source": "/srv/fake", "options": ["rbind", "rw"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
        ]});
        let rec = run(&mut spec, &policy(), &FakeHost::new()).unwrap();
        let mounts = spec["mounts"].as_array().unwrap();
        assert_eq!(mounts.len(), 2, "{mounts:?}");
        assert_eq!(mounts[1]["destination"], PROBE_PATH);
        assert_eq!(mounts[1]["source"], PROBE);
        assert_eq!(
            mounts[1]["options"],
            json!(["bind", "ro", "nosuid", "nodev"])
        );
        assert!(rec.changes.iter().any(|c| c.rule == RULE));
        // Fed back, the spec keeps one probe mount, the same.
        let before = spec.clone();
        run(&mut spec, &policy(), &FakeHost::new()).unwrap();
        assert_eq!(spec, before);
    }

    #[test]
    fn a_probe_that_does_not_exist_refuses_the_create() {
        let mut host = FakeHost::new();
        host.all_paths_exist = false;
        let mut spec = json!({"mounts": []});
        let denial = run(&mut spec, &policy(), &host).unwrap_err();
        assert!(denial.to_string().contains("does not exist"), "{denial}");
    }

    #[test]
    fn without_the_option_nothing_changes() {
        let mut spec = json!({"mounts": [
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
        ]});
        let before = spec.clone();
        let rec =
            run_rule_with(apply, &mut spec, &Policy::default(), &FakeHost::new(), None).unwrap();
        assert!(rec.changes.is_empty());
        assert_eq!(spec, before);
    }

    #[test]
    fn a_relative_probe_path_is_refused_by_the_policy() {
        let text = "[filesystem]\nprobe = \"vibe-shim-probe\"\n";
        let err = Policy::from_toml_str(text, std::path::Path::new("/t.toml")).unwrap_err();
        assert!(err.to_string().contains("filesystem.probe"), "{err}");
        let ok = Policy::from_toml_str(
            "[filesystem]\nprobe = \"/usr/lib/vibe-shim/vibe-shim-probe\"\n",
            std::path::Path::new("/t.toml"),
        );
        assert_eq!(ok.unwrap().filesystem.probe, Some(PathBuf::from(PROBE)));
    }
}
