//! The rules of `inet vibe_shim` (in the container's namespace) and of
//! `inet vibe_shim_<id>` (in the host's, open mode), as a pure function of
//! the policy and the container's own addresses. Nothing here touches the
//! system.
//!
//! Open mode keeps the host out without knowing the host's addresses: the
//! host table drops, at the host's input hook, every packet from the
//! container's addresses that is not a reply or neighbour discovery. The
//! input hook only ever sees packets the host's routing delivers locally,
//! so an address the host gains later is covered at once. The container's
//! own table lets out only packets from those addresses, so an interface
//! added later (with an address the host table does not know) has no
//! egress until the start check has covered it.
//!
//! The rules are a small structured model ([`Rule`]): the hooks crate
//! encodes it as netlink messages, and [`ruleset`] renders it as `nft -f`
//! text for an admin who configured an `nft` binary. Both forms list
//! identically under `nft list table inet vibe_shim` (a root test checks
//! this). Every rule is a plain match list: no sets, so the start-time check
//! can read the table back without decoding set elements.
//!
//! The batch ensures the table exists, flushes its rules, then defines its
//! chains and rules, as one transaction: any old ruleset is replaced
//! atomically and there is never a moment without the wall. Flushing instead
//! of deleting the table matters for speed: deleting base chains unregisters
//! netfilter hooks, which waits for an RCU grace period.

use std::fmt::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::config::{policy_tag, AllowRule, NetworkMode, NetworkSection, PortRange, Protocol};
use crate::egress::dns::DNS_PORT;
use crate::egress::transparent::TRANSPARENT_PORT;
use crate::lang::container_id;
use ipnet::IpNet;

/// Family and name of the one table the hook owns.
pub const TABLE: &str = "inet vibe_shim";

/// The table's name alone (the family is `inet`).
pub const TABLE_NAME: &str = "vibe_shim";

/// Docker's embedded DNS server, reached over lo after Docker's DNAT.
pub const DOCKER_EMBEDDED_DNS: &str = "127.0.0.11";
/// The never-"the internet" ranges; one list, shared with the egress proxy.
pub use super::denyset::{PRIVATE_V4, PRIVATE_V6};

/// What the ruleset depends on besides the policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The container's addresses (not loopback, not link-local), read
    /// inside its namespace: open mode lets out only packets from them,
    /// and transparent egress leaves connections to them alone (a server
    /// of the container's own, reached on its own address).
    pub container_addrs: Vec<IpAddr>,
    /// Mode proxy with `preview_ports`: the engine's host side of the
    /// container's bridge ([`preview_sources`]), the only source new
    /// connections to a preview port may come from.
    pub preview_sources: Vec<IpAddr>,
}

/// The addresses a preview port lets in: each host bridge address (`bridges`,
/// read in the host's namespace) that lies on the subnet of one of the
/// container's addresses (`container`, read in its namespace, as
/// address/prefix), but is not that address. That is the source docker-proxy
/// connects from, and the one dockerd masquerades the host's loopback
/// traffic to with the userland proxy off. No container can send from it
/// without CAP_NET_RAW, and the host's kernel drops it as a martian when it
/// arrives from any other interface. Loopback and link-local addresses never
/// count; IPv4 first.
pub fn preview_sources(container: &[IpNet], bridges: &[IpAddr]) -> Vec<IpAddr> {
    let found: Vec<IpAddr> = bridges
        .iter()
        .copied()
        .filter(|b| is_routable(*b))
        .filter(|b| {
            container
                .iter()
                .any(|c| is_routable(c.addr()) && c.addr() != *b && c.trunc().contains(b))
        })
        .collect();
    sorted(&found)
}

fn is_routable(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => !(a.is_loopback() || a.is_link_local() || a.is_unspecified()),
        IpAddr::V6(a) => {
            !(a.is_loopback() || a.is_unspecified() || (a.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

/// One condition of a rule. All of a rule's matches must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// `ip saddr NET` / `ip6 saddr NET` (the family follows the address).
    Saddr(IpNet),
    /// `ip daddr NET` / `ip6 daddr NET` (the family follows the address).
    Daddr(IpNet),
    /// `ip daddr != NET` / `ip6 daddr != NET`: a packet of that family to
    /// anywhere else.
    DaddrNot(IpNet),
    /// `meta l4proto tcp`, or `tcp dport LO[-HI]` with ports.
    Transport {
        protocol: Protocol,
        ports: Option<(u16, u16)>,
    },
    /// `tcp sport LO[-HI]` (`udp` for udp).
    SourcePorts {
        protocol: Protocol,
        ports: (u16, u16),
    },
    /// `ct state established`: replies only, not related ICMP.
    Established,
    /// `icmpv6 type TYPE`.
    Icmpv6Type(u8),
    /// `meta oiftype loopback`: by device type, since every namespace has lo.
    OifLoopback,
    /// `meta iiftype loopback`.
    IifLoopback,
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
    /// `redirect to :PORT` (nat chains only): to this port on the
    /// namespace's own loopback, keeping the original destination for
    /// `SO_ORIGINAL_DST`.
    Redirect(u16),
}

/// One rule of a chain.
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

    fn tagged(self, tag: &str) -> Rule {
        Rule {
            comment: Some(tag.to_string()),
            ..self
        }
    }
}

/// The netfilter hook a base chain sits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Input,
    Forward,
    Output,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
        }
    }
}

/// What a base chain does: filter (priority filter), or transparent
/// egress's redirects (`type nat`, before the engine's own nat).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainType {
    Filter,
    Nat,
}

/// A base chain: a filter chain is named after its hook, the nat chain
/// [`NAT_CHAIN`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub hook: Hook,
    pub kind: ChainType,
    /// Accept or Drop.
    pub policy: Verdict,
    pub rules: Vec<Rule>,
}

/// The name of transparent egress's nat chain.
pub const NAT_CHAIN: &str = "transparent";

/// The nat chain's priority: before `dstnat` (-100), where Docker's own
/// DNAT of 127.0.0.11:53 (in the container's namespace) sits, so a query
/// goes to the answerer, never to the engine's resolver.
pub const NAT_PRIORITY: i32 = -150;

impl Chain {
    pub fn name(&self) -> &'static str {
        match self.kind {
            ChainType::Filter => self.hook.name(),
            ChainType::Nat => NAT_CHAIN,
        }
    }

    pub fn priority(&self) -> i32 {
        match self.kind {
            ChainType::Filter => 0,
            ChainType::Nat => NAT_PRIORITY,
        }
    }

    /// The `type` nft names.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            ChainType::Filter => "filter",
            ChainType::Nat => "nat",
        }
    }
}

/// An `inet` table as the hook installs it: all or nothing, replacing any
/// rules it had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub name: String,
    pub chains: Vec<Chain>,
}

/// ICMPv6 neighbour discovery, which IPv6 needs to reach even an allowed
/// neighbour; it never leaves the link (hop limit 255) and carries no payload.
pub const ND_ROUTER_SOLICIT: u8 = 133;
pub const ND_NEIGHBOR_SOLICIT: u8 = 135;
pub const ND_NEIGHBOR_ADVERT: u8 = 136;

/// The table in the container's namespace: output, input and forward, each
/// with policy drop.
pub fn container_table(net: &NetworkSection, facts: &Facts) -> Table {
    let mut chains = vec![
        Chain {
            hook: Hook::Output,
            kind: ChainType::Filter,
            policy: Verdict::Drop,
            rules: output_rules(net, facts),
        },
        Chain {
            hook: Hook::Input,
            kind: ChainType::Filter,
            policy: Verdict::Drop,
            rules: input_rules(net, facts),
        },
        Chain {
            hook: Hook::Forward,
            kind: ChainType::Filter,
            policy: Verdict::Drop,
            rules: Vec::new(),
        },
    ];
    chains.extend(transparent_chain(net, facts));
    Table {
        name: TABLE_NAME.to_string(),
        chains,
    }
}

/// Comment on the one rule the hook adds only until `start` (see
/// [`creating_table`]); the start check closes it with [`start_gate`].
pub const UNTIL_START_TAG: &str = "vibe-shim until start: engine neighbour advertisement";
/// Comment on [`start_gate`]'s rule.
pub const FROM_START_TAG: &str = "vibe-shim from start: engine neighbour advertisement closed";

/// The table the `createRuntime` hook installs. For the loopback-only modes
/// it is [`container_table`] plus one output rule accepting ICMPv6 neighbour
/// advertisements: Docker 28+ moves the interface in after `runc create`
/// and sends an unsolicited advertisement from the namespace, failing the
/// container when the wall rejects it. Until `start` no client process runs
/// in the namespace (runc's init waits on its fifo), so only the engine can
/// use the rule. The start check closes it with [`start_gate`], a rule
/// added in front of it: a transaction that deletes nothing, which the
/// kernel commits without waiting for an RCU grace period.
///
/// The rule sits last before the chain's final reject, so that a rule
/// rejecting the same packets right in front of it leaves the chain
/// deciding every packet as [`container_table`]'s does.
pub fn creating_table(net: &NetworkSection, facts: &Facts) -> Table {
    let mut table = container_table(net, facts);
    if net.mode.loopback_only() {
        if let Some(output) = table.chains.iter_mut().find(|c| c.hook == Hook::Output) {
            let at = output
                .rules
                .iter()
                .rposition(|r| r.matches.is_empty() && r.verdict == Verdict::RejectAdminProhibited)
                .unwrap_or(output.rules.len());
            output.rules.insert(
                at,
                Rule::new(vec![Match::Icmpv6Type(ND_NEIGHBOR_ADVERT)], Verdict::Accept)
                    .tagged(UNTIL_START_TAG),
            );
        }
    }
    table
}

/// What the start check adds to the output chain of a [`creating_table`],
/// right in front of the [`UNTIL_START_TAG`] rule: the same packets get the
/// final reject's verdict there, so the rule behind it never matches again.
pub fn start_gate() -> Rule {
    Rule::new(
        vec![Match::Icmpv6Type(ND_NEIGHBOR_ADVERT)],
        Verdict::RejectAdminProhibited,
    )
    .tagged(FROM_START_TAG)
}

/// The output chain's name (the chain [`start_gate`] goes into).
pub const OUTPUT_CHAIN: &str = "output";

/// The output chain's rules for this policy, in order.
pub fn output_rules(net: &NetworkSection, facts: &Facts) -> Vec<Rule> {
    let mut rules = Vec::new();
    if !net.dns {
        // Before the loopback accept: this address is only reached over lo.
        let embedded = IpNet::from(IpAddr::from([127, 0, 0, 11]));
        rules.push(Rule::new(vec![Match::Daddr(embedded)], Verdict::Drop));
    }
    // The comment marks the table as ours and names the policy: a rule
    // comment, because a table's comment cannot change once it exists.
    rules.push(Rule::new(vec![Match::OifLoopback], Verdict::Accept).tagged(&policy_tag(net)));
    if net.mode.loopback_only() {
        // Nothing but loopback, not even replies, except the replies of a
        // preview port to the engine's host side.
        for (from, range) in previews(net, facts) {
            rules.push(Rule::new(
                vec![
                    Match::Daddr(IpNet::from(from)),
                    Match::SourcePorts {
                        protocol: Protocol::Tcp,
                        ports: (range.lo, range.hi),
                    },
                    Match::Established,
                ],
                Verdict::Accept,
            ));
        }
        rules.extend(preview_neighbour_rules(net, facts));
        rules.extend(transparent_accepts(net));
        // Nothing but loopback, not even replies: nothing comes in either.
        rules.push(Rule::new(Vec::new(), Verdict::RejectAdminProhibited));
        return rules;
    }
    // Replies within connections the policy let through.
    rules.push(Rule::new(
        vec![Match::EstablishedOrRelated],
        Verdict::Accept,
    ));
    for icmp_type in [ND_ROUTER_SOLICIT, ND_NEIGHBOR_SOLICIT, ND_NEIGHBOR_ADVERT] {
        rules.push(Rule::new(
            vec![Match::Icmpv6Type(icmp_type)],
            Verdict::Accept,
        ));
    }
    if net.dns {
        rules.extend(dns_rules(&[], &net.resolvers));
    }
    match net.mode {
        NetworkMode::Allowlist => {
            rules.extend(net.allow.iter().map(allow_rule));
        }
        NetworkMode::Open => {
            for dest in private_destinations() {
                rules.push(Rule::new(vec![Match::Daddr(dest)], Verdict::Drop));
            }
            // Only from the addresses the host table covers.
            for addr in sorted(&facts.container_addrs) {
                rules.push(Rule::new(
                    vec![Match::Saddr(IpNet::from(addr))],
                    Verdict::Accept,
                ));
            }
        }
        NetworkMode::None | NetworkMode::Proxy => {}
    }
    rules.push(Rule::new(Vec::new(), Verdict::RejectAdminProhibited));
    rules
}

/// The input chain: loopback; with egress also replies and neighbour
/// discovery; new connections only with `inbound = true`, or in mode proxy
/// to a preview port from the engine's host side.
pub fn input_rules(net: &NetworkSection, facts: &Facts) -> Vec<Rule> {
    let mut rules =
        vec![Rule::new(vec![Match::IifLoopback], Verdict::Accept).tagged(&policy_tag(net))];
    if net.mode.loopback_only() {
        for (from, range) in previews(net, facts) {
            rules.push(Rule::new(
                vec![
                    Match::Saddr(IpNet::from(from)),
                    Match::Transport {
                        protocol: Protocol::Tcp,
                        ports: Some((range.lo, range.hi)),
                    },
                ],
                Verdict::Accept,
            ));
        }
        rules.extend(preview_neighbour_rules(net, facts));
        return rules;
    }
    rules.push(Rule::new(
        vec![Match::EstablishedOrRelated],
        Verdict::Accept,
    ));
    for icmp_type in [ND_NEIGHBOR_SOLICIT, ND_NEIGHBOR_ADVERT] {
        rules.push(Rule::new(
            vec![Match::Icmpv6Type(icmp_type)],
            Verdict::Accept,
        ));
    }
    if net.inbound {
        rules.push(Rule::new(Vec::new(), Verdict::Accept));
    }
    rules
}

/// Each (source, port range) a preview rule names: only mode proxy, and
/// nothing without a known host side.
fn previews(net: &NetworkSection, facts: &Facts) -> Vec<(IpAddr, PortRange)> {
    if net.mode != NetworkMode::Proxy {
        return Vec::new();
    }
    let mut out = Vec::new();
    for from in sorted(&facts.preview_sources) {
        for range in &net.preview_ports {
            out.push((from, *range));
        }
    }
    out
}

/// IPv6 needs neighbour discovery to answer an IPv6 host side at all:
/// solicitations and advertisements, in and out, only when a preview rule
/// names an IPv6 source (they never leave the link and carry no payload).
fn preview_neighbour_rules(net: &NetworkSection, facts: &Facts) -> Vec<Rule> {
    if !previews(net, facts).iter().any(|(from, _)| from.is_ipv6()) {
        return Vec::new();
    }
    [ND_NEIGHBOR_SOLICIT, ND_NEIGHBOR_ADVERT]
        .into_iter()
        .map(|t| Rule::new(vec![Match::Icmpv6Type(t)], Verdict::Accept))
        .collect()
}

/// The name of the host-namespace table that keeps container `id` off the
/// host's addresses; `None` when the id breaks the one container-id rule
/// ([`crate::lang::container_id`]).
pub fn host_table_name(id: &str) -> Option<String> {
    container_id::is_valid(id).then(|| format!("{HOST_TABLE_PREFIX}{id}"))
}

/// Prefix of the per-container host tables.
pub const HOST_TABLE_PREFIX: &str = "vibe_shim_";

/// The host-namespace table for an open-mode container: one input chain
/// (policy accept: other traffic is not ours to judge) that drops what comes
/// from the container's addresses, except replies, neighbour discovery and
/// DNS to the admin's resolvers.
pub fn host_table(name: &str, net: &NetworkSection, container_addrs: &[IpAddr]) -> Table {
    let mut rules = Vec::new();
    for addr in sorted(container_addrs) {
        let from = Match::Saddr(IpNet::from(addr));
        if addr.is_ipv6() {
            for icmp_type in [ND_ROUTER_SOLICIT, ND_NEIGHBOR_SOLICIT, ND_NEIGHBOR_ADVERT] {
                rules.push(Rule::new(
                    vec![from, Match::Icmpv6Type(icmp_type)],
                    Verdict::Accept,
                ));
            }
        }
        rules.push(Rule::new(
            vec![from, Match::EstablishedOrRelated],
            Verdict::Accept,
        ));
        if net.dns {
            let same_family: Vec<IpAddr> = net
                .resolvers
                .iter()
                .copied()
                .filter(|r| r.is_ipv6() == addr.is_ipv6())
                .collect();
            rules.extend(dns_rules(&[from], &same_family));
        }
        rules.push(Rule::new(vec![from], Verdict::Drop));
    }
    Table {
        name: name.to_string(),
        chains: vec![Chain {
            hook: Hook::Input,
            kind: ChainType::Filter,
            policy: Verdict::Accept,
            rules,
        }],
    }
}

/// Whether transparent egress applies: mode "proxy" with `transparent`.
pub fn is_transparent(net: &NetworkSection) -> bool {
    net.mode == NetworkMode::Proxy && net.transparent
}

/// Transparent egress's nat chain (output hook, before the engine's nat):
/// DNS to any address, both transports, goes to the daemon's answerer on
/// the namespace's loopback ([`DNS_PORT`]); every other new TCP connection
/// goes to its transparent listener ([`TRANSPARENT_PORT`]), except one to
/// loopback (the proxy's own listener, the container's local servers) or
/// to one of the container's own addresses (`facts.container_addrs`: a
/// dev server reached on eth0's address). The listener serves a fake
/// address the answerer gave and refuses, with its log line, everything
/// else: an IP literal, any port. Only new connections pass a nat chain,
/// so the replies of a preview port's inbound connections never meet it.
/// `redirect` rewrites the destination to 127.0.0.1 (::1), so nothing here
/// routes off loopback. Nothing for any other policy.
pub fn transparent_chain(net: &NetworkSection, facts: &Facts) -> Option<Chain> {
    if !is_transparent(net) {
        return None;
    }
    let mut rules = Vec::new();
    for protocol in [Protocol::Udp, Protocol::Tcp] {
        rules.push(Rule::new(
            vec![Match::Transport {
                protocol,
                ports: Some((53, 53)),
            }],
            Verdict::Redirect(DNS_PORT),
        ));
    }
    let loopback: [IpNet; 2] = [
        IpNet::V4(ipnet::Ipv4Net::new(Ipv4Addr::new(127, 0, 0, 0), 8).unwrap_or_default()),
        IpNet::from(IpAddr::from(Ipv6Addr::LOCALHOST)),
    ];
    let own = sorted(&facts.container_addrs);
    for lo in loopback {
        let mut matches = vec![Match::DaddrNot(lo)];
        matches.extend(
            own.iter()
                .filter(|a| a.is_ipv6() == lo.addr().is_ipv6())
                .map(|a| Match::DaddrNot(IpNet::from(*a))),
        );
        matches.push(Match::Transport {
            protocol: Protocol::Tcp,
            ports: None,
        });
        rules.push(Rule::new(matches, Verdict::Redirect(TRANSPARENT_PORT)));
    }
    Some(Chain {
        hook: Hook::Output,
        kind: ChainType::Nat,
        policy: Verdict::Accept,
        rules,
    })
}

/// The filter output rules transparent egress adds, after the loopback
/// accept: a query to a nameserver on the container's own link (podman's
/// gateway resolver), or a connection to an address there (the gateway,
/// another container), was routed to that link before the nat chain
/// redirected it, and the filter chain still sees that device. These
/// accept it by its rewritten destination, which is loopback's (127.0.0.1
/// or ::1, the answerer's or the listener's port), and which the kernel
/// only ever delivers over lo.
pub fn transparent_accepts(net: &NetworkSection) -> Vec<Rule> {
    if !is_transparent(net) {
        return Vec::new();
    }
    let mut rules = Vec::new();
    for lo in [
        IpAddr::from([127, 0, 0, 1]),
        IpAddr::from(Ipv6Addr::LOCALHOST),
    ] {
        let ports = [
            (Protocol::Udp, DNS_PORT),
            (Protocol::Tcp, DNS_PORT),
            (Protocol::Tcp, TRANSPARENT_PORT),
        ];
        for (protocol, port) in ports {
            rules.push(Rule::new(
                vec![
                    Match::Daddr(IpNet::from(lo)),
                    Match::Transport {
                        protocol,
                        ports: Some((port, port)),
                    },
                ],
                Verdict::Accept,
            ));
        }
    }
    rules
}

/// IPv4 first, each family in the given order, without duplicates.
fn sorted(addrs: &[IpAddr]) -> Vec<IpAddr> {
    let mut seen: Vec<IpAddr> = Vec::new();
    for a in addrs {
        if !seen.contains(a) {
            seen.push(*a);
        }
    }
    seen.sort_by_key(|a| a.is_ipv6());
    seen
}

/// Accepts DNS (both transports) to each non-loopback resolver, after the
/// matches in `prefix`. Loopback resolvers are reached over lo anyway.
fn dns_rules(prefix: &[Match], resolvers: &[IpAddr]) -> Vec<Rule> {
    let resolvers: Vec<IpAddr> = resolvers
        .iter()
        .copied()
        .filter(|a| !a.is_loopback())
        .collect();
    let mut rules = Vec::new();
    for ns in sorted(&resolvers) {
        for protocol in [Protocol::Udp, Protocol::Tcp] {
            let mut matches = prefix.to_vec();
            matches.push(Match::Daddr(IpNet::from(ns)));
            matches.push(Match::Transport {
                protocol,
                ports: Some((53, 53)),
            });
            rules.push(Rule::new(matches, Verdict::Accept));
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

/// The full `nft -f -` batch for a table.
pub fn ruleset(table: &Table) -> String {
    let name = format!("inet {}", table.name);
    let mut out = String::new();
    let _ = writeln!(out, "add table {name}");
    let _ = writeln!(out, "flush table {name}");
    let _ = writeln!(out, "table {name} {{");
    for chain in &table.chains {
        let _ = writeln!(out, "\tchain {} {{", chain.name());
        let policy = if chain.policy == Verdict::Accept {
            "accept"
        } else {
            "drop"
        };
        let priority = match chain.kind {
            ChainType::Filter => "filter".to_string(),
            ChainType::Nat => chain.priority().to_string(),
        };
        let _ = writeln!(
            out,
            "\t\ttype {} hook {} priority {priority}; policy {policy};",
            chain.type_name(),
            chain.hook.name()
        );
        for rule in &chain.rules {
            let _ = writeln!(out, "\t\t{rule}");
        }
        let _ = writeln!(out, "\t}}");
    }
    let _ = writeln!(out, "}}");
    out
}

/// nft's own syntax, in the form `nft list` prints it back.
impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.matches.iter().map(Match::to_string).collect();
        parts.push(match self.verdict {
            Verdict::Accept => "accept".to_string(),
            Verdict::Drop => "drop".to_string(),
            Verdict::RejectAdminProhibited => "reject with icmpx admin-prohibited".to_string(),
            Verdict::Redirect(port) => format!("redirect to :{port}"),
        });
        if let Some(comment) = &self.comment {
            parts.push(format!("comment \"{comment}\""));
        }
        f.write_str(&parts.join(" "))
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Match::Saddr(net) | Match::Daddr(net) | Match::DaddrNot(net) => {
                let family = if matches!(net, IpNet::V4(_)) {
                    "ip"
                } else {
                    "ip6"
                };
                let field = match self {
                    Match::Saddr(_) => "saddr",
                    Match::DaddrNot(_) => "daddr !=",
                    _ => "daddr",
                };
                write!(f, "{family} {field} {}", net_text(net))
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
            Match::SourcePorts { protocol, ports } => {
                let proto = match protocol {
                    Protocol::Tcp => "tcp",
                    Protocol::Udp => "udp",
                };
                match ports {
                    (lo, hi) if lo == hi => write!(f, "{proto} sport {lo}"),
                    (lo, hi) => write!(f, "{proto} sport {lo}-{hi}"),
                }
            }
            Match::Established => f.write_str("ct state established"),
            Match::Icmpv6Type(t) => match *t {
                ND_ROUTER_SOLICIT => f.write_str("icmpv6 type nd-router-solicit"),
                ND_NEIGHBOR_SOLICIT => f.write_str("icmpv6 type nd-neighbor-solicit"),
                ND_NEIGHBOR_ADVERT => f.write_str("icmpv6 type nd-neighbor-advert"),
                other => write!(f, "icmpv6 type {other}"),
            },
            Match::OifLoopback => f.write_str("meta oiftype loopback"),
            Match::IifLoopback => f.write_str("meta iiftype loopback"),
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

/// The fixed private ranges, without entries that a wider one already
/// covers. The host's own addresses are the host table's job.
fn private_destinations() -> Vec<IpNet> {
    let fixed = PRIVATE_V4.iter().chain(PRIVATE_V6.iter());
    fixed.filter_map(|s| s.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(mode: NetworkMode, allow: &[&str], dns: bool) -> NetworkSection {
        NetworkSection {
            mode,
            allow: allow.iter().map(|a| a.parse().unwrap()).collect(),
            dns,
            ..NetworkSection::default()
        }
    }

    fn addrs(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    fn texts(rules: &[Rule]) -> Vec<String> {
        rules.iter().map(Rule::to_string).collect()
    }

    fn lo(net: &NetworkSection) -> String {
        format!(
            "meta oiftype loopback accept comment \"{}\"",
            policy_tag(net)
        )
    }

    const CT: &str = "ct state established,related accept";

    const ND: [&str; 3] = [
        "icmpv6 type nd-router-solicit accept",
        "icmpv6 type nd-neighbor-solicit accept",
        "icmpv6 type nd-neighbor-advert accept",
    ];

    /// The wall of modes none and proxy: loopback only, tagged `tag`.
    fn loopback_wall(tag: &str) -> String {
        format!(
            "add table inet vibe_shim\n\
flush table inet vibe_shim\n\
table inet vibe_shim {{\n\
\tchain output {{\n\
\t\ttype filter hook output priority filter; policy drop;\n\
\t\tip daddr 127.0.0.11 drop\n\
\t\tmeta oiftype loopback accept comment \"{tag}\"\n\
\t\treject with icmpx admin-prohibited\n\
\t}}\n\
\tchain input {{\n\
\t\ttype filter hook input priority filter; policy drop;\n\
\t\tmeta iiftype loopback accept comment \"{tag}\"\n\
\t}}\n\
\tchain forward {{\n\
\t\ttype filter hook forward priority filter; policy drop;\n\
\t}}\n\
}}\n"
        )
    }

    #[test]
    fn none_mode_golden() {
        let net = section(NetworkMode::None, &[], false);
        let text = ruleset(&container_table(&net, &Facts::default()));
        let tag = policy_tag(&net);
        let expected = loopback_wall(&tag);
        assert_eq!(text, expected);
    }

    /// Mode proxy without `transparent`: exactly the table it always had
    /// (this text is the one before transparent egress existed).
    #[test]
    fn proxy_mode_without_transparent_is_unchanged() {
        let mut net = section(NetworkMode::Proxy, &[], false);
        net.hosts = vec!["api.example.com".into(), "*.github.com:8443".into()];
        let tag = policy_tag(&net);
        let expected = loopback_wall(&tag);
        assert_eq!(ruleset(&container_table(&net, &Facts::default())), expected);
        // `transparent` outside mode proxy changes nothing (and is refused
        // at load time anyway).
        for mode in [NetworkMode::None, NetworkMode::Allowlist, NetworkMode::Open] {
            let plain = section(mode, &["203.0.113.5:80"], false);
            let mut flagged = plain.clone();
            flagged.transparent = true;
            assert_eq!(
                container_table(&plain, &Facts::default()),
                container_table(&flagged, &Facts::default())
            );
            assert_eq!(policy_tag(&plain), policy_tag(&flagged));
        }
    }

    #[test]
    fn proxy_mode_transparent_golden() {
        let mut net = section(NetworkMode::Proxy, &[], false);
        net.hosts = vec![
            "api.example.com".into(),
            "*.github.com:8443".into(),
            "git.example:22".into(),
            "x.example:443".into(),
        ];
        net.transparent = true;
        let tag = policy_tag(&net);
        let expected = format!(
            "add table inet vibe_shim\n\
flush table inet vibe_shim\n\
table inet vibe_shim {{\n\
\tchain output {{\n\
\t\ttype filter hook output priority filter; policy drop;\n\
\t\tip daddr 127.0.0.11 drop\n\
\t\tmeta oiftype loopback accept comment \"{tag}\"\n\
\t\tip daddr 127.0.0.1 udp dport 3153 accept\n\
\t\tip daddr 127.0.0.1 tcp dport 3153 accept\n\
\t\tip daddr 127.0.0.1 tcp dport 3129 accept\n\
\t\tip6 daddr ::1 udp dport 3153 accept\n\
\t\tip6 daddr ::1 tcp dport 3153 accept\n\
\t\tip6 daddr ::1 tcp dport 3129 accept\n\
\t\treject with icmpx admin-prohibited\n\
\t}}\n\
\tchain input {{\n\
\t\ttype filter hook input priority filter; policy drop;\n\
\t\tmeta iiftype loopback accept comment \"{tag}\"\n\
\t}}\n\
\tchain forward {{\n\
\t\ttype filter hook forward priority filter; policy drop;\n\
\t}}\n\
\tchain transparent {{\n\
\t\ttype nat hook output priority -150; policy accept;\n\
\t\tudp dport 53 redirect to :3153\n\
\t\ttcp dport 53 redirect to :3153\n\
\t\tip daddr != 127.0.0.0/8 ip daddr != 172.30.99.2 meta l4proto tcp redirect to :3129\n\
\t\tip6 daddr != ::1 ip6 daddr != fd42::2 meta l4proto tcp redirect to :3129\n\
\t}}\n\
}}\n"
        );
        // The container's own addresses, as the start check reads them.
        let facts = Facts {
            container_addrs: addrs(&["172.30.99.2", "fd42::2"]),
            ..Facts::default()
        };
        assert_eq!(ruleset(&container_table(&net, &facts)), expected);
        let mut off = net.clone();
        off.transparent = false;
        assert_ne!(policy_tag(&off), tag);
    }

    /// Nothing transparent egress adds lets a packet off loopback: every
    /// accept it adds is to a loopback address, and every nat rule
    /// redirects (to loopback, by definition of `redirect`).
    #[test]
    fn transparent_adds_nothing_off_loopback() {
        let mut net = section(NetworkMode::Proxy, &[], true);
        net.hosts = vec!["*.example.com:1-65535".into()];
        net.transparent = true;
        let facts = Facts {
            container_addrs: addrs(&["172.30.99.2", "fd42::2"]),
            preview_sources: addrs(&["172.30.99.1"]),
        };
        let table = container_table(&net, &facts);
        let mut plain = net.clone();
        plain.transparent = false;
        let before = container_table(&plain, &facts);
        // The tags differ (they name the policy); the rules are compared
        // without them.
        let untagged = |t: &Table| -> Vec<Chain> {
            let mut chains = t.chains.clone();
            for r in chains.iter_mut().flat_map(|c| c.rules.iter_mut()) {
                r.comment = None;
            }
            chains
        };
        let (table, before) = (untagged(&table), untagged(&before));
        let output = &table[0].rules;
        let old = &before[0].rules;
        for rule in output.iter().filter(|r| !old.contains(r)) {
            assert_eq!(rule.verdict, Verdict::Accept);
            assert!(
                rule.matches.iter().any(|m| matches!(m,
                    Match::Daddr(n) if n.addr().is_loopback() && n.prefix_len() == n.max_prefix_len())),
                "{rule}"
            );
        }
        assert_eq!(table[1..3], before[1..3]);
        assert_eq!(before.len(), 3);
        let nat = &table[3];
        assert_eq!((nat.kind, nat.policy), (ChainType::Nat, Verdict::Accept));
        assert!(nat
            .rules
            .iter()
            .all(|r| matches!(r.verdict, Verdict::Redirect(_))));
        // With dns = true (proxy mode ignores it) nothing else changes.
        assert_eq!(output.last(), old.last());
    }

    /// Every new TCP connection the container opens goes to the listener
    /// (which refuses, and logs, an address its answerer did not give),
    /// whatever the address and port, except to loopback and to the
    /// container's own addresses; one rule per family, each of them ending
    /// in the redirect.
    #[test]
    fn transparent_redirects_all_tcp_but_loopback_and_own_addresses() {
        let mut net = section(NetworkMode::Proxy, &[], false);
        net.hosts = vec!["api.example.com".into()];
        net.transparent = true;
        let facts = Facts {
            container_addrs: addrs(&["fd42::2", "172.30.99.2", "172.30.99.3", "172.30.99.2"]),
            ..Facts::default()
        };
        let nat = transparent_chain(&net, &facts).unwrap();
        let catch_all: Vec<String> = nat.rules[2..].iter().map(Rule::to_string).collect();
        assert_eq!(
            catch_all,
            [
                "ip daddr != 127.0.0.0/8 ip daddr != 172.30.99.2 ip daddr != 172.30.99.3 meta l4proto tcp redirect to :3129",
                "ip6 daddr != ::1 ip6 daddr != fd42::2 meta l4proto tcp redirect to :3129",
            ]
        );
        // No port in them: an IP literal on any port, and a fake address
        // on a port no entry names, reach the listener's refusal.
        for rule in &nat.rules[2..] {
            assert!(!rule
                .matches
                .iter()
                .any(|m| matches!(m, Match::Transport { ports: Some(_), .. })));
            assert_eq!(rule.verdict, Verdict::Redirect(TRANSPARENT_PORT));
        }
        // No addresses known yet (Docker 28 before start): loopback only.
        let early = transparent_chain(&net, &Facts::default()).unwrap();
        assert_eq!(
            early.rules[2].to_string(),
            "ip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :3129"
        );
        // The preview sources are no exception: a connection the
        // container opens to the host side is an IP literal like any.
        let with_preview = Facts {
            preview_sources: addrs(&["172.30.99.1"]),
            ..facts.clone()
        };
        assert_eq!(transparent_chain(&net, &with_preview), Some(nat));
    }

    /// Before start, the loopback-only modes let out only the engine's
    /// neighbour advertisement, last before the final reject; the gate start
    /// adds in front of it gives those packets the final reject's verdict,
    /// so the chain then decides every packet as the strict table does.
    #[test]
    fn creating_table_adds_only_the_advertisement_until_start() {
        for mode in [NetworkMode::None, NetworkMode::Proxy] {
            let mut net = section(mode, &[], false);
            let mut facts = Facts::default();
            if mode == NetworkMode::Proxy {
                // With IPv6 previews an earlier rule accepts advertisements
                // on its own: the gate must not reach it.
                net.preview_ports = vec!["8000".parse().unwrap()];
                net.transparent = true;
                facts.preview_sources = addrs(&["fd00::1", "10.0.0.1"]);
            }
            let strict = container_table(&net, &facts);
            let creating = creating_table(&net, &facts);
            let text = ruleset(&creating);
            let want = format!(
                "\t\ticmpv6 type nd-neighbor-advert accept comment \"{UNTIL_START_TAG}\"\n\
\t\treject with icmpx admin-prohibited\n"
            );
            assert!(text.contains(&want), "{text}");
            assert_eq!(
                ruleset(&strict).contains("nd-neighbor-advert"),
                mode == NetworkMode::Proxy
            );
            // Only that one output rule differs.
            let mut relaxed = creating.clone();
            relaxed.chains[0]
                .rules
                .retain(|r| r.comment.as_deref() != Some(UNTIL_START_TAG));
            assert_eq!(relaxed, strict);
            // The gate goes right in front of it; after the two, only the
            // final reject, whose verdict the gate gives.
            let output = &creating.chains[0].rules;
            let at = output
                .iter()
                .position(|r| r.comment.as_deref() == Some(UNTIL_START_TAG))
                .unwrap();
            assert_eq!(at, output.len() - 2);
            let gate = start_gate();
            assert_eq!(gate.matches, output[at].matches);
            assert_eq!(gate.verdict, output[at + 1].verdict);
            assert!(output[at + 1].matches.is_empty());
            assert_eq!(creating.chains[0].name(), OUTPUT_CHAIN);
        }
        for mode in [NetworkMode::Allowlist, NetworkMode::Open] {
            let net = section(mode, &["203.0.113.5"], false);
            assert_eq!(
                creating_table(&net, &Facts::default()),
                container_table(&net, &Facts::default())
            );
        }
    }

    /// Mode none lets nothing but loopback in or out: not even replies.
    #[test]
    fn none_mode_has_no_conntrack_accept() {
        let mut net = section(NetworkMode::None, &[], true);
        net.resolvers = addrs(&["192.0.2.53"]);
        let facts = Facts {
            container_addrs: addrs(&["172.30.99.2"]),
            ..Facts::default()
        };
        let text = ruleset(&container_table(&net, &facts));
        assert!(!text.contains("ct state"), "{text}");
        assert!(!text.contains("192.0.2.53"), "{text}");
        assert!(!text.contains("172.30.99.2"), "{text}");
    }

    #[test]
    fn input_chain_by_mode_and_inbound() {
        let none = section(NetworkMode::None, &[], false);
        assert_eq!(input_rules(&none, &Facts::default()).len(), 1);
        for mode in [NetworkMode::Allowlist, NetworkMode::Open] {
            let mut net = section(mode, &["203.0.113.5"], false);
            let tag = policy_tag(&net);
            let closed = vec![
                format!("meta iiftype loopback accept comment \"{tag}\""),
                CT.to_string(),
                "icmpv6 type nd-neighbor-solicit accept".to_string(),
                "icmpv6 type nd-neighbor-advert accept".to_string(),
            ];
            assert_eq!(texts(&input_rules(&net, &Facts::default())), closed);
            net.inbound = true;
            let rules = texts(&input_rules(&net, &Facts::default()));
            assert_eq!(rules.last().map(String::as_str), Some("accept"));
            assert_eq!(rules.len(), closed.len() + 1);
        }
    }

    fn preview(ports: &[&str]) -> NetworkSection {
        let mut net = section(NetworkMode::Proxy, &[], false);
        net.hosts = vec!["api.example".into()];
        net.preview_ports = ports.iter().map(|p| p.parse().unwrap()).collect();
        net
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    /// Proxy mode today: a published port answers nothing, since nothing
    /// but loopback comes in; the policy's preview ports let in new TCP
    /// connections from the engine's host side only, and let out only
    /// their established replies.
    #[test]
    fn proxy_preview_golden() {
        let none_set = preview(&[]);
        let facts = Facts {
            preview_sources: addrs(&["172.30.93.1"]),
            ..Facts::default()
        };
        assert_eq!(input_rules(&none_set, &facts).len(), 1, "no key, no rule");
        let net = preview(&["8000", "3000-3999"]);
        let tag = policy_tag(&net);
        let text = ruleset(&container_table(&net, &facts));
        let expected = format!(
            "add table inet vibe_shim\n\
flush table inet vibe_shim\n\
table inet vibe_shim {{\n\
\tchain output {{\n\
\t\ttype filter hook output priority filter; policy drop;\n\
\t\tip daddr 127.0.0.11 drop\n\
\t\tmeta oiftype loopback accept comment \"{tag}\"\n\
\t\tip daddr 172.30.93.1 tcp sport 8000 ct state established accept\n\
\t\tip daddr 172.30.93.1 tcp sport 3000-3999 ct state established accept\n\
\t\treject with icmpx admin-prohibited\n\
\t}}\n\
\tchain input {{\n\
\t\ttype filter hook input priority filter; policy drop;\n\
\t\tmeta iiftype loopback accept comment \"{tag}\"\n\
\t\tip saddr 172.30.93.1 tcp dport 8000 accept\n\
\t\tip saddr 172.30.93.1 tcp dport 3000-3999 accept\n\
\t}}\n\
\tchain forward {{\n\
\t\ttype filter hook forward priority filter; policy drop;\n\
\t}}\n\
}}\n"
        );
        assert_eq!(text, expected);
        // Not a single conntrack accept that could carry a connection the
        // container opened, nor any udp.
        assert!(!text.contains("related"), "{text}");
        assert!(!text.contains("udp"), "{text}");
    }

    /// No host side known (Docker 28 before start, a network without a
    /// bridge of the host's): the wall is mode none's, byte for byte.
    #[test]
    fn preview_without_a_host_side_is_the_plain_wall() {
        let net = preview(&["8000"]);
        let mut plain = net.clone();
        plain.preview_ports.clear();
        let ours = ruleset(&container_table(&net, &Facts::default()));
        let theirs = ruleset(&container_table(&plain, &Facts::default()));
        assert_eq!(
            ours.replace(&policy_tag(&net), "TAG"),
            theirs.replace(&policy_tag(&plain), "TAG")
        );
    }

    /// IPv6 needs neighbour discovery to answer the host side; it comes
    /// only with an IPv6 source, before the final reject.
    #[test]
    fn preview_v6_adds_neighbour_discovery() {
        let net = preview(&["8000"]);
        let facts = Facts {
            preview_sources: addrs(&["fd42::1", "172.30.93.1"]),
            ..Facts::default()
        };
        let out = texts(&output_rules(&net, &facts));
        let inp = texts(&input_rules(&net, &facts));
        for rules in [&out, &inp] {
            assert!(rules
                .iter()
                .any(|r| r == "icmpv6 type nd-neighbor-solicit accept"));
            assert!(rules
                .iter()
                .any(|r| r == "icmpv6 type nd-neighbor-advert accept"));
        }
        assert!(inp.contains(&"ip6 saddr fd42::1 tcp dport 8000 accept".to_string()));
        assert!(out
            .contains(&"ip6 daddr fd42::1 tcp sport 8000 ct state established accept".to_string()));
        assert_eq!(
            out.last().map(String::as_str),
            Some("reject with icmpx admin-prohibited")
        );
        let v4_only = Facts {
            preview_sources: addrs(&["172.30.93.1"]),
            ..Facts::default()
        };
        assert!(!ruleset(&container_table(&net, &v4_only)).contains("icmpv6"));
    }

    /// Only mode proxy: none keeps nothing but loopback whatever the facts.
    #[test]
    fn preview_rules_only_in_proxy_mode() {
        let mut net = preview(&["8000"]);
        net.mode = NetworkMode::None;
        let facts = Facts {
            preview_sources: addrs(&["172.30.93.1"]),
            ..Facts::default()
        };
        assert!(!ruleset(&container_table(&net, &facts)).contains("172.30.93.1"));
    }

    #[test]
    fn preview_sources_are_host_bridge_addresses_on_the_container_subnet() {
        let container = nets(&["127.0.0.1/8", "172.30.93.2/24", "fd42::2/64", "fe80::2/64"]);
        let bridges = addrs(&[
            "fe80::1",     // link-local: never
            "fd42::1",     // on the container's /64
            "172.30.93.1", // the gateway
            "172.30.94.1", // another bridge's subnet
            "172.30.93.2", // the container's own address
            "127.0.0.1",   // loopback: never
            "172.30.93.1", // listed twice
        ]);
        assert_eq!(
            preview_sources(&container, &bridges),
            addrs(&["172.30.93.1", "fd42::1"])
        );
        assert!(preview_sources(&[], &bridges).is_empty());
        assert!(preview_sources(&container, &[]).is_empty());
    }

    #[test]
    fn allowlist_golden_v4_v6_ports_ranges_udp_dns() {
        let mut net = section(
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
        net.resolvers = addrs(&[
            "127.0.0.11",
            "2001:db8::53",
            "192.0.2.53",
            "192.0.2.54",
            "192.0.2.53",
        ]);
        let facts = Facts {
            container_addrs: addrs(&["203.0.113.9"]),
            ..Facts::default()
        };
        let mut expected = vec![lo(&net), CT.to_string()];
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
        assert_eq!(texts(&output_rules(&net, &facts)), expected);
    }

    /// DNS goes to the admin's resolvers only: nothing in the rules comes
    /// from the container (its resolv.conf is not even an input).
    #[test]
    fn dns_without_resolvers_opens_no_port_53() {
        let net = section(NetworkMode::Allowlist, &["203.0.113.5:80"], true);
        let text = ruleset(&container_table(&net, &Facts::default()));
        assert!(!text.contains("dport 53"), "{text}");
        assert!(
            !text.contains("127.0.0.11"),
            "embedded DNS stays open: {text}"
        );
    }

    #[test]
    fn allowlist_without_dns_drops_embedded_dns_and_has_no_port_53() {
        let net = section(NetworkMode::Allowlist, &["203.0.113.5:80"], false);
        let text = ruleset(&container_table(&net, &Facts::default()));
        assert!(text.contains("ip daddr 127.0.0.11 drop"));
        assert!(!text.contains("dport 53"));
    }

    #[test]
    fn open_mode_golden() {
        let net = section(NetworkMode::Open, &[], false);
        let facts = Facts {
            container_addrs: addrs(&["fd42::2", "172.30.99.2", "172.30.99.2"]),
            ..Facts::default()
        };
        let mut expected = vec![
            "ip daddr 127.0.0.11 drop".to_string(),
            lo(&net),
            CT.to_string(),
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
        ] {
            expected.push(format!("ip6 daddr {dest} drop"));
        }
        expected.push("ip saddr 172.30.99.2 accept".into());
        expected.push("ip6 saddr fd42::2 accept".into());
        expected.push("reject with icmpx admin-prohibited".into());
        assert_eq!(texts(&output_rules(&net, &facts)), expected);
    }

    /// No egress before the container's addresses are known (Docker 28
    /// configures the network after create): the start check adds them.
    #[test]
    fn open_mode_without_addresses_lets_nothing_out() {
        let net = section(NetworkMode::Open, &[], false);
        let rules = texts(&output_rules(&net, &Facts::default()));
        assert_eq!(
            rules.last().map(String::as_str),
            Some("reject with icmpx admin-prohibited")
        );
        assert!(!rules.iter().any(|r| r == "accept"), "{rules:?}");
    }

    #[test]
    fn open_mode_keeps_documentation_ranges_reachable() {
        let net = section(NetworkMode::Open, &[], false);
        let text = ruleset(&container_table(&net, &Facts::default()));
        for doc in ["192.0.2.", "198.51.100.", "203.0.113.", "2001:db8"] {
            assert!(!text.contains(doc), "{doc} must stay reachable:\n{text}");
        }
    }

    #[test]
    fn open_mode_with_dns_accepts_private_resolver_before_the_private_drop() {
        let mut net = section(NetworkMode::Open, &[], true);
        net.resolvers = addrs(&["10.0.0.2"]);
        let rules = texts(&output_rules(&net, &Facts::default()));
        let dns = rules.iter().position(|r| r.contains("10.0.0.2")).unwrap();
        let drop = rules.iter().position(|r| r.contains("10.0.0.0/8")).unwrap();
        assert!(dns < drop);
        assert!(!rules.iter().any(|r| r.contains("127.0.0.11")));
    }

    #[test]
    fn host_table_golden() {
        let mut net = section(NetworkMode::Open, &[], true);
        net.resolvers = addrs(&["198.51.100.53"]);
        let table = host_table("vibe_shim_abc", &net, &addrs(&["fd42::2", "172.30.99.2"]));
        let expected = "add table inet vibe_shim_abc\n\
flush table inet vibe_shim_abc\n\
table inet vibe_shim_abc {\n\
\tchain input {\n\
\t\ttype filter hook input priority filter; policy accept;\n\
\t\tip saddr 172.30.99.2 ct state established,related accept\n\
\t\tip saddr 172.30.99.2 ip daddr 198.51.100.53 udp dport 53 accept\n\
\t\tip saddr 172.30.99.2 ip daddr 198.51.100.53 tcp dport 53 accept\n\
\t\tip saddr 172.30.99.2 drop\n\
\t\tip6 saddr fd42::2 icmpv6 type nd-router-solicit accept\n\
\t\tip6 saddr fd42::2 icmpv6 type nd-neighbor-solicit accept\n\
\t\tip6 saddr fd42::2 icmpv6 type nd-neighbor-advert accept\n\
\t\tip6 saddr fd42::2 ct state established,related accept\n\
\t\tip6 saddr fd42::2 drop\n\
\t}\n\
}\n";
        assert_eq!(ruleset(&table), expected);
    }

    #[test]
    fn host_table_names() {
        assert_eq!(host_table_name("abc-1.2_x").unwrap(), "vibe_shim_abc-1.2_x");
        for bad in ["", "a/b", "a b", "a+b", "a\"b", &"x".repeat(201)] {
            assert!(host_table_name(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn tag_depends_on_the_policy_only() {
        let a = section(NetworkMode::Allowlist, &["203.0.113.5:80"], false);
        let b = section(NetworkMode::Allowlist, &["203.0.113.5:81"], false);
        let c = section(NetworkMode::Allowlist, &["203.0.113.5:80"], true);
        let mut d = a.clone();
        d.inbound = true;
        let mut e = c.clone();
        e.resolvers = addrs(&["192.0.2.53"]);
        assert_eq!(policy_tag(&a), policy_tag(&a.clone()));
        for other in [&b, &c, &d, &e] {
            assert_ne!(policy_tag(&a), policy_tag(other));
        }
        assert_ne!(policy_tag(&c), policy_tag(&e));
        assert!(policy_tag(&a).starts_with("vibe-shim policy "));
        assert_eq!(policy_tag(&a).len(), "vibe-shim policy ".len() + 16);
    }

    #[test]
    fn batch_replaces_atomically() {
        let text = ruleset(&container_table(
            &NetworkSection::default(),
            &Facts::default(),
        ));
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
