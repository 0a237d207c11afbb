//! daemon.json: `runtimes.vibe-shim`, and optionally `default-runtime` and
//! `authorization-plugins`. serde_json keeps the admin's key order
//! (preserve_order); the indentation becomes two spaces, which is why
//! uninstall puts the backup's bytes back when nothing changed since.

use serde_json::{Map, Value};

use super::{Edit, EditError, KeyChange, Record, RUNTIME_NAME};

pub const DEFAULT_DAEMON_JSON: &str = "/etc/docker/daemon.json";
/// The authz plugin's name: dockerd finds it as
/// /run/docker/plugins/<name>.sock.
pub const AUTHZ_PLUGIN: &str = "vibe-shim";
pub const AUTHZ_SOCKET: &str = "/run/docker/plugins/vibe-shim.sock";

const RUNTIMES: &str = "runtimes";
const DEFAULT_RUNTIME: &str = "default-runtime";
const AUTHZ: &str = "authorization-plugins";

#[derive(Debug, Clone, Default)]
pub struct DockerOpts {
    /// The binary dockerd runs (absolute).
    pub path: String,
    /// A policy file other than the default, as `runtimeArgs`.
    pub policy: Option<String>,
    pub default: bool,
    pub authz: bool,
}

fn parse(text: &str) -> Result<Map<String, Value>, EditError> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text)? {
        Value::Object(map) => Ok(map),
        _ => Err("daemon.json is not a JSON object".into()),
    }
}

fn render(map: &Map<String, Value>) -> Result<String, EditError> {
    Ok(serde_json::to_string_pretty(map)? + "\n")
}

pub fn entry(opts: &DockerOpts) -> Value {
    let mut entry = Map::new();
    entry.insert("path".into(), Value::from(opts.path.as_str()));
    if let Some(policy) = &opts.policy {
        entry.insert(
            "runtimeArgs".into(),
            Value::from(vec!["--config", policy.as_str()]),
        );
    }
    Value::Object(entry)
}

/// Adds what `opts` asks for; `text: None` in the result when all of it is
/// there already.
pub fn add(text: &str, opts: &DockerOpts) -> Result<Edit, EditError> {
    let mut map = parse(text)?;
    let mut changes = Vec::new();
    let mut set = |map: &mut Map<String, Value>, key: &str, after: Value| {
        let before = map.insert(key.to_string(), after.clone());
        changes.push(KeyChange {
            path: vec![key.to_string()],
            before,
            after,
        });
    };

    let runtimes = match map.get(RUNTIMES) {
        None => Map::new(),
        Some(Value::Object(r)) => r.clone(),
        Some(_) => return Err(EditError::Shape(format!("{RUNTIMES:?} is not an object"))),
    };
    let want = entry(opts);
    if runtimes.get(RUNTIME_NAME) != Some(&want) {
        let mut runtimes = runtimes;
        runtimes.insert(RUNTIME_NAME.into(), want);
        set(&mut map, RUNTIMES, Value::Object(runtimes));
    }
    if opts.default && map.get(DEFAULT_RUNTIME) != Some(&Value::from(RUNTIME_NAME)) {
        set(&mut map, DEFAULT_RUNTIME, Value::from(RUNTIME_NAME));
    }
    if opts.authz {
        let mut plugins = match map.get(AUTHZ) {
            None => Vec::new(),
            Some(Value::Array(p)) if p.iter().all(Value::is_string) => p.clone(),
            Some(_) => {
                return Err(EditError::Shape(format!(
                    "{AUTHZ:?} is not a list of names"
                )))
            }
        };
        if !plugins.contains(&Value::from(AUTHZ_PLUGIN)) {
            plugins.push(Value::from(AUTHZ_PLUGIN));
            set(&mut map, AUTHZ, Value::Array(plugins));
        }
    }
    let text = match changes.is_empty() {
        true => None,
        false => Some(render(&map)?),
    };
    Ok(Edit {
        text,
        changes,
        created_tables: Vec::new(),
    })
}

/// Takes out what install put in, leaving whatever the admin changed since.
pub fn revert(text: &str, record: &Record) -> Result<String, EditError> {
    let mut map = parse(text)?;
    for change in record.changes.iter().rev() {
        let Some(key) = change.path.first() else {
            continue;
        };
        let before = change.before.as_ref();
        match key.as_str() {
            RUNTIMES => {
                let Some(Value::Object(runtimes)) = map.get_mut(RUNTIMES) else {
                    continue;
                };
                let ours = change.after.get(RUNTIME_NAME);
                if runtimes.get(RUNTIME_NAME) == ours {
                    match before.and_then(|b| b.get(RUNTIME_NAME)) {
                        Some(old) => runtimes.insert(RUNTIME_NAME.into(), old.clone()),
                        None => runtimes.shift_remove(RUNTIME_NAME),
                    };
                }
                if runtimes.is_empty() && before.is_none() {
                    map.shift_remove(RUNTIMES);
                }
            }
            DEFAULT_RUNTIME if map.get(DEFAULT_RUNTIME) == Some(&change.after) => {
                match before {
                    Some(old) => map.insert(DEFAULT_RUNTIME.into(), old.clone()),
                    None => map.shift_remove(DEFAULT_RUNTIME),
                };
            }
            AUTHZ => {
                let Some(Value::Array(plugins)) = map.get_mut(AUTHZ) else {
                    continue;
                };
                let had = before
                    .and_then(Value::as_array)
                    .is_some_and(|b| b.contains(&Value::from(AUTHZ_PLUGIN)));
                if !had {
                    plugins.retain(|p| p != AUTHZ_PLUGIN);
                }
                if plugins.is_empty() && before.is_none() {
                    map.shift_remove(AUTHZ);
                }
            }
            _ => {}
        }
    }
    render(&map)
}

/// What to tell the admin after a change.
pub fn reload_hint(authz: bool) -> String {
    let mut hint = String::from(
        "runtimes, default-runtime and authorization-plugins are all reloaded live: \
         `systemctl reload docker` (or `kill -HUP $(pidof dockerd)`); no restart needed, \
         running containers are not touched.",
    );
    if authz {
        hint.push_str(
            "\nStart the plugin before the reload (`systemctl enable --now vibe-shim-authz`): \
             dockerd exits (a fatal error) when a reload names a plugin it cannot find at \
             /run/docker/plugins/vibe-shim.sock, and refuses every request while it is unreachable.",
        );
    }
    hint
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADMIN: &str = r#"{
    "log-driver": "journald",
    "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}},
    "default-runtime": "nvidia",
    "authorization-plugins": ["opa"],
    "zzz": 1
}
"#;

    fn opts(default: bool, authz: bool) -> DockerOpts {
        DockerOpts {
            path: "/usr/bin/vibe-shim".into(),
            policy: None,
            default,
            authz,
        }
    }

    fn record(changes: Vec<KeyChange>) -> Record {
        Record {
            changes,
            ..Record::default()
        }
    }

    #[test]
    fn adds_runtime_default_and_plugin_keeping_foreign_keys_in_order() {
        let edit = add(ADMIN, &opts(true, true)).unwrap();
        let text = edit.text.unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["runtimes"]["vibe-shim"]["path"], "/usr/bin/vibe-shim");
        assert_eq!(
            v["runtimes"]["nvidia"]["path"],
            "/usr/bin/nvidia-container-runtime"
        );
        assert_eq!(v["default-runtime"], "vibe-shim");
        assert_eq!(
            v["authorization-plugins"],
            serde_json::json!(["opa", "vibe-shim"])
        );
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "log-driver",
                "runtimes",
                "default-runtime",
                "authorization-plugins",
                "zzz"
            ]
        );
        // Second run: already configured.
        assert!(add(&text, &opts(true, true)).unwrap().text.is_none());
        // Revert takes out exactly what was added.
        let back = revert(&text, &record(edit.changes)).unwrap();
        let orig: Value = serde_json::from_str(ADMIN).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&back).unwrap(), orig);
    }

    #[test]
    fn empty_or_absent_file_and_runtime_args() {
        let mut o = opts(false, false);
        o.policy = Some("/etc/vibe-shim/strict.toml".into());
        let edit = add("", &o).unwrap();
        let v: Value = serde_json::from_str(edit.text.as_ref().unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"runtimes": {"vibe-shim": {"path": "/usr/bin/vibe-shim",
                "runtimeArgs": ["--config", "/etc/vibe-shim/strict.toml"]}}})
        );
        assert!(v.get("default-runtime").is_none());
        let back = revert(edit.text.as_ref().unwrap(), &record(edit.changes)).unwrap();
        assert_eq!(back, "{}\n");
    }

    #[test]
    fn revert_keeps_what_the_admin_changed_since() {
        let edit = add("{}", &opts(true, true)).unwrap();
        let mut v: Value = serde_json::from_str(edit.text.as_ref().unwrap()).unwrap();
        v["authorization-plugins"]
            .as_array_mut()
            .unwrap()
            .push("other".into());
        v["default-runtime"] = "crun".into();
        v["runtimes"]["crun"] = serde_json::json!({"path": "/usr/bin/crun"});
        let back = revert(&v.to_string(), &record(edit.changes)).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&back).unwrap(),
            serde_json::json!({"runtimes": {"crun": {"path": "/usr/bin/crun"}},
                "default-runtime": "crun", "authorization-plugins": ["other"]})
        );
    }

    #[test]
    fn an_earlier_vibe_shim_entry_comes_back() {
        let old = r#"{"runtimes": {"vibe-shim": {"path": "/opt/vibe-shim"}}}"#;
        let edit = add(old, &opts(false, false)).unwrap();
        let back = revert(edit.text.as_ref().unwrap(), &record(edit.changes)).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&back).unwrap(),
            serde_json::from_str::<Value>(old).unwrap()
        );
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert!(add("[]", &opts(false, false)).is_err());
        assert!(add(r#"{"runtimes": 1}"#, &opts(false, false)).is_err());
        assert!(add(r#"{"authorization-plugins": "x"}"#, &opts(false, true)).is_err());
        assert!(add("{", &opts(false, false)).is_err());
    }
}
