//! What the proxy refuses beyond the fixed private ranges: the host's own
//! addresses and the subnets of its bridges (the engines' networks, which
//! may be on public ranges), read from the host's namespace at daemon start.

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
