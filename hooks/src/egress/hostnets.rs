//! What the proxy refuses beyond the fixed private ranges: the host's own
//! addresses and the subnets of its bridges (the engines' networks, which
//! may be on public ranges), read from the host's namespace at daemon start
//! and again whenever the kernel reports an address or link change
//! ([`watch`]), at each registration and at each sweep.
//!
//! The read runs a netlink runtime of its own (`routes::with_netlink`), so it
//! is called from plain threads (the watcher, tokio's blocking pool), never
//! from an async task.

use std::net::IpAddr;
use std::path::Path;

use ipnet::IpNet;

use crate::routes::{self, RouteError};

/// The host's addresses (as /32 and /128) and each bridge's subnet.
pub fn host_deny_nets() -> Result<Vec<IpNet>, RouteError> {
    let bridges = bridge_indexes(Path::new("/sys/class/net"));
    let entries =
        routes::with_netlink(|handle| async move { routes::address_entries(&handle).await })?;
    let addrs: Vec<(IpAddr, u8, bool)> = entries
        .iter()
        .map(|e| (e.addr, e.prefix_len, bridges.contains(&e.index)))
        .collect();
    Ok(nets(&addrs))
}

/// rtnetlink multicast groups: links, IPv4 and IPv6 addresses.
const GROUPS: u32 = 0x1 | 0x10 | 0x100; // RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR

/// Calls `changed` after every burst of address or link notifications in
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

fn nets(addrs: &[(IpAddr, u8, bool)]) -> Vec<IpNet> {
    let mut nets = Vec::new();
    for &(addr, prefix, on_bridge) in addrs {
        let mut wanted = vec![IpNet::from(addr)];
        if on_bridge {
            wanted.extend(IpNet::new(addr, prefix).ok().map(|n| n.trunc()));
        }
        for net in wanted {
            if !nets.contains(&net) {
                nets.push(net);
            }
        }
    }
    nets
}

/// Interface indexes of the bridges under `sys` (`<if>/bridge` exists).
fn bridge_indexes(sys: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(sys) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.path().join("bridge").is_dir())
        .filter_map(|e| std::fs::read_to_string(e.path().join("ifindex")).ok())
        .filter_map(|i| i.trim().parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_addresses_and_bridge_subnets() {
        let got = nets(&[
            ("192.0.2.7".parse().unwrap(), 24, false),
            ("172.30.99.1".parse().unwrap(), 24, true),
            ("2001:db8:1::1".parse().unwrap(), 64, true),
            ("192.0.2.7".parse().unwrap(), 24, false),
        ]);
        let want: Vec<IpNet> = [
            "192.0.2.7/32",
            "172.30.99.1/32",
            "172.30.99.0/24",
            "2001:db8:1::1/128",
            "2001:db8:1::/64",
        ]
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn reads_the_hosts_namespace() {
        // Loopback at least.
        let nets = host_deny_nets().unwrap();
        assert!(nets.contains(&"127.0.0.1/32".parse().unwrap()), "{nets:?}");
    }
}
