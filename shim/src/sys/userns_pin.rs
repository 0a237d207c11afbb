//! The container's user namespace, made by vibe-shim and owned by its block.
//!
//! The kernel charges per-user budgets (inotify instances and watches,
//! `RLIMIT_NPROC`, user namespaces, mqueue bytes) to the user in the
//! namespace *and* to the owner of each user namespace above it. A user
//! namespace that runc makes is owned by root, so every private container
//! would draw on host root's budget: one container that used up its
//! inotify instances took them from dockerd, systemd and every other
//! container. Here a child process takes the block's base ids and unshares
//! the namespace, so the owner is that host id, which no account and no
//! other container has; vibe-shim (root) writes the block's mappings, and
//! the namespace is pinned by a bind of its nsfs file that runc joins
//! (`linux.namespaces[].path`). The pin goes with the staged binds: at
//! `start`, at `delete` and on any failure of `create`.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, pipe2, setgroups, setresgid, setresuid, ForkResult, Gid, Pid, Uid};
use vibe_policy::config::USERNS_BLOCK;
use vibe_policy::engine::IdBlock;

#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("{what}: {errno}")]
    Sys { what: &'static str, errno: Errno },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the namespace's child failed to {step}: {errno}")]
    Child { step: &'static str, errno: Errno },
}

fn sys(what: &'static str) -> impl FnOnce(Errno) -> PinError {
    move |errno| PinError::Sys { what, errno }
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> PinError + 'a {
    move |source| PinError::Io {
        what,
        path: path.display().to_string(),
        source,
    }
}

/// The steps the child reports by number when one fails.
const STEPS: [&str; 4] = [
    "drop its groups",
    "take the block's gid",
    "take the block's uid",
    "unshare a user namespace",
];

/// Makes a user namespace owned by the block's base uid, maps container
/// ids 0-65535 onto the block, and binds it onto `point` (a new file).
pub fn pin(point: &Path, block: IdBlock) -> Result<(), PinError> {
    let (ready_r, ready_w) = pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe"))?;
    let (done_r, done_w) = pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe"))?;
    // SAFETY: create runs no other thread; the child makes only system
    // calls (no allocation, no lock) and leaves with _exit.
    match unsafe { fork() }.map_err(sys("fork"))? {
        ForkResult::Child => {
            drop(ready_r);
            drop(done_w);
            child(block, ready_w, done_r)
        }
        ForkResult::Parent { child } => {
            drop(ready_w);
            drop(done_r);
            let pinned = parent(point, block, child, ready_r);
            // The child waits for this pipe to close, then leaves.
            drop(done_w);
            let _ = waitpid(child, None);
            if pinned.is_err() {
                let _ = std::fs::remove_file(point);
            }
            pinned
        }
    }
}

fn child(block: IdBlock, ready: OwnedFd, done: OwnedFd) -> ! {
    let (uid, gid) = (Uid::from_raw(block.uid), Gid::from_raw(block.gid));
    let steps: [&dyn Fn() -> nix::Result<()>; 4] = [
        &|| setgroups(&[]),
        &|| setresgid(gid, gid, gid),
        &|| setresuid(uid, uid, uid),
        &|| unshare(CloneFlags::CLONE_NEWUSER),
    ];
    let mut report = [0u8; 5];
    for (i, step) in steps.iter().enumerate() {
        if let Err(errno) = step() {
            report[0] = i as u8 + 1;
            report[1..].copy_from_slice(&(errno as i32).to_ne_bytes());
            break;
        }
    }
    let _ = nix::unistd::write(&ready, &report);
    let mut byte = [0u8; 1];
    let _ = nix::unistd::read(done.as_raw_fd(), &mut byte);
    // SAFETY: _exit ends the forked child without running the parent's
    // atexit handlers or destructors.
    unsafe { nix::libc::_exit(0) }
}

fn parent(point: &Path, block: IdBlock, child: Pid, ready: OwnedFd) -> Result<(), PinError> {
    let mut report = [0u8; 5];
    File::from(ready)
        .read_exact(&mut report)
        .map_err(io("read the report of", Path::new("the namespace's child")))?;
    if report[0] != 0 {
        let step = STEPS
            .get(usize::from(report[0]) - 1)
            .copied()
            .unwrap_or("?");
        let errno = i32::from_ne_bytes([report[1], report[2], report[3], report[4]]);
        return Err(PinError::Child {
            step,
            errno: Errno::from_raw(errno),
        });
    }
    let proc = Path::new("/proc").join(child.as_raw().to_string());
    // The group map first: writing it needs no `setgroups deny` from a
    // writer with CAP_SETGID above, and the container may set its groups.
    for (file, base) in [("gid_map", block.gid), ("uid_map", block.uid)] {
        let path = proc.join(file);
        let line = format!("0 {base} {USERNS_BLOCK}\n");
        File::options()
            .write(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(io("write", &path))?;
    }
    File::options()
        .write(true)
        .create_new(true)
        .open(point)
        .map_err(io("create", point))?;
    let ns = proc.join("ns/user");
    mount(
        Some(&ns),
        point,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(sys("bind the user namespace"))
}
