//! `vibe-shim install|uninstall docker|containerd|podman`: register
//! vibe-shim with an engine the way `nvidia-ctk runtime configure` does.
//!
//! Each engine module holds pure edit functions (text in, text out, plus
//! what was changed) with their unit tests; this module does the file I/O:
//! a backup of the original bytes, an atomic write, and a record under
//! `/var/lib/vibe-shim/installed/` of exactly what install changed, so
//! `uninstall` (and the package's prerm) undoes that and nothing else.

pub mod containerd;
pub mod docker;
pub mod lockdown;
pub mod podman;
pub mod toml_doc;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The name every engine knows vibe-shim by (the authz plugin and
/// `doctor` look for it).
pub const RUNTIME_NAME: &str = "vibe-shim";
/// Where install records what it changed.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/vibe-shim/installed";
/// Suffix of the backup of the original config, next to it.
pub const BACKUP_SUFFIX: &str = ".vibe-shim.bak";

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An engine's edit could not read or change the file.
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: EditError,
    },
    /// A record that does not parse (or cannot be written as JSON).
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The binary the engine would run is missing or cannot be run: every
    /// container would then fail with the engine's own, vaguer error.
    #[error("{path}: {why}")]
    Binary { path: PathBuf, why: String },
    #[error("{path}: not UTF-8: {source}")]
    NotUtf8 {
        path: PathBuf,
        #[source]
        source: std::str::Utf8Error,
    },
}

/// Why an engine's pure edit (or revert) could not be made.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Toml(#[from] toml_edit::TomlError),
    /// The file parses but is not shaped as the edit needs (edit it by hand).
    #[error("{0}")]
    Shape(String),
}

impl From<String> for EditError {
    fn from(why: String) -> Self {
        EditError::Shape(why)
    }
}

impl From<&str> for EditError {
    fn from(why: &str) -> Self {
        EditError::Shape(why.to_string())
    }
}

/// The binary an engine is to run: `given` (absolute, as the admin spelled
/// it, a symlink included), or this very binary by its canonical path, so
/// what was installed is what runs. Either must be an executable regular
/// file now.
pub fn runtime_binary(given: Option<&str>) -> Result<String, InstallError> {
    let path = match given {
        Some(p) => PathBuf::from(p),
        None => {
            std::fs::canonicalize("/proc/self/exe").map_err(io_err(Path::new("/proc/self/exe")))?
        }
    };
    let refuse = |why: &str| InstallError::Binary {
        path: path.clone(),
        why: why.to_string(),
    };
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse("does not exist: the engine could run no container (pass --path with the installed vibe-shim)"))
        }
        Err(source) => return Err(InstallError::Io { path, source }),
    };
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(refuse(
            "is not an executable file: the engine could run no container",
        ));
    }
    path.into_os_string()
        .into_string()
        .map_err(|_| InstallError::Binary {
            path: PathBuf::new(),
            why: "the binary's path is not UTF-8".into(),
        })
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One value install set, for the record: where, what was there, what it
/// wrote. `before: None` means the key was absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyChange {
    pub path: Vec<String>,
    pub before: Option<serde_json::Value>,
    pub after: serde_json::Value,
}

/// What install did to one engine config file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub engine: String,
    pub config: PathBuf,
    /// The file did not exist before install.
    pub created_file: bool,
    /// Directories install created for the file, outermost first.
    #[serde(default)]
    pub created_dirs: Vec<PathBuf>,
    /// The original bytes, when the file existed.
    pub backup: Option<PathBuf>,
    /// The file's content as install last wrote it: if it still reads so,
    /// uninstall puts the original bytes back as they were.
    pub written: String,
    /// Each key install set, in order.
    #[serde(default)]
    pub changes: Vec<KeyChange>,
    /// Tables install created (containerd), parents first.
    #[serde(default)]
    pub created_tables: Vec<Vec<String>>,
}

impl Record {
    /// Merges a later install's changes: the first `before` of each key is
    /// the one uninstall restores.
    fn absorb(&mut self, later: Vec<KeyChange>, tables: Vec<Vec<String>>) {
        for change in later {
            match self.changes.iter_mut().find(|c| c.path == change.path) {
                Some(old) => old.after = change.after,
                None => self.changes.push(change),
            }
        }
        for t in tables {
            if !self.created_tables.contains(&t) {
                self.created_tables.push(t);
            }
        }
    }
}

/// The record file for one engine config: one per (engine, path).
pub fn record_path(state_dir: &Path, engine: &str, config: &Path) -> PathBuf {
    let flat: String = config
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    state_dir.join(format!("{engine}{flat}.json"))
}

pub fn load_record(path: &Path) -> Result<Option<Record>, InstallError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| InstallError::Json {
                path: path.to_path_buf(),
                source,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Writes `bytes` to `path` atomically (`vibe_hooks::fsio`), keeping the
/// old file's mode (new files: `mode`): an admin's 0640 daemon.json stays so.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), InstallError> {
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(mode);
    vibe_hooks::fsio::write_atomic(path, bytes, mode).map_err(io_err(path))
}

/// Creates `dir` and its missing parents; returns those it created,
/// outermost first.
fn create_dirs(dir: &Path) -> Result<Vec<PathBuf>, InstallError> {
    let mut missing = Vec::new();
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if d.as_os_str().is_empty() || d.exists() {
            break;
        }
        missing.push(d.to_path_buf());
        cur = d.parent();
    }
    missing.reverse();
    for d in &missing {
        std::fs::create_dir(d).map_err(io_err(d))?;
    }
    Ok(missing)
}

/// The result of an engine's pure edit.
pub struct Edit {
    /// The new file content; `None`: already configured.
    pub text: Option<String>,
    pub changes: Vec<KeyChange>,
    pub created_tables: Vec<Vec<String>>,
}

/// What `install` reports.
#[derive(Debug, PartialEq)]
pub enum Installed {
    Already,
    Changed { backup: Option<PathBuf> },
    DryRun(String),
}

/// Applies an engine's edit to `config`: backup, atomic write, record.
pub fn apply(
    engine: &str,
    config: &Path,
    state_dir: &Path,
    dry_run: bool,
    edit: impl FnOnce(&str) -> Result<Edit, EditError>,
) -> Result<Installed, InstallError> {
    let original = match std::fs::read(config) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(config)(e)),
    };
    let text = match &original {
        Some(bytes) => std::str::from_utf8(bytes).map_err(|source| InstallError::NotUtf8 {
            path: config.to_path_buf(),
            source,
        })?,
        None => "",
    };
    let result = edit(text).map_err(|source| InstallError::Parse {
        path: config.to_path_buf(),
        source,
    })?;
    let Some(new_text) = result.text else {
        return Ok(Installed::Already);
    };
    if dry_run {
        return Ok(Installed::DryRun(new_text));
    }
    let rec_path = record_path(state_dir, engine, config);
    let mut record = match load_record(&rec_path)? {
        Some(r) => r,
        None => Record {
            engine: engine.into(),
            config: config.to_path_buf(),
            created_file: original.is_none(),
            ..Record::default()
        },
    };
    if record.created_dirs.is_empty() && original.is_none() {
        if let Some(parent) = config.parent() {
            record.created_dirs = create_dirs(parent)?;
        }
    }
    // The backup holds the bytes from before the first install only.
    if let (Some(bytes), None) = (&original, &record.backup) {
        let backup = backup_path(config);
        write_atomic(&backup, bytes, 0o600)?;
        record.backup = Some(backup);
    }
    record.absorb(result.changes, result.created_tables);
    record.written = new_text.clone();
    create_dirs(state_dir)?;
    let rec_json = serde_json::to_string_pretty(&record).map_err(|source| InstallError::Json {
        path: rec_path.clone(),
        source,
    })?;
    // The record first: a crash between the two leaves a record of a change
    // not made, which uninstall tolerates; the reverse would strand it.
    write_atomic(&rec_path, rec_json.as_bytes(), 0o600)?;
    write_atomic(config, new_text.as_bytes(), 0o644)?;
    Ok(Installed::Changed {
        backup: record.backup,
    })
}

pub fn backup_path(config: &Path) -> PathBuf {
    let mut name = config.as_os_str().to_owned();
    name.push(BACKUP_SUFFIX);
    PathBuf::from(name)
}

/// What `uninstall` reports.
#[derive(Debug, PartialEq)]
pub enum Uninstalled {
    NotInstalled,
    /// The original bytes are back.
    Restored,
    /// The file install created is gone.
    Removed,
    /// The file changed since install: only install's keys were undone.
    Reverted,
}

/// Undoes what the record says install did to `config`.
pub fn unapply(
    engine: &str,
    config: &Path,
    state_dir: &Path,
    revert: impl FnOnce(&str, &Record) -> Result<String, EditError>,
) -> Result<Uninstalled, InstallError> {
    let rec_path = record_path(state_dir, engine, config);
    let Some(record) = load_record(&rec_path)? else {
        return Ok(Uninstalled::NotInstalled);
    };
    let current = match std::fs::read_to_string(config) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(config)(e)),
    };
    let outcome = match current {
        // Gone already: nothing of ours is left to undo.
        None => Uninstalled::Reverted,
        Some(text) if text == record.written => match &record.backup {
            Some(backup) => {
                let bytes = std::fs::read(backup).map_err(io_err(backup))?;
                write_atomic(config, &bytes, 0o644)?;
                Uninstalled::Restored
            }
            None => {
                std::fs::remove_file(config).map_err(io_err(config))?;
                Uninstalled::Removed
            }
        },
        Some(text) => {
            let reverted = revert(&text, &record).map_err(|source| InstallError::Parse {
                path: config.to_path_buf(),
                source,
            })?;
            if reverted != text {
                write_atomic(config, reverted.as_bytes(), 0o644)?;
            }
            Uninstalled::Reverted
        }
    };
    if outcome == Uninstalled::Removed {
        for dir in record.created_dirs.iter().rev() {
            // Only if empty: anything else in it is not ours.
            let _ = std::fs::remove_dir(dir);
        }
    }
    if let Some(backup) = &record.backup {
        let _ = std::fs::remove_file(backup);
    }
    std::fs::remove_file(&rec_path).map_err(io_err(&rec_path))?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add_key(text: &str) -> Result<Edit, EditError> {
        if text.contains("key") {
            return Ok(Edit {
                text: None,
                changes: vec![],
                created_tables: vec![],
            });
        }
        Ok(Edit {
            text: Some(format!("{text}key\n")),
            changes: vec![KeyChange {
                path: vec!["key".into()],
                before: None,
                after: serde_json::json!(true),
            }],
            created_tables: vec![],
        })
    }

    #[test]
    fn backup_once_record_and_byte_exact_restore() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("conf");
        let state = dir.path().join("state");
        std::fs::write(&config, "  original\n").unwrap();
        let first = apply("t", &config, &state, false, add_key).unwrap();
        assert_eq!(
            first,
            Installed::Changed {
                backup: Some(backup_path(&config))
            }
        );
        assert_eq!(
            std::fs::read_to_string(backup_path(&config)).unwrap(),
            "  original\n"
        );
        // Second run: nothing written, no backup churn.
        let mtime = std::fs::metadata(backup_path(&config))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(
            apply("t", &config, &state, false, add_key).unwrap(),
            Installed::Already
        );
        assert_eq!(
            std::fs::metadata(backup_path(&config))
                .unwrap()
                .modified()
                .unwrap(),
            mtime
        );
        let undo = |_: &str, _: &Record| -> Result<String, EditError> { unreachable!() };
        assert_eq!(
            unapply("t", &config, &state, undo).unwrap(),
            Uninstalled::Restored
        );
        assert_eq!(std::fs::read_to_string(&config).unwrap(), "  original\n");
        assert!(!backup_path(&config).exists());
        let undo = |_: &str, _: &Record| -> Result<String, EditError> { unreachable!() };
        assert_eq!(
            unapply("t", &config, &state, undo).unwrap(),
            Uninstalled::NotInstalled
        );
    }

    #[test]
    fn created_file_and_dirs_go_again() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("a/b/conf");
        let state = dir.path().join("state");
        apply("t", &config, &state, false, add_key).unwrap();
        assert_eq!(std::fs::read_to_string(&config).unwrap(), "key\n");
        let undo = |_: &str, _: &Record| -> Result<String, EditError> { unreachable!() };
        unapply("t", &config, &state, undo).unwrap();
        assert!(!dir.path().join("a").exists());
    }

    #[test]
    fn a_file_changed_since_install_is_reverted_not_restored() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("conf");
        let state = dir.path().join("state");
        std::fs::write(&config, "orig\n").unwrap();
        apply("t", &config, &state, false, add_key).unwrap();
        std::fs::write(&config, "orig\nkey\nadmin\n").unwrap();
        let undo = |text: &str, rec: &Record| -> Result<String, EditError> {
            assert_eq!(rec.changes.len(), 1);
            Ok(text.replace("key\n", ""))
        };
        assert_eq!(
            unapply("t", &config, &state, undo).unwrap(),
            Uninstalled::Reverted
        );
        assert_eq!(std::fs::read_to_string(&config).unwrap(), "orig\nadmin\n");
    }
}
