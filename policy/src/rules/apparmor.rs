//! The container's AppArmor profile is the policy's choice, not the
//! client's: `--security-opt apparmor=unconfined` (or `--privileged`, which
//! asks for the same) would drop docker-default's mount, ptrace and /proc
//! rules. On a host with AppArmor, a profile must match
//! `[process] apparmor_profiles` and be loaded in enforce mode; an empty or
//! `unconfined` one is replaced by the first exact entry that is. On a host
//! without AppArmor runc applies no profile, and the field is left as given.
//! Every exec keeps the container's profile ([`crate::rules::lsm`]).

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::{object_at, set};

const RULE: &str = "apparmor";
const FIELD: &str = "/process/apparmorProfile";

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some(loaded) = cx.host.apparmor_enforced() else {
        return Ok(());
    };
    let requested = match spec.pointer(FIELD) {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(other) => return Err(Denial::new(RULE, FIELD, other.to_string(), "not a string")),
    }
    .to_string();
    let allowed = &cx.policy.process.apparmor_profiles;
    let matches = |name: &str| {
        allowed.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == p,
        })
    };
    let is_loaded = |name: &str| loaded.iter().any(|l| l == name);
    if !requested.is_empty() && requested != "unconfined" {
        if !matches(&requested) {
            return Err(Denial::new(
                RULE,
                FIELD,
                requested,
                "not one of [process] apparmor_profiles",
            ));
        }
        if !is_loaded(&requested) {
            return Err(Denial::new(
                RULE,
                FIELD,
                requested,
                "not loaded in enforce mode on this host",
            ));
        }
        return Ok(());
    }
    let Some(profile) = allowed.iter().find(|p| !p.ends_with('*') && is_loaded(p)) else {
        return Err(Denial::new(
            RULE,
            FIELD,
            if requested.is_empty() {
                "(none)".to_string()
            } else {
                requested
            },
            "no profile of [process] apparmor_profiles is loaded in enforce mode to replace it",
        ));
    };
    let after = Value::from(profile.as_str());
    let before = set(object_at(spec, "process"), "apparmorProfile", after.clone());
    rec.change(RULE, FIELD, before, after);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::host::FakeHost;
    use serde_json::json;

    fn run(spec: &mut Value, host: &FakeHost) -> Result<Record, Denial> {
        crate::rules::run_rule_with(apply, spec, &Policy::default(), host, None)
    }

    fn apparmor_host(loaded: &[&str]) -> FakeHost {
        let mut host = FakeHost::new();
        host.apparmor = Some(loaded.iter().map(|s| s.to_string()).collect());
        host
    }

    #[test]
    fn unconfined_becomes_the_policy_profile() {
        let host = apparmor_host(&["docker-default", "containers-default-0.62.2"]);
        for requested in [json!("unconfined"), json!(""), Value::Null] {
            let mut spec = json!({"process": {"apparmorProfile": requested}});
            let rec = run(&mut spec, &host).unwrap();
            assert_eq!(spec["process"]["apparmorProfile"], "docker-default");
            assert_eq!(rec.changes.len(), 1);
        }
        let mut spec = json!({"process": {}});
        run(&mut spec, &host).unwrap();
        assert_eq!(spec["process"]["apparmorProfile"], "docker-default");
    }

    #[test]
    fn allowed_loaded_profiles_are_kept_others_refused() {
        let host = apparmor_host(&["docker-default", "containers-default-0.62.2", "lax"]);
        let mut spec = json!({"process": {"apparmorProfile": "containers-default-0.62.2"}});
        assert!(run(&mut spec, &host).unwrap().changes.is_empty());
        for (profile, why) in [
            ("lax", "apparmor_profiles"),
            ("containers-default-9", "not loaded"),
        ] {
            let mut spec = json!({"process": {"apparmorProfile": profile}});
            let err = run(&mut spec, &host).unwrap_err();
            assert!(err.reason.contains(why), "{profile}: {err}");
        }
        // Nothing to replace an unconfined request with: refused.
        let host = apparmor_host(&["lax"]);
        let mut spec = json!({"process": {"apparmorProfile": "unconfined"}});
        assert!(run(&mut spec, &host).is_err());
    }

    #[test]
    fn a_host_without_apparmor_is_left_alone() {
        let mut spec = json!({"process": {"apparmorProfile": "unconfined"}});
        assert!(run(&mut spec, &FakeHost::new()).unwrap().changes.is_empty());
    }
}
