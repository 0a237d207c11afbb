//! The addresses that are never "the internet": the one list behind open
//! mode's nftables wall ([`super::ruleset`]) and the egress proxy's
//! check of every address a name resolves to.
//!
//! The proxy judges an IPv6 address that embeds an IPv4 one (v4-mapped,
//! NAT64 well-known prefix, 6to4, Teredo) by the IPv4 address it carries,
//! so `64:ff9b::203.0.113.5` passes and `2002:a00:1::` (10.0.0.1) does not.
//! The nftables wall cannot look inside and drops those prefixes whole.
//! 192.0.2.0/24, 198.51.100.0/24 and 203.0.113.0/24 are public here: tests
//! use them as the world.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// IPv4 destinations that are never "the internet" (open mode drops them).
pub const PRIVATE_V4: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
];

/// IPv6 destinations that are never "the internet", including the forms
/// that embed an IPv4 address (v4-mapped, NAT64, Teredo, 6to4; SIIT's
/// v4-translated form is judged by what it carries), since those can carry
/// a private IPv4 destination through a relay.
pub const PRIVATE_V6: &[&str] = &[
    "::/128",
    "::1/128",
    "::ffff:0:0/96",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "2001::/32",
    "2002::/16",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

/// Reserved ranges the proxy refuses besides [`PRIVATE_V4`]/[`PRIVATE_V6`]:
/// the 6to4 relay anycast, IPv4-compatible IPv6 (deprecated, `::a.b.c.d`),
/// the discard prefix, IPv6 benchmarking and site-local.
const RESERVED_EXTRA: &[&str] = &[
    "192.88.99.0/24",
    "::/96",
    "100::/64",
    "2001:2::/48",
    "fec0::/10",
];

/// Why an address is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub addr: IpAddr,
    /// The IPv4 address an IPv6 form carried, and the form's name.
    pub embedded: Option<(Ipv4Addr, &'static str)>,
    pub net: IpNet,
    /// "a private or reserved range" or "a host network" (a subnet of one
    /// of the host's interfaces, bridges included).
    pub kind: &'static str,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "resolves to {}", self.addr)?;
        if let Some((v4, form)) = self.embedded {
            write!(f, " ({form} form of {v4})")?;
        }
        write!(f, ", in {} {}", self.kind, self.net)
    }
}

/// The fixed list plus the host's own addresses and the subnets of all its
/// interfaces, given at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenySet {
    fixed: Vec<IpNet>,
    extra: Vec<IpNet>,
}

impl DenySet {
    pub fn new(extra: &[IpNet]) -> DenySet {
        let fixed = PRIVATE_V4
            .iter()
            .chain(PRIVATE_V6)
            .chain(RESERVED_EXTRA)
            .filter_map(|s| s.parse().ok())
            .collect();
        DenySet {
            fixed,
            extra: extra.iter().map(IpNet::trunc).collect(),
        }
    }

    /// `Ok` when `addr` may be dialled.
    pub fn check(&self, addr: IpAddr) -> Result<(), Denied> {
        if let IpAddr::V6(v6) = addr {
            if let Some((form, v4s)) = embedded_v4(v6) {
                for v4 in v4s.into_iter().flatten() {
                    if let Some((net, kind)) = self.find(IpAddr::V4(v4)) {
                        return Err(Denied {
                            addr,
                            embedded: Some((v4, form)),
                            net,
                            kind,
                        });
                    }
                }
                // The embedded address is public: judge the IPv6 address
                // itself only against the run-time nets.
                return match self.extra.iter().find(|n| n.contains(&addr)) {
                    Some(net) => Err(Denied {
                        addr,
                        embedded: None,
                        net: *net,
                        kind: EXTRA_KIND,
                    }),
                    None => Ok(()),
                };
            }
        }
        match self.find(addr) {
            Some((net, kind)) => Err(Denied {
                addr,
                embedded: None,
                net,
                kind,
            }),
            None => Ok(()),
        }
    }

    fn find(&self, addr: IpAddr) -> Option<(IpNet, &'static str)> {
        if let Some(net) = self.fixed.iter().find(|n| n.contains(&addr)) {
            return Some((*net, "a private or reserved range"));
        }
        self.extra
            .iter()
            .find(|n| n.contains(&addr))
            .map(|n| (*n, EXTRA_KIND))
    }
}

const EXTRA_KIND: &str = "a host network";

/// The IPv4 addresses an IPv6 address carries, by form. Teredo carries two:
/// the server, and the client's (bit-inverted) mapped address.
fn embedded_v4(v6: Ipv6Addr) -> Option<(&'static str, [Option<Ipv4Addr>; 2])> {
    let s = v6.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if s[..5] == [0; 5] && s[5] == 0xffff {
        return Some(("v4-mapped", [Some(v4(s[6], s[7])), None]));
    }
    // ::ffff:0:a.b.c.d, SIIT's IPv4-translated form (RFC 2765).
    if s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0 {
        return Some(("v4-translated", [Some(v4(s[6], s[7])), None]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(("NAT64", [Some(v4(s[6], s[7])), None]));
    }
    if s[0] == 0x2002 {
        return Some(("6to4", [Some(v4(s[1], s[2])), None]));
    }
    if s[0] == 0x2001 && s[1] == 0 {
        return Some(("Teredo", [Some(v4(s[2], s[3])), Some(v4(!s[6], !s[7]))]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(set: &DenySet, a: &str) -> bool {
        set.check(a.parse().unwrap()).is_err()
    }

    #[test]
    fn private_and_reserved_ranges() {
        let set = DenySet::new(&[]);
        for a in [
            "127.0.0.1",
            "127.255.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.254",
            "169.254.169.254",
            "169.254.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "198.18.0.1",
            "198.19.255.255",
            "192.0.0.8",
            "192.88.99.1",
            "::",
            "::1",
            "fc00::1",
            "fd42:dead:beef::5",
            "fe80::1",
            "ff02::1",
            "fec0::1",
            "100::1",
            "2001:2::1",
            "::7f00:1",
            "64:ff9b:1::a00:1",
        ] {
            assert!(denied(&set, a), "{a} allowed");
        }
    }

    #[test]
    fn documentation_and_public_ranges_are_public() {
        let set = DenySet::new(&[]);
        for a in [
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.5",
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2001:db8::1",
            "2001:db8:5::5",
            "2606:4700::1111",
            "3fff::1",
        ] {
            assert!(!denied(&set, a), "{a} refused");
        }
    }

    #[test]
    fn embedded_forms_are_judged_by_what_they_carry() {
        let set = DenySet::new(&[]);
        for a in [
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            // SIIT's translated form, ::ffff:0:a.b.c.d.
            "::ffff:0:127.0.0.1",
            "::ffff:0:a9fe:a9fe",
            "64:ff9b::10.0.0.1",
            "64:ff9b::169.254.169.254",
            "64:ff9b::7f00:1",
            "2002:a00:1::",
            "2002:a9fe:a9fe::1",
            "2002:7f00:1::",
            // Teredo: server 10.0.0.1 / client 127.0.0.1 (inverted 80ff:fffe).
            "2001:0:a00:1::1",
            "2001:0:cb00:7105::80ff:fffe",
        ] {
            assert!(denied(&set, a), "{a} allowed");
        }
        for a in [
            "::ffff:203.0.113.5",
            "::ffff:0:203.0.113.5",
            "64:ff9b::203.0.113.5",
            "2002:cb00:7105::1",
        ] {
            assert!(!denied(&set, a), "{a} refused");
        }
        let d = set
            .check("64:ff9b::a9fe:a9fe".parse().unwrap())
            .unwrap_err();
        assert_eq!(
            d.to_string(),
            "resolves to 64:ff9b::a9fe:a9fe (NAT64 form of 169.254.169.254), in a private or reserved range 169.254.0.0/16"
        );
    }

    #[test]
    fn run_time_nets_and_their_embeddings() {
        let extra: Vec<IpNet> = ["203.0.113.0/28", "2001:db8:ff::1/64"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let set = DenySet::new(&extra);
        assert!(denied(&set, "203.0.113.5"));
        assert!(denied(&set, "::ffff:203.0.113.5"));
        assert!(denied(&set, "2002:cb00:7105::1"));
        assert!(denied(&set, "2001:db8:ff::2"));
        assert!(!denied(&set, "203.0.113.16"));
        let d = set.check("203.0.113.5".parse().unwrap()).unwrap_err();
        assert!(d.to_string().contains("in a host network 203.0.113.0/28"));
    }
}
