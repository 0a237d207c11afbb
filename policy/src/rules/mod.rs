//! One module per rule. Each exposes `apply` (and for the update path,
//! `apply_update`) with the signatures in [`crate::engine`], records every
//! change in the [`crate::Record`], and returns a [`crate::Denial`] when the
//! spec cannot be made to follow the policy.

pub(crate) mod annotations;
pub(crate) mod apparmor;
pub mod binds;
pub(crate) mod capabilities;
pub(crate) mod cgroups;
pub(crate) mod client_hooks;
pub mod credentials;
pub(crate) mod devices;
pub(crate) mod env;
pub mod home;
pub(crate) mod host_ids;
pub mod intel_rdt;
pub(crate) mod kernel_mounts;
pub(crate) mod lsm;
pub(crate) mod masked_paths;
pub(crate) mod namespaces;
pub(crate) mod net_devices;
pub(crate) mod network_hook;
pub(crate) mod no_new_privileges;
pub mod notice;
pub(crate) mod oom;
pub mod pids;
pub(crate) mod probe;
pub(crate) mod proc_fd;
pub(crate) mod propagation;
pub mod proxy_env;
pub(crate) mod readonly_root;
pub mod resources;
pub(crate) mod rlimits;
pub(crate) mod root_path;
pub(crate) mod scheduling;
pub(crate) mod seccomp;
mod seccomp_args;
mod seccomp_merge;
pub mod sysctls;
pub(crate) mod tmpfs;
pub mod tmpfs_modes;
pub(crate) mod user;
pub mod userns;
pub mod volumes;

/// Keeps the entries of `map` that `keep` accepts; each one dropped is
/// recorded as `<at>/<key>` under `rule`.
pub(crate) fn retain_recorded(
    map: &mut serde_json::Map<String, serde_json::Value>,
    rule: &'static str,
    at: &str,
    rec: &mut crate::decision::Record,
    keep: impl Fn(&str) -> bool,
) {
    map.retain(|key, value| {
        let kept = keep(key);
        if !kept {
            rec.change(
                rule,
                format!("{at}/{}", crate::lang::json::pointer_segment(key)),
                value.clone(),
                serde_json::Value::Null,
            );
        }
        kept
    });
}

/// Test helper: runs one rule with `policy` on a fresh [`crate::FakeHost`],
/// without a create context, and returns what it recorded.
#[cfg(test)]
pub(crate) fn run_rule(
    rule: crate::engine::SpecRule,
    doc: &mut serde_json::Value,
    policy: &crate::Policy,
) -> Result<crate::Record, crate::Denial> {
    run_rule_with(rule, doc, policy, &crate::FakeHost::new(), None)
}

/// Test helper: [`run_rule`] on a given host and create context.
#[cfg(test)]
pub(crate) fn run_rule_with(
    rule: crate::engine::SpecRule,
    doc: &mut serde_json::Value,
    policy: &crate::Policy,
    host: &crate::FakeHost,
    create: Option<&crate::CreateContext>,
) -> Result<crate::Record, crate::Denial> {
    let cx = crate::engine::RuleContext {
        policy,
        host,
        create,
        process_field: "/process",
    };
    let mut rec = crate::Record::default();
    rule(doc, &cx, &mut rec).map(|()| rec)
}

/// Test helper: the options of the mount at `dest` in a spec.
#[cfg(test)]
pub(crate) fn options_at(spec: &serde_json::Value, dest: &str) -> Vec<String> {
    let mount = spec["mounts"]
        .as_array()
        .and_then(|mounts| mounts.iter().find(|m| m["destination"] == dest))
        .unwrap_or_else(|| panic!("no mount at {dest}"));
    crate::lang::json::strings(mount.get("options"))
}
