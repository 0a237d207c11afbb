//! Drop-in policy files: `<dir>/<stem>.toml` plus `<dir>/<stem>.d/*.toml`
//! (the caller reads them, in byte order of their names). This module only
//! merges text.
//!
//! Each drop-in is checked on its own as strictly as a whole policy file
//! (syntax, unknown keys, types; the error names that file and line). The
//! files are then merged as TOML values, in order: tables merge key by key,
//! a list is appended to the list before it (the built-in default's when no
//! earlier file set it), any other value replaces the one before (the last
//! file wins). A key that is a table or a list in one file and something
//! else in another is an error naming both files. The merged document is
//! then parsed and validated like a single policy file.

use toml::{Table, Value};

use crate::config::{ConfigError, Policy};

/// One policy file: `path` names it in errors, `label` in `policy check`.
#[derive(Debug, Clone)]
pub struct Layer {
    pub path: String,
    pub label: String,
    pub text: String,
}

/// A value a drop-in set (`appended`: items it added to a list).
#[derive(Debug, Clone, PartialEq)]
pub struct Origin {
    /// Dotted key, e.g. `network.mode`.
    pub key: String,
    /// The value (or the appended items) as TOML.
    pub value: String,
    pub appended: bool,
    /// The drop-in's label.
    pub file: String,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = if self.appended { "+=" } else { "=" };
        write!(f, "{} {op} {}  ({})", self.key, self.value, self.file)
    }
}

/// Parses the main file and its drop-ins (in order) into one validated
/// policy, with what each drop-in set. `origin` names the result in
/// validation errors.
pub fn merge_layers(main: &Layer, dropins: &[Layer]) -> Result<(Policy, Vec<Origin>), ConfigError> {
    if dropins.is_empty() {
        let policy = Policy::from_toml_str(&main.text, std::path::Path::new(&main.path))?;
        return Ok((policy, Vec::new()));
    }
    let mut merged = parse_layer(main)?;
    let mut owners = Owners::default();
    owners.claim_all(&merged, "", &main.path);
    let defaults = Value::try_from(Policy::default())
        .ok()
        .and_then(|v| v.as_table().cloned())
        .unwrap_or_default();
    let mut origins = Vec::new();
    for layer in dropins {
        let table = parse_layer(layer)?;
        merge_table(
            &mut merged,
            table,
            Some(&defaults),
            "",
            layer,
            &mut owners,
            &mut origins,
        )?;
    }
    let text = toml::to_string(&merged).map_err(|e| ConfigError::Parse {
        path: main.path.clone(),
        message: format!("cannot merge the drop-ins: {e}"),
    })?;
    let names: Vec<&str> = dropins.iter().map(|l| l.label.as_str()).collect();
    let origin = format!("{} + {}", main.path, names.join(", "));
    let policy = Policy::from_toml_str(&text, std::path::Path::new(&origin))?;
    Ok((policy, origins))
}

/// The file as a table, after checking it alone as a whole policy file.
fn parse_layer(layer: &Layer) -> Result<Table, ConfigError> {
    let fail = |e: toml::de::Error| ConfigError::Parse {
        path: layer.path.clone(),
        message: e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    };
    toml::from_str::<Policy>(&layer.text).map_err(fail)?;
    toml::from_str::<Table>(&layer.text).map_err(fail)
}

/// Which file last set each dotted key (for conflict errors).
#[derive(Default)]
struct Owners(std::collections::BTreeMap<String, String>);

impl Owners {
    fn claim_all(&mut self, table: &Table, prefix: &str, file: &str) {
        for (key, value) in table {
            let key = join(prefix, key);
            if let Value::Table(inner) = value {
                self.claim_all(inner, &key, file);
            }
            self.0.insert(key, file.to_string());
        }
    }

    fn of(&self, key: &str) -> &str {
        self.0
            .get(key)
            .map_or("the built-in default", String::as_str)
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Table(_) => "a table",
        Value::Array(_) => "a list",
        _ => "a value",
    }
}

/// Merges `overlay` (from `layer`) into `base`; `defaults` is the built-in
/// default at the same place.
fn merge_table(
    base: &mut Table,
    overlay: Table,
    defaults: Option<&Table>,
    prefix: &str,
    layer: &Layer,
    owners: &mut Owners,
    origins: &mut Vec<Origin>,
) -> Result<(), ConfigError> {
    for (name, value) in overlay {
        let key = join(prefix, &name);
        let default = defaults.and_then(|d| d.get(&name));
        let conflict = |earlier: &Value, owners: &Owners| ConfigError::Invalid {
            path: layer.path.clone(),
            key: key.clone(),
            message: format!(
                "{} here, but {} earlier in {}",
                kind(&value),
                kind(earlier),
                owners.of(&key)
            ),
        };
        match (base.get_mut(&name), value.clone()) {
            (Some(Value::Table(into)), Value::Table(from)) => {
                let defaults = default.and_then(Value::as_table);
                merge_table(into, from, defaults, &key, layer, owners, origins)?;
            }
            (None, Value::Table(from)) => {
                let mut into = Table::new();
                let defaults = default.and_then(Value::as_table);
                merge_table(&mut into, from, defaults, &key, layer, owners, origins)?;
                base.insert(name, Value::Table(into));
            }
            (Some(Value::Array(into)), Value::Array(from)) => {
                append(into, from, &key, layer, origins);
            }
            (None, Value::Array(from)) => {
                let mut into = match default {
                    Some(Value::Array(items)) => items.clone(),
                    _ => Vec::new(),
                };
                append(&mut into, from, &key, layer, origins);
                base.insert(name, Value::Array(into));
            }
            (Some(earlier), value) => {
                if matches!(earlier, Value::Table(_) | Value::Array(_))
                    || matches!(value, Value::Table(_) | Value::Array(_))
                {
                    return Err(conflict(earlier, owners));
                }
                *earlier = value.clone();
                set(&key, &value, layer, origins);
            }
            (None, value) => {
                set(&key, &value, layer, origins);
                base.insert(name, value);
            }
        }
        owners.0.insert(key, layer.path.clone());
    }
    Ok(())
}

fn append(
    into: &mut Vec<Value>,
    from: Vec<Value>,
    key: &str,
    layer: &Layer,
    origins: &mut Vec<Origin>,
) {
    origins.push(Origin {
        key: key.to_string(),
        value: Value::Array(from.clone()).to_string(),
        appended: true,
        file: layer.label.clone(),
    });
    into.extend(from);
}

/// A scalar set: only the last file's setting is shown.
fn set(key: &str, value: &Value, layer: &Layer, origins: &mut Vec<Origin>) {
    origins.retain(|o| o.key != key || o.appended);
    origins.push(Origin {
        key: key.to_string(),
        value: value.to_string(),
        appended: false,
        file: layer.label.clone(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{NetworkMode, TmpfsEntry, TmpfsMode};

    fn layer(name: &str, text: &str) -> Layer {
        Layer {
            path: format!("/etc/vibe-shim/{name}"),
            label: name.to_string(),
            text: text.to_string(),
        }
    }

    fn merge(main: &str, dropins: &[(&str, &str)]) -> Result<(Policy, Vec<Origin>), ConfigError> {
        let dropins: Vec<Layer> = dropins.iter().map(|(n, t)| layer(n, t)).collect();
        merge_layers(&layer("config.toml", main), &dropins)
    }

    #[test]
    fn no_drop_ins_is_the_main_file_alone() {
        let (policy, origins) = merge("[process]\npids_limit = 7\n", &[]).unwrap();
        assert_eq!(policy.process.pids_limit, 7);
        assert!(origins.is_empty());
        let err = merge("[process]\nbogus = 1\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("config.toml") && err.contains("line 2"),
            "{err}"
        );
    }

    #[test]
    fn scalars_last_file_wins() {
        // A list cannot be emptied by a later file, and the merged result is
        // validated as one file: allow entries need mode "allowlist".
        let err = merge(
            "[network]\nmode = \"none\"\n",
            &[
                (
                    "config.d/10-net.toml",
                    "[network]\nmode = \"allowlist\"\nallow = [\"192.0.2.1\"]\n",
                ),
                (
                    "config.d/20-net.toml",
                    "[network]\nmode = \"open\"\nallow = []\n",
                ),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("config.d/20-net.toml") && err.contains("network.allow"),
            "{err}"
        );
        let (policy, origins) = merge(
            "[network]\nmode = \"none\"\n",
            &[
                ("config.d/10-net.toml", "[network]\nmode = \"allowlist\"\n"),
                ("config.d/20-net.toml", "[network]\nmode = \"open\"\n"),
            ],
        )
        .unwrap();
        assert_eq!(policy.network.mode, NetworkMode::Open);
        assert_eq!(
            origins.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["network.mode = \"open\"  (config.d/20-net.toml)"]
        );
    }

    #[test]
    fn lists_append_to_the_earlier_file_or_the_default() {
        let (policy, origins) = merge(
            "[process]\nenv_allow = [\"PATH\"]\n",
            &[
                ("config.d/a.toml", "[process]\nenv_allow = [\"TERM\"]\n[filesystem]\ntmpfs = [{ path = \"/cache\", mode = \"0700\" }]\n"),
                ("config.d/b.toml", "[process]\nenv_allow = [\"TZ\"]\n"),
            ],
        )
        .unwrap();
        assert_eq!(policy.process.env_allow, ["PATH", "TERM", "TZ"]);
        let mut expected = Policy::default().filesystem.tmpfs;
        expected.push(TmpfsEntry {
            path: "/cache".into(),
            mode: TmpfsMode(0o700),
        });
        assert_eq!(policy.filesystem.tmpfs, expected);
        let lines: Vec<String> = origins.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "filesystem.tmpfs += [{ mode = \"0700\", path = \"/cache\" }]  (config.d/a.toml)",
                "process.env_allow += [\"TERM\"]  (config.d/a.toml)",
                "process.env_allow += [\"TZ\"]  (config.d/b.toml)",
            ]
        );
    }

    #[test]
    fn nested_tables_merge_key_by_key() {
        let (policy, origins) = merge(
            "[resources]\nmemory_max = \"1g\"\n[resources.rlimits]\nRLIMIT_NOFILE = 100\n",
            &[("config.d/r.toml", "[resources.rlimits]\nRLIMIT_NPROC = 50\n[[hooks.allow]]\nstages = [\"prestart\"]\npath = \"/usr/bin/h\"\nargs = [\"h\"]\n")],
        )
        .unwrap();
        assert_eq!(policy.resources.memory_max.0, 1 << 30);
        assert_eq!(policy.resources.rlimits["RLIMIT_NOFILE"], 100);
        assert_eq!(policy.resources.rlimits["RLIMIT_NPROC"], 50);
        // The built-in hook list is kept and the new entry appended.
        let defaults = Policy::default().hooks.allow;
        assert_eq!(policy.hooks.allow.len(), defaults.len() + 1);
        assert_eq!(policy.hooks.allow[..defaults.len()], defaults[..]);
        // Keys in name order within a file.
        assert_eq!(origins[0].key, "hooks.allow");
        assert_eq!(origins[1].key, "resources.rlimits.RLIMIT_NPROC");
    }

    #[test]
    fn a_type_conflict_names_both_files() {
        let main = layer("config.toml", "[network]\nmode = \"none\"\n");
        let mut merged = parse_layer(&main).unwrap();
        let mut owners = Owners::default();
        owners.claim_all(&merged, "", &main.path);
        let later = layer("config.d/x.toml", "");
        let overlay: Table = toml::from_str("[network.mode]\nx = 1\n").unwrap();
        let err = merge_table(
            &mut merged,
            overlay,
            None,
            "",
            &later,
            &mut owners,
            &mut Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("/etc/vibe-shim/config.d/x.toml")
                && err.contains("network.mode")
                && err.contains("a table here, but a value earlier in /etc/vibe-shim/config.toml"),
            "{err}"
        );
        let overlay: Table = toml::from_str("[network]\nallow = \"192.0.2.1\"\n").unwrap();
        let mut base: Table = toml::from_str("[network]\nallow = [\"192.0.2.2\"]\n").unwrap();
        let err = merge_table(
            &mut base,
            overlay,
            None,
            "",
            &later,
            &mut Owners::default(),
            &mut Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("a value here, but a list earlier in the built-in default"),
            "{err}"
        );
    }

    #[test]
    fn each_drop_in_is_checked_alone() {
        let err = merge("", &[("config.d/10-x.toml", "[network]\nmod = \"open\"\n")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/etc/vibe-shim/config.d/10-x.toml")
                && err.contains("mod")
                && err.contains("line 2"),
            "{err}"
        );
        let err = merge("", &[("config.d/y.toml", "[network]\nports = 8080\n")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("config.d/y.toml"), "{err}");
        let err = merge("", &[("config.d/z.toml", "[network\n")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("config.d/z.toml"), "{err}");
    }
}
