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
