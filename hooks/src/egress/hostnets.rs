//! What the proxy refuses beyond the fixed private ranges: every subnet of
//! every host interface (the host's own addresses with their prefixes: an
//! engine bridge, a LAN or VPN on a public range, and a prefix on `lo`,
//! which makes its whole range local) and every `local` route's range
//! (`ip route add local`), read from the host's namespace at daemon start
//! and again whenever the kernel reports an address, route or link change
//! ([`watch`]), at each registration and at each sweep. A neighbour
//! on a connected subnet is reached without a router: it is not "the
//! internet", whatever its range.
//!
//! The read runs a netlink runtime of its own (`routes::with_netlink`), so it
//! is called from plain threads (the watcher, tokio's blocking pool), never
//! from an async task.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::routes::{self, RouteError};

/// The host's addresses (as /32 and /128) and the subnet of each, then
/// every `local` route's range. A point-to-point address (`peer`) brings
/// the peer's prefix too: the dump gives it as the address entry beside the
/// local one.
pub fn host_deny_nets() -> Result<Vec<IpNet>, RouteError> {
    let (entries, local) = routes::with_netlink(|handle| async move {
        let entries = routes::address_entries(&handle).await?;
        let local = routes::local_route_nets(&handle).await?;
        Ok((entries, local))
    })?;
    let addrs: Vec<(IpAddr, u8)> = entries.iter().map(|e| (e.addr, e.prefix_len)).collect();
    let mut nets = nets(&addrs);
    for net in local.iter().map(IpNet::trunc) {
        if !nets.contains(&net) {
            nets.push(net);
        }
    }
    Ok(nets)
}

/// rtnetlink multicast groups: links, IPv4 and IPv6 addresses and routes
/// (a `local` route makes a range the host's own without an address).
// RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE
const GROUPS: u32 = 0x1 | 0x10 | 0x40 | 0x100 | 0x400;

/// Calls `changed` after every burst of address, route or link notifications in
/// the calling thread's namespace, on a thread of its own, for as long as
/// the process lives. The socket is subscribed before this returns, so a
/// change made after it is seen. A lost notification (the socket's buffer
/// overflowed) counts as a change.
pub fn watch(changed: impl Fn() + Send + 'static) -> std::io::Result<()> {
    use nix::sys::socket::{
        bind, recv, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
    };
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, GROUPS))?;
    std::thread::Builder::new()
        .name("vibe-egress-nl".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
                    Ok(_) | Err(nix::errno::Errno::ENOBUFS) => {}
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => {
                        std::thread::sleep(std::time::Duration::from_secs(1));
                        continue;
                    }
                }
                // A burst (an engine creating a bridge and its addresses)
                // is read as one change.
                std::thread::sleep(std::time::Duration::from_millis(20));
                while recv(fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT).is_ok() {}
                changed();
            }
        })?;
    Ok(())
}

fn nets(addrs: &[(IpAddr, u8)]) -> Vec<IpNet> {
    let mut nets = Vec::new();
    for &(addr, prefix) in addrs {
        let mut wanted = vec![IpNet::from(addr)];
        // A prefix the kernel gave cannot be invalid; if it were, the
        // address alone still stays refused.
        wanted.extend(IpNet::new(addr, prefix).ok().map(|n| n.trunc()));
        for net in wanted {
            if !nets.contains(&net) {
                nets.push(net);
            }
        }
    }
    nets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_interface_subnet_is_refused() {
        let got = nets(&[
            // A LAN on a public range (no bridge).
            ("192.0.2.7".parse().unwrap(), 24),
            // An engine bridge.
            ("172.30.99.1".parse().unwrap(), 24),
            ("2001:db8:1::1".parse().unwrap(), 64),
            ("192.0.2.7".parse().unwrap(), 24),
            // A prefix on lo, and a plain /32.
            ("198.51.100.1".parse().unwrap(), 24),
            ("203.0.113.77".parse().unwrap(), 32),
        ]);
        let want: Vec<IpNet> = [
            "192.0.2.7/32",
            "192.0.2.0/24",
            "172.30.99.1/32",
            "172.30.99.0/24",
            "2001:db8:1::1/128",
            "2001:db8:1::/64",
            "198.51.100.1/32",
            "198.51.100.0/24",
            "203.0.113.77/32",
        ]
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn reads_the_hosts_namespace() {
        // Loopback at least, with its /8.
        let nets = host_deny_nets().unwrap();
        assert!(nets.contains(&"127.0.0.1/32".parse().unwrap()), "{nets:?}");
        assert!(nets.contains(&"127.0.0.0/8".parse().unwrap()), "{nets:?}");
    }
}
