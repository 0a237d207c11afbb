//! Policy profiles the client cannot choose (`[[profiles]]`).
//!
//! Under lockdown every container on the host runs through vibe-shim as
//! `runc`, so the main policy also governs build steps, which need a
//! writable root. A profile swaps in another full policy file, and it is
//! selected only by a property of the bundle that the engine alone
//! controls: where the engine created the bundle directory.
//!
//! BuildKit's runc executor (dockerd >= 23 execs `runc` from PATH for every
//! RUN step) creates each bundle as `<buildkit root>/executor/<id>` with
//! `os.Mkdir(bundle, 0o711)`, as root; `<buildkit root>` is
//! `<docker data-root>/buildkit`. A client cannot get a bundle there:
//! dockerd and containerd put every API container's bundle in their own
//! state directory (`…/io.containerd.runtime.v2.task/<ns>/<id>`, the id
//! and namespace restricted to `[A-Za-z0-9._-]`), and under lockdown no
//! container can bind the host's data-root. So the check below is: the
//! bundle's canonical path is a direct child of a configured directory's
//! canonical path, and that bundle directory and every directory above it
//! is owned by root and writable by nobody else (so no other user can have
//! made it, or can swap any component of it after this check).
//!
//! Docker 20.10's legacy builder (`DOCKER_BUILDKIT=0`) has no such
//! property: it creates RUN-step containers through the same
//! `ContainerCreate` path as the API (builder/dockerfile/containerbackend.go
//! and internals.go), with a HostConfig built only from the client's build
//! options (`hostConfigFromOptions`: security options, network mode,
//! resources, extra hosts, shm size, plus LogConfig "none") and a Config
//! built from the image and Dockerfile. Every one of those a `docker run`
//! client can set too, and the bundle lands in the same containerd state
//! directory as any other container. So no profile can be selected for
//! legacy RUN steps: they run under the main policy.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::{FileFacts, HostView};

/// One `[[profiles]]` entry of the main policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSection {
    /// Named in the audit line and in refusals.
    pub name: String,
    /// The profile's own policy file (a full policy; relative to the main
    /// file's directory when relative).
    pub config: PathBuf,
    pub when: ProfileWhen,
}

/// What selects a profile. Only engine-controlled bundle facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileWhen {
    /// Directories in which the engine creates bundles (BuildKit's
    /// `<data-root>/buildkit/executor`). The bundle must be a direct child.
    pub bundle_under: Vec<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProfileError {
    #[error("profiles.name: must be a non-empty name of letters, digits, '-' or '_', not {0:?}")]
    BadName(String),
    #[error("profiles.name: {0:?} appears twice")]
    Duplicate(String),
    #[error("profiles.when.bundle_under: {0} must be an absolute path other than /")]
    BadDir(String),
    #[error("profiles.when.bundle_under: profile {0:?} names no directory")]
    NoDir(String),
}

/// Checks the `[[profiles]]` entries of a policy file.
pub fn validate(profiles: &[ProfileSection]) -> Result<(), ProfileError> {
    let mut seen = Vec::new();
    for p in profiles {
        let ok = !p.name.is_empty()
            && p.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(ProfileError::BadName(p.name.clone()));
        }
        if seen.contains(&&p.name) {
            return Err(ProfileError::Duplicate(p.name.clone()));
        }
        seen.push(&p.name);
        if p.when.bundle_under.is_empty() {
            return Err(ProfileError::NoDir(p.name.clone()));
        }
        for dir in &p.when.bundle_under {
            if !dir.is_absolute() || dir == Path::new("/") {
                return Err(ProfileError::BadDir(dir.display().to_string()));
            }
        }
    }
    Ok(())
}

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
