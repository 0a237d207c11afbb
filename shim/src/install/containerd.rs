//! containerd's config.toml: a CRI runtime `vibe-shim` of type
//! io.containerd.runc.v2 whose `options.BinaryName` is vibe-shim, so the
//! runc shim execs vibe-shim where it would exec runc. The CRI plugin's
//! name depends on the config's `version`:
//! - version 3 (containerd 2.x): io.containerd.cri.v1.runtime
//! - version 2 (containerd 1.x): io.containerd.grpc.v1.cri
//! - no `version` in a non-empty file is version 1, where plugins go by
//!   their short name (`cri`); containerd 1.x and 2.x both migrate it.
//!
//! An empty or missing file gets the version the installed containerd
//! writes itself.

use serde_json::Value as Json;

use super::toml_doc;
use super::{Edit, EditError, RUNTIME_NAME};

pub const DEFAULT_CONFIG: &str = "/etc/containerd/config.toml";
pub const RUNC_V2: &str = "io.containerd.runc.v2";

/// The runtime table's path for a config version.
pub fn runtime_path(version: i64) -> Result<Vec<String>, EditError> {
    let cri = match version {
        1 => "cri",
        2 => "io.containerd.grpc.v1.cri",
        3 => "io.containerd.cri.v1.runtime",
        v => {
            return Err(EditError::Shape(format!(
                "config version {v} is not one vibe-shim knows (1, 2, 3)"
            )))
        }
    };
    Ok(["plugins", cri, "containerd", "runtimes", RUNTIME_NAME]
        .iter()
        .map(|s| s.to_string())
        .collect())
}

/// `fresh_version`: what to write into an empty file (2 for containerd
/// 1.x, 3 for 2.x).
pub fn add(text: &str, binary: &str, fresh_version: i64) -> Result<Edit, EditError> {
    let mut doc = toml_doc::parse(text)?;
    let version = match doc.get("version") {
        Some(item) => item.as_integer().ok_or("`version` is not an integer")?,
        None if doc.is_empty() => {
            // The version is part of the file's meaning, not of what
            // vibe-shim adds: not recorded, it stays if the admin adds more.
            doc.insert("version", toml_edit::value(fresh_version));
            fresh_version
        }
        None => 1,
    };
    let table = runtime_path(version)?;
    let with = |keys: &[&str]| {
        let mut p = table.clone();
        p.extend(keys.iter().map(|k| k.to_string()));
        p
    };
    toml_doc::set_all(
        doc,
        &[
            (with(&["runtime_type"]), Json::from(RUNC_V2)),
            (with(&["options", "BinaryName"]), Json::from(binary)),
        ],
    )
}

/// The containerd major version from `containerd --version`
/// ("containerd github.com/containerd/containerd 1.6.20~ds1 ...").
pub fn major_version(version_output: &str) -> Option<u32> {
    version_output
        .split_whitespace()
        .nth(2)?
        .trim_start_matches('v')
        .split('.')
        .next()?
        .parse()
        .ok()
}

pub fn reload_hint() -> &'static str {
    "containerd reads its config only at start: `systemctl restart containerd`. \
     Running containers keep running (their shims outlive the restart). \
     Kubernetes: a RuntimeClass with `handler: vibe-shim` selects it \
     (packaging/containerd/runtimeclass.yaml)."
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::{toml_doc, Record};

    const V2: &str = r#"# the admin's containerd config
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9" # pinned
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
"#;

    fn round_trip(text: &str, fresh: i64) -> (String, Record) {
        let edit = add(text, "/usr/bin/vibe-shim", fresh).unwrap();
        let new = edit.text.unwrap();
        let record = Record {
            changes: edit.changes,
            created_tables: edit.created_tables,
            ..Record::default()
        };
        (new, record)
    }

    #[test]
    fn version_2_keeps_comments_and_foreign_tables() {
        let (new, record) = round_trip(V2, 3);
        assert!(new.starts_with(V2.trim_end()), "{new}");
        assert!(new.contains(
            "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.vibe-shim]\nruntime_type = \"io.containerd.runc.v2\""
        ), "{new}");
        assert!(new.contains(
            "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.vibe-shim.options]\nBinaryName = \"/usr/bin/vibe-shim\""
        ), "{new}");
        let parsed: toml::Table = toml::from_str(&new).unwrap();
        assert_eq!(
            parsed["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"]
                ["runtime_type"]
                .as_str(),
            Some(RUNC_V2)
        );
        // Idempotent.
        assert!(add(&new, "/usr/bin/vibe-shim", 3).unwrap().text.is_none());
        // Revert gives back the original text exactly.
        assert_eq!(toml_doc::revert(&new, &record).unwrap(), V2);
    }

    #[test]
    fn version_3_and_version_1_paths() {
        let v3 = "version = 3\n\n[plugins.'io.containerd.cri.v1.runtime']\nenable_cdi = true\n";
        let (new, record) = round_trip(v3, 2);
        let parsed: toml::Table = toml::from_str(&new).unwrap();
        let rt = &parsed["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]
            ["vibe-shim"];
        assert_eq!(
            rt["options"]["BinaryName"].as_str(),
            Some("/usr/bin/vibe-shim")
        );
        assert_eq!(toml_doc::revert(&new, &record).unwrap(), v3);

        let v1 = "root = \"/var/lib/containerd\"\n";
        let (new, record) = round_trip(v1, 2);
        let parsed: toml::Table = toml::from_str(&new).unwrap();
        assert_eq!(
            parsed["plugins"]["cri"]["containerd"]["runtimes"]["vibe-shim"]["runtime_type"]
                .as_str(),
            Some(RUNC_V2)
        );
        assert!(parsed.get("version").is_none());
        assert_eq!(toml_doc::revert(&new, &record).unwrap(), v1);
    }

    #[test]
    fn empty_file_gets_the_installed_containerds_version() {
        let (new, _) = round_trip("", 2);
        assert!(new.starts_with("version = 2\n"), "{new}");
        assert!(new.contains("io.containerd.grpc.v1.cri"));
        let (new, _) = round_trip("", 3);
        assert!(new.starts_with("version = 3\n"), "{new}");
        assert!(new.contains("io.containerd.cri.v1.runtime"));
    }

    #[test]
    fn admin_changes_since_install_stay() {
        let (new, record) = round_trip(V2, 3);
        let edited = format!("{new}\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.vibe-shim.options]\n");
        // A file with a duplicate table is not TOML: use a real edit instead.
        assert!(toml_doc::parse(&edited).is_err());
        let edited = new.replace(
            "BinaryName = \"/usr/bin/vibe-shim\"",
            "BinaryName = \"/usr/bin/vibe-shim\"\nSystemdCgroup = true",
        );
        let back = toml_doc::revert(&edited, &record).unwrap();
        let parsed: toml::Table = toml::from_str(&back).unwrap();
        let rt =
            &parsed["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["vibe-shim"];
        assert!(rt.get("runtime_type").is_none());
        assert_eq!(rt["options"]["SystemdCgroup"].as_bool(), Some(true));
        assert!(rt["options"].get("BinaryName").is_none());
    }

    #[test]
    fn unknown_versions_and_inline_tables_are_refused() {
        assert!(add("version = 4\n", "/b", 2).is_err());
        assert!(add("version = \"2\"\n", "/b", 2).is_err());
        assert!(add("version = 2\nplugins = { x = 1 }\n", "/b", 2).is_err());
    }

    #[test]
    fn major_version_from_the_cli() {
        assert_eq!(
            major_version("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1"),
            Some(1)
        );
        assert_eq!(
            major_version(
                "containerd containerd.io v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376"
            ),
            Some(2)
        );
        assert_eq!(major_version("garbage"), None);
    }
}
