//! `vibe-shim hook tmpfs-modes <marker> <rootfs> <mode:uid:gid:path>...`:
//! the createContainer hook the `tmpfs_modes` rule adds. runc runs it in
//! the container's mount namespace after its mounts and before pivot_root,
//! as root, so `<rootfs>/<path>` is the container's mount. runc has chmodded
//! each policy tmpfs to the image directory's mode; this sets the judged
//! mode and owner. Any doubt is an error, and runc's create fails.
//!
//! Each path is resolved inside the rootfs only (`RESOLVE_IN_ROOT`, as
//! runc's own SecureJoin placed the mount: an image symlink `/tmp ->
//! /var/tmp` moved runc's mount there too), no magic links. The directory
//! reached must be the root of a tmpfs mounted exactly once in this
//! namespace (which still holds every host mount, since it is a copy of
//! runc's): a fresh mount runc just made, never a host tmpfs a bind carried
//! in, whose chmod would reach the host. Then fchown and fchmod on that fd.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{open, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fchmod, fstat, Mode};
use nix::sys::statfs::{fstatfs, TMPFS_MAGIC};
use nix::unistd::{fchown, Gid, Uid};
use vibe_policy::rules::tmpfs_modes::{parse_hook_args, ModeEntry};

/// `STATX_ATTR_MOUNT_ROOT` (linux/stat.h, Linux 5.8); not in the libc crate.
const STATX_ATTR_MOUNT_ROOT: u64 = 0x2000;

#[derive(Debug, thiserror::Error)]
pub enum TmpfsHookError {
    #[error("arguments: {0}")]
    Args(String),
    #[error("{path}: {op}: {errno}")]
    Sys {
        path: String,
        op: &'static str,
        errno: Errno,
    },
    #[error("{path}: {why}; refusing to change its mode")]
    NotFresh { path: String, why: String },
    #[error("cannot read /proc/self/mountinfo: {0}")]
    Mountinfo(std::io::Error),
}

/// `args` are the tokens after `tmpfs-modes`.
pub fn run(args: &[String]) -> Result<(), TmpfsHookError> {
    let (root, entries) = parse_hook_args(args).map_err(TmpfsHookError::Args)?;
    if root == "/" {
        return Err(TmpfsHookError::Args("the rootfs cannot be /".into()));
    }
    // runc itself refuses a rootfs path with a symlink in it.
    let rootfd = open(
        Path::new(&root),
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(sys(&root, "open rootfs"))?;
    // SAFETY: open just returned this fd, and nothing else owns it.
    let rootfd = unsafe { OwnedFd::from_raw_fd(rootfd) };
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(TmpfsHookError::Mountinfo)?;
    for entry in &entries {
        set(&rootfd, entry, &mountinfo)?;
    }
    Ok(())
}

fn sys<'a>(path: &'a str, op: &'static str) -> impl Fn(Errno) -> TmpfsHookError + 'a {
    move |errno| TmpfsHookError::Sys {
        path: path.to_string(),
        op,
        errno,
    }
}

fn set(rootfd: &OwnedFd, entry: &ModeEntry, mountinfo: &str) -> Result<(), TmpfsHookError> {
    let path = entry.path.as_str();
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = openat2(rootfd.as_raw_fd(), path.trim_start_matches('/'), how)
        .map_err(sys(path, "open beneath the rootfs"))?;
    // SAFETY: openat2 just returned this fd, and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let not_fresh = |why: String| TmpfsHookError::NotFresh {
        path: path.to_string(),
        why,
    };
    let fs = fstatfs(&fd).map_err(sys(path, "fstatfs"))?;
    if fs.filesystem_type() != TMPFS_MAGIC {
        return Err(not_fresh("not a tmpfs".into()));
    }
    let (mount_id, mount_root) = statx_mount(&fd).map_err(sys(path, "statx"))?;
    if !mount_root {
        return Err(not_fresh("not the root of a mount".into()));
    }
    let st = fstat(fd.as_raw_fd()).map_err(sys(path, "fstat"))?;
    let dev = (
        nix::sys::stat::major(st.st_dev),
        nix::sys::stat::minor(st.st_dev),
    );
    fresh_mount(mountinfo, mount_id, dev).map_err(not_fresh)?;
    // chown first: it may clear mode bits, chmod then sets them all.
    fchown(
        fd.as_raw_fd(),
        Some(Uid::from_raw(entry.uid)),
        Some(Gid::from_raw(entry.gid)),
    )
    .map_err(sys(path, "fchown"))?;
    fchmod(
        fd.as_raw_fd(),
        Mode::from_bits_truncate(entry.mode as nix::libc::mode_t),
    )
    .map_err(sys(path, "fchmod"))
}

/// The fd's mount id and whether it is the root of that mount.
fn statx_mount(fd: &OwnedFd) -> Result<(u64, bool), Errno> {
    let buf = crate::sys::stage::statx_fd(fd)?;
    if buf.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT == 0 {
        return Err(Errno::ENOTSUP);
    }
    Ok((
        buf.stx_mnt_id,
        buf.stx_attributes & STATX_ATTR_MOUNT_ROOT != 0,
    ))
}

/// Whether mount `id` (device `dev`) is a whole tmpfs mounted nowhere else
/// in this namespace: its mountinfo line says tmpfs with root `/`, and no
/// other line has its device.
pub fn fresh_mount(mountinfo: &str, id: u64, dev: (u64, u64)) -> Result<(), String> {
    let dev_text = format!("{}:{}", dev.0, dev.1);
    let mut own = None;
    let mut same_dev = 0;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(line_id), Some(line_dev), Some(root)) =
            (fields.first(), fields.get(2), fields.get(3))
        else {
            continue;
        };
        if *line_dev == dev_text {
            same_dev += 1;
        }
        if line_id.parse() == Ok(id) {
            let fstype = fields
                .iter()
                .position(|f| *f == "-")
                .and_then(|sep| fields.get(sep + 1));
            own = Some((*root, fstype.copied(), *line_dev == dev_text));
        }
    }
    match own {
        None => Err(format!("mount {id} is not in this namespace's mountinfo")),
        Some((_, fstype, _)) if fstype != Some("tmpfs") => {
            Err(format!("mount {id} is {fstype:?}, not tmpfs"))
        }
        Some((root, _, _)) if root != "/" => Err(format!("mount {id} is a bind of {root}")),
        Some((_, _, false)) => Err(format!("mount {id} is not device {dev_text}")),
        Some(_) if same_dev != 1 => Err(format!(
            "its tmpfs is mounted {same_dev} times in this namespace (a host tmpfs?)"
        )),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
30 1 0:40 / /run rw,nosuid - tmpfs tmpfs rw,mode=755
500 499 0:99 / /var/lib/x/rootfs/tmp rw,nosuid,nodev - tmpfs tmpfs rw,mode=1777
501 499 0:40 /user /var/lib/x/rootfs/home/user rw - tmpfs tmpfs rw
502 499 0:40 / /var/lib/x/rootfs/cache rw shared:5 - tmpfs tmpfs rw
503 499 8:1 / /var/lib/x/rootfs/data rw - ext4 /dev/sda1 rw
";

    #[test]
    fn only_a_tmpfs_mounted_once_is_fresh() {
        assert_eq!(fresh_mount(MOUNTINFO, 500, (0, 99)), Ok(()));
        for (id, dev, why) in [
            (501, (0, 40), "bind of /user"),
            (502, (0, 40), "mounted 3 times"),
            (503, (8, 1), "not tmpfs"),
            (504, (0, 99), "not in this namespace"),
            (500, (0, 98), "not device"),
        ] {
            let err = fresh_mount(MOUNTINFO, id, dev).unwrap_err();
            assert!(err.contains(why), "{id}: {err}");
        }
    }

    #[test]
    fn a_directory_that_is_not_a_tmpfs_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        let args: Vec<String> = [
            vibe_policy::TMPFS_MODES_HOOK_MARKER,
            dir.path().to_str().unwrap(),
            "1777:0:0:/tmp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let err = run(&args).unwrap_err().to_string();
        // /var/tmp-style temp dirs may themselves be on a tmpfs: either way
        // the directory is refused, never chmodded.
        assert!(err.contains("/tmp: "), "{err}");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("tmp"))
                .unwrap()
                .permissions(),
        );
        assert_ne!(mode & 0o7777, 0o1777);
        assert!(run(&args[..1]).is_err());
    }
}
