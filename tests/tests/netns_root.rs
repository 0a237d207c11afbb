//! The hook against real network namespaces (root only). A "container"
//! namespace is wired to a "provider" namespace holding the test hosts; the
//! host namespace takes no part, and each test checks it is left unchanged.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use vibe_hooks::{check_before_start, remove_host_rules, run_network_hook, HookError};
use vibe_policy::config::{NetworkMode, NetworkSection};
use vibe_policy::network::ruleset;
use vibe_shim_tests::netns::{self, Lab, Netns};

const IGNORE: &str = "needs root, runc and the test env: run tests/run.sh";

/// Tests run one at a time: the host snapshot must not see another test's
/// (namespace-only) changes, and timings stay honest.
static SERIAL: Mutex<()> = Mutex::new(());

fn policy(mode: NetworkMode, allow: &[&str], dns: bool) -> NetworkSection {
    NetworkSection {
        mode,
        allow: allow.iter().map(|a| a.parse().unwrap()).collect(),
        dns,
        ..NetworkSection::default()
    }
}

/// The container id every test's OCI state carries (open mode names its
/// host table after it: `inet vibe_shim_vibe-hooks-test`).
const ID: &str = "vibe-hooks-test";

fn state(pid: i32, bundle: &Path) -> Vec<u8> {
    serde_json::json!({
        "ociVersion": "1.0.2", "id": ID, "status": "creating",
        "pid": pid, "bundle": bundle, "annotations": {}
    })
    .to_string()
    .into_bytes()
}

fn table(ns: &Netns) -> String {
    String::from_utf8_lossy(
        &ns.exec(&["nft", "list", "table", "inet", "vibe_shim"])
            .stdout,
    )
    .into_owned()
}

/// A bundle whose config.json binds a resolv.conf with `text`, as Docker's do.
fn bundle_with_resolv_conf(text: &str) -> tempfile::TempDir {
    let bundle = tempfile::tempdir().unwrap();
    let resolv = bundle.path().join("resolv.conf");
    std::fs::write(&resolv, text).unwrap();
    std::fs::write(
        bundle.path().join("config.json"),
        serde_json::json!({"root": {"path": "rootfs"}, "mounts": [
            {"destination": "/etc/resolv.conf", "type": "bind", "source": resolv,
             "options": ["rbind", "ro"]}]})
        .to_string(),
    )
    .unwrap();
    bundle
}

fn has_default_route(ns: &Netns) -> bool {
    let v4 = ns.ip(&["-4", "route", "show", "default"]);
    let v6 = ns.ip(&["-6", "route", "show", "default"]);
    !(v4.trim().is_empty() && v6.trim().is_empty())
}

struct Guard {
    before: String,
    _serial: std::sync::MutexGuard<'static, ()>,
}

fn host_guard() -> Guard {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    Guard {
        before: netns::host_network_snapshot(),
        _serial: serial,
    }
}

impl Guard {
    fn assert_host_unchanged(&self) {
        assert_eq!(
            self.before,
            netns::host_network_snapshot(),
            "the host's routes or ruleset changed"
        );
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn none_mode_cuts_everything_but_loopback() {
    let _ = IGNORE;
    let mut lab = Lab::new("none");
    let guard = host_guard();
    assert!(
        lab.container.tcp_answers(netns::PUBLIC_HOST, 8080),
        "lab works"
    );
    let pid = lab.container.spawn(&["sleep", "60"]);
    lab.container.tcp_server(9000);

    run_network_hook(
        &state(pid, Path::new("/nonexistent")),
        &policy(NetworkMode::None, &[], false),
    )
    .unwrap();

    let t = table(&lab.container);
    assert!(t.contains("comment \"vibe-shim policy "), "{t}");
    assert!(t.contains("policy drop"), "{t}");
    assert!(!has_default_route(&lab.container));
    for host in [netns::GATEWAY, netns::PUBLIC_HOST, netns::METADATA_HOST] {
        assert!(!lab.container.tcp_answers(host, 8080), "{host} answered");
    }
    assert!(!lab.container.tcp_answers(netns::PUBLIC_HOST6, 8080));
    assert!(!lab.container.udp_answers(netns::GATEWAY, 8053));
    assert!(
        lab.container.tcp_answers("127.0.0.1", 9000),
        "loopback must work"
    );
    guard.assert_host_unchanged();
    drop(lab);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn allowlist_mode_allows_exactly_the_entries() {
    let mut lab = Lab::new("allow");
    let guard = host_guard();
    let pid = lab.container.spawn(&["sleep", "60"]);
    let net = policy(
        NetworkMode::Allowlist,
        &[
            "203.0.113.5:8080",
            "203.0.113.5:8053/udp",
            "[2001:db8:5::5]:8080",
        ],
        false,
    );
    run_network_hook(&state(pid, Path::new("/nonexistent")), &net).unwrap();

    let c = &lab.container;
    assert!(c.tcp_answers(netns::PUBLIC_HOST, 8080), "listed host:port");
    assert!(!c.tcp_answers(netns::PUBLIC_HOST, 8081), "other port");
    assert!(!c.tcp_answers(netns::UNLISTED_HOST, 8080), "unlisted host");
    assert!(c.udp_answers(netns::PUBLIC_HOST, 8053), "UDP entry");
    assert!(
        !c.udp_answers(netns::UNLISTED_HOST, 8053),
        "UDP to unlisted host"
    );
    assert!(c.tcp_answers(netns::PUBLIC_HOST6, 8080), "IPv6 entry");
    assert!(
        !c.tcp_answers(netns::UNLISTED_HOST6, 8080),
        "unlisted IPv6 host"
    );
    assert!(!c.tcp_answers(netns::GATEWAY, 8080), "gateway");
    assert!(!has_default_route(c));
    let routes = c.ip(&["-4", "route"]);
    assert!(routes.contains("203.0.113.5 via 198.51.100.1"), "{routes}");
    let routes6 = c.ip(&["-6", "route"]);
    assert!(
        routes6.contains("2001:db8:5::5 via 2001:db8:100::1"),
        "{routes6}"
    );

    // Idempotent: the start check redoes the route work without harm.
    check_before_start(ID, pid, &net).unwrap();
    assert!(c.tcp_answers(netns::PUBLIC_HOST, 8080));
    guard.assert_host_unchanged();
    drop(lab);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn open_mode_allows_public_but_nothing_private() {
    let mut lab = Lab::new("open");
    lab.provider
        .ip(&["-6", "addr", "add", "::ffff:a00:1/128", "dev", "lo"]);
    let guard = host_guard();
    let pid = lab.container.spawn(&["sleep", "60"]);
    run_network_hook(
        &state(pid, Path::new("/nonexistent")),
        &policy(NetworkMode::Open, &[], false),
    )
    .unwrap();

    let c = &lab.container;
    assert!(c.tcp_answers(netns::PUBLIC_HOST, 8080), "public host");
    assert!(
        c.tcp_answers(netns::UNLISTED_HOST, 8081),
        "any public host/port"
    );
    assert!(c.udp_answers(netns::PUBLIC_HOST, 8053), "public UDP");
    assert!(c.tcp_answers(netns::PUBLIC_HOST6, 8080), "public IPv6");
    assert!(!c.tcp_answers(netns::PRIVATE_HOST, 8080), "RFC 1918");
    assert!(!c.tcp_answers(netns::METADATA_HOST, 8080), "metadata");
    assert!(!c.tcp_answers(netns::ULA_HOST6, 8080), "ULA");
    assert!(has_default_route(c), "open mode keeps the routes");
    remove_host_rules(ID).unwrap();
    guard.assert_host_unchanged();
    drop(lab);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn docker28_order_network_arrives_after_create() {
    let mut lab = Lab::new_detached("d28");
    let guard = host_guard();
    let pid = lab.container.spawn(&["sleep", "60"]);
    let net = policy(NetworkMode::Allowlist, &["203.0.113.5:8080"], false);
    // createRuntime: only lo exists.
    run_network_hook(&state(pid, Path::new("/nonexistent")), &net).unwrap();
    // The engine now adds eth0 and default routes...
    lab.attach_container();
    assert!(has_default_route(&lab.container));
    // ...and the start check removes them, keeping the table.
    check_before_start(ID, pid, &net).unwrap();
    let c = &lab.container;
    assert!(!has_default_route(c));
    assert!(table(c).contains("vibe-shim policy"));
    assert!(c.tcp_answers(netns::PUBLIC_HOST, 8080));
    assert!(!c.tcp_answers(netns::UNLISTED_HOST, 8080));
    guard.assert_host_unchanged();

    // none mode, same order.
    let mut lab2 = Lab::new_detached("d28n");
    let pid2 = lab2.container.spawn(&["sleep", "60"]);
    let none = policy(NetworkMode::None, &[], false);
    run_network_hook(&state(pid2, Path::new("/nonexistent")), &none).unwrap();
    lab2.attach_container();
    check_before_start(ID, pid2, &none).unwrap();
    assert!(!has_default_route(&lab2.container));
    assert!(!lab2.container.tcp_answers(netns::PUBLIC_HOST, 8080));

    // open mode, same order: no egress until the start check has named the
    // container's addresses in both tables.
    let mut lab3 = Lab::new_detached("d28o");
    let pid3 = lab3.container.spawn(&["sleep", "60"]);
    let open = policy(NetworkMode::Open, &[], false);
    run_network_hook(&state(pid3, Path::new("/nonexistent")), &open).unwrap();
    lab3.attach_container();
    assert!(
        !lab3.container.tcp_answers(netns::PUBLIC_HOST, 8080),
        "egress from addresses no host rule covers"
    );
    check_before_start(ID, pid3, &open).unwrap();
    assert!(lab3.container.tcp_answers(netns::PUBLIC_HOST, 8080));
    let host = netns::must(&["nft", "list", "table", "inet", "vibe_shim_vibe-hooks-test"]);
    assert!(host.contains("ip saddr 198.51.100.2 drop"), "{host}");
    assert!(host.contains("ip6 saddr 2001:db8:100::2 drop"), "{host}");
    remove_host_rules(ID).unwrap();
    guard.assert_host_unchanged();
}

/// Sends one ICMPv6 neighbour advertisement out of `ns`'s eth0 to all
/// nodes, as a process in the container could; whether the wall let it go.
fn advertisement_leaves(ns: &Netns) -> bool {
    // Retried while the new link's multicast route is not there yet.
    let script = r#"
import socket, struct, time
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
na = struct.pack('!BBHI', 136, 0, 0, 0x20000000)
na += socket.inet_pton(socket.AF_INET6, '2001:db8:100::2')
said = 'no attempt'
for i in range(40):
    try:
        s.sendto(na, ('ff02::1', 0, 0, socket.if_nametoindex('eth0')))
        said = 'sent'
        break
    except PermissionError:
        said = 'refused'
        break
    except OSError as e:
        said = str(e)
        time.sleep(0.05)
print(said)
"#;
    let out = ns.exec(&["python3", "-c", script]);
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    match said.as_str() {
        "sent" => true,
        "refused" => false,
        _ => panic!(
            "the advertisement probe failed: {said} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The engine's neighbour advertisement (Docker 28 sends one from the
/// namespace after create) is let out until start only: after the start
/// check a process in the container cannot send one, with either backend,
/// and the check closed the rule without replacing the table (its rules'
/// handles are the hook's).
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn the_engines_advertisement_goes_out_until_start_only() {
    let guard = host_guard();
    for nft in [None, Some(PathBuf::from("/usr/sbin/nft"))] {
        let mut lab = Lab::new_detached("na");
        let pid = lab.container.spawn(&["sleep", "60"]);
        let none = NetworkSection {
            nft,
            ..policy(NetworkMode::None, &[], false)
        };
        run_network_hook(&state(pid, Path::new("/nonexistent")), &none).unwrap();
        lab.attach_container();
        let handles = |ns: &Netns| {
            let out = ns.exec(&["nft", "-a", "list", "chain", "inet", "vibe_shim", "output"]);
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.contains("from start"))
                .filter_map(|l| l.rsplit_once("# handle ").map(|(_, h)| h.to_string()))
                .collect::<Vec<_>>()
        };
        let before = handles(&lab.container);
        assert!(advertisement_leaves(&lab.container), "before start");
        check_before_start(ID, pid, &none).unwrap();
        assert!(!advertisement_leaves(&lab.container), "after start");
        assert_eq!(handles(&lab.container), before, "the table was replaced");
        assert!(table(&lab.container).contains(ruleset::FROM_START_TAG));
        // A second check finds it closed and adds nothing.
        check_before_start(ID, pid, &none).unwrap();
        let gates = table(&lab.container)
            .matches(ruleset::FROM_START_TAG)
            .count();
        assert_eq!(gates, 1);
        assert!(
            !advertisement_leaves(&lab.container),
            "after a second check"
        );
    }
    guard.assert_host_unchanged();
}

/// DNS goes to the policy's resolvers, never to the container's
/// resolv.conf (which a client writes: `--dns`).
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn dns_allows_the_policy_resolvers_not_resolv_conf() {
    let mut lab = Lab::new_detached("dns");
    let guard = host_guard();
    lab.provider.tcp_server(53);
    let bundle = bundle_with_resolv_conf("nameserver 203.0.113.6\nnameserver 2001:db8:6::6\n");
    let pid = lab.container.spawn(&["sleep", "60"]);
    let mut net = policy(NetworkMode::Allowlist, &["203.0.113.5:8080"], true);
    net.resolvers = vec![
        "203.0.113.5".parse().unwrap(),
        "2001:db8:5::5".parse().unwrap(),
    ];
    run_network_hook(&state(pid, bundle.path()), &net).unwrap();
    let t = table(&lab.container);
    for proto in ["udp", "tcp"] {
        let rule = format!("ip daddr 203.0.113.5 {proto} dport 53 accept");
        assert!(t.contains(&rule), "{t}");
    }
    assert!(!t.contains("203.0.113.6"), "resolv.conf's resolver: {t}");
    assert!(!t.contains("2001:db8:6::6"), "resolv.conf's resolver: {t}");
    assert!(
        !t.contains("127.0.0.11 drop"),
        "dns = true allows Docker's DNS: {t}"
    );
    lab.attach_container();
    check_before_start(ID, pid, &net).unwrap();
    let c = &lab.container;
    assert!(c.tcp_answers(netns::PUBLIC_HOST, 53), "configured resolver");
    assert!(
        c.tcp_answers(netns::PUBLIC_HOST6, 53),
        "configured IPv6 resolver"
    );
    assert!(!c.tcp_answers(netns::UNLISTED_HOST, 53), "resolv.conf's v4");
    assert!(
        !c.tcp_answers(netns::UNLISTED_HOST6, 53),
        "resolv.conf's v6"
    );
    assert!(!c.tcp_answers(netns::UNLISTED_HOST, 8080), "only port 53");
    guard.assert_host_unchanged();
}

/// Section 3: with `inbound = false` (the default) nothing outside can open
/// a connection to the container, in any mode; `true` allows it where the
/// mode has egress. The provider plays the outside, IPv4 and IPv6.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn inbound_only_with_inbound_true() {
    let guard = host_guard();
    let mut open_inbound = policy(NetworkMode::Open, &[], false);
    open_inbound.inbound = true;
    let mut allow_inbound = policy(NetworkMode::Allowlist, &["203.0.113.5:8080"], false);
    allow_inbound.inbound = true;
    for (net, expect) in [
        (policy(NetworkMode::None, &[], false), false),
        (
            policy(NetworkMode::Allowlist, &["203.0.113.5:8080"], false),
            false,
        ),
        (policy(NetworkMode::Open, &[], false), false),
        (allow_inbound, true),
        (open_inbound, true),
    ] {
        let mut lab = Lab::new("in");
        let pid = lab.container.spawn(&["sleep", "60"]);
        lab.container.tcp_server(9000);
        assert!(lab.provider.tcp_answers("198.51.100.2", 9000), "lab works");
        run_network_hook(&state(pid, Path::new("/nonexistent")), &net).unwrap();
        check_before_start(ID, pid, &net).unwrap();
        let p = &lab.provider;
        assert_eq!(p.tcp_answers("198.51.100.2", 9000), expect, "v4 {net:?}");
        assert_eq!(p.tcp_answers("2001:db8:100::2", 9000), expect, "v6 {net:?}");
        if net.mode != NetworkMode::None {
            // Egress (and its replies) still work either way.
            assert!(
                lab.container.tcp_answers(netns::PUBLIC_HOST, 8080),
                "{net:?}"
            );
        }
        let _ = remove_host_rules(ID);
    }
    guard.assert_host_unchanged();
}

/// Section 3b: an address the host gains after the hook ran is as
/// unreachable as the ones it had. A container namespace wired straight to
/// the host by a veth (192.0.2.128/30, 2001:db8:c0::/64, documentation
/// ranges): the host is its gateway, as Docker's bridge is.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn open_mode_host_address_added_later_is_unreachable() {
    use std::io::Write;
    use std::net::TcpListener;
    let mut ns = Netns::new("vsHost");
    let guard = host_guard();
    let veth = HostVeth::new(&ns);
    let pid = ns.spawn(&["sleep", "60"]);
    let net = policy(NetworkMode::Open, &[], false);
    run_network_hook(&state(pid, Path::new("/nonexistent")), &net).unwrap();
    check_before_start(ID, pid, &net).unwrap();

    let _added = netns::HostAddress::add("vsnewaddr", "192.0.2.77", "2001:db8:77::1");
    let mut ports = Vec::new();
    for addr in ["192.0.2.77", "2001:db8:77::1", "192.0.2.129"] {
        let listener = TcpListener::bind((addr, 0)).unwrap();
        ports.push(listener.local_addr().unwrap().port());
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let _ = conn.write_all(b"ok\n");
            }
        });
    }
    assert!(!ns.tcp_answers("192.0.2.77", ports[0]), "new host IPv4");
    assert!(!ns.tcp_answers("2001:db8:77::1", ports[1]), "new host IPv6");
    // The control: the same server answers once the host table is gone.
    remove_host_rules(ID).unwrap();
    assert!(ns.tcp_answers("192.0.2.77", ports[0]), "control v4");
    assert!(ns.tcp_answers("2001:db8:77::1", ports[1]), "control v6");
    // The start check puts it back.
    check_before_start(ID, pid, &net).unwrap();
    assert!(
        !ns.tcp_answers("192.0.2.77", ports[0]),
        "after the start check"
    );
    remove_host_rules(ID).unwrap();
    drop(veth);
    drop(_added);
    guard.assert_host_unchanged();
}

/// A veth from the host to `ns`: host 192.0.2.129/30 and 2001:db8:c0::1,
/// `ns` .130 and ::2 with default routes via the host. Deleted on drop.
struct HostVeth;

impl HostVeth {
    fn new(ns: &Netns) -> HostVeth {
        let _ = netns::run(&["ip", "link", "del", "vshost-h"]);
        netns::must(&[
            "ip", "link", "add", "vshost-h", "type", "veth", "peer", "name", "eth0", "netns",
            &ns.name,
        ]);
        netns::must(&["ip", "addr", "add", "192.0.2.129/30", "dev", "vshost-h"]);
        netns::must(&[
            "ip",
            "-6",
            "addr",
            "add",
            "2001:db8:c0::1/64",
            "dev",
            "vshost-h",
            "nodad",
        ]);
        netns::must(&["ip", "link", "set", "vshost-h", "up"]);
        ns.ip(&["addr", "add", "192.0.2.130/30", "dev", "eth0"]);
        ns.ip(&[
            "-6",
            "addr",
            "add",
            "2001:db8:c0::2/64",
            "dev",
            "eth0",
            "nodad",
        ]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["route", "add", "default", "via", "192.0.2.129"]);
        ns.ip(&["-6", "route", "add", "default", "via", "2001:db8:c0::1"]);
        HostVeth
    }
}

impl Drop for HostVeth {
    fn drop(&mut self) {
        let _ = netns::run(&["ip", "link", "del", "vshost-h"]);
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn fails_closed() {
    let mut lab = Lab::new("fail");
    let guard = host_guard();
    let pid = lab.container.spawn(&["sleep", "60"]);
    let none = policy(NetworkMode::None, &[], false);
    let st = state(pid, Path::new("/nonexistent"));

    // No nft binary.
    let mut no_nft = none.clone();
    no_nft.nft = Some(PathBuf::from("/nonexistent/nft"));
    let err = run_network_hook(&st, &no_nft).unwrap_err();
    assert!(matches!(err, HookError::Nft(_)), "{err}");
    assert!(err.to_string().contains("/nonexistent/nft"), "{err}");
    assert!(table(&lab.container).is_empty());

    // nft that fails.
    let mut failing = none.clone();
    failing.nft = Some(PathBuf::from("/bin/false"));
    let err = run_network_hook(&st, &failing).unwrap_err();
    assert!(err.to_string().contains("/bin/false failed"), "{err}");

    // The start check refuses a namespace without our table...
    let err = check_before_start(ID, pid, &none).unwrap_err();
    assert!(matches!(err, HookError::TableMissing), "{err}");
    // ...and one whose table came from another policy.
    run_network_hook(&st, &none).unwrap();
    let other = policy(NetworkMode::Open, &[], false);
    let err = check_before_start(ID, pid, &other).unwrap_err();
    assert!(matches!(err, HookError::TableForeign { .. }), "{err}");
    check_before_start(ID, pid, &none).unwrap();
    // Anything added to our table makes it foreign: a chain, a rule in
    // forward, a set. Re-running the hook flushes rules but not the extras.
    for (add, undo) in [
        (
            "add chain inet vibe_shim sneaky",
            "delete chain inet vibe_shim sneaky",
        ),
        (
            "add rule inet vibe_shim forward accept",
            "flush chain inet vibe_shim forward",
        ),
        (
            "add set inet vibe_shim s { type ipv4_addr; }",
            "delete set inet vibe_shim s",
        ),
    ] {
        let out = lab.container.exec(&["nft", add]);
        assert!(out.status.success(), "{add}: {out:?}");
        let err = check_before_start(ID, pid, &none).unwrap_err();
        assert!(
            matches!(err, HookError::TableForeign { .. }),
            "{add}: {err}"
        );
        let out = lab.container.exec(&["nft", undo]);
        assert!(out.status.success(), "{undo}: {out:?}");
        check_before_start(ID, pid, &none).unwrap();
    }

    // A process in the host's namespace is refused before anything runs.
    let me = std::process::id() as i32;
    let err = run_network_hook(&state(me, Path::new("/nonexistent")), &none).unwrap_err();
    assert!(matches!(err, HookError::HostNamespace { .. }), "{err}");
    let err = check_before_start(ID, me, &none).unwrap_err();
    assert!(matches!(err, HookError::HostNamespace { .. }), "{err}");
    // Open mode for an id that cannot name its host table: refused, and
    // nothing to remove for it later.
    let bad = String::from_utf8(st.clone())
        .unwrap()
        .replace(ID, "bad+id")
        .into_bytes();
    let err = run_network_hook(&bad, &policy(NetworkMode::Open, &[], false)).unwrap_err();
    assert!(matches!(err, HookError::BadId(_)), "{err}");
    remove_host_rules("bad+id").unwrap();
    // A pid that does not exist.
    assert!(run_network_hook(&state(i32::MAX, Path::new("/x")), &none).is_err());
    guard.assert_host_unchanged();
}

/// The netlink encoding means what the `nft` text means: for each policy,
/// the table that netlink installs lists exactly as the one `nft -f`
/// installs from the text, and every rule lists as `Rule`'s Display.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn netlink_and_nft_install_the_same_table() {
    use vibe_policy::network::ruleset::{container_table, host_table, Facts};
    let guard = host_guard();
    let every_allow_form = [
        "192.0.2.10",
        "198.51.100.0/24:443",
        "203.0.113.5:8000-8100/udp",
        "[2001:db8::5]:8080",
        "2001:db8:1::/48",
        "10.0.0.0/7:22",
        "0.0.0.0/0:853",
    ];
    let resolvers = vec![
        "192.0.2.53".parse().unwrap(),
        "2001:db8::53".parse().unwrap(),
    ];
    let mut allow_dns = policy(NetworkMode::Allowlist, &every_allow_form, true);
    allow_dns.resolvers = resolvers.clone();
    allow_dns.inbound = true;
    let mut open_dns = policy(NetworkMode::Open, &[], true);
    open_dns.resolvers = resolvers;
    let host_name = format!("vibe_shim_{ID}");
    let container_addrs = vec!["192.0.2.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
    // Transparent egress's nat chain and its redirects list alike too.
    let transparent = NetworkSection {
        mode: NetworkMode::Proxy,
        hosts: vec!["api.example.com".into(), "*.example.org:8443".into()],
        transparent: true,
        ..NetworkSection::default()
    };
    for net in [
        policy(NetworkMode::None, &[], false),
        allow_dns,
        policy(NetworkMode::Open, &[], false),
        open_dns,
        transparent,
    ] {
        let mut listings = Vec::new();
        let mut host_listings = Vec::new();
        for nft in [None, Some(PathBuf::from("/usr/sbin/nft"))] {
            let mut ns = Netns::new("vsEq");
            // The container's addresses (open mode's rules name them).
            ns.ip(&["addr", "add", "192.0.2.1/32", "dev", "lo"]);
            ns.ip(&["-6", "addr", "add", "2001:db8::1/128", "dev", "lo", "nodad"]);
            let pid = ns.spawn(&["sleep", "60"]);
            let with = NetworkSection {
                nft: nft.clone(),
                ..net.clone()
            };
            run_network_hook(&state(pid, Path::new("/nonexistent")), &with).unwrap();
            check_before_start(ID, pid, &with).unwrap();
            listings.push(table(&ns));
            let host = netns::run(&["nft", "list", "table", "inet", &host_name]);
            host_listings.push(String::from_utf8_lossy(&host.stdout).into_owned());
            remove_host_rules(ID).unwrap();
        }
        assert_eq!(listings[0], listings[1], "netlink vs nft for {net:?}");
        assert_eq!(host_listings[0], host_listings[1], "host table for {net:?}");
        let facts = Facts {
            container_addrs: container_addrs.clone(),
            ..Facts::default()
        };
        for chain in container_table(&net, &facts).chains {
            for rule in chain.rules {
                let line = format!("\t\t{rule}\n");
                assert!(listings[0].contains(&line), "{line:?} in\n{}", listings[0]);
            }
        }
        if net.mode == NetworkMode::Open {
            let host = host_table(&host_name, &net, &container_addrs);
            for rule in &host.chains[0].rules {
                let line = format!("\t\t{rule}\n");
                assert!(
                    host_listings[0].contains(&line),
                    "{line:?} in\n{}",
                    host_listings[0]
                );
            }
        } else {
            assert!(host_listings[0].is_empty(), "{}", host_listings[0]);
        }
    }
    guard.assert_host_unchanged();
}

/// The hook's wall time as runc sees it: each run meets a fresh namespace
/// (a veth eth0 with a default route), as at a real `runc create`.
/// `cargo test --release -p vibe-shim-tests --test netns_root -- --ignored --nocapture hook_timing`
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hook_timing() {
    let guard = host_guard();
    for (name, net) in [
        ("none", policy(NetworkMode::None, &[], false)),
        (
            "allowlist",
            policy(
                NetworkMode::Allowlist,
                &["203.0.113.5:8080", "[2001:db8:5::5]:8080"],
                false,
            ),
        ),
        ("open", policy(NetworkMode::Open, &[], false)),
    ] {
        let mut hook = Vec::new();
        let mut start = Vec::new();
        for _ in 0..50 {
            let mut ns = Netns::new("vsTime");
            ns.ip(&[
                "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
            ]);
            ns.ip(&["link", "set", "eth1", "up"]);
            ns.ip(&["addr", "add", "198.51.100.2/24", "dev", "eth0"]);
            ns.ip(&["link", "set", "eth0", "up"]);
            ns.ip(&["route", "add", "default", "via", "198.51.100.1"]);
            let pid = ns.spawn(&["sleep", "60"]);
            let st = state(pid, Path::new("/nonexistent"));
            let t = Instant::now();
            run_network_hook(&st, &net).unwrap();
            hook.push(t.elapsed());
            let t = Instant::now();
            check_before_start(ID, pid, &net).unwrap();
            start.push(t.elapsed());
            remove_host_rules(ID).unwrap();
        }
        hook.sort();
        start.sort();
        println!(
            "vibe-hooks timing {name}: run_network_hook median {:?} (p90 {:?}), \
             check_before_start median {:?}, 50 fresh namespaces",
            hook[25], hook[45], start[25]
        );
    }
    guard.assert_host_unchanged();
}

/// A second hook run in a namespace that already has the table (a container
/// joining another's network, `--network container:X`) replaces the rules in
/// one transaction: the table then answers to the new policy only.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn reapplying_replaces_the_rules() {
    let mut lab = Lab::new("again");
    let guard = host_guard();
    let pid = lab.container.spawn(&["sleep", "60"]);
    let st = state(pid, Path::new("/nonexistent"));
    let open = policy(NetworkMode::Open, &[], false);
    let allow = policy(NetworkMode::Allowlist, &["203.0.113.5:8080"], false);
    run_network_hook(&st, &open).unwrap();
    check_before_start(ID, pid, &open).unwrap();
    assert!(lab.container.tcp_answers(netns::UNLISTED_HOST, 8080));

    let t = Instant::now();
    run_network_hook(&st, &allow).unwrap();
    println!("re-apply over an existing table: {:?}", t.elapsed());
    check_before_start(ID, pid, &allow).unwrap();
    let err = check_before_start(ID, pid, &open).unwrap_err();
    assert!(matches!(err, HookError::TableForeign { .. }), "{err}");
    let listing = table(&lab.container);
    assert!(
        !listing.contains("10.0.0.0/8"),
        "open mode's rules stayed:\n{listing}"
    );
    assert!(lab.container.tcp_answers(netns::PUBLIC_HOST, 8080));
    assert!(!lab.container.tcp_answers(netns::UNLISTED_HOST, 8080));
    remove_host_rules(ID).unwrap();
    guard.assert_host_unchanged();
}

/// Preview ports, judged on the hook itself (no engine): a bridge of the
/// host's (`vpvbr<slot>`, 10.93.<slot>.1/24) with the container's namespace
/// on it. The hook runs before the container has its interface (Docker 28's
/// order), so only the start check can learn the host side; after it the
/// host reaches 8000 (listed) and not 9000, and the container opens nothing
/// to the host. Both backends install the same rules, listed as rendered.
/// (A neighbour on the bridge is e2e_preview's: the host's br_netfilter and
/// Docker's FORWARD policy drop bridged frames of a bridge Docker does not
/// own.)
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn preview_ports_let_in_only_the_host_bridge_address() {
    use std::io::Write;
    use std::net::TcpListener;
    use vibe_policy::network::ruleset::{container_table, Facts};
    let guard = host_guard();
    let slot = vibe_shim_tests::egress::slot();
    let bridge = format!("vpvbr{slot}");
    let (gw, addr) = (format!("10.93.{slot}.1"), format!("10.93.{slot}.2"));
    struct Links(Vec<String>);
    impl Drop for Links {
        fn drop(&mut self) {
            for link in &self.0 {
                let _ = netns::run(&["ip", "link", "del", link]);
            }
        }
    }
    let _ = netns::run(&["ip", "link", "del", &bridge]);
    netns::must(&["ip", "link", "add", &bridge, "type", "bridge"]);
    let mut links = Links(vec![bridge.clone()]);
    netns::must(&["ip", "addr", "add", &format!("{gw}/24"), "dev", &bridge]);
    netns::must(&["ip", "link", "set", &bridge, "up"]);
    let attach = |ns: &Netns, host_end: &str, ip: &str| {
        let _ = netns::run(&["ip", "link", "del", host_end]);
        netns::must(&[
            "ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns",
            &ns.name,
        ]);
        netns::must(&["ip", "link", "set", host_end, "master", &bridge, "up"]);
        ns.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["route", "add", "default", "via", &gw]);
    };
    let mut container = Netns::new(&format!("vpvC{slot}"));
    container.tcp_server(8000);
    container.tcp_server(9000);
    let pid = container.spawn(&["sleep", "60"]);
    // A host listener on the bridge address, for the outward probe.
    let listener = TcpListener::bind((gw.as_str(), 0)).expect("bind on the bridge");
    let host_port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let _ = conn.write_all(b"ok\n");
        }
    });

    let mut net = policy(NetworkMode::Proxy, &[], false);
    net.hosts = vec!["api.example".into()];
    net.preview_ports = vec!["8000".parse().unwrap(), "3000-3999".parse().unwrap()];
    let mut listings = Vec::new();
    for (i, nft) in [None, Some(PathBuf::from("/usr/sbin/nft"))]
        .into_iter()
        .enumerate()
    {
        let with = NetworkSection { nft, ..net.clone() };
        run_network_hook(&state(pid, Path::new("/nonexistent")), &with).unwrap();
        if i == 0 {
            assert!(
                !table(&container).contains(&gw),
                "a preview rule before the container had an address:\n{}",
                table(&container)
            );
            // Control, the wall aside: the lab answers everyone.
            container.exec(&["nft", "delete", "table", "inet", "vibe_shim"]);
            attach(&container, &format!("vpvc{slot}"), &addr);
            links.0.push(format!("vpvc{slot}"));
            assert!(
                netns::host_fetch(&addr, 9000, "ok"),
                "control: host to 9000"
            );
            run_network_hook(&state(pid, Path::new("/nonexistent")), &with).unwrap();
        }
        check_before_start(ID, pid, &with).unwrap();
        let listing = table(&container);
        assert!(
            listing.contains(&format!("ip saddr {gw} tcp dport 8000 accept")),
            "{listing}"
        );
        assert_eq!(listing.matches("ip saddr").count(), 2, "{listing}");
        assert!(
            !has_default_route(&container),
            "proxy mode keeps no default route"
        );
        assert!(
            netns::host_fetch(&addr, 8000, "ok"),
            "host to a preview port"
        );
        assert!(
            !netns::host_fetch(&addr, 9000, "ok"),
            "host to an unlisted port"
        );
        assert!(
            !container.tcp_answers(&gw, host_port),
            "container out to the host"
        );
        listings.push(listing);
    }
    assert_eq!(listings[0], listings[1], "netlink vs nft");
    let facts = Facts {
        preview_sources: vec![gw.parse().unwrap()],
        ..Facts::default()
    };
    for chain in container_table(&net, &facts).chains {
        for rule in chain.rules {
            let line = format!("\t\t{rule}\n");
            assert!(listings[0].contains(&line), "{line:?} in\n{}", listings[0]);
        }
    }
    // Transparent egress's nat chain takes only connections the container
    // opens: a preview port's inbound ones are served as before, and one
    // to its own address stays its own. Out to the host's side it is an IP
    // literal for the listener (none here: refused either way).
    let transparent = NetworkSection {
        transparent: true,
        ..net.clone()
    };
    run_network_hook(&state(pid, Path::new("/nonexistent")), &transparent).unwrap();
    check_before_start(ID, pid, &transparent).unwrap();
    let listing = table(&container);
    assert!(
        listing.contains(&format!(
            "ip daddr != 127.0.0.0/8 ip daddr != {addr} meta l4proto tcp redirect to :3129"
        )),
        "{listing}"
    );
    assert!(
        netns::host_fetch(&addr, 8000, "ok"),
        "transparent: host to a preview port"
    );
    assert!(
        !netns::host_fetch(&addr, 9000, "ok"),
        "transparent: host to an unlisted port"
    );
    assert!(
        container.tcp_answers(&addr, 9000),
        "transparent: its own address"
    );
    assert!(
        !container.tcp_answers(&gw, host_port),
        "transparent: out to the host"
    );
    drop(container);
    drop(links);
    guard.assert_host_unchanged();
}
