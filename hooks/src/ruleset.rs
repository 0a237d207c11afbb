//! The rules of `inet vibe_shim`, as a pure function of the policy and the
//! host facts the hook collected. Nothing here touches the system.
//!
//! The rules are a small structured model ([`Rule`]): `nftables.rs` encodes
//! it as netlink messages, and [`ruleset`] renders it as `nft -f` text for an
//! admin who configured an `nft` binary. Both forms list identically under
//! `nft list table inet vibe_shim` (a root test checks this). Every rule is a
//! plain match list: no sets, so the start-time check can read the table
//! back without decoding set elements.
//!
//! The batch ensures the table exists, flushes its rules, then defines its
//! chains and rules, as one transaction: any old ruleset is replaced
//! atomically and there is never a moment without the wall. Flushing instead
//! of deleting the table matters for speed: deleting base chains unregisters
//! netfilter hooks, which waits for an RCU grace period.

use std::fmt::{self, Write as _};
use std::net::IpAddr;

use ipnet::IpNet;
use vibe_policy::config::{AllowRule, NetworkMode, NetworkSection, Protocol};

/// Family and name of the one table the hook owns.
pub const TABLE: &str = "inet vibe_shim";

/// The table's name alone (the family is `inet`).
pub const TABLE_NAME: &str = "vibe_shim";

/// Docker's embedded DNS server, reached over lo after Docker's DNAT.
pub const DOCKER_EMBEDDED_DNS: &str = "127.0.0.11";
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
/// that embed an IPv4 address (v4-mapped, NAT64, Teredo, 6to4), since those
/// can carry a private IPv4 destination through a relay.
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

/// What the ruleset depends on besides the policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// Resolvers from the container's resolv.conf (used when `dns = true`).
    pub nameservers: Vec<IpAddr>,
    /// Every address on every host interface (used by open mode).
    pub host_addrs: Vec<IpAddr>,
}

/// One condition of a rule. All of a rule's matches must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// `ip daddr NET` / `ip6 daddr NET` (the family follows the address).
    Daddr(IpNet),
    /// `meta l4proto tcp`, or `tcp dport LO[-HI]` with ports.
    Transport {
        protocol: Protocol,
        ports: Option<(u16, u16)>,
    },
    /// `icmpv6 type TYPE`.
    Icmpv6Type(u8),
    /// `meta oiftype loopback`: by device type, since every namespace has lo.
    OifLoopback,
    /// `ct state established,related`.
    EstablishedOrRelated,
}

/// What a matching packet gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    Drop,
    /// Fails a blocked connect at once instead of after a timeout.
    RejectAdminProhibited,
}

/// One rule of the output chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub matches: Vec<Match>,
    pub verdict: Verdict,
    pub comment: Option<String>,
}

impl Rule {
    fn new(matches: Vec<Match>, verdict: Verdict) -> Rule {
        Rule {
            matches,
            verdict,
            comment: None,
        }
    }
}

/// ICMPv6 neighbour discovery, which IPv6 needs to reach even an allowed
/// neighbour; it never leaves the link (hop limit 255) and carries no payload.
pub const ND_ROUTER_SOLICIT: u8 = 133;
pub const ND_NEIGHBOR_SOLICIT: u8 = 135;
pub const ND_NEIGHBOR_ADVERT: u8 = 136;

/// A short fingerprint of the network policy, stored as a rule comment so
/// the start-time check can tell our table from a look-alike.
pub fn policy_tag(net: &NetworkSection) -> String {
    let mode = match net.mode {
        NetworkMode::None => "none",
        NetworkMode::Allowlist => "allowlist",
        NetworkMode::Open => "open",
    };
    let allow: Vec<String> = net.allow.iter().map(|r| r.to_string()).collect();
    let canonical = format!("mode={mode};dns={};allow={}", net.dns, allow.join(","));
    // FNV-1a: stable across builds and platforms, no dependency needed.
    let hash = canonical.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("vibe-shim policy {hash:016x}")
}

/// The output chain's rules for this policy, in order.
pub fn output_rules(net: &NetworkSection, facts: &HostFacts) -> Vec<Rule> {
    let mut rules = Vec::new();
    if !net.dns {
        // Before the loopback accept: this address is only reached over lo.
        let embedded = IpNet::from(IpAddr::from([127, 0, 0, 11]));
        rules.push(Rule::new(vec![Match::Daddr(embedded)], Verdict::Drop));
    }
    rules.push(Rule::new(vec![Match::OifLoopback], Verdict::Accept));
    // Replies to connections that came in (published ports, docker exec).
    // The comment marks the table as ours and names the policy: a rule
    // comment, because a table's comment cannot change once it exists.
    rules.push(Rule {
        comment: Some(policy_tag(net)),
        ..Rule::new(vec![Match::EstablishedOrRelated], Verdict::Accept)
    });
    if net.mode == NetworkMode::None {
        rules.push(Rule::new(Vec::new(), Verdict::RejectAdminProhibited));
        return rules;
    }
    for icmp_type in [ND_ROUTER_SOLICIT, ND_NEIGHBOR_SOLICIT, ND_NEIGHBOR_ADVERT] {
        rules.push(Rule::new(
            vec![Match::Icmpv6Type(icmp_type)],
            Verdict::Accept,
        ));
    }
    if net.dns {
        rules.extend(dns_rules(&facts.nameservers));
    }
    match net.mode {
        NetworkMode::Allowlist => {
            rules.extend(net.allow.iter().map(allow_rule));
            rules.push(Rule::new(Vec::new(), Verdict::RejectAdminProhibited));
        }
        NetworkMode::Open => {
            for dest in private_destinations(&facts.host_addrs) {
                rules.push(Rule::new(vec![Match::Daddr(dest)], Verdict::Drop));
            }
            rules.push(Rule::new(Vec::new(), Verdict::Accept));
        }
        NetworkMode::None => {}
    }
    rules
}

/// Accepts DNS (both transports) to each non-loopback resolver. Loopback
/// resolvers (127.0.0.11, 127.0.0.53) are reached over lo anyway.
fn dns_rules(nameservers: &[IpAddr]) -> Vec<Rule> {
    let mut seen: Vec<IpAddr> = Vec::new();
    for ns in nameservers.iter().filter(|a| !a.is_loopback()) {
        if !seen.contains(ns) {
            seen.push(*ns);
        }
    }
    // IPv4 first, as resolv.conf order within each family.
    seen.sort_by_key(|a| a.is_ipv6());
    let mut rules = Vec::new();
    for ns in seen {
        for protocol in [Protocol::Udp, Protocol::Tcp] {
            rules.push(Rule::new(
                vec![
                    Match::Daddr(IpNet::from(ns)),
                    Match::Transport {
                        protocol,
                        ports: Some((53, 53)),
                    },
                ],
                Verdict::Accept,
            ));
        }
    }
    rules
}

fn allow_rule(rule: &AllowRule) -> Rule {
    Rule::new(
        vec![
            Match::Daddr(rule.net),
            // No port: every port, still only the entry's protocol.
            Match::Transport {
                protocol: rule.protocol,
                ports: rule.ports,
            },
        ],
        Verdict::Accept,
    )
}

/// The full `nft -f -` batch for these output rules.
pub fn ruleset(output_rules: &[Rule]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "add table {TABLE}");
    let _ = writeln!(out, "flush table {TABLE}");
    let _ = writeln!(out, "table {TABLE} {{");
    let _ = writeln!(out, "\tchain output {{");
    let _ = writeln!(
        out,
        "\t\ttype filter hook output priority filter; policy drop;"
    );
    for rule in output_rules {
        let _ = writeln!(out, "\t\t{rule}");
    }
    let _ = writeln!(out, "\t}}");
    let _ = writeln!(out, "\tchain forward {{");
    let _ = writeln!(
        out,
        "\t\ttype filter hook forward priority filter; policy drop;"
    );
    let _ = writeln!(out, "\t}}");
    let _ = writeln!(out, "}}");
    out
}

/// nft's own syntax, in the form `nft list` prints it back.
impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.matches.iter().map(Match::to_string).collect();
        parts.push(
            match self.verdict {
                Verdict::Accept => "accept",
                Verdict::Drop => "drop",
                Verdict::RejectAdminProhibited => "reject with icmpx admin-prohibited",
            }
            .to_string(),
        );
        if let Some(comment) = &self.comment {
            parts.push(format!("comment \"{comment}\""));
        }
        f.write_str(&parts.join(" "))
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Match::Daddr(net) => {
                let family = if matches!(net, IpNet::V4(_)) {
                    "ip"
                } else {
                    "ip6"
                };
                write!(f, "{family} daddr {}", net_text(net))
            }
            Match::Transport { protocol, ports } => {
                let proto = match protocol {
                    Protocol::Tcp => "tcp",
                    Protocol::Udp => "udp",
                };
                match ports {
                    Some((lo, hi)) if lo == hi => write!(f, "{proto} dport {lo}"),
                    Some((lo, hi)) => write!(f, "{proto} dport {lo}-{hi}"),
                    None => write!(f, "meta l4proto {proto}"),
                }
            }
            Match::Icmpv6Type(t) => match *t {
                ND_ROUTER_SOLICIT => f.write_str("icmpv6 type nd-router-solicit"),
                ND_NEIGHBOR_SOLICIT => f.write_str("icmpv6 type nd-neighbor-solicit"),
                ND_NEIGHBOR_ADVERT => f.write_str("icmpv6 type nd-neighbor-advert"),
                other => write!(f, "icmpv6 type {other}"),
            },
            Match::OifLoopback => f.write_str("meta oiftype loopback"),
            Match::EstablishedOrRelated => f.write_str("ct state established,related"),
        }
    }
}

/// A single address prints bare; a real prefix keeps its length.
fn net_text(net: &IpNet) -> String {
    if net.prefix_len() == net.max_prefix_len() {
        net.addr().to_string()
    } else {
        net.to_string()
    }
}

/// The fixed private ranges plus every host address, without entries that a
/// wider one already covers (one rule each would be dead weight).
fn private_destinations(host_addrs: &[IpAddr]) -> Vec<IpNet> {
    let fixed = PRIVATE_V4.iter().chain(PRIVATE_V6.iter());
    let mut nets: Vec<IpNet> = fixed.filter_map(|s| s.parse().ok()).collect();
    nets.extend(host_addrs.iter().map(|a| IpNet::from(*a)));
    let mut kept: Vec<IpNet> = Vec::new();
    for (i, net) in nets.iter().enumerate() {
        let covered = nets
            .iter()
            .enumerate()
            .any(|(j, other)| j != i && other.contains(net) && (other != net || j < i));
        if !covered {
            kept.push(*net);
        }
    }
    // IPv4 first, each family in policy order.
    kept.sort_by_key(|n| matches!(n, IpNet::V6(_)));
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(mode: NetworkMode, allow: &[&str], dns: bool) -> NetworkSection {
        NetworkSection {
            mode,
            allow: allow.iter().map(|a| a.parse().unwrap()).collect(),
            dns,
            nft: None,
        }
    }

    fn addrs(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    fn batch(net: &NetworkSection, facts: &HostFacts) -> String {
        ruleset(&output_rules(net, facts))
    }

    fn texts(net: &NetworkSection, facts: &HostFacts) -> Vec<String> {
        output_rules(net, facts)
            .iter()
            .map(Rule::to_string)
            .collect()
    }

    const HEAD: &str = "add table inet vibe_shim\n\
flush table inet vibe_shim\n\
table inet vibe_shim {\n";

    fn ct(net: &NetworkSection) -> String {
        format!(
            "ct state established,related accept comment \"{}\"",
            policy_tag(net)
        )
    }

    const ND: [&str; 3] = [
        "icmpv6 type nd-router-solicit accept",
        "icmpv6 type nd-neighbor-solicit accept",
        "icmpv6 type nd-neighbor-advert accept",
    ];

    #[test]
    fn none_mode_golden() {
        let net = section(NetworkMode::None, &[], false);
        let text = batch(&net, &HostFacts::default());
        let expected = format!(
            "{HEAD}\tchain output {{\n\
\t\ttype filter hook output priority filter; policy drop;\n\
\t\tip daddr 127.0.0.11 drop\n\
\t\tmeta oiftype loopback accept\n\
\t\tct state established,related accept comment \"{}\"\n\
\t\treject with icmpx admin-prohibited\n\
\t}}\n\
\tchain forward {{\n\
\t\ttype filter hook forward priority filter; policy drop;\n\
\t}}\n\
}}\n",
            policy_tag(&net)
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn none_mode_ignores_host_facts() {
        let net = section(NetworkMode::None, &[], false);
        let facts = HostFacts {
            nameservers: addrs(&["192.0.2.53"]),
            host_addrs: addrs(&["203.0.113.9"]),
        };
        assert_eq!(batch(&net, &facts), batch(&net, &HostFacts::default()));
    }

    #[test]
    fn allowlist_golden_v4_v6_ports_ranges_udp_dns() {
        let net = section(
            NetworkMode::Allowlist,
            &[
                "192.0.2.10",
                "198.51.100.0/24:443",
                "203.0.113.5:8000-8100/udp",
                "[2001:db8::5]:8080",
                "2001:db8:1::/48",
            ],
            true,
        );
        let facts = HostFacts {
            nameservers: addrs(&[
                "127.0.0.11",
                "2001:db8::53",
                "192.0.2.53",
                "192.0.2.54",
                "192.0.2.53",
            ]),
            host_addrs: addrs(&["203.0.113.9"]),
        };
        let mut expected = vec!["meta oiftype loopback accept".to_string(), ct(&net)];
        expected.extend(ND.map(String::from));
        expected.extend(
            [
                "ip daddr 192.0.2.53 udp dport 53 accept",
                "ip daddr 192.0.2.53 tcp dport 53 accept",
                "ip daddr 192.0.2.54 udp dport 53 accept",
                "ip daddr 192.0.2.54 tcp dport 53 accept",
                "ip6 daddr 2001:db8::53 udp dport 53 accept",
                "ip6 daddr 2001:db8::53 tcp dport 53 accept",
                "ip daddr 192.0.2.10 meta l4proto tcp accept",
                "ip daddr 198.51.100.0/24 tcp dport 443 accept",
                "ip daddr 203.0.113.5 udp dport 8000-8100 accept",
                "ip6 daddr 2001:db8::5 tcp dport 8080 accept",
                "ip6 daddr 2001:db8:1::/48 meta l4proto tcp accept",
                "reject with icmpx admin-prohibited",
            ]
            .map(String::from),
        );
        assert_eq!(texts(&net, &facts), expected);
    }

    #[test]
    fn allowlist_without_dns_drops_embedded_dns_and_has_no_port_53() {
        let net = section(NetworkMode::Allowlist, &["203.0.113.5:80"], false);
        let facts = HostFacts {
            nameservers: addrs(&["192.0.2.53"]),
            host_addrs: vec![],
        };
        let text = batch(&net, &facts);
        assert!(text.contains("ip daddr 127.0.0.11 drop"));
        assert!(!text.contains("dport 53"));
        assert!(!text.contains("192.0.2.53"));
    }

    #[test]
    fn open_mode_golden() {
        let net = section(NetworkMode::Open, &[], false);
        let facts = HostFacts {
            nameservers: vec![],
            // 10.0.2.15 and 172.17.0.1 are inside fixed ranges and need no
            // rule of their own.
            host_addrs: addrs(&[
                "10.0.2.15",
                "172.17.0.1",
                "198.51.100.7",
                "198.51.100.7",
                "2001:db8::7",
                "fe80::1",
                "::1",
            ]),
        };
        let mut expected = vec![
            "ip daddr 127.0.0.11 drop".to_string(),
            "meta oiftype loopback accept".to_string(),
            ct(&net),
        ];
        expected.extend(ND.map(String::from));
        for dest in [
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
            "198.51.100.7",
        ] {
            expected.push(format!("ip daddr {dest} drop"));
        }
        for dest in [
            "::",
            "::1",
            "::ffff:0.0.0.0/96",
            "64:ff9b::/96",
            "64:ff9b:1::/48",
            "2001::/32",
            "2002::/16",
            "fc00::/7",
            "fe80::/10",
            "ff00::/8",
            "2001:db8::7",
        ] {
            expected.push(format!("ip6 daddr {dest} drop"));
        }
        expected.push("accept".into());
        assert_eq!(texts(&net, &facts), expected);
    }

    #[test]
    fn open_mode_keeps_documentation_ranges_reachable() {
        let net = section(NetworkMode::Open, &[], false);
        let text = batch(&net, &HostFacts::default());
        for doc in ["192.0.2.", "198.51.100.", "203.0.113.", "2001:db8"] {
            assert!(!text.contains(doc), "{doc} must stay reachable:\n{text}");
        }
    }

    #[test]
    fn open_mode_with_dns_accepts_private_resolver_before_the_private_drop() {
        let net = section(NetworkMode::Open, &[], true);
        let facts = HostFacts {
            nameservers: addrs(&["10.0.0.2"]),
            host_addrs: vec![],
        };
        let rules = texts(&net, &facts);
        let dns = rules.iter().position(|r| r.contains("10.0.0.2")).unwrap();
        let drop = rules.iter().position(|r| r.contains("10.0.0.0/8")).unwrap();
        assert!(dns < drop);
        assert!(!rules.iter().any(|r| r.contains("127.0.0.11")));
    }

    #[test]
    fn tag_depends_on_the_policy_only() {
        let a = section(NetworkMode::Allowlist, &["203.0.113.5:80"], false);
        let b = section(NetworkMode::Allowlist, &["203.0.113.5:81"], false);
        let c = section(NetworkMode::Allowlist, &["203.0.113.5:80"], true);
        assert_eq!(policy_tag(&a), policy_tag(&a.clone()));
        assert_ne!(policy_tag(&a), policy_tag(&b));
        assert_ne!(policy_tag(&a), policy_tag(&c));
        assert!(policy_tag(&a).starts_with("vibe-shim policy "));
        assert_eq!(policy_tag(&a).len(), "vibe-shim policy ".len() + 16);
    }

    #[test]
    fn batch_replaces_atomically() {
        let text = batch(&NetworkSection::default(), &HostFacts::default());
        let lines: Vec<&str> = text.lines().take(3).collect();
        assert_eq!(
            lines,
            [
                "add table inet vibe_shim",
                "flush table inet vibe_shim",
                "table inet vibe_shim {"
            ]
        );
    }
}
