//! Paths in a spec that runc resolves against its bundle directory.

use std::path::Path;

use serde_json::Value;

/// runc resolves a relative `root.path` and relative bind sources against
/// its bundle directory. runc gets vibe-shim's private directory as its
/// bundle, so they are anchored to the engine's bundle first, as runc would
/// have read them; the rules then judge absolute paths.
pub fn anchor_relative_paths(spec: &mut Value, bundle: &Path) {
    let anchor = |value: &mut Value| {
        if let Some(path) = value.as_str().filter(|p| !p.starts_with('/')) {
            *value = Value::from(bundle.join(path).to_string_lossy().into_owned());
        }
    };
    if let Some(root) = spec.pointer_mut("/root/path") {
        anchor(root);
    }
    let Some(Value::Array(mounts)) = spec.get_mut("mounts") else {
        return;
    };
    for mount in mounts {
        let bind = mount.get("type").and_then(Value::as_str) == Some("bind")
            || crate::lang::json::str_items(mount.get("options"))
                .any(|o| o == "bind" || o == "rbind");
        if let Some(source) = mount.get_mut("source").filter(|_| bind) {
            anchor(source);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn relative_root_and_bind_sources_are_anchored() {
        let mut spec = json!({
            "root": {"path": "rootfs"},
            "mounts": [
                {"type": "bind", "source": "data", "destination": "/d"},
                {"source": "opt", "destination": "/o", "options": ["rbind"]},
                {"type": "tmpfs", "source": "tmpfs", "destination": "/t"},
                {"type": "bind", "source": "/abs", "destination": "/a"}
            ]
        });
        anchor_relative_paths(&mut spec, Path::new("/b"));
        assert_eq!(spec["root"]["path"], "/b/rootfs");
        assert_eq!(spec["mounts"][0]["source"], "/b/data");
        assert_eq!(spec["mounts"][1]["source"], "/b/opt");
        assert_eq!(spec["mounts"][2]["source"], "tmpfs");
        assert_eq!(spec["mounts"][3]["source"], "/abs");
    }
}
