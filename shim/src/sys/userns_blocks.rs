//! The private id blocks of `[userns] mode = "private"`: which container
//! holds which 65,536 host ids. The decision of what a block maps is the
//! policy's ([`vibe_policy::rules::userns`]); the record is here.
//!
//! ```text
//! /run/vibe-shim/userns/
//!     lock                                 flock(2)ed by every allocation and free
//!     <runc root, escaped>/<container id>  {"v":1,"runc_root":..,"uid":..,"gid":..,"pid":..,"start":..}
//! ```
//!
//! A record is written whole (temp file, fsync, rename, fsync of the
//! directory) before runc runs, so a reader sees a block held or not,
//! never half; a create that is refused after it frees it again, `delete`
//! frees it, and each allocation first sweeps the records of containers
//! that vanished: runc has no state for them and the vibe-shim that
//! allocated (pid and start time) is gone. Blocks are compared by the ids
//! recorded, not by their index, so a changed range never hands out ids a
//! live container holds. The format carries its version and lives as long
//! as /run: an upgraded vibe-shim reads the blocks an older one recorded.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use vibe_policy::config::USERNS_BLOCK;
use vibe_policy::engine::IdBlock;
use vibe_policy::rules::userns::{block, IdRange};

use crate::sys::state_dir::{self, StateDirError};

/// Where the records live.
pub const BASE: &str = "/run/vibe-shim/userns";
const LOCK: &str = "lock";
const VERSION: u32 = 1;
/// A record is under a hundred bytes; anything larger is not ours.
const MAX_RECORD: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    #[error(
        "every one of the {blocks} private id blocks of the range ({start}+{size}) is held \
         by a live container"
    )]
    Exhausted { blocks: u32, start: u32, size: u32 },
    #[error("{path}: the container already holds a private id block and still exists")]
    Held { path: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a block record: {reason}")]
    Parse { path: String, reason: String },
    #[error(transparent)]
    StateDir(#[from] StateDirError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BlockError + '_ {
    move |source| BlockError::Io {
        path: path.display().to_string(),
        source,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    v: u32,
    runc_root: PathBuf,
    uid: u32,
    gid: u32,
    /// The vibe-shim (then runc) that allocated it, until runc has state.
    pid: u32,
    /// Its start time (`/proc/<pid>/stat` field 22), against pid reuse.
    start: u64,
}

/// The records under one base directory (tests use a temp dir).
pub struct Blocks {
    base: PathBuf,
}

impl Default for Blocks {
    fn default() -> Self {
        Blocks::new(BASE)
    }
}

impl Blocks {
    pub fn new(base: impl Into<PathBuf>) -> Blocks {
        Blocks { base: base.into() }
    }

    fn lock(&self) -> Result<Flock<File>, BlockError> {
        state_dir::ensure_private(&self.base)?;
        let path = self.base.join(LOCK);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(&path)
            .map_err(io(&path))?;
        Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| io(&path)(e.into()))
    }

    /// Holds the first block of the ranges that overlaps no live
    /// container's for `id` under `runc_root`, recorded durably.
    pub fn allocate(
        &self,
        runc_root: &Path,
        id: &str,
        uids: IdRange,
        gids: IdRange,
    ) -> Result<IdBlock, BlockError> {
        let path = state_dir::container_dir_in(&self.base, runc_root, id)?;
        let _lock = self.lock()?;
        let mut held = Vec::new();
        for (root, other_id, file, record) in self.records()? {
            if live(&root, &other_id, &record) {
                if file == path {
                    return Err(BlockError::Held {
                        path: file.display().to_string(),
                    });
                }
                held.push(record);
            } else {
                remove_record(&file)?;
            }
        }
        let overlaps = |a: u32, b: u32| {
            let (a, b) = (u64::from(a), u64::from(b));
            a < b + u64::from(USERNS_BLOCK) && b < a + u64::from(USERNS_BLOCK)
        };
        let free = (0..uids.blocks().min(gids.blocks()))
            .filter_map(|i| block(uids, gids, i))
            .find(|b| {
                !held
                    .iter()
                    .any(|r| overlaps(r.uid, b.uid) || overlaps(r.gid, b.gid))
            });
        let Some(found) = free else {
            return Err(BlockError::Exhausted {
                blocks: uids.blocks().min(gids.blocks()),
                start: uids.start,
                size: uids.size,
            });
        };
        let me = std::process::id();
        let record = Record {
            v: VERSION,
            runc_root: runc_root.to_path_buf(),
            uid: found.uid,
            gid: found.gid,
            pid: me,
            start: vibe_hooks::egress::records::process_start(i64::from(me)).unwrap_or(0),
        };
        let dir = path.parent().unwrap_or(&self.base);
        state_dir::ensure_private(dir)?;
        // The new directory entry itself must survive a crash too.
        vibe_hooks::fsio::sync_dir(&self.base).map_err(io(&self.base))?;
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        vibe_hooks::fsio::replace(
            &path,
            &bytes,
            0o600,
            None,
            vibe_hooks::fsio::Durability::Synced,
        )
        .map_err(io(&path))?;
        Ok(found)
    }

    /// Whether `id` under `runc_root` has a block recorded (one `stat`).
    pub fn has_record(&self, runc_root: &Path, id: &str) -> bool {
        state_dir::container_dir_in(&self.base, runc_root, id)
            .is_ok_and(|path| std::fs::symlink_metadata(path).is_ok())
    }

    /// Frees the block of `id` under `runc_root`; none held is fine.
    pub fn free(&self, runc_root: &Path, id: &str) -> Result<(), BlockError> {
        let path = state_dir::container_dir_in(&self.base, runc_root, id)?;
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(());
        }
        let _lock = self.lock()?;
        remove_record(&path)
    }

    /// Frees every block whose container vanished; returns how many
    /// (what [`Blocks::allocate`] does first).
    #[cfg(test)]
    pub fn sweep(&self) -> Result<usize, BlockError> {
        let _lock = self.lock()?;
        let mut freed = 0;
        for (root, id, file, record) in self.records()? {
            if !live(&root, &id, &record) {
                remove_record(&file)?;
                freed += 1;
            }
        }
        Ok(freed)
    }

    /// The block `id` holds, if any.
    #[cfg(test)]
    pub fn held(&self, runc_root: &Path, id: &str) -> Result<Option<IdBlock>, BlockError> {
        let path = state_dir::container_dir_in(&self.base, runc_root, id)?;
        match std::fs::symlink_metadata(&path) {
            Err(_) => Ok(None),
            Ok(_) => read_record(&path).map(|r| {
                Some(IdBlock {
                    uid: r.uid,
                    gid: r.gid,
                })
            }),
        }
    }

    /// Every record: (runc root, id, file, record). A record that cannot
    /// be read is an error: its ids might be live, so none is guessed free.
    fn records(&self) -> Result<Vec<(PathBuf, String, PathBuf, Record)>, BlockError> {
        let mut found = Vec::new();
        let roots = match std::fs::read_dir(&self.base) {
            Ok(dir) => dir,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(io(&self.base)(e)),
        };
        for root_entry in roots {
            let root_entry = root_entry.map_err(io(&self.base))?;
            let root_dir = root_entry.path();
            if root_entry.file_name() == LOCK || !root_dir.is_dir() {
                continue;
            }
            for entry in std::fs::read_dir(&root_dir).map_err(io(&root_dir))? {
                let entry = entry.map_err(io(&root_dir))?;
                let id = entry.file_name().to_string_lossy().into_owned();
                // fsio's temp files: a crash mid-write left the old state.
                if id.starts_with('.') {
                    continue;
                }
                let file = entry.path();
                let record = read_record(&file)?;
                found.push((record.runc_root.clone(), id, file, record));
            }
        }
        Ok(found)
    }
}

fn read_record(path: &Path) -> Result<Record, BlockError> {
    let bad = |reason: String| BlockError::Parse {
        path: path.display().to_string(),
        reason,
    };
    let meta = std::fs::symlink_metadata(path).map_err(io(path))?;
    if !meta.file_type().is_file() || meta.len() > MAX_RECORD {
        return Err(bad("not a small regular file".into()));
    }
    let bytes = std::fs::read(path).map_err(io(path))?;
    let record: Record = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if record.v != VERSION {
        return Err(bad(format!(
            "version {}, this vibe-shim reads {VERSION}",
            record.v
        )));
    }
    Ok(record)
}

fn remove_record(path: &Path) -> Result<(), BlockError> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(path)(e)),
    }
    if let Some(dir) = path.parent() {
        // The last record of a root takes its directory along.
        let _ = std::fs::remove_dir(dir);
        vibe_hooks::fsio::sync_dir(dir.parent().unwrap_or(dir)).map_err(io(dir))?;
    }
    Ok(())
}

/// A container is live while runc has state for it, or while the process
/// that allocated its block (vibe-shim, then runc create) still runs.
fn live(runc_root: &Path, id: &str, record: &Record) -> bool {
    let pid = i32::try_from(record.pid).unwrap_or(0);
    state_dir::container_exists(runc_root, id)
        || vibe_hooks::egress::records::same_process(pid, record.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANGE: IdRange = IdRange {
        start: 0x7000_0000,
        size: 3 * USERNS_BLOCK,
    };

    struct Env {
        _dir: tempfile::TempDir,
        blocks: Blocks,
        runc_root: PathBuf,
    }

    fn env() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let runc_root = dir.path().join("runc");
        std::fs::create_dir(&runc_root).unwrap();
        Env {
            blocks: Blocks::new(dir.path().join("userns")),
            runc_root,
            _dir: dir,
        }
    }

    impl Env {
        /// runc state for `id`: the container exists.
        fn created(&self, id: &str) {
            let dir = self.runc_root.join(id);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("state.json"), "{}").unwrap();
        }

        fn vanished(&self, id: &str) {
            std::fs::remove_dir_all(self.runc_root.join(id)).unwrap();
        }

        /// Makes the record of `id` look allocated by a process now gone.
        fn orphan(&self, id: &str) {
            let path = state_dir::container_dir_in(&self.blocks.base, &self.runc_root, id).unwrap();
            let mut record = read_record(&path).unwrap();
            record.start += 1;
            std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
        }

        fn allocate(&self, id: &str) -> Result<IdBlock, BlockError> {
            self.blocks.allocate(&self.runc_root, id, RANGE, RANGE)
        }
    }

    #[test]
    fn blocks_are_disjoint_and_an_exhausted_range_is_refused() {
        let env = env();
        let mut got = Vec::new();
        for id in ["a", "b", "c"] {
            let block = env.allocate(id).unwrap();
            env.created(id);
            got.push(block.uid);
        }
        got.sort();
        assert_eq!(
            got,
            [
                0x7000_0000,
                0x7000_0000 + USERNS_BLOCK,
                0x7000_0000 + 2 * USERNS_BLOCK
            ]
        );
        let err = env.allocate("d").unwrap_err();
        assert!(
            matches!(err, BlockError::Exhausted { blocks: 3, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("every one of the 3"), "{err}");
    }

    #[test]
    fn a_freed_block_is_handed_out_again() {
        let env = env();
        let a = env.allocate("a").unwrap();
        env.created("a");
        env.allocate("b").unwrap();
        env.created("b");
        env.blocks.free(&env.runc_root, "a").unwrap();
        assert_eq!(env.blocks.held(&env.runc_root, "a").unwrap(), None);
        assert_eq!(env.allocate("c").unwrap(), a);
        // Freeing what is not held is fine.
        env.blocks.free(&env.runc_root, "zz").unwrap();
    }

    #[test]
    fn vanished_containers_are_swept_and_live_ones_kept() {
        let env = env();
        for id in ["a", "b", "c"] {
            env.allocate(id).unwrap();
            env.created(id);
        }
        // runc's state is gone, but its creator still runs: kept.
        env.vanished("a");
        assert_eq!(env.blocks.sweep().unwrap(), 0);
        // Gone and its creator gone too: swept, and the range has room.
        env.orphan("a");
        // A live container whose creator is gone is kept (runc has state).
        env.orphan("b");
        assert_eq!(env.blocks.sweep().unwrap(), 1);
        assert!(env.blocks.held(&env.runc_root, "b").unwrap().is_some());
        env.allocate("d").unwrap();
    }

    #[test]
    fn a_live_container_is_not_given_a_second_block() {
        let env = env();
        env.allocate("a").unwrap();
        env.created("a");
        assert!(matches!(env.allocate("a"), Err(BlockError::Held { .. })));
        // A record left by a refused create of the same id is reused.
        env.vanished("a");
        env.orphan("a");
        env.allocate("a").unwrap();
    }

    #[test]
    fn a_record_is_whole_or_absent_and_a_torn_one_is_never_guessed_free() {
        let env = env();
        let block = env.allocate("a").unwrap();
        env.created("a");
        let path = state_dir::container_dir_in(&env.blocks.base, &env.runc_root, "a").unwrap();
        // A crash between temp file and rename leaves a temp file only.
        let tmp = path.with_file_name(".a.vibe-shim.1.0.tmp");
        std::fs::write(&tmp, b"{\"v\":1,\"ui").unwrap();
        let other = env.allocate("b").unwrap();
        assert_ne!(other.uid, block.uid);
        // A record that does not parse blocks allocation rather than
        // letting its ids be reused.
        std::fs::write(&path, b"{\"v\":1,\"ui").unwrap();
        let err = env.allocate("c").unwrap_err();
        assert!(matches!(err, BlockError::Parse { .. }), "{err}");
        // What an older vibe-shim of this version recorded reads back.
        std::fs::write(
            &path,
            format!(
                r#"{{"v":1,"runc_root":"{}","uid":1879048192,"gid":1879048192,"pid":0,"start":0}}"#,
                env.runc_root.display()
            ),
        )
        .unwrap();
        assert_eq!(env.blocks.held(&env.runc_root, "a").unwrap(), Some(block));
    }

    #[test]
    fn a_changed_range_never_overlaps_a_held_block() {
        let env = env();
        let a = env.allocate("a").unwrap();
        env.created("a");
        // The admin moved the range a block up, or down.
        let moved = IdRange {
            start: RANGE.start + USERNS_BLOCK,
            size: RANGE.size,
        };
        let shifted = IdRange {
            start: RANGE.start - USERNS_BLOCK,
            size: RANGE.size,
        };
        for range in [moved, shifted] {
            let b = env
                .blocks
                .allocate(&env.runc_root, "b", range, range)
                .unwrap();
            assert!(b.uid.abs_diff(a.uid) >= USERNS_BLOCK);
            env.blocks.free(&env.runc_root, "b").unwrap();
        }
    }
}
