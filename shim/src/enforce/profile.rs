//! `[[profiles]]` plumbing: which policy file an enforced verb uses.
//!
//! `create`/`run`/`restore` pick a profile from the engine's bundle
//! directory (the decision is `vibe_policy::engine::profile::select`) and the
//! choice is recorded in the container's root-only directory, so that
//! `start`, `exec` and `update` of that container use the same policy
//! (the start check reads the network table of the policy it was made
//! under). No profile: the main policy, as before.

use std::path::{Path, PathBuf};

use vibe_policy::{Denial, Policy};

use crate::policy_file;
use crate::runc_argv::Enforced;
use crate::sys::host::RealHost;
use crate::sys::state_dir;

/// File in the container's private directory naming the profile's policy.
const RECORD: &str = "profile";

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("profile {name:?}: {source}")]
    Load {
        name: String,
        source: policy_file::PolicyFileError,
    },
    #[error("profile {0:?}: a profile's policy may not name profiles itself")]
    Nested(String),
    #[error("cannot record the profile in {path}: {source}")]
    Record {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot record the profile in {path}: {source}")]
    RecordDir {
        path: &'static str,
        source: state_dir::StateDirError,
    },
    #[error("container {0:?}: its recorded profile cannot be looked up: {1}")]
    NoRecord(String, #[source] state_dir::StateDirError),
    #[error("cannot read the recorded profile {path}: {source}")]
    Recorded {
        path: String,
        source: std::io::Error,
    },
}

impl ProfileError {
    pub fn denial(&self) -> Denial {
        Denial::new("profiles", "[[profiles]]", "", self.to_string())
    }
}

/// The policy in force: the file it came from and its content; `profile`
/// is the profile's name when one was selected.
pub struct Chosen {
    pub config_path: PathBuf,
    pub policy: Policy,
    pub profile: Option<String>,
}

/// Picks the policy for an enforced verb: a profile selected by the
/// bundle (create, run, restore), the one recorded at create (start, exec,
/// update), or the main policy.
pub fn choose(
    argv: &Enforced,
    runc_root: Option<&std::ffi::OsStr>,
    config_path: PathBuf,
    policy: Policy,
) -> Result<Chosen, ProfileError> {
    let main = |config_path, policy| Chosen {
        config_path,
        policy,
        profile: None,
    };
    match argv {
        Enforced::Create(create) => {
            if policy.profiles.is_empty() {
                return Ok(main(config_path, policy));
            }
            let selected = vibe_policy::engine::profile::select(
                &policy.profiles,
                &create.bundle,
                &RealHost::new(),
            )
            .cloned();
            match selected {
                None => Ok(main(config_path, policy)),
                Some(p) => {
                    let path = resolve(&config_path, &p.config);
                    load(&p.name, path)
                }
            }
        }
        Enforced::Start(_) | Enforced::Exec(_) | Enforced::Update(_) => {
            // An id the state dir cannot name (one an older vibe-shim let
            // through) has no readable record: its profile may be stricter
            // than the main policy, so fall back to nothing.
            let id = argv.id().to_string_lossy();
            let root = state_dir::runc_root(runc_root);
            let dir = state_dir::container_dir(&root, &id)
                .map_err(|source| ProfileError::NoRecord(id.into_owned(), source))?;
            match recorded(&dir)? {
                None => Ok(main(config_path, policy)),
                Some((name, path)) => load(&name, path),
            }
        }
        Enforced::Checkpoint(_) => Ok(main(config_path, policy)),
    }
}

fn load(name: &str, path: PathBuf) -> Result<Chosen, ProfileError> {
    let policy = policy_file::load(&path).map_err(|source| ProfileError::Load {
        name: name.to_string(),
        source,
    })?;
    if !policy.profiles.is_empty() {
        return Err(ProfileError::Nested(name.to_string()));
    }
    Ok(Chosen {
        config_path: path,
        policy,
        profile: Some(name.to_string()),
    })
}

/// A relative profile path is relative to the main policy's directory.
fn resolve(config: &Path, profile: &Path) -> PathBuf {
    match config.parent() {
        Some(dir) if profile.is_relative() => dir.join(profile),
        _ => profile.to_path_buf(),
    }
}

/// Records the profile after a successful create, in the container's
/// private directory (root-only, made by create).
pub fn record(
    runc_root: Option<&std::ffi::OsStr>,
    id: &str,
    name: &str,
    config_path: &Path,
) -> Result<(), ProfileError> {
    let root = state_dir::runc_root(runc_root);
    let fail = |path: &Path, source| ProfileError::Record {
        path: path.display().to_string(),
        source,
    };
    let dir = state_dir::container_dir(&root, id).map_err(|source| ProfileError::RecordDir {
        path: state_dir::BASE,
        source,
    })?;
    let path = dir.join(RECORD);
    let text = format!("{name}\n{}\n", config_path.display());
    std::fs::write(&path, text).map_err(|e| fail(&path, e))
}

/// `(name, policy file)` recorded for the container in `dir`, if any.
fn recorded(dir: &Path) -> Result<Option<(String, PathBuf)>, ProfileError> {
    let path = dir.join(RECORD);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let mut lines = text.lines();
            match (lines.next(), lines.next()) {
                (Some(name), Some(config)) if Path::new(config).is_absolute() => {
                    Ok(Some((name.to_string(), PathBuf::from(config))))
                }
                _ => Err(ProfileError::Recorded {
                    path: path.display().to_string(),
                    source: std::io::Error::other("malformed"),
                }),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ProfileError::Recorded {
            path: path.display().to_string(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_round_trip_and_malformed() {
        let dir = tempfile::tempdir().unwrap();
        assert!(recorded(dir.path()).unwrap().is_none());
        std::fs::write(
            dir.path().join(RECORD),
            "build\n/etc/vibe-shim/build.toml\n",
        )
        .unwrap();
        assert_eq!(
            recorded(dir.path()).unwrap(),
            Some(("build".into(), "/etc/vibe-shim/build.toml".into()))
        );
        std::fs::write(dir.path().join(RECORD), "build\nrelative.toml\n").unwrap();
        assert!(recorded(dir.path()).is_err());
    }

    #[test]
    fn no_profiles_keeps_the_main_policy() {
        let args: Vec<std::ffi::OsString> = ["--bundle", "/x", "c1"]
            .iter()
            .map(std::ffi::OsString::from)
            .collect();
        let items = crate::runc_argv::classify_verb("create", &args).unwrap();
        let chosen = choose(
            &Enforced::from_items("create", items),
            None,
            "/etc/vibe-shim/config.toml".into(),
            Policy::default(),
        )
        .unwrap();
        assert!(chosen.profile.is_none());
        assert_eq!(chosen.config_path, Path::new("/etc/vibe-shim/config.toml"));
    }

    #[test]
    fn an_id_the_state_dir_cannot_name_is_refused_not_given_the_main_policy() {
        for (verb, args) in [
            ("update", vec!["--pids-limit", "9", "a+b"]),
            ("start", vec!["_x"]),
        ] {
            let args: Vec<std::ffi::OsString> = args.iter().map(std::ffi::OsString::from).collect();
            let items = crate::runc_argv::classify_verb(verb, &args).unwrap();
            let chosen = choose(
                &Enforced::from_items(verb, items),
                None,
                "/etc/vibe-shim/config.toml".into(),
                Policy::default(),
            );
            assert!(
                matches!(chosen, Err(ProfileError::NoRecord(..))),
                "{verb}: {:?}",
                chosen.map(|c| c.profile)
            );
        }
    }

    #[test]
    fn a_nested_profile_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("build.toml");
        std::fs::write(
            &path,
            "[[profiles]]\nname = \"x\"\nconfig = \"/y\"\nwhen = { bundle_under = [\"/z\"] }\n",
        )
        .unwrap();
        assert!(matches!(load("build", path), Err(ProfileError::Nested(_))));
    }
}
