//! Reachability by TCP connect (all targets at once, one deadline) and DNS
//! by one hand-made UDP query to each resolv.conf nameserver: no
//! getaddrinfo, so a static binary never loads NSS.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::time::{Duration, Instant};

use crate::report::Check;
use crate::syscalls::errno_name;
use crate::Args;

const METADATA: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// The IPv4 default gateways in /proc/net/route text (little-endian hex).
pub fn gateways_v4(route: &str) -> Vec<Ipv4Addr> {
    route
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (dest, gw, flags, mask) = (f.get(1)?, f.get(2)?, f.get(3)?, f.get(7)?);
            let flags = u32::from_str_radix(flags, 16).ok()?;
            let default = *dest == "00000000" && *mask == "00000000";
            // RTF_UP | RTF_GATEWAY
            (default && flags & 0x3 == 0x3).then_some(())?;
            let gw = u32::from_str_radix(gw, 16).ok()?;
            Some(Ipv4Addr::from(gw.to_le_bytes()))
        })
        .collect()
}

/// The IPv6 default gateways in /proc/net/ipv6_route text, with the
/// interface a link-local one needs.
pub fn gateways_v6(route: &str) -> Vec<(Ipv6Addr, String)> {
    route
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (dest, len, hop, iface) = (f.first()?, f.get(1)?, f.get(4)?, f.get(9)?);
            (dest.bytes().all(|b| b == b'0') && *len == "00").then_some(())?;
            let hop = Ipv6Addr::from(u128::from_str_radix(hop, 16).ok()?);
            (!hop.is_unspecified()).then(|| (hop, iface.to_string()))
        })
        .collect()
}

/// The nameservers in resolv.conf text (a `%zone` is dropped).
pub fn nameservers(resolv: &str) -> Vec<IpAddr> {
    resolv
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "nameserver").then_some(())?;
            w.next()?.split('%').next()?.parse().ok()
        })
        .collect()
}

/// How a connect attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Connected,
    /// A reset or port-unreachable: some host (or a rejecting firewall)
    /// answered; counted as reachable, the probe cannot tell which.
    Refused,
    Timeout,
    Error(i32),
}

impl Reach {
    pub fn reachable(self) -> bool {
        matches!(self, Reach::Connected | Reach::Refused)
    }

    fn describe(self) -> String {
        match self {
            Reach::Connected => "connected".into(),
            Reach::Refused => "refused (a host answered)".into(),
            Reach::Timeout => "timed out".into(),
            Reach::Error(e) => errno_name(e),
        }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A sockaddr for `addr` (with `scope` for a link-local IPv6).
fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// A non-blocking socket of `kind` connecting to `addr`: its descriptor,
/// or how it already ended.
fn start(addr: SocketAddr, kind: i32) -> Result<i32, Reach> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(family, kind | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(Reach::Error(errno()));
    }
    let (ss, len) = sockaddr(addr);
    // SAFETY: ss holds a sockaddr of len bytes.
    let r = unsafe { libc::connect(fd, (&ss as *const libc::sockaddr_storage).cast(), len) };
    if r == 0 || errno() == libc::EINPROGRESS {
        return Ok(fd);
    }
    let e = errno();
    close(fd);
    Err(match e {
        libc::ECONNREFUSED => Reach::Refused,
        e => Reach::Error(e),
    })
}

fn close(fd: i32) {
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
}

/// Waits on `fds` (`None` for one that already ended) until each is
/// ready or `timeout` passes; returns which became ready for `events`.
fn wait(fds: &[Option<i32>], events: i16, timeout: Duration) -> Vec<bool> {
    let deadline = Instant::now() + timeout;
    let mut ready = vec![false; fds.len()];
    loop {
        let pending: Vec<usize> = (0..fds.len())
            .filter(|&i| fds[i].is_some() && !ready[i])
            .collect();
        let left = deadline.saturating_duration_since(Instant::now());
        if pending.is_empty() || left.is_zero() {
            return ready;
        }
        let mut pfds: Vec<libc::pollfd> = pending
            .iter()
            .map(|&i| libc::pollfd {
                fd: fds[i].unwrap_or(-1),
                events,
                revents: 0,
            })
            .collect();
        let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
        // SAFETY: pfds is a live array of pfds.len() pollfd.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        if n < 0 && errno() != libc::EINTR {
            return ready;
        }
        for (p, &i) in pfds.iter().zip(&pending) {
            if p.revents != 0 {
                ready[i] = true;
            }
        }
    }
}

/// Connects to every target at once, all within one `timeout`.
pub fn connect_all(targets: &[SocketAddr], timeout: Duration) -> Vec<Reach> {
    let started: Vec<Result<i32, Reach>> = targets
        .iter()
        .map(|&a| start(a, libc::SOCK_STREAM))
        .collect();
    let fds: Vec<Option<i32>> = started.iter().map(|s| s.as_ref().ok().copied()).collect();
    let ready = wait(&fds, libc::POLLOUT, timeout);
    started
        .into_iter()
        .zip(ready)
        .map(|(s, ready)| match s {
            Err(reach) => reach,
            Ok(fd) => {
                let reach = match ready {
                    false => Reach::Timeout,
                    true => match so_error(fd) {
                        0 => Reach::Connected,
                        libc::ECONNREFUSED => Reach::Refused,
                        e => Reach::Error(e),
                    },
                };
                close(fd);
                reach
            }
        })
        .collect()
}

fn so_error(fd: i32) -> i32 {
    let mut err: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: err and len are live and sized for SO_ERROR.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut i32).cast(),
            &mut len,
        )
    };
    match r {
        0 => err,
        _ => errno(),
    }
}

/// A DNS query for `name`'s A record with `id`, recursion desired.
pub fn dns_query(name: &str, id: u16) -> Option<Vec<u8>> {
    let mut q = Vec::with_capacity(name.len() + 18);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        let len = u8::try_from(label.len())
            .ok()
            .filter(|l| (1..64).contains(l))?;
        q.push(len);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&[0, 1, 0, 1]);
    Some(q)
}

/// A reply's answer: `None` when `reply` is not a response to `id`,
/// else (rcode, answer count).
pub fn dns_answer(reply: &[u8], id: u16) -> Option<(u8, u16)> {
    let head = reply.get(..12)?;
    let is_reply = head[2] & 0x80 != 0;
    (u16::from_be_bytes([head[0], head[1]]) == id && is_reply).then_some(())?;
    Some((head[3] & 0x0f, u16::from_be_bytes([head[6], head[7]])))
}

/// What one nameserver did with the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dns {
    /// It answered with `answers` records (rcode 0).
    Resolved(u16),
    /// It replied without an address (NXDOMAIN, REFUSED, SERVFAIL, empty).
    NoAddress(u8),
    NoReply(Reach),
}

fn ask(servers: &[IpAddr], name: &str, timeout: Duration) -> Vec<Dns> {
    // The id need not be secret: it only pairs a reply with the query.
    let id = (std::process::id() as u16) ^ 0x5a5a;
    let Some(query) = dns_query(name, id) else {
        return vec![Dns::NoReply(Reach::Error(libc::EINVAL)); servers.len()];
    };
    let started: Vec<Result<i32, Reach>> = servers
        .iter()
        .map(|&ip| {
            let fd = start(SocketAddr::new(ip, 53), libc::SOCK_DGRAM)?;
            // SAFETY: query is a live buffer; fd is ours.
            let n = unsafe { libc::send(fd, query.as_ptr().cast(), query.len(), 0) };
            if n < 0 {
                let e = errno();
                close(fd);
                return Err(Reach::Error(e));
            }
            Ok(fd)
        })
        .collect();
    let fds: Vec<Option<i32>> = started.iter().map(|s| s.as_ref().ok().copied()).collect();
    let ready = wait(&fds, libc::POLLIN, timeout);
    started
        .into_iter()
        .zip(ready)
        .map(|(s, ready)| match s {
            Err(reach) => Dns::NoReply(reach),
            Ok(fd) => {
                let mut buf = [0u8; 512];
                let got = match ready {
                    false => Dns::NoReply(Reach::Timeout),
                    // SAFETY: buf is live and 512 bytes; fd is ours.
                    true => {
                        match unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) } {
                            n if n < 0 => match errno() {
                                libc::ECONNREFUSED => Dns::NoReply(Reach::Refused),
                                e => Dns::NoReply(Reach::Error(e)),
                            },
                            n => match dns_answer(&buf[..n as usize], id) {
                                Some((0, count)) if count > 0 => Dns::Resolved(count),
                                Some((rcode, _)) => Dns::NoAddress(rcode),
                                None => Dns::NoReply(Reach::Error(libc::EBADMSG)),
                            },
                        }
                    }
                };
                close(fd);
                got
            }
        })
        .collect()
}

/// net.dns holds when no nameserver resolves `name`: a resolver that
/// answers carries whatever a name encodes out of the sandbox.
pub fn dns_verdict(name: &str, servers: &[IpAddr], results: &[Dns]) -> Check {
    if servers.is_empty() {
        return Check::new("net.dns", true, "no nameserver in /etc/resolv.conf");
    }
    let seen: Vec<String> = servers
        .iter()
        .zip(results)
        .map(|(s, r)| match r {
            Dns::Resolved(n) => format!("{s} resolved {name} ({n} record(s))"),
            Dns::NoAddress(rcode) => format!("{s}: no address for {name} (rcode {rcode})"),
            Dns::NoReply(reach) => format!("{s}: no reply ({})", reach.describe()),
        })
        .collect();
    let holds = !results.iter().any(|r| matches!(r, Dns::Resolved(_)));
    Check::new("net.dns", holds, seen.join("; "))
}

/// A reachability rule: holds when no target in `targets` answered.
pub fn reach_verdict(rule: &'static str, targets: &[SocketAddr], results: &[Reach]) -> Check {
    let seen: Vec<String> = targets
        .iter()
        .zip(results)
        .map(|(t, r)| format!("{t} {}", r.describe()))
        .collect();
    let holds = !results.iter().any(|r| r.reachable());
    Check::new(rule, holds, seen.join(", "))
}

pub fn checks(args: &Args, timeout: Duration) -> Vec<Check> {
    let route = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    let route6 = std::fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default();
    let mut gateways: Vec<SocketAddr> = gateways_v4(&route)
        .into_iter()
        .map(|g| SocketAddr::new(g.into(), args.port))
        .collect();
    for (g, iface) in gateways_v6(&route6) {
        let name = std::ffi::CString::new(iface).unwrap_or_default();
        // SAFETY: name is NUL-terminated.
        let scope = unsafe { libc::if_nametoindex(name.as_ptr()) };
        gateways.push(SocketAddr::V6(SocketAddrV6::new(g, args.port, 0, scope)));
    }
    let metadata = match args.metadata.is_empty() {
        true => vec![SocketAddr::new(METADATA.into(), 80)],
        false => args.metadata.clone(),
    };
    let private: Vec<SocketAddr> = match args.private.is_empty() {
        true => crate::DEFAULT_PRIVATE
            .iter()
            .filter_map(|a| a.parse().ok())
            .collect(),
        false => args.private.clone(),
    };
    let groups = [&gateways, &metadata, &private, &args.outside];
    let all: Vec<SocketAddr> = groups.iter().flat_map(|g| g.iter().copied()).collect();
    let results = connect_all(&all, timeout);
    let mut at = 0;
    let mut part = |n: usize| {
        let r = &results[at..at + n];
        at += n;
        r
    };
    let mut out = Vec::new();
    let r = part(gateways.len());
    out.push(match gateways.is_empty() {
        true => Check::new("net.gateway", true, "no default route"),
        false => reach_verdict("net.gateway", &gateways, r),
    });
    out.push(reach_verdict(
        "net.metadata",
        &metadata,
        part(metadata.len()),
    ));
    out.push(reach_verdict("net.private", &private, part(private.len())));
    let r = part(args.outside.len());
    out.push(match args.outside.is_empty() {
        true => Check::skip("net.outside", "no --outside given"),
        false => reach_verdict("net.outside", &args.outside, r),
    });
    let servers = nameservers(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default());
    let answers = ask(&servers, &args.dns_name, timeout);
    out.push(dns_verdict(&args.dns_name, &servers, &answers));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Verdict;

    const ROUTE: &str = "\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t015C1EAC\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t005C1EAC\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
";
    const ROUTE6: &str = "\
fd427669626500920000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd427669626500920000000000000001 00000400 00000001 00000000 00000003     eth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo
";

    #[test]
    fn the_default_routes_gateways_parse() {
        assert_eq!(gateways_v4(ROUTE), vec![Ipv4Addr::new(172, 30, 92, 1)]);
        assert!(gateways_v4("Iface\tDestination\n").is_empty());
        assert_eq!(
            gateways_v6(ROUTE6),
            vec![("fd42:7669:6265:92::1".parse().unwrap(), "eth0".to_string())]
        );
    }

    #[test]
    fn nameservers_parse_and_zones_are_dropped() {
        let text = "# c\nsearch x\nnameserver 10.0.0.2\nnameserver fe80::1%eth0\nnameserver junk\n";
        assert_eq!(
            nameservers(text),
            vec![
                "10.0.0.2".parse::<IpAddr>().unwrap(),
                "fe80::1".parse().unwrap()
            ]
        );
    }

    #[test]
    fn a_query_is_well_formed_and_a_reply_is_paired_by_id() {
        let q = dns_query("example.com.", 0x1234).unwrap();
        assert_eq!(&q[..4], &[0x12, 0x34, 0x01, 0x00]);
        assert_eq!(&q[12..], b"\x07example\x03com\x00\x00\x01\x00\x01");
        assert!(dns_query("a..b", 1).is_none());
        let mut reply = q.clone();
        reply[2] |= 0x80;
        reply[7] = 1;
        assert_eq!(dns_answer(&reply, 0x1234), Some((0, 1)));
        assert_eq!(dns_answer(&reply, 0x4321), None);
        assert_eq!(dns_answer(&q, 0x1234), None, "a query is not a reply");
        reply[3] |= 3;
        assert_eq!(dns_answer(&reply, 0x1234), Some((3, 1)));
    }

    #[test]
    fn only_an_address_fails_dns() {
        let s: Vec<IpAddr> = vec!["10.0.0.2".parse().unwrap(), "10.0.0.3".parse().unwrap()];
        let c = dns_verdict(
            "example.com",
            &s,
            &[Dns::NoAddress(3), Dns::NoReply(Reach::Timeout)],
        );
        assert_eq!(c.verdict, Verdict::Pass);
        assert_eq!(
            c.observed,
            "10.0.0.2: no address for example.com (rcode 3); 10.0.0.3: no reply (timed out)"
        );
        let c = dns_verdict("example.com", &s, &[Dns::NoAddress(3), Dns::Resolved(1)]);
        assert_eq!(c.verdict, Verdict::Fail);
        assert_eq!(dns_verdict("x", &[], &[]).verdict, Verdict::Pass);
    }

    #[test]
    fn a_refusal_counts_as_reachable() {
        let t: Vec<SocketAddr> = vec![
            "10.0.0.1:80".parse().unwrap(),
            "10.0.0.2:80".parse().unwrap(),
        ];
        let c = reach_verdict("net.private", &t, &[Reach::Timeout, Reach::Refused]);
        assert_eq!(c.verdict, Verdict::Fail);
        assert_eq!(
            c.observed,
            "10.0.0.1:80 timed out, 10.0.0.2:80 refused (a host answered)"
        );
        let c = reach_verdict(
            "net.private",
            &t,
            &[Reach::Error(libc::ENETUNREACH), Reach::Timeout],
        );
        assert_eq!(c.verdict, Verdict::Pass);
        assert_eq!(c.observed, "10.0.0.1:80 ENETUNREACH, 10.0.0.2:80 timed out");
    }

    #[test]
    fn a_loopback_listener_is_reached_and_a_closed_port_refused() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = l.local_addr().unwrap();
        let closed = {
            let c = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            c.local_addr().unwrap()
        };
        let r = connect_all(&[open, closed], Duration::from_secs(2));
        assert_eq!(r, vec![Reach::Connected, Reach::Refused]);
    }
}
