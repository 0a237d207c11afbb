//! Reading the administrator's policy file (and the seccomp profile it may
//! name). Every error names the file; TOML errors also name the line.

use std::path::{Path, PathBuf};

use vibe_policy::{ConfigError, Policy};

#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    #[error("cannot read policy file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid policy file {0}")]
    Invalid(#[from] ConfigError),
    #[error("cannot read [seccomp] profile {path}: {message}")]
    Profile { path: String, message: String },
}

/// Loads and validates the policy at `path`.
pub fn load(path: &Path) -> Result<Policy, PolicyFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| PolicyFileError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let mut policy = Policy::from_toml_str(&text, path)?;
    policy.network.egress_socket = resolve(path, &policy.network.egress_socket);
    if let Some(profile) = policy.seccomp.profile.clone() {
        let profile = resolve(path, &profile);
        let fail = |message: String| PolicyFileError::Profile {
            path: profile.display().to_string(),
            message,
        };
        let bytes = std::fs::read(&profile).map_err(|e| fail(e.to_string()))?;
        let value = serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string()))?;
        policy.seccomp.loaded_profile = Some(value);
    }
    Ok(policy)
}

/// A relative path (seccomp profile, egress socket) is relative to the
/// policy file's directory.
fn resolve(config: &Path, profile: &Path) -> PathBuf {
    match config.parent() {
        Some(dir) if profile.is_relative() => dir.join(profile),
        _ => profile.to_path_buf(),
    }
}

/// For `delete`: only `[network] egress_socket` (resolved as [`load`]
/// does), the default when the file is missing or invalid.
pub fn egress_socket_only(path: &Path) -> PathBuf {
    let socket = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| Policy::from_toml_str(&text, path).ok())
        .map(|policy| policy.network.egress_socket)
        .unwrap_or_else(|| PathBuf::from(vibe_policy::config::DEFAULT_EGRESS_SOCKET));
    resolve(path, &socket)
}

/// For pass-through verbs: only `[runtime] path`, and `None` if the file is
/// missing or invalid (state/kill/delete must keep working so an engine can
/// clean up; they change no container's confinement).
pub fn runtime_path_only(path: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(path).ok()?;
    Policy::from_toml_str(&text, path).ok()?.runtime.path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        std::fs::write(&path, "[process]\nbogus = 1\n").unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(
            err.contains(&path.display().to_string()) && err.contains("line 2"),
            "{err}"
        );
    }

    #[test]
    fn loads_a_relative_seccomp_profile() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[seccomp]\nprofile = \"p.json\"\n").unwrap();
        assert!(load(&path).is_err());
        std::fs::write(
            dir.path().join("p.json"),
            "{\"defaultAction\":\"SCMP_ACT_ERRNO\"}",
        )
        .unwrap();
        let policy = load(&path).unwrap();
        assert_eq!(
            policy.seccomp.loaded_profile.unwrap()["defaultAction"],
            "SCMP_ACT_ERRNO"
        );
    }
}
