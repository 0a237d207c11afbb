//! Syscalls a sandboxed process must not be able to make. Each is tried
//! once, in a way that harms nothing when it works: unshare in a forked
//! child that exits, mount onto a path that does not exist, sockets and
//! the io_uring closed at once.

use crate::report::Check;

/// What one attempt returned: `Ok` when the call worked, else its errno.
pub type Outcome = Result<(), i32>;

/// Where a mount is aimed: a missing path, so a mount the filter lets
/// through stops at path lookup (ENOENT) before anything is mounted.
const MISSING: &str = "/.vibe-shim-probe-missing/target\0";

pub fn checks() -> Vec<Check> {
    vec![
        verdict("seccomp.userns", "unshare(CLONE_NEWUSER)", userns()),
        mount_verdict(mount()),
        verdict("seccomp.keyctl", "keyctl(GET_KEYRING_ID)", keyctl()),
        verdict(
            "seccomp.vsock",
            "socket(AF_VSOCK)",
            socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0),
        ),
        verdict(
            "seccomp.packet",
            "socket(AF_PACKET)",
            socket(
                libc::AF_PACKET,
                libc::SOCK_RAW,
                i32::from((libc::ETH_P_ALL as u16).to_be()),
            ),
        ),
        verdict("seccomp.io_uring", "io_uring_setup", io_uring()),
    ]
}

/// Holds when the call failed.
pub fn verdict(rule: &'static str, call: &str, outcome: Outcome) -> Check {
    match outcome {
        Ok(()) => Check::new(rule, false, format!("{call} succeeded")),
        Err(e) => Check::new(rule, true, format!("{call} refused: {}", errno_name(e))),
    }
}

/// mount holds when refused before path lookup: ENOENT means the call
/// reached the kernel's mount code, which only the capability check stood
/// between it and a real target.
pub fn mount_verdict(outcome: Outcome) -> Check {
    let rule = "seccomp.mount";
    match outcome {
        Ok(()) => Check::new(rule, false, "mount succeeded"),
        Err(libc::ENOENT) => Check::new(
            rule,
            false,
            "mount reached the kernel (ENOENT for a missing target): no filter refuses it",
        ),
        Err(e) => Check::new(rule, true, format!("mount refused: {}", errno_name(e))),
    }
}

/// The errno's symbolic name for the ones a filter or the kernel gives here.
pub fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EACCES => "EACCES",
        libc::EINVAL => "EINVAL",
        libc::ENOSYS => "ENOSYS",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::ENOMEM => "ENOMEM",
        libc::EMFILE => "EMFILE",
        libc::ENOSPC => "ENOSPC",
        libc::EUSERS => "EUSERS",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EBADMSG => "EBADMSG",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn userns() -> Outcome {
    // SAFETY: the child only calls async-signal-safe unshare and _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(errno());
    }
    if pid == 0 {
        // SAFETY: as above; the child never returns into Rust code.
        unsafe {
            let code = match libc::unshare(libc::CLONE_NEWUSER) {
                0 => 0,
                _ => *libc::__errno_location() & 0xff,
            };
            libc::_exit(code);
        }
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid || !libc::WIFEXITED(status) {
        return Err(libc::EINVAL);
    }
    match libc::WEXITSTATUS(status) {
        0 => Ok(()),
        e => Err(e),
    }
}

fn mount() -> Outcome {
    let src = "vibe-shim-probe\0";
    let fstype = "tmpfs\0";
    // SAFETY: NUL-terminated constants; the target does not exist.
    let r = unsafe {
        libc::mount(
            src.as_ptr().cast(),
            MISSING.as_ptr().cast(),
            fstype.as_ptr().cast(),
            0,
            std::ptr::null(),
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(errno()),
    }
}

fn keyctl() -> Outcome {
    const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
    const KEY_SPEC_USER_KEYRING: libc::c_long = -4;
    // SAFETY: integer arguments only; this looks up the user keyring.
    let r = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_GET_KEYRING_ID,
            KEY_SPEC_USER_KEYRING,
            0,
        )
    };
    match r >= 0 {
        true => Ok(()),
        false => Err(errno()),
    }
}

fn socket(domain: i32, kind: i32, protocol: i32) -> Outcome {
    // SAFETY: plain socket(2); the descriptor is closed at once.
    let fd = unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    Ok(())
}

fn io_uring() -> Outcome {
    // struct io_uring_params is 120 bytes; zeroed asks for defaults.
    let mut params = [0u8; 120];
    // SAFETY: params is as large as the kernel's struct; fd closed at once.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd as i32) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Verdict;

    #[test]
    fn a_call_that_works_does_not_hold() {
        let c = verdict("seccomp.io_uring", "io_uring_setup", Ok(()));
        assert_eq!(c.verdict, Verdict::Fail);
        assert_eq!(c.observed, "io_uring_setup succeeded");
        let c = verdict("seccomp.vsock", "socket(AF_VSOCK)", Err(libc::EPERM));
        assert_eq!(c.verdict, Verdict::Pass);
        assert_eq!(c.observed, "socket(AF_VSOCK) refused: EPERM");
    }

    #[test]
    fn a_mount_that_reaches_path_lookup_does_not_hold() {
        assert_eq!(mount_verdict(Err(libc::ENOENT)).verdict, Verdict::Fail);
        assert_eq!(mount_verdict(Ok(())).verdict, Verdict::Fail);
        assert_eq!(mount_verdict(Err(libc::EPERM)).verdict, Verdict::Pass);
        assert_eq!(
            mount_verdict(Err(libc::ENOSYS)).observed,
            "mount refused: ENOSYS"
        );
    }

    #[test]
    fn every_attempt_runs_and_names_its_rule() {
        let rules: Vec<_> = checks().iter().map(|c| c.rule.to_string()).collect();
        assert_eq!(
            rules,
            [
                "seccomp.userns",
                "seccomp.mount",
                "seccomp.keyctl",
                "seccomp.vsock",
                "seccomp.packet",
                "seccomp.io_uring"
            ]
        );
    }
}
