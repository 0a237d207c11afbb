//! Reading the administrator's policy file, its drop-ins, and the seccomp
//! profile it may name. Every error names the file; TOML errors also name
//! the line.
//!
//! Drop-ins: `<dir>/<stem>.toml` is merged with every `<dir>/<stem>.d/*.toml`
//! in byte order of the names (`vibe_policy::config::merge`). Names starting
//! with `.` and names not ending in `.toml` are ignored. The directory and
//! each drop-in must be owned by root and unwritable by group and others, or
//! nothing loads (a missing directory is no drop-ins).

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use vibe_policy::config::merge::{merge_layers, Layer, Origin};
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
    #[error("cannot read [seccomp] profile {path}: {source}")]
    ProfileRead {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot read [seccomp] profile {path}: {source}")]
    ProfileJson {
        path: String,
        source: serde_json::Error,
    },
    #[error("refusing drop-in {path}: {why}")]
    Untrusted { path: String, why: Untrusted },
}

/// Why a drop-in (or its directory) may not add to the policy.
#[derive(Debug, thiserror::Error)]
pub enum Untrusted {
    #[error("not a directory")]
    NotADirectory,
    #[error("not a regular file")]
    NotAFile,
    #[error("owned by uid {uid}, not {owner}")]
    Owner { uid: u32, owner: u32 },
    #[error("mode {0:o} is writable by group or others")]
    Writable(u32),
}

/// The owner drop-ins must have: root.
const TRUSTED_UID: u32 = 0;

/// Loads and validates the policy at `path` with its drop-ins.
pub fn load(path: &Path) -> Result<Policy, PolicyFileError> {
    load_explained(path).map(|(policy, _)| policy)
}

/// [`load`], plus what each drop-in set (for `policy check`).
pub fn load_explained(path: &Path) -> Result<(Policy, Vec<Origin>), PolicyFileError> {
    load_with_owner(path, TRUSTED_UID)
}

/// [`load_explained`] with drop-ins owned by `owner` (tests use their own uid).
pub(crate) fn load_with_owner(
    path: &Path,
    owner: u32,
) -> Result<(Policy, Vec<Origin>), PolicyFileError> {
    let (mut policy, origins) = load_merged(path, owner)?;
    policy.network.egress_socket = resolve(path, &policy.network.egress_socket);
    if let Some(profile) = policy.seccomp.profile.clone() {
        let profile = resolve(path, &profile);
        let path = || profile.display().to_string();
        let bytes = std::fs::read(&profile).map_err(|source| PolicyFileError::ProfileRead {
            path: path(),
            source,
        })?;
        let value =
            serde_json::from_slice(&bytes).map_err(|source| PolicyFileError::ProfileJson {
                path: path(),
                source,
            })?;
        policy.seccomp.loaded_profile = Some(value);
    }
    Ok((policy, origins))
}

/// The main file merged with its drop-ins; no seccomp profile read.
fn load_merged(path: &Path, owner: u32) -> Result<(Policy, Vec<Origin>), PolicyFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| PolicyFileError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let main = Layer {
        path: path.display().to_string(),
        label: path.display().to_string(),
        text,
    };
    let dropins = read_dropins(path, owner)?;
    Ok(merge_layers(&main, &dropins)?)
}

/// `<dir>/<stem>.d` for `<dir>/<stem>.toml` (any extension is dropped).
pub fn dropin_dir(path: &Path) -> PathBuf {
    let stem = path.file_stem().unwrap_or(path.as_os_str());
    let mut name = stem.to_os_string();
    name.push(".d");
    path.with_file_name(name)
}

/// The drop-ins of the policy file at `path`, in name (byte) order, each
/// labelled `<stem>.d/<name>`.
fn read_dropins(path: &Path, owner: u32) -> Result<Vec<Layer>, PolicyFileError> {
    let dir = dropin_dir(path);
    let untrusted = |path: &Path, why: Untrusted| PolicyFileError::Untrusted {
        path: path.display().to_string(),
        why,
    };
    let read_err = |path: &Path| {
        let path = path.display().to_string();
        move |source| PolicyFileError::Read { path, source }
    };
    let meta = match std::fs::metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other.map_err(read_err(&dir))?,
    };
    if !meta.is_dir() {
        return Err(untrusted(&dir, Untrusted::NotADirectory));
    }
    trusted(&meta, owner).map_err(|why| untrusted(&dir, why))?;
    let names = dropin_names(&dir).map_err(read_err(&dir))?;
    let dir_name = dir.file_name().unwrap_or_default().to_string_lossy();
    let mut layers = Vec::with_capacity(names.len());
    for name in names {
        let file_path = dir.join(&name);
        // Judge the file that is read: one open, then fstat of that fd.
        // O_NONBLOCK: a FIFO named *.toml must not hang every create.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(&file_path)
            .map_err(read_err(&file_path))?;
        let meta = file.metadata().map_err(read_err(&file_path))?;
        if !meta.is_file() {
            return Err(untrusted(&file_path, Untrusted::NotAFile));
        }
        trusted(&meta, owner).map_err(|why| untrusted(&file_path, why))?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(read_err(&file_path))?;
        layers.push(Layer {
            path: file_path.display().to_string(),
            label: format!("{dir_name}/{}", name.to_string_lossy()),
            text,
        });
    }
    Ok(layers)
}

/// The drop-in names in `dir`, in the order they merge (byte order).
fn dropin_names(dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let bytes = name.as_bytes();
        if !bytes.starts_with(b".") && bytes.ends_with(b".toml") {
            names.push(name);
        }
    }
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(names)
}

/// The policy file at `path` and its drop-ins (`<stem>.d/<name>`), as
/// [`load`] merges them, for the container's notice.
pub fn files(path: &Path) -> Vec<String> {
    let dir = dropin_dir(path);
    let dir_name = dir.file_name().unwrap_or_default().to_string_lossy();
    let dropins = dropin_names(&dir).unwrap_or_default();
    std::iter::once(path.display().to_string())
        .chain(
            dropins
                .iter()
                .map(|name| format!("{dir_name}/{}", name.to_string_lossy())),
        )
        .collect()
}

/// Owned by `owner` and unwritable by group and others: nobody else can
/// add to the policy.
fn trusted(meta: &std::fs::Metadata, owner: u32) -> Result<(), Untrusted> {
    if meta.uid() != owner {
        return Err(Untrusted::Owner {
            uid: meta.uid(),
            owner,
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Untrusted::Writable(meta.mode() & 0o7777));
    }
    Ok(())
}

/// A relative path (seccomp profile, egress socket) is relative to the
/// policy file's directory.
fn resolve(config: &Path, profile: &Path) -> PathBuf {
    match config.parent() {
        Some(dir) if profile.is_relative() => dir.join(profile),
        _ => profile.to_path_buf(),
    }
}

/// What a pass-through verb reads from the policy, parsed once (a delete
/// needs both). A missing or invalid file gives the defaults:
/// state/kill/delete must keep working so an engine can clean up; they
/// change no container's confinement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassThroughSettings {
    /// `[runtime] path`, `None` for runc in PATH.
    pub runtime: Option<PathBuf>,
    /// `[network] egress_socket`, resolved as [`load`] does.
    pub egress_socket: PathBuf,
}

pub fn pass_through_settings(path: &Path) -> PassThroughSettings {
    let policy = load_merged(path, TRUSTED_UID)
        .ok()
        .map(|(policy, _)| policy);
    let socket = policy
        .as_ref()
        .map(|p| p.network.egress_socket.clone())
        .unwrap_or_else(|| PathBuf::from(vibe_policy::config::DEFAULT_EGRESS_SOCKET));
    PassThroughSettings {
        runtime: policy.and_then(|p| p.runtime.path),
        egress_socket: resolve(path, &socket),
    }
}

/// Only `[network] egress_socket` ([`pass_through_settings`]).
pub fn egress_socket_only(path: &Path) -> PathBuf {
    pass_through_settings(path).egress_socket
}

/// Only `[runtime] path` ([`pass_through_settings`]).
pub fn runtime_path_only(path: &Path) -> Option<PathBuf> {
    pass_through_settings(path).runtime
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

    fn write(path: &Path, text: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn dropin_setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("build.toml");
        write(&path, "[process]\npids_limit = 10\n", 0o644);
        let dropins = dir.path().join("build.d");
        std::fs::create_dir(&dropins).unwrap();
        std::fs::set_permissions(&dropins, std::fs::Permissions::from_mode(0o755)).unwrap();
        (dir, path, dropins)
    }

    fn me() -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    #[test]
    fn drop_ins_merge_in_byte_order_for_any_stem() {
        let (_dir, path, dropins) = dropin_setup();
        assert_eq!(dropin_dir(&path), dropins);
        write(
            &dropins.join("b.toml"),
            "[process]\npids_limit = 30\n",
            0o644,
        );
        write(
            &dropins.join("B.toml"),
            "[process]\npids_limit = 20\n",
            0o644,
        );
        write(&dropins.join("a.toml.disabled"), "bogus = 1\n", 0o644);
        write(&dropins.join(".a.toml"), "bogus = 1\n", 0o644);
        let (policy, origins) = load_with_owner(&path, me()).unwrap();
        // "B" < "b" in bytes: b.toml is last and wins.
        assert_eq!(policy.process.pids_limit, 30);
        assert_eq!(origins[0].file, "build.d/b.toml");
        // An unknown key in a drop-in names that file.
        write(&dropins.join("c.toml"), "[process]\npids = 1\n", 0o644);
        let err = load_with_owner(&path, me()).unwrap_err().to_string();
        assert!(
            err.contains("build.d/c.toml") && err.contains("pids"),
            "{err}"
        );
    }

    #[test]
    fn untrusted_drop_ins_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, path, dropins) = dropin_setup();
        write(&dropins.join("a.toml"), "", 0o664);
        let err = load_with_owner(&path, me()).unwrap_err().to_string();
        assert!(
            err.contains("a.toml") && err.contains("writable by group"),
            "{err}"
        );
        std::fs::set_permissions(
            dropins.join("a.toml"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert!(load_with_owner(&path, me()).is_ok());
        let err = load_with_owner(&path, me() + 1).unwrap_err().to_string();
        assert!(
            err.contains("build.d") && err.contains("owned by uid"),
            "{err}"
        );
        std::fs::set_permissions(&dropins, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = load_with_owner(&path, me()).unwrap_err().to_string();
        assert!(
            err.contains("build.d:") && err.contains("mode 777"),
            "{err}"
        );
        // The pass-through verbs see drop-ins too, and fail the same way.
        std::fs::set_permissions(&dropins, std::fs::Permissions::from_mode(0o755)).unwrap();
        write(
            &dropins.join("a.toml"),
            "[runtime]\npath = \"/usr/bin/x\"\n",
            0o644,
        );
        assert_eq!(
            load_merged(&path, me()).unwrap().0.runtime.path,
            Some(PathBuf::from("/usr/bin/x"))
        );
        // A FIFO is not read (it would block).
        nix::unistd::mkfifo(
            &dropins.join("f.toml"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let err = load_with_owner(&path, me()).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    #[test]
    fn pass_through_settings_read_once_with_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let missing = pass_through_settings(&path);
        assert_eq!(missing.runtime, None);
        assert_eq!(
            missing.egress_socket,
            PathBuf::from(vibe_policy::config::DEFAULT_EGRESS_SOCKET)
        );
        std::fs::write(
            &path,
            "[runtime]\npath = \"/usr/bin/x\"\n[network]\negress_socket = \"e/egress.sock\"\n",
        )
        .unwrap();
        let set = pass_through_settings(&path);
        assert_eq!(set.runtime, Some(PathBuf::from("/usr/bin/x")));
        assert_eq!(set.egress_socket, dir.path().join("e/egress.sock"));
        assert_eq!(egress_socket_only(&path), set.egress_socket);
        assert_eq!(runtime_path_only(&path), set.runtime);
        // Invalid: the defaults, so an engine's delete still reaches runc.
        std::fs::write(&path, "[runtime\n").unwrap();
        assert_eq!(pass_through_settings(&path), missing);
    }
}
