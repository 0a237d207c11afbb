//! The claim ledger of engine volumes (`filesystem.volumes = "private"`):
//! which container a volume belongs to. The first container vibe-shim
//! creates with a volume claims it; the decision is the policy's
//! ([`vibe_policy::rules::volumes::judge_claim`]), the files are here.
//!
//! ```text
//! /var/lib/vibe-shim/volumes/<volume dir, escaped>/<name>@<inode>@<birth s>.<birth ns>
//!     {"runc_root": "...", "id": "..."}   the holder
//! ```
//!
//! Under /var/lib, not /run: a claim must outlive a reboot, or the first
//! container to start afterwards would take any volume. A claim is keyed by
//! the identity of the `_data` directory that runc mounts (the pinned fd),
//! inode and birth time: `docker volume rm` and a new volume of the same
//! name is a new claim, and an inode number the filesystem reuses has
//! another birth time. The device number is left out on purpose: it may
//! change at a reboot (a device-mapper minor), while the volume directory's
//! path does not, and `_data` is on that directory's own mount (checked by
//! the stager). A claim is made by `link(2)` of a complete, synced temp
//! file: of two creates racing for a new volume exactly one link succeeds,
//! and the other reads the winner's holder. Claims are never released (see
//! docs/admin/policy.md#volumes): runc's `delete` runs at every stop of a
//! Docker container, which keeps its volume.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use nix::errno::Errno;
use serde::{Deserialize, Serialize};
use vibe_policy::rules::volumes::{Holder, Volume};

use crate::sys::state_dir::{self, StateDirError};

/// Where the ledger lives.
pub const BASE: &str = "/var/lib/vibe-shim/volumes";
/// A holder file is a few hundred bytes; anything larger is not ours.
const MAX_CLAIM: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(
        "the filesystem of {0} does not report birth times (statx STATX_BTIME): \
         a volume's identity cannot be told from a later one's"
    )]
    NoBirthTime(String),
    #[error("statx {path}: {errno}")]
    Statx { path: String, errno: Errno },
    #[error("volume claim {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("volume claim {path} is not a holder record: {source}")]
    Parse {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Private(#[from] vibe_hooks::fsio::PrivateFileError),
    #[error(transparent)]
    StateDir(#[from] StateDirError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LedgerError + '_ {
    move |source| LedgerError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// What identifies one volume's content directory for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub ino: u64,
    pub birth_sec: i64,
    pub birth_nsec: u32,
}

/// The identity of the directory `fd` is open on (the pinned `_data`).
pub fn identity(fd: &OwnedFd, path: &Path) -> Result<Identity, LedgerError> {
    // SAFETY: statx fills the zeroed buffer; AT_EMPTY_PATH with "" makes
    // it describe the fd itself.
    let mut buf: nix::libc::statx = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        nix::libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            nix::libc::AT_EMPTY_PATH,
            nix::libc::STATX_INO | nix::libc::STATX_BTIME,
            &mut buf,
        )
    };
    Errno::result(rc).map_err(|errno| LedgerError::Statx {
        path: path.display().to_string(),
        errno,
    })?;
    if buf.stx_mask & nix::libc::STATX_BTIME == 0 {
        return Err(LedgerError::NoBirthTime(path.display().to_string()));
    }
    Ok(Identity {
        ino: buf.stx_ino,
        birth_sec: buf.stx_btime.tv_sec,
        birth_nsec: buf.stx_btime.tv_nsec,
    })
}

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    runc_root: PathBuf,
    id: String,
}

/// The claim file of a volume below `base`.
fn claim_path(base: &Path, volume: &Volume, identity: Identity) -> PathBuf {
    let dir = vibe_hooks::egress::records::escape_root(&volume.dir);
    let Identity {
        ino,
        birth_sec,
        birth_nsec,
    } = identity;
    base.join(dir)
        .join(format!("{}@{ino}@{birth_sec}.{birth_nsec:09}", volume.name))
}

/// The ledger's answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub holder: Holder,
    /// This call made the claim: the volume's first use through vibe-shim.
    pub fresh: bool,
}

/// Claims the volume for `this` unless someone holds it; returns the
/// holder either way.
pub fn claim(volume: &Volume, identity: Identity, this: &Holder) -> Result<Claim, LedgerError> {
    claim_in(Path::new(BASE), volume, identity, this)
}

fn claim_in(
    base: &Path,
    volume: &Volume,
    identity: Identity,
    this: &Holder,
) -> Result<Claim, LedgerError> {
    let held = |holder| Claim {
        holder,
        fresh: false,
    };
    let path = claim_path(base, volume, identity);
    let dir = path.parent().unwrap_or(base);
    state_dir::ensure_private(dir)?;
    match read_holder(&path) {
        Err(LedgerError::Private(e)) if e.is_missing() => {}
        found => return found.map(held),
    }
    let record = Record {
        runc_root: this.runc_root.clone(),
        id: this.id.clone(),
    };
    let bytes = serde_json::to_vec(&record).map_err(|source| LedgerError::Parse {
        path: path.display().to_string(),
        source,
    })?;
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let tmp = dir.join(format!(
        ".claim.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    vibe_hooks::fsio::write_new(&tmp, &bytes, 0o600, vibe_hooks::fsio::Durability::Synced)
        .map_err(io(&tmp))?;
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            vibe_hooks::fsio::sync_dir(dir).map_err(io(dir))?;
            Ok(Claim {
                holder: this.clone(),
                fresh: true,
            })
        }
        // Another create won the race: its holder decides.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_holder(&path).map(held),
        Err(e) => Err(io(&path)(e)),
    }
}

fn read_holder(path: &Path) -> Result<Holder, LedgerError> {
    let bytes = vibe_hooks::fsio::read_private(path, MAX_CLAIM)?;
    let record: Record = serde_json::from_slice(&bytes).map_err(|source| LedgerError::Parse {
        path: path.display().to_string(),
        source,
    })?;
    Ok(Holder {
        runc_root: record.runc_root,
        id: record.id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(name: &str) -> Volume {
        Volume {
            dir: PathBuf::from("/var/lib/docker/volumes"),
            name: name.into(),
        }
    }

    fn holder(id: &str) -> Holder {
        Holder {
            runc_root: PathBuf::from("/run/docker/runtime-runc/moby"),
            id: id.into(),
        }
    }

    const ID: Identity = Identity {
        ino: 42,
        birth_sec: 1_700_000_000,
        birth_nsec: 5,
    };

    #[test]
    fn first_claim_wins_and_is_kept() {
        let base = tempfile::tempdir().unwrap();
        let v = volume("myvol");
        let claim = |id: Identity, who: &str| {
            let c = claim_in(base.path(), &v, id, &holder(who)).unwrap();
            (c.holder.id, c.fresh)
        };
        assert_eq!(claim(ID, "a"), ("a".into(), true));
        // The holder again (a restart), and someone else: both read "a".
        assert_eq!(claim(ID, "a"), ("a".into(), false));
        assert_eq!(claim(ID, "b"), ("a".into(), false));
        // A new volume of the same name (new birth time) is a new claim.
        let again = Identity {
            birth_sec: ID.birth_sec + 1,
            ..ID
        };
        assert_eq!(claim(again, "b"), ("b".into(), true));
        // No temp file is left behind.
        let dir = claim_path(base.path(), &v, ID);
        let left: Vec<_> = std::fs::read_dir(dir.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn racing_claims_have_exactly_one_winner() {
        let base = tempfile::tempdir().unwrap();
        let v = volume("race");
        let winners: Vec<Claim> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|i| {
                    let (base, v) = (base.path(), &v);
                    s.spawn(move || claim_in(base, v, ID, &holder(&format!("c{i}"))).unwrap())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let first = &winners[0].holder;
        assert!(winners.iter().all(|w| w.holder == *first), "{winners:?}");
        assert_eq!(winners.iter().filter(|w| w.fresh).count(), 1, "{winners:?}");
    }

    #[test]
    fn a_damaged_claim_fails_closed() {
        let base = tempfile::tempdir().unwrap();
        let v = volume("bad");
        let path = claim_path(base.path(), &v, ID);
        state_dir::ensure_private(path.parent().unwrap()).unwrap();
        vibe_hooks::fsio::write_new(
            &path,
            b"not json",
            0o600,
            vibe_hooks::fsio::Durability::Volatile,
        )
        .unwrap();
        assert!(matches!(
            claim_in(base.path(), &v, ID, &holder("a")),
            Err(LedgerError::Parse { .. })
        ));
    }

    #[test]
    fn identity_of_a_directory_has_a_birth_time() {
        let dir = tempfile::tempdir().unwrap();
        let fd: OwnedFd = std::fs::File::open(dir.path()).unwrap().into();
        match identity(&fd, dir.path()) {
            Ok(id) => assert!(id.ino > 0),
            Err(LedgerError::NoBirthTime(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
}
