//! Podman: a containers.conf(5) drop-in (podman >= 4 reads
//! /etc/containers/containers.conf.d/*.conf after containers.conf), so
//! nothing of the admin's is edited: `[engine.runtimes] vibe-shim = [path]`
//! and, with `--default`, `[engine] runtime = "vibe-shim"`.

use serde_json::Value as Json;

use super::toml_doc;
use super::{Edit, EditError, RUNTIME_NAME};

pub const DEFAULT_DROP_IN: &str = "/etc/containers/containers.conf.d/vibe-shim.conf";
const HEADER: &str =
    "# Written by `vibe-shim install podman`; `vibe-shim uninstall podman` removes it.\n";

fn key(keys: &[&str]) -> Vec<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

pub fn add(text: &str, binary: &str, default: bool) -> Result<Edit, EditError> {
    let doc = toml_doc::parse(text)?;
    let mut sets = vec![(
        key(&["engine", "runtimes", RUNTIME_NAME]),
        Json::from(vec![binary]),
    )];
    if default {
        sets.push((key(&["engine", "runtime"]), Json::from(RUNTIME_NAME)));
    }
    let mut edit = toml_doc::set_all(doc, &sets)?;
    if text.trim().is_empty() {
        edit.text = edit.text.map(|t| format!("{HEADER}{t}"));
    }
    Ok(edit)
}

pub fn reload_hint() -> &'static str {
    "podman reads containers.conf at every command: nothing to reload. \
     Use it with `podman --runtime vibe-shim run ...` (or install with --default)."
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::Record;

    #[test]
    fn drop_in_new_and_idempotent() {
        let edit = add("", "/usr/bin/vibe-shim", false).unwrap();
        let text = edit.text.unwrap();
        assert_eq!(
            text,
            format!("{HEADER}[engine.runtimes]\nvibe-shim = [\"/usr/bin/vibe-shim\"]\n")
        );
        assert!(add(&text, "/usr/bin/vibe-shim", false)
            .unwrap()
            .text
            .is_none());
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        assert!(parsed["engine"].get("runtime").is_none());
    }

    #[test]
    fn into_an_existing_containers_conf() {
        let conf = "[engine]\n# keep me\nevents_logger = \"file\"\n\n[network]\nnetwork_backend = \"netavark\"\n";
        let edit = add(conf, "/usr/bin/vibe-shim", true).unwrap();
        let text = edit.text.unwrap();
        assert!(text.contains("# keep me"));
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(parsed["engine"]["runtime"].as_str(), Some("vibe-shim"));
        assert_eq!(parsed["engine"]["events_logger"].as_str(), Some("file"));
        let record = Record {
            changes: edit.changes,
            created_tables: edit.created_tables,
            ..Record::default()
        };
        assert_eq!(toml_doc::revert(&text, &record).unwrap(), conf);
    }
}
