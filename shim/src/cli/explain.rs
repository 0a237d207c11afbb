//! `vibe-shim explain CONTAINER-ID`: the notice vibe-shim wrote at create
//! for a container (the text the container reads at
//! `/etc/vibe-shim/notice`), from vibe-shim's own per-container state
//! directory, under any runc root. A unique prefix of the id will do.
//! `--assurance` prints the start's assurance record instead (what the
//! kernel showed of the container at `start`, judged).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::sys::state_dir;

const EXIT_CODES: &str = "Exit codes:\n  0  the notice (or record) was printed\n  1  no such container in vibe-shim's state, an ambiguous prefix, or no notice (or record) to read\n  2  a usage error";

#[derive(Debug, clap::Parser)]
#[command(
    name = "explain",
    bin_name = "vibe-shim explain",
    about = "Show what vibe-shim changed in a container (its notice), from vibe-shim's own state",
    after_help = EXIT_CODES
)]
pub struct ExplainArgs {
    /// The container's id (for Docker, its full 64-hex id), or a unique prefix of it
    #[arg(value_name = "CONTAINER-ID")]
    id: String,
    /// Print the assurance record of the container's start (JSON) instead
    #[arg(long)]
    assurance: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("no container {id} in vibe-shim's state ({base})")]
    NotFound { id: String, base: String },
    #[error("{id} is a prefix of more than one container: {matches}")]
    Ambiguous { id: String, matches: String },
    #[error("{0}")]
    BadId(#[from] state_dir::StateDirError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub fn run(args: &[OsString]) -> i32 {
    let parsed = match super::parse::<ExplainArgs>("explain", args, 2) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let file = match parsed.assurance {
        true => vibe_policy::rules::notice::ASSURANCE_FILE,
        false => state_dir::NOTICE_FILE,
    };
    match file_of(Path::new(state_dir::BASE), &parsed.id, file) {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("vibe-shim: explain: {e}");
            1
        }
    }
}

/// One file (the notice, or the assurance record) of the container `id`
/// (or the one whose id starts with it) among the state directories under
/// `base`.
pub fn file_of(base: &Path, id: &str, file: &str) -> Result<String, ExplainError> {
    let dir = find(base, id)?;
    let path = dir.join(file);
    std::fs::read_to_string(&path).map_err(|source| ExplainError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The container directory named `id`, else the one whose name starts with
/// `id`; more than one either way is ambiguous.
fn find(base: &Path, id: &str) -> Result<PathBuf, ExplainError> {
    state_dir::check_id(id)?;
    let read = |dir: &Path| {
        std::fs::read_dir(dir).map_err(|source| ExplainError::Read {
            path: dir.display().to_string(),
            source,
        })
    };
    let (mut exact, mut prefixed) = (Vec::new(), Vec::new());
    let roots = match read(base) {
        Ok(roots) => roots,
        Err(ExplainError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(not_found(base, id))
        }
        Err(e) => return Err(e),
    };
    for root in roots.flatten() {
        let Ok(containers) = read(&root.path()) else {
            continue;
        };
        for container in containers.flatten() {
            let name = container.file_name();
            let name = name.to_string_lossy();
            if name == id {
                exact.push(container.path());
            } else if name.starts_with(id) {
                prefixed.push(container.path());
            }
        }
    }
    let found = if exact.is_empty() { prefixed } else { exact };
    match found.len() {
        0 => Err(not_found(base, id)),
        1 => Ok(found.into_iter().next().unwrap_or_default()),
        _ => Err(ExplainError::Ambiguous {
            id: id.to_string(),
            matches: found
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

fn not_found(base: &Path, id: &str) -> ExplainError {
    ExplainError::NotFound {
        id: id.to_string(),
        base: base.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(base: &Path, root: &str, id: &str, notice: Option<&str>) {
        let dir = base.join(root).join(id);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(text) = notice {
            std::fs::write(dir.join(state_dir::NOTICE_FILE), text).unwrap();
        }
    }

    #[test]
    fn by_id_or_unique_prefix_under_any_root() {
        let base = tempfile::tempdir().unwrap();
        let b = base.path();
        container(b, "%2Frun%2Fdocker", "abc123", Some("one\n"));
        container(b, "%2Frun%2Frunc", "abd456", Some("two\n"));
        container(b, "%2Frun%2Frunc", "abc", Some("three\n"));
        container(b, "%2Frun%2Frunc", "old", None);
        assert_eq!(
            file_of(b, "abc123", state_dir::NOTICE_FILE).unwrap(),
            "one\n"
        );
        assert_eq!(file_of(b, "abd", state_dir::NOTICE_FILE).unwrap(), "two\n");
        // An exact id beats the prefix it also is.
        assert_eq!(
            file_of(b, "abc", state_dir::NOTICE_FILE).unwrap(),
            "three\n"
        );
        let err = file_of(b, "ab", state_dir::NOTICE_FILE).unwrap_err();
        assert!(matches!(err, ExplainError::Ambiguous { .. }), "{err}");
        let err = file_of(b, "zzz", state_dir::NOTICE_FILE)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("no container zzz in vibe-shim's state"),
            "{err}"
        );
        assert!(matches!(
            file_of(b, "old", state_dir::NOTICE_FILE),
            Err(ExplainError::Read { .. })
        ));
        assert!(matches!(
            file_of(b, "../x", state_dir::NOTICE_FILE),
            Err(ExplainError::BadId(_))
        ));
        assert!(matches!(
            file_of(&b.join("none"), "abc", state_dir::NOTICE_FILE),
            Err(ExplainError::NotFound { .. })
        ));
    }
}
