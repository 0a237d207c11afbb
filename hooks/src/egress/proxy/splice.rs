//! A pipe for splice(2): socket -> pipe -> socket without a user-space
//! copy. Both ends non-blocking; the caller waits on the sockets.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::libc;

/// What the pipe is asked to hold (the default is 64 KiB). Pages are
/// taken only while bytes are in flight; if the kernel refuses (the
/// per-user pipe limits), the default size stays.
const PIPE_BYTES: i32 = 1024 * 1024;

#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    size: usize,
}

impl Pipe {
    pub fn new() -> io::Result<Pipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        let size = fcntl(write.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(PIPE_BYTES))
            .or_else(|_| fcntl(write.as_raw_fd(), FcntlArg::F_GETPIPE_SZ))?;
        Ok(Pipe {
            read,
            write,
            size: usize::try_from(size).unwrap_or(64 * 1024),
        })
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
