//! Which `[[profiles]]` entry, if any, governs a bundle: judged on the
//! host's view of where the engine made it (see [`crate::config::profiles`]
//! for why only that property may choose).

use std::path::Path;

use crate::config::profiles::ProfileSection;
use crate::host::{FileFacts, HostView};

/// The first profile whose `bundle_under` holds this bundle, as only the
/// engine could have made it; `None`: the main policy applies. Any doubt
/// (a path that does not resolve, a directory another user owns or can
/// write) means no profile, so a forged lookalike gets the main policy.
pub fn select<'a>(
    profiles: &'a [ProfileSection],
    bundle: &Path,
    host: &dyn HostView,
) -> Option<&'a ProfileSection> {
    if profiles.is_empty() || !bundle.is_absolute() {
        return None;
    }
    let canonical = host.canonicalize(bundle)?;
    let parent = canonical.parent()?;
    if !engine_owned_chain(&canonical, host) {
        return None;
    }
    profiles.iter().find(|p| {
        p.when
            .bundle_under
            .iter()
            .filter_map(|dir| host.canonicalize(dir))
            .any(|dir| dir == parent)
    })
}

/// The directory and every ancestor up to `/`: directories owned by root,
/// writable by nobody else.
fn engine_owned_chain(canonical: &Path, host: &dyn HostView) -> bool {
    canonical.ancestors().all(|dir| {
        host.file_facts(dir).is_some_and(|f: FileFacts| {
            f.mode & FileFacts::TYPE_MASK == FileFacts::DIRECTORY && f.root_only_writable()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::profiles::{validate, ProfileError, ProfileWhen};
    use crate::host::FakeHost;

    const EXECUTOR: &str = "/var/lib/docker/buildkit/executor";

    fn profiles() -> Vec<ProfileSection> {
        vec![ProfileSection {
            name: "build".into(),
            config: "/etc/vibe-shim/build.toml".into(),
            when: ProfileWhen {
                bundle_under: vec![EXECUTOR.into()],
            },
        }]
    }

    fn dir(uid: u32, perm: u32) -> FileFacts {
        FileFacts {
            dev: 1,
            ino: 2,
            uid,
            mode: FileFacts::DIRECTORY | perm,
        }
    }

    fn host() -> FakeHost {
        FakeHost {
            all_paths_exist: true,
            ..FakeHost::default()
        }
    }

    fn picked(host: &FakeHost, bundle: &str) -> Option<String> {
        let p = profiles();
        select(&p, Path::new(bundle), host).map(|p| p.name.clone())
    }

    #[test]
    fn buildkit_bundle_selects_build() {
        let h = host();
        assert_eq!(
            picked(&h, &format!("{EXECUTOR}/k3x9abc")),
            Some("build".into())
        );
    }

    #[test]
    fn api_bundles_and_lookalikes_get_the_main_policy() {
        let h = host();
        for bundle in [
            // dockerd/containerd's own bundle for any API container.
            "/run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/abc",
            "/run/containerd/io.containerd.runtime.v2.task/default/x",
            // String-prefix lookalikes.
            "/var/lib/docker/buildkit/executor-evil/x",
            "/tmp/var/lib/docker/buildkit/executor/x",
            // Not a direct child, or the directory itself.
            "/var/lib/docker/buildkit/executor/x/y",
            EXECUTOR,
            // Relative paths are never trusted.
            "var/lib/docker/buildkit/executor/x",
        ] {
            assert_eq!(picked(&h, bundle), None, "{bundle}");
        }
    }

    #[test]
    fn dot_dot_is_judged_canonically() {
        let mut h = host();
        let sneaky = format!("{EXECUTOR}/../../../../../tmp/evil");
        h.canonical
            .insert(sneaky.clone().into(), "/tmp/evil".into());
        assert_eq!(picked(&h, &sneaky), None);
        // And the other way round: a path that resolves into the executor
        // directory is judged as that directory.
        let via = "/srv/x/../../var/lib/docker/buildkit/executor/b1";
        h.canonical
            .insert(via.into(), format!("{EXECUTOR}/b1").into());
        assert_eq!(picked(&h, via), Some("build".into()));
    }

    #[test]
    fn symlinked_lookalike_is_judged_by_its_target() {
        let mut h = host();
        // /home/u/executor/x -> /home/u/x (a client-made symlink tree).
        h.canonical
            .insert("/home/u/executor/x".into(), "/home/u/x".into());
        assert_eq!(picked(&h, "/home/u/executor/x"), None);
        // The configured directory itself behind a symlink (a data-root
        // moved with a symlink) still matches by canonical path.
        let mut h2 = host();
        h2.canonical
            .insert(EXECUTOR.into(), "/srv/docker/buildkit/executor".into());
        h2.canonical.insert(
            "/srv/docker/buildkit/executor/b".into(),
            "/srv/docker/buildkit/executor/b".into(),
        );
        assert_eq!(
            picked(&h2, "/srv/docker/buildkit/executor/b"),
            Some("build".into())
        );
    }

    #[test]
    fn a_directory_another_user_owns_or_can_write_selects_nothing() {
        let bundle = format!("{EXECUTOR}/b");
        let mut h = host();
        h.files.insert(bundle.clone().into(), dir(1000, 0o755));
        assert_eq!(picked(&h, &bundle), None);
        let mut h = host();
        h.files.insert(EXECUTOR.into(), dir(0, 0o777));
        assert_eq!(picked(&h, &bundle), None);
        let mut h = host();
        h.files.insert("/var/lib".into(), dir(0, 0o775));
        assert_eq!(picked(&h, &bundle), None);
        // A regular file named like a bundle is not a bundle.
        let mut h = host();
        h.files.insert(
            bundle.clone().into(),
            FileFacts {
                mode: FileFacts::REGULAR | 0o644,
                ..dir(0, 0)
            },
        );
        assert_eq!(picked(&h, &bundle), None);
        // BuildKit's own modes (0711) pass.
        let mut h = host();
        h.files.insert(bundle.clone().into(), dir(0, 0o711));
        h.files.insert(EXECUTOR.into(), dir(0, 0o711));
        assert_eq!(picked(&h, &bundle), Some("build".into()));
    }

    #[test]
    fn a_missing_bundle_selects_nothing() {
        let mut h = host();
        h.all_paths_exist = false;
        assert_eq!(picked(&h, &format!("{EXECUTOR}/gone")), None);
    }

    #[test]
    fn validation() {
        assert_eq!(validate(&profiles()), Ok(()));
        let mut p = profiles();
        p[0].name = "a b".into();
        assert!(validate(&p).is_err());
        let mut p = profiles();
        p.push(p[0].clone());
        assert_eq!(validate(&p), Err(ProfileError::Duplicate("build".into())));
        let mut p = profiles();
        p[0].when.bundle_under = vec!["relative".into()];
        assert!(validate(&p).is_err());
        let mut p = profiles();
        p[0].when.bundle_under = vec!["/".into()];
        assert!(validate(&p).is_err());
        let mut p = profiles();
        p[0].when.bundle_under.clear();
        assert!(validate(&p).is_err());
    }
}
