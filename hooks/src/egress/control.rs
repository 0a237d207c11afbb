//! The egress daemon's control protocol, over its root-only unix socket:
//! one JSON request line (a registration carries the container's network
//! namespace as an SCM_RIGHTS fd on its first bytes), one JSON reply line.
//!
//! ```text
//! {"op":"register","id","runc_root","network":{...},"pid","start_time"} + netns fd
//! {"op":"unregister","id","runc_root"}
//! {"op":"status","id","runc_root"}      (both omitted: the daemon's count)
//! -> {"ok":true,...} | {"ok":false,"error":"why"}
//! ```
//!
//! Both halves share this framing; the client half (the hook's and the
//! shim's calls) is [`super::client`], the daemon's is [`super::daemon`].

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};
use vibe_policy::config::NetworkSection;
use vibe_policy::egress::credential::Binding;

/// Longest request line the daemon reads (a network section is small).
pub const MAX_LINE: usize = 256 * 1024;
/// How long either side waits for the other.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// One request.
// Built once per control call; boxing the register's network gains nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Request {
    Register {
        id: String,
        runc_root: PathBuf,
        network: NetworkSection,
        pid: i32,
        start_time: u64,
        /// The container's credentials (none for most containers).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        credentials: Vec<Binding>,
    },
    Unregister {
        id: String,
        runc_root: PathBuf,
    },
    Status {
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        runc_root: Option<PathBuf>,
    },
}

/// One reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The addresses a registered container's proxy listens on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<String>,
    /// How many containers the daemon serves (a status without an id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containers: Option<usize>,
    /// A registration with credentials: the PEM certificate of the CA the
    /// daemon terminates this container's credential hosts with, for the
    /// container's trust bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_pem: Option<String>,
}

impl Reply {
    pub fn ok() -> Reply {
        Reply {
            ok: true,
            ..Reply::default()
        }
    }

    pub fn refused(reason: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            error: Some(reason.into()),
            ..Reply::default()
        }
    }
}

/// Writes `bytes`, the fd riding on the first `sendmsg`.
pub fn send_with_fd(
    stream: &UnixStream,
    bytes: &[u8],
    fd: Option<BorrowedFd<'_>>,
) -> std::io::Result<()> {
    let raw: Vec<RawFd> = fd.iter().map(|fd| fd.as_raw_fd()).collect();
    let cmsgs = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &cmsgs };
    let sent = loop {
        match sendmsg::<()>(
            stream.as_raw_fd(),
            &[IoSlice::new(bytes)],
            cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other.map_err(std::io::Error::from)?,
        }
    };
    let mut writer = stream;
    writer.write_all(&bytes[sent..])
}

/// Reads up to a newline (which is dropped), at most `max` bytes.
pub fn read_line(stream: &mut impl Read, max: usize) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1024];
    loop {
        let n = stream.read(&mut byte)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before a full line",
            ));
        }
        line.extend_from_slice(&byte[..n]);
        if let Some(end) = line.iter().position(|b| *b == b'\n') {
            line.truncate(end);
            return Ok(line);
        }
        if line.len() > max {
            return Err(std::io::Error::other("line too long"));
        }
    }
}

/// The daemon's side: reads one request line and the fds that came with
/// it (received close-on-exec; more than one is refused by the caller).
pub fn receive_request(stream: &UnixStream) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut line = Vec::new();
    let mut fds = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let mut space = nix::cmsg_space!([RawFd; 4]);
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = match recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => msg,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if let Ok(cmsgs) = msg.cmsgs() {
            for cmsg in cmsgs {
                if let ControlMessageOwned::ScmRights(received) = cmsg {
                    // SAFETY: the kernel just installed these fds in this
                    // process for us; nothing else owns them.
                    fds.extend(
                        received
                            .into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
            }
        }
        let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
        let n = msg.bytes;
        if truncated {
            return Err(std::io::Error::other("too many fds"));
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before a full line",
            ));
        }
        line.extend_from_slice(&buf[..n]);
        if let Some(end) = line.iter().position(|b| *b == b'\n') {
            line.truncate(end);
            return Ok((line, fds));
        }
        if line.len() > MAX_LINE {
            return Err(std::io::Error::other("request line too long"));
        }
    }
}

/// Writes one reply line.
pub fn send_reply(stream: &mut UnixStream, reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_as_documented() {
        let r: Request = serde_json::from_str(
            r#"{"op":"register","id":"c","runc_root":"/run/runc","network":{"mode":"proxy","hosts":["a.example"]},"pid":7,"start_time":9}"#,
        )
        .unwrap();
        let Request::Register { network, pid, .. } = r else {
            panic!("not a register")
        };
        assert_eq!((network.hosts.len(), pid), (1, 7));
        let r: Request = serde_json::from_str(r#"{"op":"status"}"#).unwrap();
        assert_eq!(
            r,
            Request::Status {
                id: None,
                runc_root: None
            }
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"shutdown"}"#).is_err());
        assert!(serde_json::from_str::<Request>(
            r#"{"op":"unregister","id":"c","runc_root":"/r","x":1}"#
        )
        .is_err());
    }

    #[test]
    fn a_line_and_an_fd_cross_a_socketpair() {
        let (a, b) = UnixStream::pair().unwrap();
        let file = std::fs::File::open("/proc/self/ns/net").unwrap();
        let request = Request::Unregister {
            id: "c".into(),
            runc_root: "/r".into(),
        };
        let mut line = serde_json::to_vec(&request).unwrap();
        line.push(b'\n');
        use std::os::fd::AsFd;
        send_with_fd(&a, &line, Some(file.as_fd())).unwrap();
        let (got, fds) = receive_request(&b).unwrap();
        assert_eq!(serde_json::from_slice::<Request>(&got).unwrap(), request);
        assert_eq!(fds.len(), 1);
        use std::os::unix::fs::MetadataExt;
        let theirs = std::fs::File::from(fds.into_iter().next().unwrap());
        assert_eq!(
            theirs.metadata().unwrap().ino(),
            file.metadata().unwrap().ino()
        );
        let mut b = b;
        send_reply(&mut b, &Reply::refused("no")).unwrap();
        let mut a = a;
        let reply: Reply = serde_json::from_slice(&read_line(&mut a, MAX_LINE).unwrap()).unwrap();
        assert_eq!(reply.error.as_deref(), Some("no"));
    }
}
