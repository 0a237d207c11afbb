//! Every container created through the shim gets vibe-shim's notice of
//! what it changed ([`crate::notice`]) at [`NOTICE_PATH`]: a file in
//! vibe-shim's root-only state directory ([`CreateContext::notice`]), bound
//! read-only, last, over any client mount at that path. The shim writes the
//! file after the judge, from this rewrite's record; runc binds it.
//!
//! The start's assurance record rides with it: [`ASSURANCE_FILE`] beside
//! the notice, bound read-only at [`ASSURANCE_PATH`] the same way (start
//! writes it in place, before the container's process runs).
//!
//! An earlier create's own mount (an engine's spec fed back) is dropped and
//! made again. Under a client bind at `/etc` or `/etc/vibe-shim` there is
//! no notice: its mount point would be made in that host directory. The binds rule and the credentials rule skip exactly this
//! mount ([`is_own_file_mount`]): its source is vibe-shim's own.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::{ASSURANCE_PATH, NOTICE_PATH};
use crate::decision::{Denial, Record};
use crate::engine::context::{CreateContext, RuleContext};
use crate::lang::json::{clean_path_within, str_field};
#[cfg(test)]
use crate::rules::credentials::BUNDLE_OPTIONS;
use crate::rules::credentials::{is_trust_bundle_mount, push_own_file_mount};
use crate::rules::kernel_mounts::{destination, is_bind, remove_mounts_at};

const RULE: &str = "notice";

/// The assurance record's file name in the container's state directory.
pub const ASSURANCE_FILE: &str = "assurance.json";

/// The host path of the container's assurance record, beside its notice.
pub fn assurance_file(notice: &Path) -> PathBuf {
    notice.with_file_name(ASSURANCE_FILE)
}

/// The two files this rule binds: (container path, host path).
fn own_files(notice: &Path) -> [(&'static str, PathBuf); 2] {
    [
        (NOTICE_PATH, notice.to_path_buf()),
        (ASSURANCE_PATH, assurance_file(notice)),
    ]
}

/// Whether `mount` is this container's own notice (or assurance record)
/// mount: a bind of `create.notice` onto [`NOTICE_PATH`], or of the record
/// beside it onto [`ASSURANCE_PATH`].
pub fn is_notice_mount(mount: &Value, create: Option<&CreateContext>) -> bool {
    let Some(notice) = create.and_then(|c| c.notice.as_deref()) else {
        return false;
    };
    is_bind(mount)
        && own_files(notice).iter().any(|(path, file)| {
            destination(mount) == *path && file.to_str() == Some(str_field(mount, "source"))
        })
}

/// Whether `mount` binds one of vibe-shim's own files of this container
/// (the trust bundle, the notice) from its root-only state directory.
pub fn is_own_file_mount(mount: &Value, create: Option<&CreateContext>) -> bool {
    is_trust_bundle_mount(mount, create) || is_notice_mount(mount, create)
}

/// Whether a bind the client kept covers a directory above the notice
/// (`/etc`, `/etc/vibe-shim`): runc would make the notice's mount point in
/// that host directory, as root. Such a container gets no notice there.
fn bind_above_notice(spec: &Value) -> bool {
    spec.get("mounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|m| {
            let dest = destination(m);
            is_bind(m)
                && [NOTICE_PATH, ASSURANCE_PATH]
                    .iter()
                    .any(|own| dest != *own && clean_path_within(own, &dest))
        })
}

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let Some(notice) = cx.create.and_then(|c| c.notice.as_deref()) else {
        return Ok(());
    };
    if bind_above_notice(spec) {
        return Ok(());
    }
    for (path, file) in own_files(notice) {
        let source = file.to_str().ok_or_else(|| {
            Denial::new(
                RULE,
                "/mounts",
                file.display().to_string(),
                "the notice's host path is not UTF-8",
            )
        })?;
        // Anything at the path (an earlier create's mount, a client's)
        // goes: the notice is vibe-shim's word, not the client's.
        remove_mounts_at(spec, path, RULE, rec);
        push_own_file_mount(spec, RULE, path, source, rec);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::rules::run_rule_with;
    use crate::FakeHost;
    use serde_json::json;
    use std::path::PathBuf;

    const FILE: &str = "/run/vibe-shim/containers/r/c1/notice";

    fn create() -> CreateContext {
        CreateContext {
            notice: Some(PathBuf::from(FILE)),
            ..CreateContext::default()
        }
    }

    #[test]
    fn the_notice_is_bound_read_only_last_and_replaces_a_client_mount() {
        let mut spec = json!({"mounts": [
            {"destination": NOTICE_PATH, "type": "bind", "source": "/srv/fake", "options": ["bind"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
        ]});
        let create = create();
        let rec = run_rule_with(
            apply,
            &mut spec,
            &Policy::default(),
            &FakeHost::new(),
            Some(&create),
        )
        .unwrap();
        let mounts = spec["mounts"].as_array().unwrap();
        assert_eq!(mounts.len(), 3);
        assert_eq!(mounts[1]["source"], FILE);
        assert_eq!(mounts[1]["options"], json!(BUNDLE_OPTIONS));
        // The assurance record beside it, bound the same way.
        assert_eq!(mounts[2]["destination"], ASSURANCE_PATH);
        assert_eq!(
            mounts[2]["source"],
            "/run/vibe-shim/containers/r/c1/assurance.json"
        );
        assert_eq!(mounts[2]["options"], json!(BUNDLE_OPTIONS));
        for own in &mounts[1..] {
            assert!(is_own_file_mount(own, Some(&create)));
            assert!(!is_own_file_mount(own, None));
        }
        assert_eq!(rec.changes.len(), 3);
        // Fed back, the spec keeps one notice mount and one record mount.
        run_rule_with(
            apply,
            &mut spec,
            &Policy::default(),
            &FakeHost::new(),
            Some(&create),
        )
        .unwrap();
        assert_eq!(spec["mounts"].as_array().unwrap().len(), 3);
        // A client's mount at the record's path goes too.
        let mut spec = json!({"mounts": [
            {"destination": ASSURANCE_PATH, "type": "bind", "source": "/srv/fake", "options": ["bind"]},
        ]});
        run_rule_with(
            apply,
            &mut spec,
            &Policy::default(),
            &FakeHost::new(),
            Some(&create),
        )
        .unwrap();
        let mounts = spec["mounts"].as_array().unwrap();
        assert_eq!(mounts.len(), 2);
        assert!(mounts.iter().all(|m| is_own_file_mount(m, Some(&create))));
    }

    #[test]
    fn no_notice_under_a_bind_of_a_host_directory_above_it() {
        for dest in ["/etc", "/etc/", "/etc/vibe-shim"] {
            let mut spec = json!({"mounts": [
                {"destination": dest, "type": "bind", "source": "/srv/wt/etc", "options": ["rbind"]},
            ]});
            let create = create();
            run_rule_with(
                apply,
                &mut spec,
                &Policy::default(),
                &FakeHost::new(),
                Some(&create),
            )
            .unwrap();
            assert_eq!(spec["mounts"].as_array().unwrap().len(), 1, "{dest}");
        }
        // A tmpfs there is no host directory: the notice goes on top.
        let mut spec = json!({"mounts": [
            {"destination": "/etc/vibe-shim", "type": "tmpfs", "source": "tmpfs"},
        ]});
        let create = create();
        run_rule_with(
            apply,
            &mut spec,
            &Policy::default(),
            &FakeHost::new(),
            Some(&create),
        )
        .unwrap();
        assert_eq!(spec["mounts"][1]["destination"], NOTICE_PATH);
    }

    #[test]
    fn no_notice_file_no_mount() {
        let mut spec = json!({"mounts": []});
        let rec = crate::rules::run_rule(apply, &mut spec, &Policy::default()).unwrap();
        assert!(rec.changes.is_empty());
        assert_eq!(spec["mounts"], json!([]));
    }
}
