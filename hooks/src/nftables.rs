//! The `inet vibe_shim` table over netlink, in process: the batch that
//! installs [`vibe_policy::network::ruleset`]'s rules, and a read-back of the table for the
//! start-time check. Each rule is encoded the way `nft` 1.0 encodes the same
//! text (see `nft --debug=netlink`), so `nft list` prints both alike.
//! Numbers are from the kernel's uapi header linux/netfilter/nf_tables.h.

use std::net::IpAddr;

use ipnet::IpNet;
use nix::errno::Errno;
use vibe_policy::config::Protocol;
use vibe_policy::network::ruleset::{
    Hook, Match, Rule, Table, Verdict, NAT_CHAIN, NAT_PRIORITY, TABLE_NAME,
};

use crate::nfnetlink::{
    attr_str, attr_u32_be, attribute, attributes, MessageWriter, NetfilterSocket, NetlinkError,
    Reply, NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_DUMP,
};

const NFPROTO_INET: u8 = 1;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_GETTABLE: u16 = 1;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_GETCHAIN: u16 = 4;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_GETRULE: u16 = 7;
const NFT_MSG_DELRULE: u16 = 8;
const NFT_MSG_GETSET: u16 = 10;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_POSITION: u16 = 6;
const NFTA_RULE_USERDATA: u16 = 7;
const NFTA_SET_TABLE: u16 = 1;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;

/// Netfilter hook numbers (NF_INET_*).
pub const HOOK_LOCAL_IN: u32 = 1;
pub const HOOK_FORWARD: u32 = 2;
pub const HOOK_LOCAL_OUT: u32 = 3;
/// Verdict codes (NF_DROP, NF_ACCEPT).
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;

const REG_VERDICT: u32 = 0;
const REG_1: u32 = 1;

const PAYLOAD_NETWORK: u32 = 1;
const PAYLOAD_TRANSPORT: u32 = 2;

const CMP_EQ: u32 = 0;
const CMP_NEQ: u32 = 1;
const CMP_LTE: u32 = 3;
const CMP_GTE: u32 = 5;

const META_IIFTYPE: u32 = 8;
const META_OIFTYPE: u32 = 9;
const META_NFPROTO: u32 = 15;
const META_L4PROTO: u32 = 16;
const CT_STATE: u32 = 0;
const CT_STATE_ESTABLISHED: u32 = 0x2;
const CT_STATE_ESTABLISHED_RELATED: u32 = 0x2 | 0x4;
const ARPHRD_LOOPBACK: u16 = 772;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_ICMPV6: u8 = 58;
const REJECT_ICMPX_UNREACH: u32 = 2;
const REJECT_ICMPX_ADMIN_PROHIBITED: u8 = 3;
/// nf_nat.h: the redirect names a port.
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 0x2;
/// libnftnl's user-data TLV type for a rule comment.
const UDATA_RULE_COMMENT: u8 = 0;

/// The chains the container's table holds: (name, hook).
pub const CHAINS: [(&str, u32); 3] = [
    ("output", HOOK_LOCAL_OUT),
    ("input", HOOK_LOCAL_IN),
    ("forward", HOOK_FORWARD),
];

fn hook_number(hook: Hook) -> u32 {
    match hook {
        Hook::Input => HOOK_LOCAL_IN,
        Hook::Forward => HOOK_FORWARD,
        Hook::Output => HOOK_LOCAL_OUT,
    }
}

/// Installs `table` in one transaction: add the table, flush its rules,
/// (re)define its chains, append the rules. Runs in the calling thread's
/// network namespace.
pub fn apply(table: &Table) -> Result<(), NetlinkError> {
    let batch = encode_batch(table, first_seq());
    send_batch(&batch, Release::Detached)
}

/// Adds `rule` to chain `chain` of table `inet TABLE`, in front of the rule
/// whose handle is `before`. The transaction deletes nothing, so the kernel
/// has nothing to free after an RCU grace period when the socket closes.
pub fn insert_before(
    table: &str,
    chain: &str,
    before: u64,
    rule: &Rule,
) -> Result<(), NetlinkError> {
    let mut w = MessageWriter::new(first_seq());
    w.begin_batch();
    // Without NLM_F_APPEND a position means "in front of".
    w.begin(
        NFT_MSG_NEWRULE,
        NLM_F_CREATE | NLM_F_ACK,
        NFPROTO_INET,
        &format!("insert rule \"{rule}\""),
    );
    w.string(NFTA_RULE_TABLE, table);
    w.string(NFTA_RULE_CHAIN, chain);
    w.bytes(NFTA_RULE_POSITION, &before.to_be_bytes());
    encode_rule(&mut w, rule);
    w.end();
    w.end_batch();
    send_batch(&w, Release::Inline)
}

/// Deletes table `inet NAME` with everything in it; a table that is not
/// there is not an error.
pub fn delete_table(name: &str) -> Result<(), NetlinkError> {
    let mut w = MessageWriter::new(first_seq());
    w.begin_batch();
    w.begin(
        NFT_MSG_DELTABLE,
        NLM_F_ACK,
        NFPROTO_INET,
        &format!("delete table inet {name}"),
    );
    w.string(NFTA_TABLE_NAME, name);
    w.end();
    w.end_batch();
    match send_batch(&w, Release::Detached) {
        Err(NetlinkError::Refused {
            errno: Errno::ENOENT,
            ..
        }) => Ok(()),
        other => other,
    }
}

/// How a committed batch's socket is closed: a batch that deleted
/// something makes the close wait for an RCU grace period (the kernel
/// frees what it deleted first), which a detached child takes instead.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Release {
    Detached,
    Inline,
}

fn send_batch(batch: &MessageWriter, release: Release) -> Result<(), NetlinkError> {
    let mut socket = NetfilterSocket::open()?;
    socket.send(batch)?;
    let described = batch.described();
    // Every message but the batch markers asks for an ack.
    let mut pending: Vec<u32> = described[1..described.len() - 1]
        .iter()
        .map(|(seq, _)| *seq)
        .collect();
    socket.receive_until(|reply| match *reply {
        Reply::Ack { seq, errno } if described.iter().any(|(s, _)| *s == seq) => {
            if errno != 0 {
                return Err(refused(described, seq, errno));
            }
            pending.retain(|s| *s != seq);
            Ok(pending.is_empty())
        }
        _ => Ok(false),
    })?;
    match release {
        Release::Detached => socket.release_detached(),
        Release::Inline => drop(socket),
    }
    Ok(())
}

fn refused(described: &[(u32, String)], seq: u32, errno: i32) -> NetlinkError {
    let what = described
        .iter()
        .find(|(s, _)| *s == seq)
        .map_or_else(|| format!("message {seq}"), |(_, w)| w.clone());
    NetlinkError::Refused {
        what,
        errno: Errno::from_raw(-errno),
    }
}

/// Distinct sequence numbers per process, so stale answers are not ours.
fn first_seq() -> u32 {
    std::process::id().wrapping_mul(1000)
}

/// The whole transaction as netlink messages.
pub fn encode_batch(table: &Table, first_seq: u32) -> MessageWriter {
    let name = table.name.as_str();
    let mut w = MessageWriter::new(first_seq);
    w.begin_batch();
    w.begin(
        NFT_MSG_NEWTABLE,
        NLM_F_CREATE | NLM_F_ACK,
        NFPROTO_INET,
        &format!("add table inet {name}"),
    );
    w.string(NFTA_TABLE_NAME, name);
    w.end();
    // No chain attribute: every rule of every chain in the table goes.
    w.begin(
        NFT_MSG_DELRULE,
        NLM_F_ACK,
        NFPROTO_INET,
        &format!("flush table inet {name}"),
    );
    w.string(NFTA_RULE_TABLE, name);
    w.end();
    for chain in &table.chains {
        let chain_name = chain.name();
        w.begin(
            NFT_MSG_NEWCHAIN,
            NLM_F_CREATE | NLM_F_ACK,
            NFPROTO_INET,
            &format!("chain {chain_name}"),
        );
        w.string(NFTA_CHAIN_TABLE, name);
        w.string(NFTA_CHAIN_NAME, chain_name);
        let nest = w.nest_start(NFTA_CHAIN_HOOK);
        w.u32_be(NFTA_HOOK_HOOKNUM, hook_number(chain.hook));
        // "priority filter" (0), or the nat chain's.
        w.u32_be(NFTA_HOOK_PRIORITY, chain.priority() as u32);
        w.nest_end(nest);
        let policy = if chain.policy == Verdict::Accept {
            NF_ACCEPT
        } else {
            NF_DROP
        };
        w.u32_be(NFTA_CHAIN_POLICY, policy);
        w.string(NFTA_CHAIN_TYPE, chain.type_name());
        w.end();
    }
    for chain in &table.chains {
        for rule in &chain.rules {
            w.begin(
                NFT_MSG_NEWRULE,
                NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK,
                NFPROTO_INET,
                &format!("rule \"{rule}\""),
            );
            w.string(NFTA_RULE_TABLE, name);
            w.string(NFTA_RULE_CHAIN, chain.name());
            encode_rule(&mut w, rule);
            w.end();
        }
    }
    w.end_batch();
    w
}

/// A rule's expressions and comment, inside its NEWRULE message.
fn encode_rule(w: &mut MessageWriter, rule: &Rule) {
    let list = w.nest_start(NFTA_RULE_EXPRESSIONS);
    // nft loads the family once per rule; a second match of the same
    // family does not repeat it (so both list alike).
    let mut family = None;
    for m in &rule.matches {
        encode_match(w, m, &mut family);
    }
    encode_verdict(w, rule.verdict);
    w.nest_end(list);
    if let Some(comment) = &rule.comment {
        w.bytes(NFTA_RULE_USERDATA, &comment_udata(comment));
    }
}

/// A comment as libnftnl stores it: type, length, NUL-terminated text. The
/// length is one byte; our comments are short fixed strings.
fn comment_udata(comment: &str) -> Vec<u8> {
    let text = &comment.as_bytes()[..comment.len().min(254)];
    let mut out = vec![UDATA_RULE_COMMENT, (text.len() + 1) as u8];
    out.extend_from_slice(text);
    out.push(0);
    out
}

/// `meta nfproto FAMILY`, unless the rule already established it.
fn nfproto(w: &mut MessageWriter, family: u8, known: &mut Option<u8>) {
    if *known != Some(family) {
        meta_cmp(w, META_NFPROTO, &[family]);
        *known = Some(family);
    }
}

fn encode_match(w: &mut MessageWriter, m: &Match, known: &mut Option<u8>) {
    match *m {
        Match::Saddr(net) | Match::Daddr(net) | Match::DaddrNot(net) => {
            let source = matches!(m, Match::Saddr(_));
            let op = if matches!(m, Match::DaddrNot(_)) {
                CMP_NEQ
            } else {
                CMP_EQ
            };
            let (family, offset, addr) = match net {
                IpNet::V4(n) => (
                    NFPROTO_IPV4,
                    if source { 12 } else { 16 },
                    n.addr().octets().to_vec(),
                ),
                IpNet::V6(n) => (
                    NFPROTO_IPV6,
                    if source { 8 } else { 24 },
                    n.addr().octets().to_vec(),
                ),
            };
            nfproto(w, family, known);
            let prefix = usize::from(net.prefix_len());
            if prefix > 0 && prefix % 8 == 0 {
                // Whole bytes: load just those, as nft does.
                payload(w, PAYLOAD_NETWORK, offset, prefix / 8);
                cmp(w, op, &addr[..prefix / 8]);
            } else {
                payload(w, PAYLOAD_NETWORK, offset, addr.len());
                let mask = prefix_mask(prefix, addr.len());
                let network: Vec<u8> = addr.iter().zip(&mask).map(|(a, m)| a & m).collect();
                bitwise(w, &mask);
                cmp(w, op, &network);
            }
        }
        Match::Transport { protocol, ports } => {
            meta_cmp(w, META_L4PROTO, &[ip_protocol(protocol)]);
            if let Some(ports) = ports {
                port_range(w, 2, ports);
            }
        }
        Match::SourcePorts { protocol, ports } => {
            meta_cmp(w, META_L4PROTO, &[ip_protocol(protocol)]);
            port_range(w, 0, ports);
        }
        Match::Icmpv6Type(t) => {
            nfproto(w, NFPROTO_IPV6, known);
            meta_cmp(w, META_L4PROTO, &[IPPROTO_ICMPV6]);
            payload(w, PAYLOAD_TRANSPORT, 0, 1);
            cmp(w, CMP_EQ, &[t]);
        }
        Match::OifLoopback => meta_cmp(w, META_OIFTYPE, &ARPHRD_LOOPBACK.to_ne_bytes()),
        Match::IifLoopback => meta_cmp(w, META_IIFTYPE, &ARPHRD_LOOPBACK.to_ne_bytes()),
        Match::EstablishedOrRelated => ct_state(w, CT_STATE_ESTABLISHED_RELATED),
        Match::Established => ct_state(w, CT_STATE_ESTABLISHED),
    }
}

fn ip_protocol(protocol: Protocol) -> u8 {
    match protocol {
        Protocol::Tcp => IPPROTO_TCP,
        Protocol::Udp => IPPROTO_UDP,
    }
}

/// The transport header's port at `offset` (0 source, 2 destination) is
/// `lo`, or within `lo..=hi`.
fn port_range(w: &mut MessageWriter, offset: u32, (lo, hi): (u16, u16)) {
    payload(w, PAYLOAD_TRANSPORT, offset, 2);
    if lo == hi {
        cmp(w, CMP_EQ, &lo.to_be_bytes());
    } else {
        cmp(w, CMP_GTE, &lo.to_be_bytes());
        cmp(w, CMP_LTE, &hi.to_be_bytes());
    }
}

/// `ct state` has one of the `states` bits.
fn ct_state(w: &mut MessageWriter, states: u32) {
    expr(w, "ct", |w| {
        w.u32_be(1, REG_1); // NFTA_CT_DREG
        w.u32_be(2, CT_STATE); // NFTA_CT_KEY
    });
    bitwise(w, &states.to_ne_bytes());
    cmp(w, CMP_NEQ, &0u32.to_ne_bytes());
}

fn encode_verdict(w: &mut MessageWriter, verdict: Verdict) {
    let code = match verdict {
        Verdict::Accept => NF_ACCEPT,
        Verdict::Drop => NF_DROP,
        Verdict::RejectAdminProhibited => {
            expr(w, "reject", |w| {
                w.u32_be(1, REJECT_ICMPX_UNREACH); // NFTA_REJECT_TYPE
                w.bytes(2, &[REJECT_ICMPX_ADMIN_PROHIBITED]); // NFTA_REJECT_ICMP_CODE
            });
            return;
        }
        Verdict::Redirect(port) => {
            // `immediate reg 1 PORT; redir proto_min reg 1 flags 0x2`, as
            // nft encodes `redirect to :PORT`.
            expr(w, "immediate", |w| {
                w.u32_be(1, REG_1); // NFTA_IMMEDIATE_DREG
                data_value(w, 2, &port.to_be_bytes()); // NFTA_IMMEDIATE_DATA
            });
            expr(w, "redir", |w| {
                w.u32_be(1, REG_1); // NFTA_REDIR_REG_PROTO_MIN
                w.u32_be(3, NF_NAT_RANGE_PROTO_SPECIFIED); // NFTA_REDIR_FLAGS
            });
            return;
        }
    };
    expr(w, "immediate", |w| {
        w.u32_be(1, REG_VERDICT); // NFTA_IMMEDIATE_DREG
        let data = w.nest_start(2); // NFTA_IMMEDIATE_DATA
        let verdict = w.nest_start(NFTA_DATA_VERDICT);
        w.u32_be(NFTA_VERDICT_CODE, code);
        w.nest_end(verdict);
        w.nest_end(data);
    });
}

fn expr(w: &mut MessageWriter, name: &str, body: impl FnOnce(&mut MessageWriter)) {
    let elem = w.nest_start(NFTA_LIST_ELEM);
    w.string(NFTA_EXPR_NAME, name);
    let data = w.nest_start(NFTA_EXPR_DATA);
    body(w);
    w.nest_end(data);
    w.nest_end(elem);
}

/// `meta load KEY => reg 1; cmp eq reg 1 VALUE`.
fn meta_cmp(w: &mut MessageWriter, key: u32, value: &[u8]) {
    expr(w, "meta", |w| {
        w.u32_be(2, key); // NFTA_META_KEY
        w.u32_be(1, REG_1); // NFTA_META_DREG
    });
    cmp(w, CMP_EQ, value);
}

fn payload(w: &mut MessageWriter, base: u32, offset: u32, len: usize) {
    expr(w, "payload", |w| {
        w.u32_be(1, REG_1); // NFTA_PAYLOAD_DREG
        w.u32_be(2, base); // NFTA_PAYLOAD_BASE
        w.u32_be(3, offset); // NFTA_PAYLOAD_OFFSET
        w.u32_be(4, len as u32); // NFTA_PAYLOAD_LEN
    });
}

fn cmp(w: &mut MessageWriter, op: u32, value: &[u8]) {
    expr(w, "cmp", |w| {
        w.u32_be(1, REG_1); // NFTA_CMP_SREG
        w.u32_be(2, op); // NFTA_CMP_OP
        data_value(w, 3, value); // NFTA_CMP_DATA
    });
}

/// `reg 1 = (reg 1 & mask) ^ 0`.
fn bitwise(w: &mut MessageWriter, mask: &[u8]) {
    expr(w, "bitwise", |w| {
        w.u32_be(1, REG_1); // NFTA_BITWISE_SREG
        w.u32_be(2, REG_1); // NFTA_BITWISE_DREG
        w.u32_be(3, mask.len() as u32); // NFTA_BITWISE_LEN
        data_value(w, 4, mask); // NFTA_BITWISE_MASK
        data_value(w, 5, &vec![0; mask.len()]); // NFTA_BITWISE_XOR
    });
}

fn data_value(w: &mut MessageWriter, kind: u16, value: &[u8]) {
    let nest = w.nest_start(kind);
    w.bytes(NFTA_DATA_VALUE, value);
    w.nest_end(nest);
}

fn prefix_mask(prefix: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let bits = prefix.saturating_sub(i * 8).min(8);
            (0xff_u16 << (8 - bits)) as u8
        })
        .collect()
}

/// What the kernel holds for the table, as far as the start check needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableView {
    pub chains: Vec<ChainView>,
    /// Sets of any kind in the table (the hook never makes one).
    pub sets: usize,
    pub rules: Vec<RuleView>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainView {
    pub name: String,
    /// (hook number, priority) of a base chain.
    pub hook: Option<(u32, i32)>,
    pub policy: Option<u32>,
    pub kind: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleView {
    pub chain: String,
    /// The kernel's handle, for adding a rule next to this one.
    pub handle: u64,
    pub comment: Option<String>,
    pub exprs: Vec<ExprView>,
}

/// The expressions the start check reads; others keep only their name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExprView {
    Payload { base: u32, offset: u32, len: u32 },
    Cmp { op: u32, data: Vec<u8> },
    Verdict(u32),
    Other(String),
}

/// Reads `inet vibe_shim` from the calling thread's network namespace;
/// `Ok(None)` when there is no such table.
pub fn read_table() -> Result<Option<TableView>, NetlinkError> {
    read_table_named(TABLE_NAME)
}

/// Reads table `inet NAME` from the calling thread's network namespace.
pub fn read_table_named(name: &str) -> Result<Option<TableView>, NetlinkError> {
    let mut view = TableView::default();
    let found = dump_table(name, |object, attrs| match object {
        TableObject::Chain => view.chains.push(chain_view(attrs)),
        TableObject::Set => view.sets += 1,
        TableObject::Rule => view.rules.push(rule_view(attrs)),
    })?;
    Ok(found.then_some(view))
}

/// The kernel's own bytes of table `inet NAME` (its chains, sets and rules,
/// in the order the kernel dumps them), hashed: `None` without the table.
pub fn table_digest_named(
    name: &str,
) -> Result<Option<vibe_policy::assurance::TableDigest>, NetlinkError> {
    let mut hash = crate::digest::Sha256::new();
    let (mut chains, mut rules) = (0, 0);
    let found = dump_table(name, |object, attrs| {
        let tag: &[u8] = match object {
            TableObject::Chain => {
                chains += 1;
                b"chain"
            }
            TableObject::Set => b"set",
            TableObject::Rule => {
                rules += 1;
                b"rule"
            }
        };
        hash.update(tag);
        hash.update(&(attrs.len() as u64).to_le_bytes());
        hash.update(attrs);
    })?;
    Ok(found.then(|| vibe_policy::assurance::TableDigest {
        sha256: hash.hex(),
        chains,
        rules,
    }))
}

/// What one dumped message of a table is.
#[derive(Clone, Copy)]
enum TableObject {
    Chain,
    Set,
    Rule,
}

/// Dumps table `inet NAME`'s chains, sets and rules to `each`; false when
/// there is no such table.
fn dump_table(name: &str, mut each: impl FnMut(TableObject, &[u8])) -> Result<bool, NetlinkError> {
    let mut socket = NetfilterSocket::open()?;
    let seq = first_seq();
    let mut exists = true;
    request(
        &mut socket,
        seq,
        NFT_MSG_GETTABLE,
        NLM_F_ACK,
        (NFTA_TABLE_NAME, name),
        |_| {},
    )
    .or_else(|e| match e {
        NetlinkError::Refused {
            errno: Errno::ENOENT,
            ..
        } => {
            exists = false;
            Ok(())
        }
        e => Err(e),
    })?;
    if !exists {
        return Ok(false);
    }
    let dumps = [
        (NFT_MSG_GETCHAIN, NFTA_CHAIN_TABLE, TableObject::Chain),
        (NFT_MSG_GETSET, NFTA_SET_TABLE, TableObject::Set),
        (NFT_MSG_GETRULE, NFTA_RULE_TABLE, TableObject::Rule),
    ];
    for (offset, (msg, table_attr, object)) in (1..).zip(dumps) {
        request(
            &mut socket,
            seq + offset,
            msg,
            NLM_F_DUMP,
            (table_attr, name),
            |attrs| {
                if attr_str(attrs, table_attr) == Some(name) {
                    each(object, attrs);
                }
            },
        )?;
    }
    Ok(true)
}

/// One get request naming our table; `each` sees every data message until
/// the ack (a single object) or the end of the dump.
fn request(
    socket: &mut NetfilterSocket,
    seq: u32,
    msg: u16,
    flags: u16,
    (table_attr, name): (u16, &str),
    mut each: impl FnMut(&[u8]),
) -> Result<(), NetlinkError> {
    let mut w = MessageWriter::new(seq);
    let what = format!("get {msg} of table inet {name}");
    w.begin(msg, flags, NFPROTO_INET, &what);
    w.string(table_attr, name);
    w.end();
    socket.send(&w)?;
    socket.receive_until(|reply| match *reply {
        Reply::Data { seq: s, attrs, .. } if s == seq => {
            each(attrs);
            Ok(false)
        }
        Reply::Ack { seq: s, errno } if s == seq => {
            if errno != 0 {
                return Err(refused(w.described(), seq, errno));
            }
            Ok(true)
        }
        Reply::Done { seq: s } if s == seq => Ok(true),
        _ => Ok(false),
    })
}

fn chain_view(attrs: &[u8]) -> ChainView {
    let hook = attribute(attrs, NFTA_CHAIN_HOOK).and_then(|h| {
        let num = attr_u32_be(h, NFTA_HOOK_HOOKNUM)?;
        let priority = attr_u32_be(h, NFTA_HOOK_PRIORITY)? as i32;
        Some((num, priority))
    });
    ChainView {
        name: attr_str(attrs, NFTA_CHAIN_NAME).unwrap_or("").to_string(),
        hook,
        policy: attr_u32_be(attrs, NFTA_CHAIN_POLICY),
        kind: attr_str(attrs, NFTA_CHAIN_TYPE).map(str::to_string),
    }
}

fn rule_view(attrs: &[u8]) -> RuleView {
    let comment = attribute(attrs, NFTA_RULE_USERDATA).and_then(udata_comment);
    let exprs = attribute(attrs, NFTA_RULE_EXPRESSIONS)
        .map(|list| {
            attributes(list)
                .filter(|(k, _)| *k == NFTA_LIST_ELEM)
                .map(|(_, e)| expr_view(e))
                .collect()
        })
        .unwrap_or_default();
    let handle = attribute(attrs, NFTA_RULE_HANDLE)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_be_bytes);
    RuleView {
        chain: attr_str(attrs, NFTA_RULE_CHAIN).unwrap_or("").to_string(),
        handle,
        comment,
        exprs,
    }
}

fn udata_comment(mut udata: &[u8]) -> Option<String> {
    while let [kind, len, rest @ ..] = udata {
        let len = usize::from(*len);
        let value = rest.get(..len)?;
        if *kind == UDATA_RULE_COMMENT {
            let text = value.strip_suffix(&[0]).unwrap_or(value);
            return Some(String::from_utf8_lossy(text).into_owned());
        }
        udata = &rest[len..];
    }
    None
}

fn expr_view(elem: &[u8]) -> ExprView {
    let name = attr_str(elem, NFTA_EXPR_NAME).unwrap_or("");
    let data = attribute(elem, NFTA_EXPR_DATA).unwrap_or(&[]);
    let parsed = match name {
        "payload" => (|| {
            Some(ExprView::Payload {
                base: attr_u32_be(data, 2)?,
                offset: attr_u32_be(data, 3)?,
                len: attr_u32_be(data, 4)?,
            })
        })(),
        "cmp" => (|| {
            Some(ExprView::Cmp {
                op: attr_u32_be(data, 2)?,
                data: attribute(attribute(data, 3)?, NFTA_DATA_VALUE)?.to_vec(),
            })
        })(),
        "immediate" => (|| {
            let verdict = attribute(attribute(data, 2)?, NFTA_DATA_VERDICT)?;
            Some(ExprView::Verdict(attr_u32_be(verdict, NFTA_VERDICT_CODE)?))
        })(),
        _ => None,
    };
    parsed.unwrap_or_else(|| ExprView::Other(name.to_string()))
}

impl TableView {
    /// Exactly our three base chains with policy drop, nothing in forward,
    /// no set, and our policy's tag on a rule of output and of input. A
    /// fourth chain only as transparent egress makes it (see
    /// [`TableView::nat_chain_ok`]); the tag says whether the policy has
    /// one, so a table with it never passes for one without.
    pub fn is_ours(&self, tag: &str) -> bool {
        let mut names: Vec<&str> = self.chains.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        let three = names == ["forward", "input", "output"];
        let four = names == ["forward", "input", "output", NAT_CHAIN] && self.nat_chain_ok();
        let chains_ok = (three || four)
            && CHAINS.iter().all(|(name, hook)| {
                self.chains.iter().any(|c| {
                    c.name == *name
                        && c.hook == Some((*hook, 0))
                        && c.policy == Some(NF_DROP)
                        && c.kind.as_deref() == Some("filter")
                })
            });
        chains_ok
            && self.sets == 0
            && !self.rules.iter().any(|r| r.chain == "forward")
            && ["output", "input"].iter().all(|chain| {
                self.rules
                    .iter()
                    .any(|r| r.chain == *chain && r.comment.as_deref() == Some(tag))
            })
    }

    /// Transparent egress's nat chain: a base chain of type nat on the
    /// output hook at [`NAT_PRIORITY`], policy accept, every rule ending
    /// in a redirect (to the namespace's loopback), none with a `nat`
    /// expression (a DNAT could name another host).
    fn nat_chain_ok(&self) -> bool {
        let chain_ok = self.chains.iter().any(|c| {
            c.name == NAT_CHAIN
                && c.hook == Some((HOOK_LOCAL_OUT, NAT_PRIORITY))
                && c.policy == Some(NF_ACCEPT)
                && c.kind.as_deref() == Some("nat")
        });
        let rules_ok = self.rules.iter().filter(|r| r.chain == NAT_CHAIN).all(|r| {
            let redirects = matches!(r.exprs.last(), Some(ExprView::Other(n)) if n == "redir");
            let only_matches = r.exprs.iter().all(|e| match e {
                ExprView::Other(n) => {
                    ["meta", "bitwise", "immediate", "redir"].contains(&n.as_str())
                }
                ExprView::Payload { .. } | ExprView::Cmp { .. } => true,
                ExprView::Verdict(_) => false,
            });
            redirects && only_matches
        });
        chain_ok && rules_ok
    }

    /// The first rule with comment `tag`.
    pub fn tagged(&self, tag: &str) -> Option<&RuleView> {
        self.rules
            .iter()
            .find(|r| r.comment.as_deref() == Some(tag))
    }

    /// The source addresses open mode's output chain lets out: rules that
    /// are exactly a full source address, then accept.
    pub fn source_addrs(&self) -> Vec<IpAddr> {
        self.full_saddrs("output", false)
    }

    /// The host addresses the loopback-only modes' input chain lets reach a
    /// preview port: rules that begin with a full source address and
    /// accept (nothing else in that chain names one).
    pub fn preview_sources(&self) -> Vec<IpAddr> {
        self.full_saddrs("input", true)
    }

    /// The container's own addresses transparent egress's nat chain leaves
    /// alone (`ip daddr != ADDR`, full addresses other than loopback).
    pub fn nat_exempt_addrs(&self) -> Vec<IpAddr> {
        let mut found = Vec::new();
        for rule in self.rules.iter().filter(|r| r.chain == NAT_CHAIN) {
            for pair in rule.exprs.windows(2) {
                let [ExprView::Payload {
                    base: PAYLOAD_NETWORK,
                    offset,
                    len,
                }, ExprView::Cmp { op: CMP_NEQ, data }] = pair
                else {
                    continue;
                };
                let addr = match (*offset, *len) {
                    (16, 4) => <[u8; 4]>::try_from(data.as_slice()).ok().map(IpAddr::from),
                    (24, 16) => <[u8; 16]>::try_from(data.as_slice()).ok().map(IpAddr::from),
                    _ => None,
                };
                found.extend(addr.filter(|a| !a.is_loopback()));
            }
        }
        found
    }

    /// Rules of `chain` that are a full source address then accept, or
    /// (`more`) begin with one and end in accept.
    fn full_saddrs(&self, chain: &str, more: bool) -> Vec<IpAddr> {
        let mut found = Vec::new();
        for rule in self.rules.iter().filter(|r| r.chain == chain) {
            let [head @ .., ExprView::Verdict(NF_ACCEPT)] = rule.exprs.as_slice() else {
                continue;
            };
            let head = match more {
                true => head.get(..4),
                false => Some(head).filter(|h| h.len() == 4),
            };
            let addr = match head {
                Some(
                    [ExprView::Other(_), ExprView::Cmp { .. }, ExprView::Payload {
                        base: PAYLOAD_NETWORK,
                        offset,
                        len,
                    }, ExprView::Cmp { op: CMP_EQ, data }],
                ) => match (*offset, *len) {
                    (12, 4) => <[u8; 4]>::try_from(data.as_slice()).ok().map(IpAddr::from),
                    (8, 16) => <[u8; 16]>::try_from(data.as_slice()).ok().map(IpAddr::from),
                    _ => None,
                },
                _ => None,
            };
            found.extend(addr);
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfnetlink::parse_replies;
    use vibe_policy::config::policy_tag;
    use vibe_policy::config::{NetworkMode, NetworkSection};
    use vibe_policy::network::ruleset::{container_table, Facts};

    #[test]
    fn prefix_masks() {
        assert_eq!(prefix_mask(10, 4), [0xff, 0xc0, 0, 0]);
        assert_eq!(prefix_mask(0, 4), [0, 0, 0, 0]);
        assert_eq!(prefix_mask(7, 16)[..2], [0xfe, 0]);
    }

    #[test]
    fn comment_round_trips() {
        let udata = comment_udata("vibe-shim policy 0123");
        assert_eq!(&udata[..2], &[0, 22]);
        assert_eq!(
            udata_comment(&udata).as_deref(),
            Some("vibe-shim policy 0123")
        );
        assert_eq!(
            udata_comment(&[1, 2, 0, 0, 0, 3, b'a', b'b', 0]).unwrap(),
            "ab"
        );
        assert_eq!(udata_comment(&[0, 9, b'a']), None);
    }

    /// The batch, read back with the same decoder the start check uses,
    /// gives our table: the encoder and the reader agree.
    #[test]
    fn batch_reads_back_as_our_table() {
        let net = NetworkSection {
            mode: NetworkMode::Allowlist,
            allow: vec!["203.0.113.5:8000-8100/udp".parse().unwrap()],
            dns: true,
            resolvers: vec![
                "192.0.2.53".parse().unwrap(),
                "2001:db8::53".parse().unwrap(),
            ],
            ..NetworkSection::default()
        };
        let table = container_table(&net, &Facts::default());
        let rules: usize = table.chains.iter().map(|c| c.rules.len()).sum();
        let batch = encode_batch(&table, 100);
        let mut view = TableView::default();
        for reply in parse_replies(batch.as_bytes()).unwrap() {
            let Reply::Data { msg, attrs, .. } = reply else {
                continue;
            };
            match msg {
                NFT_MSG_NEWCHAIN => view.chains.push(chain_view(attrs)),
                NFT_MSG_NEWRULE => view.rules.push(rule_view(attrs)),
                _ => {}
            }
        }
        assert_eq!(view.rules.len(), rules);
        assert!(view.is_ours(&policy_tag(&net)));
        assert!(!view.is_ours("vibe-shim policy other"));
        assert!(view.source_addrs().is_empty(), "allowlist names no source");
        // The tag must be on input as well as output.
        let mut untagged_input = view.clone();
        for r in untagged_input
            .rules
            .iter_mut()
            .filter(|r| r.chain == "input")
        {
            r.comment = None;
        }
        assert!(!untagged_input.is_ours(&policy_tag(&net)));
        let mut no_input = view.clone();
        no_input.chains.retain(|c| c.name != "input");
        assert!(!no_input.is_ours(&policy_tag(&net)));

        let mut extra = view.clone();
        extra.chains.push(ChainView {
            name: "sneaky".into(),
            ..ChainView::default()
        });
        assert!(!extra.is_ours(&policy_tag(&net)));
        let mut accept = view.clone();
        accept.chains[0].policy = Some(NF_ACCEPT);
        assert!(!accept.is_ours(&policy_tag(&net)));
        let mut forward_rule = view.clone();
        forward_rule.rules.push(RuleView {
            chain: "forward".into(),
            ..RuleView::default()
        });
        assert!(!forward_rule.is_ours(&policy_tag(&net)));
        let mut with_set = view;
        with_set.sets = 1;
        assert!(!with_set.is_ours(&policy_tag(&net)));
    }

    fn view_of(table: &Table) -> TableView {
        let batch = encode_batch(table, 100);
        let mut view = TableView::default();
        for reply in parse_replies(batch.as_bytes()).unwrap() {
            let Reply::Data { msg, attrs, .. } = reply else {
                continue;
            };
            match msg {
                NFT_MSG_NEWCHAIN => view.chains.push(chain_view(attrs)),
                NFT_MSG_NEWRULE => view.rules.push(rule_view(attrs)),
                _ => {}
            }
        }
        view
    }

    /// Transparent egress's table reads back as ours (its nat chain
    /// included); a nat chain that could send a packet elsewhere does not.
    #[test]
    fn transparent_table_reads_back_as_ours() {
        let net = NetworkSection {
            mode: NetworkMode::Proxy,
            hosts: vec!["api.example.com".into()],
            transparent: true,
            ..NetworkSection::default()
        };
        let facts = Facts {
            container_addrs: vec!["172.30.99.2".parse().unwrap()],
            ..Facts::default()
        };
        let view = view_of(&container_table(&net, &facts));
        let tag = policy_tag(&net);
        assert!(view.is_ours(&tag));
        let nat: Vec<&RuleView> = view.rules.iter().filter(|r| r.chain == NAT_CHAIN).collect();
        assert_eq!(nat.len(), 4, "2 DNS + TCP in each family");
        // `ip daddr != 127.0.0.0/8 ip daddr != 172.30.99.2 meta l4proto
        // tcp redirect to :3129` as `nft --debug=netlink` shows nft 1.0's.
        let neq = |data: &[u8]| ExprView::Cmp {
            op: CMP_NEQ,
            data: data.to_vec(),
        };
        let daddr = |len| ExprView::Payload {
            base: PAYLOAD_NETWORK,
            offset: 16,
            len,
        };
        let meta = || ExprView::Other("meta".into());
        assert_eq!(
            nat[2].exprs,
            [
                meta(),
                ExprView::Cmp {
                    op: CMP_EQ,
                    data: vec![NFPROTO_IPV4]
                },
                daddr(1),
                neq(&[127]),
                daddr(4),
                neq(&[172, 30, 99, 2]),
                meta(),
                ExprView::Cmp {
                    op: CMP_EQ,
                    data: vec![IPPROTO_TCP]
                },
                ExprView::Other("immediate".into()),
                ExprView::Other("redir".into()),
            ]
        );
        let mut plain = net.clone();
        plain.transparent = false;
        assert!(
            !view.is_ours(&policy_tag(&plain)),
            "the tag tells them apart"
        );
        assert!(view_of(&container_table(&plain, &Facts::default())).is_ours(&policy_tag(&plain)));

        let mut dnat = view.clone();
        let at = dnat
            .rules
            .iter()
            .position(|r| r.chain == NAT_CHAIN)
            .unwrap();
        dnat.rules[at].exprs.push(ExprView::Other("nat".into()));
        assert!(!dnat.is_ours(&tag));
        let mut accept = view.clone();
        accept.rules[at].exprs.push(ExprView::Verdict(NF_ACCEPT));
        assert!(!accept.is_ours(&tag));
        let mut early = view.clone();
        for c in early.chains.iter_mut().filter(|c| c.name == NAT_CHAIN) {
            c.hook = Some((HOOK_LOCAL_OUT, -100));
        }
        assert!(!early.is_ours(&tag));
        let mut filter = view;
        for c in filter.chains.iter_mut().filter(|c| c.name == NAT_CHAIN) {
            c.kind = Some("filter".into());
        }
        assert!(!filter.is_ours(&tag));
    }

    /// Open mode's source accepts read back as the addresses they name.
    #[test]
    fn source_addrs_read_back() {
        let net = NetworkSection {
            mode: NetworkMode::Open,
            ..NetworkSection::default()
        };
        let facts = Facts {
            container_addrs: vec!["172.30.99.2".parse().unwrap(), "fd42::2".parse().unwrap()],
            ..Facts::default()
        };
        let batch = encode_batch(&container_table(&net, &facts), 7);
        let mut view = TableView::default();
        for reply in parse_replies(batch.as_bytes()).unwrap() {
            if let Reply::Data {
                msg: NFT_MSG_NEWRULE,
                attrs,
                ..
            } = reply
            {
                view.rules.push(rule_view(attrs));
            }
        }
        assert_eq!(view.source_addrs(), facts.container_addrs);
    }

    /// What the start check compares with the facts it reads again: the
    /// preview sources and the own addresses transparent egress exempts.
    #[test]
    fn start_facts_read_back() {
        let net = NetworkSection {
            mode: NetworkMode::Proxy,
            hosts: vec!["api.example.com".into()],
            transparent: true,
            preview_ports: vec!["8000".parse().unwrap(), "3000-3999".parse().unwrap()],
            ..NetworkSection::default()
        };
        let facts = Facts {
            container_addrs: vec!["172.30.99.2".parse().unwrap(), "fd42::2".parse().unwrap()],
            preview_sources: vec!["172.30.99.1".parse().unwrap()],
        };
        let view = view_of(&vibe_policy::network::ruleset::creating_table(&net, &facts));
        let mut exempt = view.nat_exempt_addrs();
        exempt.sort();
        assert_eq!(exempt, facts.container_addrs);
        let mut previews = view.preview_sources();
        previews.dedup();
        assert_eq!(previews, facts.preview_sources);
        let bare = view_of(&container_table(&net, &Facts::default()));
        assert!(bare.nat_exempt_addrs().is_empty());
        assert!(bare.preview_sources().is_empty());
        // The handle of the rule the gate goes in front of is read too.
        let until = view.tagged(vibe_policy::network::ruleset::UNTIL_START_TAG);
        assert!(until.is_some_and(|r| r.chain == "output"));
    }

    #[test]
    fn every_message_but_the_markers_asks_for_an_ack() {
        let table = container_table(&NetworkSection::default(), &Facts::default());
        let rules: usize = table.chains.iter().map(|c| c.rules.len()).sum();
        let batch = encode_batch(&table, 1);
        let bytes = batch.as_bytes();
        let mut flags = Vec::new();
        let mut rest = bytes;
        while rest.len() >= 16 {
            let len = u32::from_ne_bytes(rest[..4].try_into().unwrap()) as usize;
            flags.push(u16::from_ne_bytes([rest[6], rest[7]]));
            rest = &rest[len..];
        }
        // begin, table, flush, 3 chains, the rules, end
        assert_eq!(flags.len(), 2 + 2 + 3 + rules);
        assert_eq!(flags[0] & NLM_F_ACK, 0);
        assert_eq!(flags[flags.len() - 1] & NLM_F_ACK, 0);
        assert!(flags[1..flags.len() - 1].iter().all(|f| f & NLM_F_ACK != 0));
    }
}
