//! The egress daemon's client half: what the `createRuntime` hook, the
//! start check and `delete` ask the daemon over its control socket
//! ([`super::control`]'s framing). The daemon itself is [`super::daemon`].

use std::fs::File;
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use vibe_policy::config::NetworkSection;
use vibe_policy::egress::credential::Binding;

use super::control::{read_line, send_with_fd, Reply, Request, MAX_LINE, TIMEOUT};
use super::records;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot reach the egress daemon at {path}: {source} (is `vibe-shim egress` running?)")]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("egress daemon at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("egress daemon at {path}: unreadable reply: {source}")]
    Reply {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("egress daemon refused: {0}")]
    Refused(String),
    #[error("request: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("request: cannot read process {0}'s start time")]
    StartTime(i32),
}

/// Sends `request` (with `fd` attached) to the daemon at `socket` and
/// returns its reply; a reply with `ok: false` is [`ControlError::Refused`].
pub fn call(
    socket: &Path,
    request: &Request,
    fd: Option<BorrowedFd<'_>>,
) -> Result<Reply, ControlError> {
    let io = |source| ControlError::Io {
        path: socket.to_path_buf(),
        source,
    };
    let mut stream = UnixStream::connect(socket).map_err(|source| ControlError::Connect {
        path: socket.to_path_buf(),
        source,
    })?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
    let mut line = serde_json::to_vec(request).map_err(ControlError::Encode)?;
    line.push(b'\n');
    send_with_fd(&stream, &line, fd).map_err(io)?;
    let reply = read_line(&mut stream, MAX_LINE).map_err(io)?;
    let reply: Reply = serde_json::from_slice(&reply).map_err(|source| ControlError::Reply {
        path: socket.to_path_buf(),
        source,
    })?;
    if !reply.ok {
        let reason = reply.error.unwrap_or_else(|| "no reason given".into());
        return Err(ControlError::Refused(reason));
    }
    Ok(reply)
}

/// Registers container `id` (under runc root `runc_root`, init `pid`) with
/// the daemon at `socket`, passing its network namespace: the hook's side.
/// The reply carries the listeners and, with credentials, the CA's PEM.
pub fn register(
    socket: &Path,
    runc_root: &Path,
    id: &str,
    pid: i32,
    network: &NetworkSection,
    credentials: &[Binding],
    netns: &File,
) -> Result<Reply, ControlError> {
    use std::os::fd::AsFd;
    let start_time = records::process_start(i64::from(pid)).ok_or(ControlError::StartTime(pid))?;
    let request = Request::Register {
        id: id.to_string(),
        runc_root: runc_root.to_path_buf(),
        network: network.clone(),
        pid,
        start_time,
        credentials: credentials.to_vec(),
    };
    call(socket, &request, Some(netns.as_fd()))
}

/// Whether the daemon at `socket` serves container `id`: its listeners.
pub fn status(socket: &Path, runc_root: &Path, id: &str) -> Result<Vec<String>, ControlError> {
    let request = Request::Status {
        id: Some(id.to_string()),
        runc_root: Some(runc_root.to_path_buf()),
    };
    call(socket, &request, None).map(|reply| reply.listeners)
}

/// Tells the daemon at `socket` to stop serving container `id`.
pub fn unregister(socket: &Path, runc_root: &Path, id: &str) -> Result<(), ControlError> {
    let request = Request::Unregister {
        id: id.to_string(),
        runc_root: runc_root.to_path_buf(),
    };
    call(socket, &request, None).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_daemon_names_the_socket() {
        let err = call(
            Path::new("/nonexistent/egress.sock"),
            &Request::Status {
                id: None,
                runc_root: None,
            },
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("/nonexistent/egress.sock") && err.contains("vibe-shim egress"),
            "{err}"
        );
    }
}
