//! Installs vibe-shim's network hook (the egress wall) in
//! `hooks.createRuntime`, after removing any entry that pretends to be it,
//! and refuses runtimes whose own network stack would bypass the wall.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::{RuleContext, NETWORK_HOOK_MARKER};
use crate::lang::json::{array_at, object_at, strings};

const RULE: &str = "network_hook";

/// Runtimes with a user-space or VM network stack: traffic leaves without
/// passing the network namespace's netfilter, where the wall lives.
const BYPASSING_RUNTIMES: [&str; 3] = ["runsc", "gvisor", "kata"];

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some(create) = cx.create else {
        return Ok(());
    };
    let runtime_name = create
        .runtime_path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if let Some(bad) = BYPASSING_RUNTIMES
        .iter()
        .find(|b| runtime_name.contains(*b))
    {
        return Err(Denial::new(
            RULE,
            "runtime.path",
            create.runtime_path.display().to_string(),
            format!(
                "{bad} has its own network stack that bypasses the namespace's netfilter, \
                 so the egress policy cannot hold"
            ),
        ));
    }
    let Some(entry) = &create.network_hook else {
        return Ok(());
    };
    // A forged or stale entry must not run in place of ours (or twice).
    remove_marked(spec, NETWORK_HOOK_MARKER, RULE, rec);
    // Engine hooks stay: runc runs prestart (Docker's libnetwork-setkey)
    // before createRuntime, so the engine's network is set up before ours.
    if let Some(hooks) = spec.get_mut("hooks") {
        let create_runtime = array_at(hooks, "createRuntime");
        create_runtime.push(entry.clone());
        rec.change(
            RULE,
            format!("/hooks/createRuntime/{}", create_runtime.len() - 1),
            Value::Null,
            entry.clone(),
        );
    }
    Ok(())
}

/// Removes, from every hook list, each entry with an argument containing
/// `marker` (creating `hooks` when missing), recording each removal.
pub(crate) fn remove_marked(spec: &mut Value, marker: &str, rule: &'static str, rec: &mut Record) {
    let hooks = object_at(spec, "hooks");
    for (list_name, list) in hooks.iter_mut() {
        let Value::Array(items) = list else { continue };
        let mut index = 0;
        items.retain(|hook| {
            let forged = strings(hook.get("args"))
                .iter()
                .any(|arg| arg.contains(marker));
            if forged {
                rec.change(
                    rule,
                    format!("/hooks/{list_name}/{index}"),
                    hook.clone(),
                    Value::Null,
                );
            }
            index += 1;
            !forged
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::engine::CreateContext;
    use crate::host::FakeHost;
    use serde_json::json;
    use std::path::PathBuf;

    fn our_hook() -> Value {
        json!({"path": "/usr/local/bin/vibe-shim", "args": ["vibe-shim", "hook", "network", NETWORK_HOOK_MARKER]})
    }

    fn run(spec: &mut Value, runtime: &str, hook: Option<Value>) -> Result<Record, Denial> {
        let (policy, host) = (Policy::default(), FakeHost::new());
        let create = CreateContext {
            container_id: "c1".into(),
            network_hook: hook,
            runtime_path: PathBuf::from(runtime),
            ..CreateContext::default()
        };
        let cx = RuleContext {
            policy: &policy,
            host: &host,
            create: Some(&create),
            process_field: "/process",
        };
        let mut rec = Record::default();
        apply(spec, &cx, &mut rec).map(|_| rec)
    }

    fn default_spec() -> Value {
        serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-default.json"
        ))
        .unwrap()
    }

    #[test]
    fn hook_added_after_dockers_prestart() {
        let mut spec = default_spec();
        let prestart = spec["hooks"]["prestart"].clone();
        let rec = run(&mut spec, "/usr/sbin/runc", Some(our_hook())).unwrap();
        assert_eq!(spec["hooks"]["prestart"], prestart);
        assert_eq!(spec["hooks"]["createRuntime"], json!([our_hook()]));
        assert_eq!(rec.changes.len(), 1);
        assert_eq!(rec.changes[0].field, "/hooks/createRuntime/0");
        // Running again replaces ours rather than adding a second one.
        let rec = run(&mut spec, "/usr/sbin/runc", Some(our_hook())).unwrap();
        assert_eq!(spec["hooks"]["createRuntime"], json!([our_hook()]));
        assert_eq!(rec.changes.len(), 2);
    }

    #[test]
    fn forged_hooks_are_removed_everywhere() {
        let mut spec = default_spec();
        let forged =
            json!({"path": "/bin/true", "args": ["true", format!("--{NETWORK_HOOK_MARKER}=x")]});
        spec["hooks"]["poststart"] = json!([forged.clone()]);
        spec["hooks"]["createRuntime"] = json!([{"path": "/bin/engine-hook"}, forged]);
        let rec = run(&mut spec, "runc", Some(our_hook())).unwrap();
        assert_eq!(spec["hooks"]["poststart"], json!([]));
        assert_eq!(
            spec["hooks"]["createRuntime"],
            json!([{"path": "/bin/engine-hook"}, our_hook()])
        );
        let fields: Vec<&str> = rec.changes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "/hooks/poststart/0",
                "/hooks/createRuntime/1",
                "/hooks/createRuntime/1"
            ]
        );
    }

    #[test]
    fn hooks_object_created_when_missing() {
        let mut spec = json!({"ociVersion": "1.0.2"});
        run(&mut spec, "runc", Some(our_hook())).unwrap();
        assert_eq!(spec["hooks"], json!({"createRuntime": [our_hook()]}));
    }

    #[test]
    fn sandboxed_runtimes_are_refused() {
        for runtime in [
            "/usr/bin/runsc",
            "/opt/gvisor-runc",
            "/usr/bin/kata-runtime",
        ] {
            let err = run(&mut default_spec(), runtime, Some(our_hook())).unwrap_err();
            assert_eq!(err.value, runtime);
            assert!(err.reason.contains("bypasses"), "{err}");
        }
    }

    #[test]
    fn nothing_without_a_hook_or_outside_create() {
        let mut spec = default_spec();
        let before = spec.clone();
        assert!(run(&mut spec, "/usr/sbin/runc", None)
            .unwrap()
            .changes
            .is_empty());
        assert_eq!(spec, before);
        let (policy, host) = (Policy::default(), FakeHost::new());
        let cx = RuleContext {
            policy: &policy,
            host: &host,
            create: None,
            process_field: "",
        };
        apply(&mut spec, &cx, &mut Record::default()).unwrap();
        assert_eq!(spec, before);
    }
}
