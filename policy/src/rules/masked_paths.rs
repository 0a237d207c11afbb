//! The masked and read-only `/proc` and `/sys` paths. `--privileged` and
//! `--security-opt systempaths=unconfined` empty these lists; the policy puts
//! Docker's defaults back and keeps any extra paths the client added.

use serde_json::Value;

use crate::decision::{Denial, Record};
use crate::engine::context::RuleContext;
use crate::lang::json::{clean_path, is_string_array, object_at, set, str_items, string_array};

const RULE: &str = "masked_paths";

/// Paths hidden from every container (Docker's defaults plus powercap).
pub const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// Paths every container sees read-only. `/sys/fs/cgroup`: under cgroup v1
/// runc mounts a tmpfs there to hold the hierarchies, and runc 1.3 leaves
/// it writable even when the cgroup mount is `ro`, a scratch space the
/// policy never granted (runc skips a path that does not exist).
pub const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/sys/fs/cgroup",
];

fn ensure(
    linux: &mut serde_json::Map<String, Value>,
    key: &str,
    required: &[&str],
    rec: &mut Record,
) {
    let current = linux.get(key);
    let mut paths: Vec<&str> = str_items(current).collect();
    for path in required {
        if !paths.contains(path) {
            paths.push(path);
        }
    }
    if is_string_array(current, &paths) {
        return;
    }
    let after = string_array(&paths);
    let before = set(linux, key, after.clone());
    rec.change(RULE, format!("/linux/{key}"), before, after);
}

pub fn apply(spec: &mut Value, _cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    // A mask over the root is a tmpfs stacked where no path walk sees it,
    // and runc resolves a relative path from wherever it stands.
    let masked = spec.pointer("/linux/maskedPaths");
    for (i, path) in str_items(masked).enumerate() {
        if !path.starts_with('/') || clean_path(path) == "/" {
            return Err(Denial::new(
                RULE,
                format!("/linux/maskedPaths/{i}"),
                path,
                "a masked path must be absolute and not the root",
            ));
        }
    }
    let linux = object_at(spec, "linux");
    ensure(linux, "maskedPaths", MASKED_PATHS, rec);
    ensure(linux, "readonlyPaths", READONLY_PATHS, rec);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use serde_json::json;

    fn run(spec: &mut Value) -> Record {
        crate::rules::run_rule(apply, spec, &Policy::default()).unwrap()
    }

    fn fixture(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn privileged_and_systempaths_get_the_lists_back() {
        for text in [
            include_str!("../../tests/fixtures/docker-20.10/config-privileged.json"),
            include_str!("../../tests/fixtures/docker-20.10/config-systempaths.json"),
        ] {
            let mut spec = fixture(text);
            let rec = run(&mut spec);
            assert_eq!(spec["linux"]["maskedPaths"], json!(MASKED_PATHS));
            assert_eq!(spec["linux"]["readonlyPaths"], json!(READONLY_PATHS));
            assert_eq!(rec.changes.len(), 2);
        }
    }

    #[test]
    fn docker_default_only_gains_powercap_and_the_cgroup_dir() {
        let mut spec = fixture(include_str!(
            "../../tests/fixtures/docker-20.10/config-default.json"
        ));
        let rec = run(&mut spec);
        assert_eq!(rec.changes.len(), 2);
        assert_eq!(rec.changes[0].field, "/linux/maskedPaths");
        assert_eq!(rec.changes[1].field, "/linux/readonlyPaths");
        assert_eq!(
            spec["linux"]["readonlyPaths"]
                .as_array()
                .unwrap()
                .last()
                .unwrap(),
            "/sys/fs/cgroup"
        );
        assert_eq!(
            spec["linux"]["maskedPaths"]
                .as_array()
                .unwrap()
                .last()
                .unwrap(),
            "/sys/devices/virtual/powercap"
        );
    }

    #[test]
    fn a_mask_over_the_root_or_a_relative_one_is_refused() {
        for path in ["/", "//", "/proc/..", "proc/kcore", ""] {
            let mut spec = json!({"linux": {"maskedPaths": ["/proc/kcore", path]}});
            let err = crate::rules::run_rule(apply, &mut spec, &Policy::default()).unwrap_err();
            assert_eq!(err.field, "/linux/maskedPaths/1", "{path:?}");
        }
    }

    #[test]
    fn client_extras_are_kept() {
        let mut spec = json!({"linux": {"maskedPaths": ["/proc/extra"], "readonlyPaths": ["/x"]}});
        run(&mut spec);
        assert_eq!(spec["linux"]["maskedPaths"][0], "/proc/extra");
        assert_eq!(spec["linux"]["readonlyPaths"][0], "/x");
        assert_eq!(spec["linux"]["maskedPaths"].as_array().unwrap().len(), 12);
    }
}
