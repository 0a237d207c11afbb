//! The rule chain. Each rule is a small function in [`crate::rules`]; the
//! engine runs them in a fixed order over one `serde_json::Value`, so fields
//! no rule knows are preserved, and collects every change.

use serde::Serialize;
use serde_json::Value;

use super::context::{CreateContext, ProcessRule, RuleContext, SpecRule};
use super::validate;
use crate::config::Policy;
use crate::decision::{Change, Denial, Record, Refusal};
use crate::host::HostView;
use crate::rules;

/// A rewritten document plus everything that was changed in it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rewrite {
    pub document: Value,
    pub changes: Vec<Change>,
}

/// A check of the input document before any rule runs.
type Validator = fn(&mut Value) -> Result<(), Denial>;

/// Rules that hold for every process: the container's init and every exec.
pub const PROCESS_RULES: &[ProcessRule] = &[
    rules::proc_fd::apply,
    rules::capabilities::apply,
    rules::no_new_privileges::apply,
    rules::user::apply,
    rules::env::apply,
    rules::proxy_env::apply,
    rules::home::apply_process,
    rules::rlimits::apply,
    rules::oom::apply,
    rules::scheduling::apply,
];

/// Rules over the whole spec, in order. Mount rules run before the policy's
/// own tmpfs mounts are added, so those are never judged as client mounts.
pub const SPEC_RULES: &[SpecRule] = &[
    apply_process_rules,
    rules::apparmor::apply,
    rules::readonly_root::apply,
    rules::root_path::apply,
    rules::cgroups::apply,
    rules::namespaces::apply,
    rules::net_devices::apply,
    rules::intel_rdt::apply,
    rules::kernel_mounts::apply,
    rules::probe::apply,
    rules::binds::apply,
    rules::userns::apply,
    rules::tmpfs::apply,
    rules::home::apply_mount,
    rules::credentials::apply,
    rules::notice::apply,
    rules::propagation::apply,
    rules::masked_paths::apply,
    rules::devices::apply,
    rules::seccomp::apply,
    rules::resources::apply,
    rules::sysctls::apply,
    rules::annotations::apply,
    rules::host_ids::apply,
    rules::pids::apply,
    rules::client_hooks::apply,
    rules::network_hook::apply,
    rules::tmpfs_modes::apply,
    rules::resources::apply_hook,
];

fn apply_process_rules(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let process = crate::lang::json::object_at(spec, "process");
    let mut process_value = Value::Object(std::mem::take(process));
    let result = PROCESS_RULES
        .iter()
        .try_for_each(|rule| rule(&mut process_value, cx, rec));
    if let Value::Object(map) = process_value {
        *crate::lang::json::object_at(spec, "process") = map;
    }
    result
}

/// Rewrites a bundle's `config.json` for create, run and restore. Takes the
/// spec by value: the rewrite edits it in place rather than copying it.
pub fn enforce_create(
    spec: Value,
    policy: &Policy,
    host: &dyn HostView,
    ctx: &CreateContext,
) -> Result<Rewrite, Refusal> {
    let cx = RuleContext {
        policy,
        host,
        create: Some(ctx),
        process_field: "/process",
    };
    run_chain(spec, &cx, SPEC_RULES, Some(validate::validate_spec))
}

/// Rewrites an exec's process JSON (runc `exec --process FILE`).
pub fn enforce_process(
    process: &Value,
    policy: &Policy,
    host: &dyn HostView,
) -> Result<Rewrite, Refusal> {
    let cx = RuleContext::standalone(policy, host);
    run_chain(process.clone(), &cx, PROCESS_RULES, None)
}

/// Rewrites an exec's process (from `--process FILE`, or built the way
/// runc's `getProcess` builds it) against the container's judged spec:
/// the process rules, then [`rules::credentials::keep_container`] (the
/// container's placeholders and trust bundle variables),
/// [`rules::home::keep_container`] (the container's HOME), [`rules::lsm`],
/// which keeps the container's AppArmor profile and SELinux label, and [`rules::host_ids`] against the
/// container's writable binds.
pub fn enforce_exec(
    process: &Value,
    container: &Value,
    policy: &Policy,
    host: &dyn HostView,
) -> Result<Rewrite, Refusal> {
    let mut rewrite = enforce_process(process, policy, host)?;
    let mut rec = Record {
        changes: std::mem::take(&mut rewrite.changes),
    };
    let cx = RuleContext::standalone(policy, host);
    let container_process = container.get("process").unwrap_or(&Value::Null);
    rules::credentials::keep_container(&mut rewrite.document, container_process, policy, &mut rec);
    rules::home::keep_container(&mut rewrite.document, container_process, policy, &mut rec);
    let checked =
        rules::lsm::keep_container(&mut rewrite.document, container_process, "", &mut rec)
            .and_then(|()| rules::host_ids::check_exec(&rewrite.document, container, &cx));
    match checked {
        Ok(()) => Ok(Rewrite {
            document: rewrite.document,
            changes: rec.changes,
        }),
        Err(denial) => Err(Refusal {
            denial,
            changes: rec.changes,
        }),
    }
}

/// Rewrites the resources of `runc update` (`--resources` JSON).
pub fn enforce_update(
    resources: &Value,
    policy: &Policy,
    host: &dyn HostView,
) -> Result<Rewrite, Refusal> {
    let cx = RuleContext::standalone(policy, host);
    run_chain(
        resources.clone(),
        &cx,
        &[
            rules::pids::apply_update,
            rules::devices::apply_update,
            rules::resources::apply_update,
        ],
        None,
    )
}

fn run_chain(
    mut document: Value,
    cx: &RuleContext,
    chain: &[SpecRule],
    validate: Option<Validator>,
) -> Result<Rewrite, Refusal> {
    // A Docker spec yields a few dozen changes: reserve once, not regrow.
    let mut rec = Record {
        changes: Vec::with_capacity(32),
    };
    let refuse = |denial: Denial, rec: Record| Refusal {
        denial,
        changes: rec.changes,
    };
    if !document.is_object() {
        let denial = Denial::new("spec", "/", document.to_string(), "expected a JSON object");
        return Err(refuse(denial, rec));
    }
    if let Some(validate) = validate {
        if let Err(denial) = validate(&mut document) {
            return Err(refuse(denial, rec));
        }
    }
    for rule in chain {
        if let Err(denial) = rule(&mut document, cx, &mut rec) {
            return Err(refuse(denial, rec));
        }
    }
    Ok(Rewrite {
        document,
        changes: rec.changes,
    })
}
