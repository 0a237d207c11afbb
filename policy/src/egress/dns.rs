//! The DNS answerer of transparent egress, pure: one query message in, one
//! answer message (or nothing) out, and the synthetic addresses it hands
//! out. The daemon does the socket I/O.
//!
//! Design: synthetic per-name addresses (fake IPs), never the real ones.
//! An allowed name gets an address from [`FAKE_NET`] (198.18.0.0/15, the
//! benchmarking range: already in the deny set, so the proxy never dials
//! one, and on no real network). The answerer resolves nothing and talks to
//! no resolver, for allowed names as for refused ones, so a query is no
//! channel out: `<secret>.attacker.example` gets NXDOMAIN and reaches no
//! one. The real name is resolved and vetted only when a connection to the
//! fake address arrives, exactly as for CONNECT; the address the client
//! chose only names which allowed name it meant ([`FakePool::name_of`]),
//! and the SNI or `Host` must agree with it.
//!
//! AAAA and every other type of an allowed name get an empty answer
//! (NOERROR, no records), so clients use the IPv4 fake address.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;

use crate::lang::hosts::normalize_name;

/// The range fake addresses come from (RFC 2544's benchmarking range).
pub const FAKE_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 0, 0), 15);

/// The range's last usable address, never handed out: kept free for an
/// address on the container's `lo` should the range ever need one (the
/// hook instead routes everything off the container's link to `lo`, see
/// `hooks::routes::local_default_on_lo`).
pub const FAKE_LO_ADDR: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 254);

/// The port the daemon's answerer listens on (UDP and TCP) on the
/// container's loopback; the nat chain redirects every query there.
pub const DNS_PORT: u16 = 3153;

/// How long a client may cache an answer, in seconds.
pub const ANSWER_TTL: u32 = 30;

/// Names a container may hold fake addresses for at once; the oldest
/// assignment is reused after that.
pub const DEFAULT_POOL_NAMES: usize = 4096;

/// The largest DNS message read or written over UDP without EDNS.
pub const MAX_UDP: usize = 512;

const TYPE_A: u16 = 1;
const CLASS_IN: u16 = 1;
const HEADER: usize = 12;

/// Response codes used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rcode {
    NoError = 0,
    FormErr = 1,
    ServFail = 2,
    NxDomain = 3,
    NotImp = 4,
    Refused = 5,
}

/// Why a message gets no ordinary answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    #[error("shorter than a DNS header")]
    Short,
    #[error("a response, not a query")]
    NotQuery,
    #[error("malformed question: {0}")]
    Malformed(&'static str),
}

/// One question of a query, as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    /// The RD bit, echoed.
    pub recursion_desired: bool,
    pub opcode: u8,
    /// The name in the form `[network] hosts` is compared in, or why it is
    /// no host name.
    pub name: Result<String, String>,
    pub qtype: u16,
    pub qclass: u16,
    /// The question's wire bytes (name, type, class), echoed in the answer.
    question: Vec<u8>,
}

/// Reads a query. `Err(DnsError::Short | NotQuery)`: send nothing (a
/// response or noise answers nothing). `Malformed`: a FORMERR, built by
/// [`formerr`] from the id.
pub fn parse_query(msg: &[u8]) -> Result<Query, DnsError> {
    let header = msg.get(..HEADER).ok_or(DnsError::Short)?;
    let id = u16::from_be_bytes([header[0], header[1]]);
    let flags = u16::from_be_bytes([header[2], header[3]]);
    if flags & 0x8000 != 0 {
        return Err(DnsError::NotQuery);
    }
    let count = |i: usize| u16::from_be_bytes([header[i], header[i + 1]]);
    if count(4) != 1 {
        return Err(DnsError::Malformed("not exactly one question"));
    }
    if count(6) != 0 || count(8) != 0 {
        return Err(DnsError::Malformed(
            "answer or authority records in a query",
        ));
    }
    let mut at = HEADER;
    let mut labels: Vec<String> = Vec::new();
    let mut wire_len = 0usize;
    loop {
        let len = usize::from(*msg.get(at).ok_or(DnsError::Malformed("truncated name"))?);
        at += 1;
        wire_len += 1 + len;
        if wire_len > 255 {
            return Err(DnsError::Malformed("name longer than 255 bytes"));
        }
        if len == 0 {
            break;
        }
        if len > 63 {
            // A compression pointer (or a reserved label type): a query's
            // one name has nothing earlier to point to.
            return Err(DnsError::Malformed("label type or length"));
        }
        let label = msg
            .get(at..at + len)
            .ok_or(DnsError::Malformed("truncated name"))?;
        at += len;
        labels.push(String::from_utf8_lossy(label).into_owned());
    }
    let tail = msg
        .get(at..at + 4)
        .ok_or(DnsError::Malformed("truncated question"))?;
    let qtype = u16::from_be_bytes([tail[0], tail[1]]);
    let qclass = u16::from_be_bytes([tail[2], tail[3]]);
    let question = msg[HEADER..at + 4].to_vec();
    let raw = labels.join(".");
    // A label with a dot or a non-name byte inside fails the grammar here.
    let name = if labels.iter().any(|l| l.contains('.')) {
        Err(format!("{raw:?} is not a host name"))
    } else {
        normalize_name(&raw).map_err(|e| e.to_string())
    };
    Ok(Query {
        id,
        recursion_desired: flags & 0x0100 != 0,
        opcode: ((flags >> 11) & 0xf) as u8,
        name,
        qtype,
        qclass,
        question,
    })
}

/// What the answerer decided for one query, for its log line and its reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// The reply's bytes.
    pub message: Vec<u8>,
    pub rcode: Rcode,
    /// The fake address given, if any.
    pub address: Option<Ipv4Addr>,
}

/// Answers `q`: `allowed(name)` says whether the policy names it (any
/// port); an allowed name's A query gets its fake address from `pool`.
pub fn answer(q: &Query, allowed: impl Fn(&str) -> bool, pool: &mut FakePool) -> Answered {
    if q.opcode != 0 {
        return reply(q, Rcode::NotImp, None);
    }
    if q.qclass != CLASS_IN {
        return reply(q, Rcode::Refused, None);
    }
    let name = match &q.name {
        Ok(name) if allowed(name) => name,
        _ => return reply(q, Rcode::NxDomain, None),
    };
    if q.qtype != TYPE_A {
        return reply(q, Rcode::NoError, None);
    }
    let addr = pool.assign(name);
    reply(q, Rcode::NoError, Some(addr))
}

/// A FORMERR for a malformed query with this id (the first two bytes).
pub fn formerr(msg: &[u8]) -> Option<Vec<u8>> {
    let id = msg.get(..2)?;
    let mut out = id.to_vec();
    out.extend_from_slice(&[0x80, Rcode::FormErr as u8, 0, 0, 0, 0, 0, 0, 0, 0]);
    Some(out)
}

fn reply(q: &Query, rcode: Rcode, address: Option<Ipv4Addr>) -> Answered {
    let mut flags: u16 = 0x8000 | 0x0400 | 0x0080 | (u16::from(q.opcode) << 11);
    if q.recursion_desired {
        flags |= 0x0100;
    }
    flags |= rcode as u16;
    let mut out = Vec::with_capacity(HEADER + q.question.len() + 16);
    out.extend_from_slice(&q.id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&u16::from(address.is_some()).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&q.question);
    if let Some(a) = address {
        out.extend_from_slice(&[0xc0, HEADER as u8]); // the question's name
        out.extend_from_slice(&TYPE_A.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&ANSWER_TTL.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&a.octets());
    }
    Answered {
        message: out,
        rcode,
        address,
    }
}

/// One container's fake addresses: name to address and back. Bounded; past
/// `cap` names the oldest assignment is given to the new name (a client
/// still holding the old answer then names the new name, whose SNI or
/// `Host` check refuses it).
#[derive(Debug, Clone)]
pub struct FakePool {
    cap: usize,
    by_name: HashMap<String, u32>,
    by_index: HashMap<u32, String>,
    order: VecDeque<u32>,
    next: u32,
}

impl FakePool {
    /// A pool of at most `cap` names (at least 1, at most the range less
    /// its first address and [`FAKE_LO_ADDR`]).
    pub fn new(cap: usize) -> FakePool {
        let most = (1usize << (32 - FAKE_NET.1)) - 3;
        FakePool {
            cap: cap.clamp(1, most),
            by_name: HashMap::new(),
            by_index: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
        }
    }

    /// `name`'s address, assigning one if it has none.
    pub fn assign(&mut self, name: &str) -> Ipv4Addr {
        if let Some(i) = self.by_name.get(name) {
            return address(*i);
        }
        let index = if self.by_index.len() >= self.cap {
            let old = self.order.pop_front().unwrap_or(0);
            if let Some(gone) = self.by_index.remove(&old) {
                self.by_name.remove(&gone);
            }
            old
        } else {
            self.next += 1;
            self.next
        };
        self.by_name.insert(name.to_string(), index);
        self.by_index.insert(index, name.to_string());
        self.order.push_back(index);
        address(index)
    }

    /// The name a fake address stands for; `None` for an address this pool
    /// never gave (or gave away again).
    pub fn name_of(&self, addr: Ipv4Addr) -> Option<&str> {
        let (base, prefix) = FAKE_NET;
        let offset = u32::from(addr).checked_sub(u32::from(base))?;
        if offset >> (32 - prefix) != 0 {
            return None;
        }
        self.by_index.get(&offset).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.by_index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_index.is_empty()
    }
}

fn address(index: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(FAKE_NET.0) + index)
}

/// Whether `addr` is in [`FAKE_NET`].
pub fn is_fake(addr: Ipv4Addr) -> bool {
    let (base, prefix) = FAKE_NET;
    (u32::from(addr) ^ u32::from(base)) >> (32 - prefix) == 0
}

/// A query for tests and the benchmark.
#[cfg(any(test, feature = "test-support"))]
pub fn build_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut out = id.to_be_bytes().to_vec();
    out.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(name: &str) -> bool {
        name == "api.example.com" || name.ends_with(".github.com")
    }

    fn rcode(msg: &[u8]) -> u8 {
        msg[3] & 0xf
    }

    #[test]
    fn an_allowed_name_gets_a_fake_address() {
        let mut pool = FakePool::new(16);
        let q = parse_query(&build_query(7, "API.Example.com.", TYPE_A)).unwrap();
        assert_eq!(q.name.as_deref(), Ok("api.example.com"));
        let a = answer(&q, allowed, &mut pool);
        assert_eq!(a.rcode, Rcode::NoError);
        let addr = a.address.unwrap();
        assert!(is_fake(addr) && addr != FAKE_LO_ADDR);
        assert_eq!(pool.name_of(addr), Some("api.example.com"));
        let m = &a.message;
        assert_eq!(&m[..2], &7u16.to_be_bytes());
        assert_eq!(m[2] & 0x80, 0x80, "a response");
        assert_eq!(u16::from_be_bytes([m[6], m[7]]), 1, "one answer");
        assert_eq!(&m[m.len() - 4..], &addr.octets());
        // Asked again: the same address.
        assert_eq!(answer(&q, allowed, &mut pool).address, Some(addr));
    }

    #[test]
    fn a_refused_name_gets_nxdomain_and_no_address() {
        let mut pool = FakePool::new(16);
        for name in ["secret.attacker.example", "github.com", "example.com"] {
            let q = parse_query(&build_query(1, name, TYPE_A)).unwrap();
            let a = answer(&q, allowed, &mut pool);
            assert_eq!(a.rcode, Rcode::NxDomain, "{name}");
            assert_eq!(rcode(&a.message), 3);
            assert!(a.address.is_none());
        }
        assert!(pool.is_empty());
    }

    #[test]
    fn other_types_of_an_allowed_name_are_empty() {
        let mut pool = FakePool::new(16);
        for qtype in [28u16, 65, 16, 255] {
            let q = parse_query(&build_query(1, "api.example.com", qtype)).unwrap();
            let a = answer(&q, allowed, &mut pool);
            assert_eq!(a.rcode, Rcode::NoError);
            assert!(a.address.is_none());
            assert_eq!(u16::from_be_bytes([a.message[6], a.message[7]]), 0);
        }
    }

    #[test]
    fn responses_and_noise_get_nothing() {
        assert_eq!(parse_query(&[1, 2, 3]), Err(DnsError::Short));
        let mut m = build_query(1, "api.example.com", TYPE_A);
        m[2] |= 0x80;
        assert_eq!(parse_query(&m), Err(DnsError::NotQuery));
    }

    #[test]
    fn malformed_questions() {
        let mut m = build_query(1, "api.example.com", TYPE_A);
        m[12] = 0xc0; // a pointer
        assert!(matches!(parse_query(&m), Err(DnsError::Malformed(_))));
        let m = build_query(1, "api.example.com", TYPE_A);
        assert!(parse_query(&m[..m.len() - 1]).is_err());
        let f = formerr(&m).unwrap();
        assert_eq!((f[0], f[1], rcode(&f)), (m[0], m[1], 1));
        // A label holding a dot is not the name it prints as.
        let mut m = vec![0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(b"\x0fapi.example.com\x00\x00\x01\x00\x01");
        let q = parse_query(&m).unwrap();
        assert!(q.name.is_err());
        assert_eq!(
            answer(&q, |_| true, &mut FakePool::new(4)).rcode,
            Rcode::NxDomain
        );
    }

    #[test]
    fn the_pool_is_bounded_and_reuses_the_oldest() {
        let mut pool = FakePool::new(2);
        let a = pool.assign("a.github.com");
        let b = pool.assign("b.github.com");
        let c = pool.assign("c.github.com");
        assert_eq!(pool.len(), 2);
        assert_eq!(c, a);
        assert_eq!(pool.name_of(a), Some("c.github.com"));
        assert_eq!(pool.name_of(b), Some("b.github.com"));
        assert_eq!(pool.name_of(Ipv4Addr::new(203, 0, 113, 5)), None);
        assert_eq!(pool.name_of(FAKE_LO_ADDR), None);
        assert!(!is_fake(Ipv4Addr::new(198, 20, 0, 1)));
        assert!(is_fake(Ipv4Addr::new(198, 19, 0, 1)));
    }

    #[test]
    fn the_largest_pool_never_reaches_the_lo_address() {
        let pool = FakePool::new(usize::MAX);
        assert_eq!(address(pool.cap as u32 + 1), FAKE_LO_ADDR);
    }
}
