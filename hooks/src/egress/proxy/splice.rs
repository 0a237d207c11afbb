//! A pipe for splice(2): socket -> pipe -> socket without a user-space
//! copy. Both ends non-blocking; the caller waits on the sockets.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::libc;

/// What a large pipe is asked to hold (the default is 64 KiB). Pages are
/// taken only while bytes are in flight; if the kernel refuses (the
/// per-user pipe limits), the default size stays.
const PIPE_BYTES: usize = 1024 * 1024;
/// Bytes of large pipes the whole daemon may hold. Spliced pages are
/// charged to no socket and no cgroup, and a container that drains its
/// tunnels one byte at a time keeps them full: past this budget a tunnel
/// gets the default 64 KiB pipes (what a buffered copy would hold too).
const LARGE_PIPE_BUDGET: usize = 64 * PIPE_BYTES;
static LARGE_PIPES_HELD: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    size: usize,
    /// Holds `PIPE_BYTES` of [`LARGE_PIPE_BUDGET`].
    large: bool,
}

impl Pipe {
    pub fn new() -> io::Result<Pipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        let mut pipe = Pipe {
            read,
            write,
            size: 64 * 1024,
            large: false,
        };
        if reserve_large() {
            // From here on Drop returns the reservation.
            pipe.large = true;
            if let Ok(n) = fcntl(
                pipe.write.as_raw_fd(),
                FcntlArg::F_SETPIPE_SZ(PIPE_BYTES as i32),
            ) {
                pipe.size = usize::try_from(n).unwrap_or(pipe.size);
                return Ok(pipe);
            }
        }
        let size = fcntl(pipe.write.as_raw_fd(), FcntlArg::F_GETPIPE_SZ)?;
        pipe.size = usize::try_from(size).unwrap_or(pipe.size);
        Ok(pipe)
    }

    /// Moves what `socket` has (up to the pipe's size) into the empty pipe:
    /// the byte count, 0 at end of stream, WouldBlock when nothing is there.
    pub fn fill(&self, socket: BorrowedFd<'_>) -> io::Result<usize> {
        splice(socket, self.write.as_fd(), self.size)
    }

    /// Moves up to `len` bytes of the pipe into `socket`.
    pub fn drain(&self, socket: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
        splice(self.read.as_fd(), socket, len)
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        if self.large {
            LARGE_PIPES_HELD.fetch_sub(PIPE_BYTES, Ordering::AcqRel);
        }
    }
}

fn reserve_large() -> bool {
    LARGE_PIPES_HELD
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            (held + PIPE_BYTES <= LARGE_PIPE_BUDGET).then_some(held + PIPE_BYTES)
        })
        .is_ok()
}

fn splice(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
    // SAFETY: two fds borrowed for the call, no offsets (pipes and sockets
    // have none). Writing to a socket whose peer is gone raises SIGPIPE,
    // which Rust's runtime ignores in this process: EPIPE comes back.
    let n = unsafe {
        libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            flags,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_pipes_stop_at_the_budget_and_come_back_on_drop() {
        // Other tests in this process may hold some: take what is left.
        let mut held = Vec::new();
        while let Ok(p) = Pipe::new() {
            if !p.large {
                assert_eq!(
                    p.size,
                    64 * 1024,
                    "a pipe past the budget keeps the default"
                );
                break;
            }
            held.push(p);
            assert!(
                held.len() <= LARGE_PIPE_BUDGET / PIPE_BYTES,
                "budget overrun"
            );
        }
        assert!(LARGE_PIPES_HELD.load(Ordering::Acquire) <= LARGE_PIPE_BUDGET);
        let n = held.len();
        drop(held);
        if n > 0 {
            assert!(
                Pipe::new().unwrap().large,
                "a dropped large pipe returns its bytes"
            );
        }
    }
}
