//! Reads what the kernel shows of a created container's init for the
//! start's assurance check ([`vibe_policy::assurance`] judges it): its
//! /proc files, through one descriptor of its /proc directory so a pid
//! reused meanwhile fails the reads instead of answering for another
//! process; its cgroup's limits; the namespaces against this process's.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::Mode;
use vibe_policy::assurance::{self as judge, CgroupLimits, Evidence, Namespace, RuncSeccomp};

#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Parse(#[from] judge::ParseError),
    #[error(
        "/proc/{pid}/stat: start time {seen} is not runc's init_process_start {expected} \
         (another process has the pid)"
    )]
    NotTheInit {
        pid: i32,
        seen: String,
        expected: String,
    },
    #[error("/proc/{pid}/cgroup: no pids cgroup")]
    NoCgroup { pid: i32 },
}

fn read_err(path: impl Into<String>) -> impl FnOnce(std::io::Error) -> EvidenceError {
    let path = path.into();
    move |source| EvidenceError::Read { path, source }
}

/// The init's /proc directory, opened once.
pub struct ProcDir {
    pid: i32,
    dir: OwnedFd,
}

impl ProcDir {
    pub fn open(pid: i32) -> Result<ProcDir, EvidenceError> {
        let path = format!("/proc/{pid}");
        let fd = open(
            path.as_str(),
            OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| read_err(path.clone())(e.into()))?;
        // SAFETY: `open` just returned this descriptor, owned by no one else.
        let dir = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(ProcDir { pid, dir })
    }

    fn name(&self, file: &str) -> String {
        format!("/proc/{}/{file}", self.pid)
    }

    fn file(&self, file: &str) -> Result<File, EvidenceError> {
        use std::os::fd::AsRawFd;
        let fd = openat(
            Some(self.dir.as_fd().as_raw_fd()),
            file,
            OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| read_err(self.name(file))(e.into()))?;
        // SAFETY: `openat` just returned this descriptor, owned by no one else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    pub fn read(&self, file: &str) -> Result<String, EvidenceError> {
        let mut text = String::new();
        self.file(file)?
            .read_to_string(&mut text)
            .map_err(read_err(self.name(file)))?;
        Ok(text)
    }

    /// The host uid that owns the process's user namespace
    /// (`NS_GET_OWNER_UID`), whose per-user budgets its users draw on too;
    /// `None` on a kernel without the ioctl (before 4.11).
    fn userns_owner(&self) -> Result<Option<u32>, EvidenceError> {
        use std::os::fd::AsRawFd;
        const NS_GET_OWNER_UID: nix::libc::c_ulong = 0xb704;
        let ns = self.file("ns/user")?;
        let mut uid: nix::libc::uid_t = 0;
        // SAFETY: the ioctl writes one uid_t through a pointer to ours.
        let rc = unsafe { nix::libc::ioctl(ns.as_raw_fd(), NS_GET_OWNER_UID, &mut uid) };
        if rc == 0 {
            return Ok(Some(uid));
        }
        match Errno::last() {
            Errno::ENOTTY | Errno::EINVAL => Ok(None),
            errno => Err(read_err(self.name("ns/user"))(errno.into())),
        }
    }

    fn inode(&self, file: &str) -> Result<u64, EvidenceError> {
        let meta = self
            .file(file)?
            .metadata()
            .map_err(read_err(self.name(file)))?;
        Ok(meta.ino())
    }

    /// Field 22 of `stat`, the start time in clock ticks (after the
    /// command, which may hold spaces and parentheses).
    pub fn start_time(&self) -> Result<String, EvidenceError> {
        let stat = self.read("stat")?;
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
        Ok(after
            .split_whitespace()
            .nth(19)
            .unwrap_or_default()
            .to_string())
    }
}

/// runc's facts about its init, from its state.json.
#[derive(Debug, Clone, Default)]
pub struct RuncFacts {
    /// `init_process_start`, when runc's state.json gave it.
    pub start_time: Option<String>,
    pub seccomp: RuncSeccomp,
    /// The rootfs runc resolved the spec's mount destinations in.
    pub rootfs: Option<std::path::PathBuf>,
}

/// Everything the check reads. `runc` comes from runc's state.json.
pub fn gather(pid: i32, runc: &RuncFacts) -> Result<Evidence, EvidenceError> {
    let proc = ProcDir::open(pid)?;
    let same_process = || -> Result<(), EvidenceError> {
        match &runc.start_time {
            Some(expected) => {
                let seen = proc.start_time()?;
                match &seen == expected {
                    true => Ok(()),
                    false => Err(EvidenceError::NotTheInit {
                        pid,
                        seen,
                        expected: expected.clone(),
                    }),
                }
            }
            None => Ok(()),
        }
    };
    same_process()?;
    let status = judge::parse_status(&proc.read("status")?)?;
    let uid_map = judge::parse_id_map(&proc.read("uid_map")?, "uid_map")?;
    let gid_map = judge::parse_id_map(&proc.read("gid_map")?, "gid_map")?;
    let mounts = judge::parse_mountinfo(&proc.read("mountinfo")?)?;
    let rlimits = judge::parse_limits(&proc.read("limits")?)?;
    let mut namespaces = Vec::with_capacity(judge::NAMESPACE_KINDS.len());
    for kind in judge::NAMESPACE_KINDS {
        let host = format!("/proc/thread-self/ns/{kind}");
        let host_inode = std::fs::metadata(&host).map_err(read_err(host))?.ino();
        namespaces.push(Namespace {
            kind,
            inode: proc.inode(&format!("ns/{kind}"))?,
            host_inode,
        });
    }
    let userns_owner = proc.userns_owner()?;
    let cgroup = cgroup_limits(pid, &proc.read("cgroup")?)?;
    // Still the init: every file above was its.
    same_process()?;
    Ok(Evidence {
        status,
        runc_seccomp: runc.seccomp.clone(),
        uid_map,
        gid_map,
        mounts,
        namespaces,
        userns_owner,
        cgroup,
        rlimits,
        nft: None,
    })
}

const CGROUP_FS: &str = "/sys/fs/cgroup";

fn read_cgroup_file(path: &Path) -> Result<String, EvidenceError> {
    std::fs::read_to_string(path).map_err(read_err(path.display().to_string()))
}

/// The limits of the init's cgroup: v1 when a pids hierarchy is listed,
/// else v2's one path.
fn cgroup_limits(pid: i32, text: &str) -> Result<CgroupLimits, EvidenceError> {
    let lines: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _ = parts.next()?;
            Some((parts.next()?, parts.next()?))
        })
        .collect();
    let v1 = |controller: &str| {
        lines
            .iter()
            .find(|(list, _)| list.split(',').any(|c| c == controller))
            .map(|(list, path)| {
                Path::new(CGROUP_FS)
                    .join(list)
                    .join(path.trim_start_matches('/'))
            })
    };
    let value = |dir: &Path, file: &str| -> Result<Option<u64>, EvidenceError> {
        Ok(judge::parse_cgroup_value(&read_cgroup_file(
            &dir.join(file),
        )?))
    };
    if let Some(pids) = v1("pids") {
        let path = lines
            .iter()
            .find(|(list, _)| list.split(',').any(|c| c == "pids"))
            .map(|(_, p)| p.to_string())
            .unwrap_or_default();
        let memory = v1("memory").ok_or(EvidenceError::NoCgroup { pid })?;
        let cpu = v1("cpu").ok_or(EvidenceError::NoCgroup { pid })?;
        return Ok(CgroupLimits {
            path,
            version: 1,
            pids_max: value(&pids, "pids.max")?,
            memory_max: value(&memory, "memory.limit_in_bytes")?,
            cpu_quota: value(&cpu, "cpu.cfs_quota_us")?,
            cpu_period: value(&cpu, "cpu.cfs_period_us")?.unwrap_or(100_000),
        });
    }
    let path = lines
        .iter()
        .find(|(list, _)| list.is_empty())
        .map(|(_, p)| p.to_string())
        .ok_or(EvidenceError::NoCgroup { pid })?;
    let dir = Path::new(CGROUP_FS).join(path.trim_start_matches('/'));
    let (cpu_quota, cpu_period) = judge::parse_cpu_max(&read_cgroup_file(&dir.join("cpu.max"))?);
    Ok(CgroupLimits {
        path,
        version: 2,
        pids_max: value(&dir, "pids.max")?,
        memory_max: value(&dir, "memory.max")?,
        cpu_quota,
        cpu_period,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id() as i32;
        let proc = ProcDir::open(me).unwrap();
        assert!(!proc.start_time().unwrap().is_empty());
        assert!(proc.read("status").unwrap().contains("CapEff"));
        let runc = RuncFacts {
            start_time: Some("1".into()),
            ..RuncFacts::default()
        };
        assert!(matches!(
            gather(me, &runc),
            Err(EvidenceError::NotTheInit { .. })
        ));
    }

    #[test]
    fn a_gone_pid_is_an_error() {
        assert!(ProcDir::open(i32::MAX).is_err());
    }
}
