//! Just enough of netfilter's netlink protocol (NETLINK_NETFILTER) to write
//! an nf_tables batch and read dumps back: message framing, attributes, and
//! a socket with a receive timeout. The kernel's uapi headers
//! (linux/netlink.h, linux/netfilter/nfnetlink.h) define every number here.
//!
//! The socket belongs to the network namespace of the thread that opens it,
//! so callers open it on the thread that entered the container's namespace.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_APPEND: u16 = 0x800;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;
const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;

pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 16;
const NFNL_MSG_BATCH_END: u16 = 17;

/// How long to wait for the kernel's answer before giving up (fail closed).
const RECV_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("cannot open a netfilter netlink socket: {0}")]
    Socket(Errno),
    #[error("netfilter netlink send failed: {0}")]
    Send(Errno),
    #[error("no answer from the kernel's nf_tables within {0:?}")]
    Timeout(Duration),
    #[error("netfilter netlink receive failed: {0}")]
    Recv(Errno),
    #[error("the kernel refused {what}: {errno}")]
    Refused { what: String, errno: Errno },
    #[error("malformed netlink answer: {0}")]
    Malformed(&'static str),
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Builds netlink messages back to back in one buffer (one batch).
#[derive(Debug, Default)]
pub struct MessageWriter {
    buf: Vec<u8>,
    seq: u32,
    /// Start of the message being written.
    msg_start: usize,
    /// What each sequence number carries, for error messages.
    described: Vec<(u32, String)>,
}

impl MessageWriter {
    /// Sequence numbers start at `first_seq`.
    pub fn new(first_seq: u32) -> MessageWriter {
        MessageWriter {
            buf: Vec::with_capacity(4096),
            seq: first_seq,
            ..MessageWriter::default()
        }
    }

    /// Starts an nf_tables message: `msg` is NFT_MSG_*, `family` NFPROTO_*.
    /// Returns its sequence number.
    pub fn begin(&mut self, msg: u16, flags: u16, family: u8, what: &str) -> u32 {
        let kind = (NFNL_SUBSYS_NFTABLES << 8) | msg;
        self.begin_raw(kind, flags, family, 0, what)
    }

    fn begin_raw(&mut self, kind: u16, flags: u16, family: u8, res_id: u16, what: &str) -> u32 {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        self.msg_start = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set in end()
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf
            .extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
        self.buf.extend_from_slice(&seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
        self.buf.push(family);
        self.buf.push(0); // NFNETLINK_V0
        self.buf.extend_from_slice(&res_id.to_be_bytes());
        self.described.push((seq, what.to_string()));
        seq
    }

    /// Finishes the current message.
    pub fn end(&mut self) {
        let len = (self.buf.len() - self.msg_start) as u32;
        self.buf[self.msg_start..self.msg_start + 4].copy_from_slice(&len.to_ne_bytes());
    }

    /// Opens a batch: every message until [`MessageWriter::end_batch`] is
    /// applied as one transaction, or not at all.
    pub fn begin_batch(&mut self) {
        self.begin_raw(
            NFNL_MSG_BATCH_BEGIN,
            0,
            0,
            NFNL_SUBSYS_NFTABLES,
            "batch begin",
        );
        self.end();
    }

    pub fn end_batch(&mut self) {
        self.begin_raw(NFNL_MSG_BATCH_END, 0, 0, NFNL_SUBSYS_NFTABLES, "batch end");
        self.end();
    }

    pub fn bytes(&mut self, kind: u16, value: &[u8]) {
        let len = 4 + value.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.buf.resize(align4(self.buf.len()), 0);
    }

    /// A NUL-terminated string, as the kernel's NLA_STRING policy expects.
    pub fn string(&mut self, kind: u16, value: &str) {
        let mut bytes = Vec::with_capacity(value.len() + 1);
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
        self.bytes(kind, &bytes);
    }

    /// nf_tables integers are big-endian.
    pub fn u32_be(&mut self, kind: u16, value: u32) {
        self.bytes(kind, &value.to_be_bytes());
    }

    /// Starts a nested attribute; close it with [`MessageWriter::nest_end`].
    pub fn nest_start(&mut self, kind: u16) -> usize {
        let start = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        start
    }

    pub fn nest_end(&mut self, start: usize) {
        let len = (self.buf.len() - start) as u16;
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    }

    /// Sequence numbers of every message written so far, with what it is.
    pub fn described(&self) -> &[(u32, String)] {
        &self.described
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// One message the kernel sent back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    /// An ack (`errno` 0) or an error for the request with this `seq`.
    Ack { seq: u32, errno: i32 },
    /// End of a dump.
    Done { seq: u32 },
    /// A data message: its NFT_MSG_* type and the attributes after nfgenmsg.
    Data { seq: u32, msg: u16, attrs: &'a [u8] },
}

/// Splits a buffer the kernel sent into messages.
pub fn parse_replies(mut buf: &[u8]) -> Result<Vec<Reply<'_>>, NetlinkError> {
    let mut out = Vec::new();
    while buf.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len < NLMSG_HDRLEN || len > buf.len() {
            return Err(NetlinkError::Malformed("message length"));
        }
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        let seq = u32::from_ne_bytes([buf[8], buf[9], buf[10], buf[11]]);
        let body = &buf[NLMSG_HDRLEN..len];
        match kind {
            NLMSG_ERROR => {
                let errno = body
                    .get(..4)
                    .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                    .ok_or(NetlinkError::Malformed("short error message"))?;
                out.push(Reply::Ack { seq, errno });
            }
            NLMSG_DONE => out.push(Reply::Done { seq }),
            _ => {
                let attrs = body
                    .get(NFGENMSG_LEN..)
                    .ok_or(NetlinkError::Malformed("short nfnetlink message"))?;
                out.push(Reply::Data {
                    seq,
                    msg: kind & 0xff,
                    attrs,
                });
            }
        }
        buf = &buf[align4(len).min(buf.len())..];
    }
    Ok(out)
}

/// Iterates the attributes in `buf` as (type without flags, value).
pub fn attributes(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let kind = u16::from_ne_bytes([buf[2], buf[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > buf.len() {
            return None;
        }
        let value = &buf[4..len];
        buf = &buf[align4(len).min(buf.len())..];
        Some((kind, value))
    })
}

/// The first attribute of type `kind` in `buf`.
pub fn attribute(buf: &[u8], kind: u16) -> Option<&[u8]> {
    attributes(buf).find(|(k, _)| *k == kind).map(|(_, v)| v)
}

/// A NUL-terminated string attribute.
pub fn attr_str(buf: &[u8], kind: u16) -> Option<&str> {
    let raw = attribute(buf, kind)?;
    let raw = raw.strip_suffix(&[0]).unwrap_or(raw);
    std::str::from_utf8(raw).ok()
}

pub fn attr_u32_be(buf: &[u8], kind: u16) -> Option<u32> {
    let raw = attribute(buf, kind)?;
    Some(u32::from_be_bytes(raw.get(..4)?.try_into().ok()?))
}

/// A NETLINK_NETFILTER socket in the calling thread's network namespace.
pub struct NetfilterSocket {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl NetfilterSocket {
    pub fn open() -> Result<NetfilterSocket, NetlinkError> {
        let fd = socket::socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkNetFilter,
        )
        .map_err(NetlinkError::Socket)?;
        socket::bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(NetlinkError::Socket)?;
        let timeout = nix::sys::time::TimeVal::new(RECV_TIMEOUT.as_secs() as _, 0);
        socket::setsockopt(&fd, socket::sockopt::ReceiveTimeout, &timeout)
            .map_err(NetlinkError::Socket)?;
        Ok(NetfilterSocket {
            fd,
            // Large enough for any one message of our table's dump.
            buf: vec![0; 64 * 1024],
        })
    }

    /// Closes the socket in a child process that does nothing else: when a
    /// netfilter socket is released while nf_tables still holds objects a
    /// transaction deleted (flushing a table's rules, deleting a table), the
    /// kernel waits for an RCU grace period (about 10 ms) before the close
    /// returns. The transaction was committed and acknowledged before this
    /// is called, so nothing depends on that wait but the child. Without a
    /// child (fork failed) the close happens here, slower but the same.
    pub fn release_detached(self) {
        // SAFETY: the child makes two raw system calls and exits; it touches
        // no lock, allocator or Rust state another thread could have held.
        match unsafe { nix::libc::fork() } {
            0 => unsafe {
                nix::libc::syscall(nix::libc::SYS_close_range, 0u32, u32::MAX, 0u32);
                nix::libc::_exit(0)
            },
            // The parent's copy is not the last reference: its close is cheap.
            _ => drop(self),
        }
    }

    /// Sends the writer's messages in one datagram: nf_tables needs a batch
    /// in a single write.
    pub fn send(&self, messages: &MessageWriter) -> Result<(), NetlinkError> {
        let bytes = messages.as_bytes();
        let sent = socket::send(self.fd.as_raw_fd(), bytes, MsgFlags::empty())
            .map_err(NetlinkError::Send)?;
        if sent != bytes.len() {
            return Err(NetlinkError::Send(Errno::EMSGSIZE));
        }
        Ok(())
    }

    /// Receives one datagram and hands its messages to `each`, which returns
    /// `true` when it has seen everything it waits for.
    pub fn receive_until(
        &mut self,
        mut each: impl FnMut(&Reply<'_>) -> Result<bool, NetlinkError>,
    ) -> Result<(), NetlinkError> {
        loop {
            let n = match socket::recv(self.fd.as_raw_fd(), &mut self.buf, MsgFlags::empty()) {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => return Err(NetlinkError::Timeout(RECV_TIMEOUT)),
                Err(e) => return Err(NetlinkError::Recv(e)),
            };
            for reply in parse_replies(&self.buf[..n])? {
                if each(&reply)? {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_layout_and_round_trip() {
        let mut w = MessageWriter::new(7);
        w.begin_batch();
        let seq = w.begin(0, NLM_F_CREATE | NLM_F_ACK, 1, "table");
        w.string(1, "vibe_shim");
        let nest = w.nest_start(4);
        w.u32_be(1, 3);
        w.nest_end(nest);
        w.end();
        w.end_batch();
        assert_eq!(seq, 8);
        let bytes = w.as_bytes();
        // Batch begin: header + nfgenmsg, res_id = nftables, big-endian.
        assert_eq!(&bytes[..4], &20u32.to_ne_bytes());
        assert_eq!(&bytes[4..6], &16u16.to_ne_bytes());
        assert_eq!(&bytes[18..20], &[0, 10]);
        let replies = parse_replies(bytes).unwrap();
        assert_eq!(replies.len(), 3);
        let Reply::Data { seq, msg, attrs } = &replies[1] else {
            panic!("{replies:?}")
        };
        assert_eq!((*seq, *msg), (8, 0));
        assert_eq!(attr_str(attrs, 1), Some("vibe_shim"));
        let hook = attribute(attrs, 4).unwrap();
        assert_eq!(attr_u32_be(hook, 1), Some(3));
        assert_eq!(
            w.described().iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            [7, 8, 9]
        );
    }

    #[test]
    fn errors_and_truncation() {
        let mut msg = Vec::new();
        msg.extend_from_slice(&36u32.to_ne_bytes());
        msg.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&5u32.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&(-2i32).to_ne_bytes());
        msg.extend_from_slice(&[0; 16]);
        assert_eq!(
            parse_replies(&msg).unwrap(),
            [Reply::Ack { seq: 5, errno: -2 }]
        );
        msg[0] = 200;
        assert!(parse_replies(&msg).is_err());
        // A truncated attribute ends the walk instead of reading past it.
        let attrs = [8u8, 0, 1, 0, 1, 2];
        assert_eq!(attributes(&attrs).count(), 0);
    }
}
