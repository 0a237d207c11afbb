//! Mode "proxy" credentials: the container holds a placeholder, never the
//! secret, and trusts the egress daemon's CA through a read-only bundle.
//!
//! With `[[network.credentials]]` in the policy, a client's entries named
//! like a credential's `env` or like [`TRUST_BUNDLE_ENV`] (any case) are
//! dropped: a client's own value must never pass for the placeholder, nor
//! point the container's TLS clients elsewhere. A client mount at
//! `/etc/vibe-shim` or beneath is refused. For each credential the create
//! bound (the shim skips an optional one whose file is missing), `ENV=<its
//! placeholder>` is appended, and with at least one, every
//! [`TRUST_BUNDLE_ENV`] variable names [`TRUST_BUNDLE_PATH`], which the
//! container's own bundle file (in vibe-shim's root-only state directory)
//! is bound onto, read-only.
//!
//! The audit record lists variable names only: the placeholder is not a
//! secret, but it is the container's, and has no business in a log.
//!
//! An exec ([`keep_container`]) gets the container's judged values of these
//! variables, never a client's, so `docker exec` sees the same placeholder.

use serde_json::Value;

use crate::config::{Policy, TRUST_BUNDLE_ENV, TRUST_BUNDLE_PATH};
use crate::decision::{Denial, Record};
use crate::engine::context::{CreateContext, RuleContext};
use crate::lang::json::{clean_path_within, str_field};
use crate::rules::env::{split_entry, MALFORMED};
use crate::rules::kernel_mounts::{destination, is_bind, mounts_mut};

const RULE: &str = "credentials";

/// The directory of [`TRUST_BUNDLE_PATH`]: no client mount goes there.
pub const TRUST_BUNDLE_DIR: &str = "/etc/vibe-shim";

/// The options of the bundle's bind mount. Non-recursive like every other
/// bind (a file has nothing below it anyway).
pub const BUNDLE_OPTIONS: [&str; 5] = ["bind", "ro", "nosuid", "nodev", "noexec"];

/// Whether `name` is a variable this rule sets: a credential's `env` or a
/// trust bundle variable, in any case.
fn is_managed(policy: &Policy, name: &str) -> bool {
    policy
        .network
        .credentials
        .iter()
        .map(|c| c.env.as_str())
        .chain(TRUST_BUNDLE_ENV)
        .any(|managed| managed.eq_ignore_ascii_case(name))
}

/// The name part of an env entry (the whole text without `=`).
fn name_part(entry: &Value) -> Option<&str> {
    split_entry(entry).map(|(name, _)| name)
}

fn label(entry: &Value) -> Value {
    Value::String(name_part(entry).unwrap_or(MALFORMED).into())
}

/// Whether `mount` is this container's own trust bundle mount: a bind of
/// `create.trust_bundle` onto [`TRUST_BUNDLE_PATH`], as this rule writes it
/// (or an earlier create of this container wrote it into the engine's copy).
/// The binds rule and its pins skip exactly this one: its source is in
/// vibe-shim's root-only state directory, which nobody else can change.
pub fn is_trust_bundle_mount(mount: &Value, create: Option<&CreateContext>) -> bool {
    let Some(bundle) = create.and_then(|c| c.trust_bundle.as_deref()) else {
        return false;
    };
    is_bind(mount)
        && destination(mount) == TRUST_BUNDLE_PATH
        && bundle.to_str() == Some(str_field(mount, "source"))
}

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let create = cx.create;
    // An earlier create's own mount (a restart from the engine's copy of
    // the spec) goes; it is added again below when this create binds any.
    if let Some(mounts) = mounts_mut(spec) {
        let mut index = 0;
        mounts.retain(|mount| {
            let own = is_trust_bundle_mount(mount, create);
            if own {
                rec.change(RULE, format!("/mounts/{index}"), mount.clone(), Value::Null);
            } else {
                index += 1;
            }
            !own
        });
    }
    let policy = cx.policy;
    if policy.network.credentials.is_empty() {
        return Ok(());
    }
    for (index, mount) in spec
        .get("mounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let dest = destination(mount);
        // The notice there is vibe-shim's own (an engine's spec fed back).
        if clean_path_within(&dest, TRUST_BUNDLE_DIR)
            && !crate::rules::notice::is_notice_mount(mount, create)
        {
            return Err(Denial::new(
                RULE,
                format!("/mounts/{index}/destination"),
                dest.into_owned(),
                format!(
                    "{TRUST_BUNDLE_DIR} holds the container's trust bundle for its credentials \
                     (mode \"proxy\"): no mount of the client's may go there"
                ),
            ));
        }
    }
    let bindings = create.map(|c| c.credentials.as_slice()).unwrap_or(&[]);
    let mut added = Vec::with_capacity(bindings.len() + TRUST_BUNDLE_ENV.len());
    for binding in bindings {
        let env = policy
            .network
            .credentials
            .iter()
            .find(|c| c.name == binding.name)
            .map(|c| c.env.as_str())
            .ok_or_else(|| {
                Denial::new(
                    RULE,
                    "/process/env",
                    binding.name.clone(),
                    "internal: a bound credential the policy does not name",
                )
            })?;
        added.push(Value::String(format!("{env}={}", binding.placeholder)));
    }
    let bundle = match (
        bindings.is_empty(),
        create.and_then(|c| c.trust_bundle.as_ref()),
    ) {
        (true, _) => None,
        (false, Some(path)) => Some(path.to_str().ok_or_else(|| {
            Denial::new(
                RULE,
                "/mounts",
                path.display().to_string(),
                "the trust bundle's host path is not UTF-8",
            )
        })?),
        (false, None) => {
            return Err(Denial::new(
                RULE,
                "/mounts",
                "",
                "internal: credentials without a trust bundle",
            ))
        }
    };
    if bundle.is_some() {
        added.extend(
            TRUST_BUNDLE_ENV
                .iter()
                .map(|name| Value::String(format!("{name}={TRUST_BUNDLE_PATH}"))),
        );
    }
    crate::lang::json::object_at(spec, "process");
    if let Some(process) = spec.get_mut("process") {
        let field = format!("{}/env", cx.process_field);
        edit_env(process, policy, added, field, rec);
    }
    if let Some(source) = bundle {
        push_own_file_mount(spec, RULE, TRUST_BUNDLE_PATH, source, rec);
    }
    Ok(())
}

/// Appends the read-only bind of one of vibe-shim's own files of this
/// container (`source`, in its root-only state directory) at
/// `destination`, recorded under `rule`.
pub(crate) fn push_own_file_mount(
    spec: &mut Value,
    rule: &'static str,
    destination: &str,
    source: &str,
    rec: &mut Record,
) {
    crate::rules::kernel_mounts::push_bind(spec, rule, destination, source, &BUNDLE_OPTIONS, rec);
}

/// Drops `process.env`'s managed entries and appends `added`, recording
/// the names; no `env` is made when there is nothing to add.
fn edit_env(
    process: &mut Value,
    policy: &Policy,
    added: Vec<Value>,
    field: String,
    rec: &mut Record,
) {
    let has_env = process.get("env").is_some_and(Value::is_array);
    if !has_env && added.is_empty() {
        return;
    }
    let env = crate::lang::json::array_at(process, "env");
    let original = env.clone();
    env.retain(|entry| !name_part(entry).is_some_and(|n| is_managed(policy, n)));
    env.extend(added);
    if original != *env {
        rec.change(
            RULE,
            field,
            Value::Array(original.iter().map(label).collect()),
            Value::Array(env.iter().map(label).collect()),
        );
    }
}

/// An exec: with credentials in the policy, the client's values of their
/// variables (and of the trust bundle's) are dropped and the container's
/// judged ones kept, in the container's order.
pub fn keep_container(
    process: &mut Value,
    container_process: &Value,
    policy: &Policy,
    rec: &mut Record,
) {
    if policy.network.credentials.is_empty() {
        return;
    }
    let judged: Vec<Value> = container_process
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|entry| name_part(entry).is_some_and(|n| is_managed(policy, n)))
        .cloned()
        .collect();
    edit_env(process, policy, judged, "/env".to_string(), rec);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CredentialSection, NetworkMode};
    use crate::egress::credential::{Binding, Inject};
    use crate::rules::run_rule_with;
    use crate::FakeHost;
    use serde_json::json;
    use std::path::PathBuf;

    const BUNDLE: &str = "/run/vibe-shim/containers/r/c1/ca-bundle.pem";
    const P1: &str = "sk-ant-api03-PLACEHOLDERaaaaaaaaaaaaaaaa";
    const P2: &str = "sk-PLACEHOLDERbbbbbbbbbbbbbbbbbbbb";

    fn policy() -> Policy {
        let mut policy = Policy::default();
        policy.network.mode = NetworkMode::Proxy;
        for (name, env) in [
            ("anthropic", "ANTHROPIC_API_KEY"),
            ("openai", "OPENAI_API_KEY"),
        ] {
            policy.network.credentials.push(CredentialSection {
                name: name.into(),
                hosts: vec![format!("api.{name}.com")],
                env: env.into(),
                header: Some("x-api-key".into()),
                scheme: None,
                basic_user: None,
                source: PathBuf::from(format!("/etc/vibe-shim/credentials/{name}")),
                optional: true,
            });
        }
        policy
    }

    fn binding(name: &str, placeholder: &str) -> Binding {
        Binding {
            name: name.into(),
            hosts: vec![format!("api.{name}.com")],
            inject: Inject::Header {
                name: "x-api-key".into(),
                scheme: None,
            },
            source: PathBuf::from(format!("/etc/vibe-shim/credentials/{name}")),
            placeholder: placeholder.into(),
        }
    }

    fn create(bindings: Vec<Binding>) -> CreateContext {
        CreateContext {
            container_id: "c1".into(),
            credentials: bindings,
            trust_bundle: Some(PathBuf::from(BUNDLE)),
            ..CreateContext::default()
        }
    }

    fn run(spec: &mut Value, policy: &Policy, create: &CreateContext) -> Result<Record, Denial> {
        run_rule_with(apply, spec, policy, &FakeHost::new(), Some(create))
    }

    fn env_of(spec: &Value) -> Vec<String> {
        crate::lang::json::strings(spec.pointer("/process/env"))
    }

    fn bundle_mounts(spec: &Value) -> Vec<&Value> {
        spec["mounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["destination"] == TRUST_BUNDLE_PATH)
            .collect()
    }

    #[test]
    fn placeholders_bundle_variables_and_the_mount_are_added() {
        let mut spec = json!({
            "process": {"env": [
                "PATH=/bin",
                "ANTHROPIC_API_KEY=sk-ant-real-secret",
                "anthropic_api_key=x",
                "ssl_cert_file=/tmp/evil.pem",
                "NODE_EXTRA_CA_CERTS=/tmp/evil.pem",
                "OPENAI_API_KEY"
            ]},
            "mounts": [{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"}]
        });
        let cx = create(vec![binding("anthropic", P1), binding("openai", P2)]);
        let rec = run(&mut spec, &policy(), &cx).unwrap();
        let env = env_of(&spec);
        let mut want = vec![
            "PATH=/bin".to_string(),
            format!("ANTHROPIC_API_KEY={P1}"),
            format!("OPENAI_API_KEY={P2}"),
        ];
        want.extend(
            TRUST_BUNDLE_ENV
                .iter()
                .map(|n| format!("{n}={TRUST_BUNDLE_PATH}")),
        );
        assert_eq!(env, want);
        assert_eq!(
            bundle_mounts(&spec),
            [&json!({
                "destination": TRUST_BUNDLE_PATH,
                "type": "bind",
                "source": BUNDLE,
                "options": ["bind", "ro", "nosuid", "nodev", "noexec"]
            })]
        );
        assert_eq!(spec["mounts"].as_array().unwrap().len(), 2);
        // Names only: neither the client's secret nor the placeholders.
        let logged = serde_json::to_string(&rec).unwrap();
        for hidden in ["real-secret", "evil", P1, P2] {
            assert!(!logged.contains(hidden), "{hidden}: {logged}");
        }
        assert!(logged.contains("ANTHROPIC_API_KEY"), "{logged}");
        assert!(logged.contains(BUNDLE), "{logged}");
    }

    #[test]
    fn one_binding_still_drops_the_others_client_value() {
        let mut spec = json!({"process": {"env": ["OPENAI_API_KEY=sk-real"]}});
        let cx = create(vec![binding("anthropic", P1)]);
        run(&mut spec, &policy(), &cx).unwrap();
        let env = env_of(&spec);
        assert!(!env.iter().any(|e| e.contains("sk-real")), "{env:?}");
        assert_eq!(env[0], format!("ANTHROPIC_API_KEY={P1}"));
        assert_eq!(env.len(), 1 + TRUST_BUNDLE_ENV.len());
    }

    #[test]
    fn no_binding_adds_nothing_but_client_values_still_go() {
        let mut spec = json!({"process": {"env": ["PATH=/bin", "SSL_CERT_FILE=/x", "ANTHROPIC_API_KEY=k"]}, "mounts": []});
        let rec = run(&mut spec, &policy(), &create(vec![])).unwrap();
        assert_eq!(env_of(&spec), ["PATH=/bin"]);
        assert!(bundle_mounts(&spec).is_empty());
        assert_eq!(rec.changes.len(), 1);
        // No env at all: none is made.
        let mut spec = json!({"process": {"args": ["sh"]}});
        let rec = run(&mut spec, &policy(), &create(vec![])).unwrap();
        assert_eq!(spec, json!({"process": {"args": ["sh"]}}));
        assert!(rec.changes.is_empty());
    }

    #[test]
    fn without_credentials_in_the_policy_nothing_changes() {
        let mut policy = Policy::default();
        policy.network.mode = NetworkMode::Proxy;
        let original = json!({
            "process": {"env": ["SSL_CERT_FILE=/x", "ANTHROPIC_API_KEY=k"]},
            "mounts": [{"destination": "/etc/vibe-shim", "type": "tmpfs", "source": "tmpfs"}]
        });
        let mut spec = original.clone();
        let rec = run(&mut spec, &policy, &create(vec![])).unwrap();
        assert_eq!(spec, original);
        assert!(rec.changes.is_empty());
    }

    #[test]
    fn client_mounts_at_the_bundle_are_refused() {
        for dest in [
            TRUST_BUNDLE_PATH,
            "/etc/vibe-shim",
            "/etc/vibe-shim/",
            "/etc//vibe-shim/x/../credentials",
            "/etc/vibe-shim/ca-bundle.pem",
        ] {
            for kind in ["bind", "tmpfs"] {
                let mut spec = json!({"mounts": [
                    {"destination": dest, "type": kind, "source": "/srv/x", "options": ["bind"]}
                ]});
                let err = run(
                    &mut spec,
                    &policy(),
                    &create(vec![binding("anthropic", P1)]),
                )
                .unwrap_err();
                assert_eq!(err.rule, RULE, "{dest}");
                assert_eq!(err.field, "/mounts/0/destination");
            }
        }
        // Beside it is fine.
        let mut spec =
            json!({"mounts": [{"destination": "/etc/vibe-shimx", "type": "tmpfs", "source": "t"}]});
        run(
            &mut spec,
            &policy(),
            &create(vec![binding("anthropic", P1)]),
        )
        .unwrap();
    }

    #[test]
    fn an_earlier_creates_own_mount_is_replaced_not_refused() {
        let mut spec = json!({
            "process": {"env": [format!("ANTHROPIC_API_KEY=sk-ant-api03-OLDPLACEHOLDERxxxxxxxxxx")]},
            "mounts": [{"destination": TRUST_BUNDLE_PATH, "type": "bind", "source": BUNDLE, "options": ["bind", "ro"]}]
        });
        run(
            &mut spec,
            &policy(),
            &create(vec![binding("anthropic", P1)]),
        )
        .unwrap();
        assert_eq!(bundle_mounts(&spec).len(), 1);
        assert_eq!(env_of(&spec)[0], format!("ANTHROPIC_API_KEY={P1}"));
        // Another source at that destination is a client's: refused.
        let mut spec = json!({"mounts": [
            {"destination": TRUST_BUNDLE_PATH, "type": "bind", "source": "/srv/evil.pem", "options": ["bind"]}
        ]});
        assert!(run(
            &mut spec,
            &policy(),
            &create(vec![binding("anthropic", P1)])
        )
        .is_err());
    }

    #[test]
    fn the_chain_leaves_the_bundle_mount_to_this_rule() {
        // The binds rule would refuse a source outside filesystem.bind;
        // pins would try to stage it. Both skip exactly this mount.
        let policy = policy();
        let host = FakeHost::new();
        let spec: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/docker-20.10/config-default.json"
        ))
        .unwrap();
        let id = spec["linux"]["cgroupsPath"].as_str().unwrap();
        let cx = CreateContext {
            container_id: id.trim_start_matches("/docker/").to_string(),
            ..create(vec![binding("anthropic", P1)])
        };
        let rewrite = crate::enforce_create(spec, &policy, &host, &cx).unwrap();
        let doc = &rewrite.document;
        let mounts = bundle_mounts(doc);
        assert_eq!(mounts.len(), 1, "{doc}");
        assert_eq!(mounts[0]["source"], BUNDLE);
        let at = doc["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .position(|m| m["destination"] == TRUST_BUNDLE_PATH)
            .unwrap();
        let pins = crate::rules::binds::pins(doc, &policy, &host, &cx).unwrap();
        assert!(
            !pins.is_empty() && pins.iter().all(|p| p.index != at),
            "{pins:?}"
        );
        // A copy of it at another destination is judged like any bind.
        let mut other = doc.clone();
        other["mounts"].as_array_mut().unwrap().push(
            json!({"destination": "/x", "type": "bind", "source": BUNDLE, "options": ["bind"]}),
        );
        assert!(crate::rules::binds::pins(&other, &policy, &host, &cx).is_err());
    }

    #[test]
    fn exec_keeps_the_containers_values() {
        let policy = policy();
        let container = json!({"env": [
            "PATH=/bin",
            format!("ANTHROPIC_API_KEY={P1}"),
            format!("SSL_CERT_FILE={TRUST_BUNDLE_PATH}"),
        ]});
        let mut process = json!({"env": [
            "TERM=xterm",
            "ANTHROPIC_API_KEY=sk-ant-real",
            "Ssl_Cert_File=/tmp/evil.pem",
            "OPENAI_API_KEY=sk-real"
        ]});
        let mut rec = Record::default();
        keep_container(&mut process, &container, &policy, &mut rec);
        assert_eq!(
            crate::lang::json::strings(process.get("env")),
            [
                "TERM=xterm".to_string(),
                format!("ANTHROPIC_API_KEY={P1}"),
                format!("SSL_CERT_FILE={TRUST_BUNDLE_PATH}"),
            ]
        );
        let logged = serde_json::to_string(&rec).unwrap();
        assert!(!logged.contains("real") && !logged.contains(P1), "{logged}");
        // Through the exec chain, from a process without env.
        let spec = json!({"process": container});
        let rewrite = crate::engine::enforce_exec(
            &json!({"args": ["sh"], "cwd": "/"}),
            &spec,
            &policy,
            &FakeHost::new(),
        )
        .unwrap();
        let env = crate::lang::json::strings(rewrite.document.get("env"));
        assert!(env.contains(&format!("ANTHROPIC_API_KEY={P1}")), "{env:?}");
        assert!(
            env.contains(&format!("SSL_CERT_FILE={TRUST_BUNDLE_PATH}")),
            "{env:?}"
        );
    }
}
