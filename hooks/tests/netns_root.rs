//! The hook against real network namespaces (root only). A "container"
//! namespace is wired to a "provider" namespace holding the test hosts; the
//! host namespace takes no part, and each test checks it is left unchanged.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use vibe_hooks::{check_before_start, run_network_hook, HookError};
use vibe_policy::config::{NetworkMode, NetworkSection};
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
        nft: None,
    }
}

fn state(pid: i32, bundle: &Path) -> Vec<u8> {
    serde_json::json!({
        "ociVersion": "1.0.2", "id": "vibe-hooks-test", "status": "creating",
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

/// One host global IPv4 address (copied onto the provider to prove open
/// mode blocks the host's own addresses).
fn a_host_v4() -> Option<String> {
    let out = netns::must(&["ip", "-4", "-o", "addr", "show", "scope", "global"]);
    out.lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .map(|cidr| cidr.split('/').next().unwrap_or(cidr).to_string())
        .find(|a| !a.starts_with("203.0.113.") && !a.starts_with("198.51.100."))
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
    check_before_start(pid, &net).unwrap();
    assert!(c.tcp_answers(netns::PUBLIC_HOST, 8080));
    guard.assert_host_unchanged();
    drop(lab);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn open_mode_allows_public_but_nothing_private() {
    let mut lab = Lab::new("open");
    let host_addr = a_host_v4();
    if let Some(addr) = &host_addr {
        // In the provider, not the host: the packet can only land there.
        lab.add_provider_host(&format!("{addr}/32"));
    }
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
    if let Some(addr) = &host_addr {
        assert!(!c.tcp_answers(addr, 8080), "host address {addr}");
    }
    assert!(has_default_route(c), "open mode keeps the routes");
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
    check_before_start(pid, &net).unwrap();
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
    check_before_start(pid2, &none).unwrap();
    assert!(!has_default_route(&lab2.container));
    assert!(!lab2.container.tcp_answers(netns::PUBLIC_HOST, 8080));
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn dns_allows_the_resolv_conf_nameservers_at_create_and_start() {
    let mut lab = Lab::new_detached("dns");
    let guard = host_guard();
    let bundle = bundle_with_resolv_conf("nameserver 203.0.113.6\nnameserver 127.0.0.11\n");
    let pid = lab.container.spawn(&["sleep", "60"]);
    let net = policy(NetworkMode::Allowlist, &["203.0.113.5:8080"], true);
    run_network_hook(&state(pid, bundle.path()), &net).unwrap();
    let t = table(&lab.container);
    for proto in ["udp", "tcp"] {
        let rule = format!("ip daddr 203.0.113.6 {proto} dport 53 accept");
        assert!(t.contains(&rule), "{t}");
    }
    assert!(
        !t.contains("127.0.0.11 drop"),
        "dns = true allows Docker's DNS: {t}"
    );
    lab.attach_container();
    check_before_start(pid, &net).unwrap();
    let routes = lab.container.ip(&["-4", "route"]);
    assert!(routes.contains("203.0.113.6 via 198.51.100.1"), "{routes}");
    assert!(
        !lab.container.tcp_answers(netns::UNLISTED_HOST, 8080),
        "only port 53"
    );
    guard.assert_host_unchanged();
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
    let err = check_before_start(pid, &none).unwrap_err();
    assert!(matches!(err, HookError::TableMissing), "{err}");
    // ...and one whose table came from another policy.
    run_network_hook(&st, &none).unwrap();
    let other = policy(NetworkMode::Open, &[], false);
    let err = check_before_start(pid, &other).unwrap_err();
    assert!(matches!(err, HookError::TableForeign { .. }), "{err}");
    check_before_start(pid, &none).unwrap();
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
        let err = check_before_start(pid, &none).unwrap_err();
        assert!(
            matches!(err, HookError::TableForeign { .. }),
            "{add}: {err}"
        );
        let out = lab.container.exec(&["nft", undo]);
        assert!(out.status.success(), "{undo}: {out:?}");
        check_before_start(pid, &none).unwrap();
    }

    // A process in the host's namespace is refused before anything runs.
    let me = std::process::id() as i32;
    let err = run_network_hook(&state(me, Path::new("/nonexistent")), &none).unwrap_err();
    assert!(matches!(err, HookError::HostNamespace { .. }), "{err}");
    let err = check_before_start(me, &none).unwrap_err();
    assert!(matches!(err, HookError::HostNamespace { .. }), "{err}");
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
    use vibe_hooks::ruleset::{output_rules, HostFacts};
    let guard = host_guard();
    let bundle = bundle_with_resolv_conf("nameserver 192.0.2.53\nnameserver 2001:db8::53\n");
    let every_allow_form = [
        "192.0.2.10",
        "198.51.100.0/24:443",
        "203.0.113.5:8000-8100/udp",
        "[2001:db8::5]:8080",
        "2001:db8:1::/48",
        "10.0.0.0/7:22",
        "0.0.0.0/0:853",
    ];
    for net in [
        policy(NetworkMode::None, &[], false),
        policy(NetworkMode::Allowlist, &every_allow_form, true),
        policy(NetworkMode::Open, &[], false),
        policy(NetworkMode::Open, &[], true),
    ] {
        let mut listings = Vec::new();
        for nft in [None, Some(PathBuf::from("/usr/sbin/nft"))] {
            let mut ns = Netns::new("vsEq");
            let pid = ns.spawn(&["sleep", "60"]);
            let with = NetworkSection {
                nft: nft.clone(),
                ..net.clone()
            };
            run_network_hook(&state(pid, bundle.path()), &with).unwrap();
            check_before_start(pid, &with).unwrap();
            listings.push(table(&ns));
        }
        assert_eq!(listings[0], listings[1], "netlink vs nft for {net:?}");
        let facts = HostFacts {
            nameservers: vec![
                "192.0.2.53".parse().unwrap(),
                "2001:db8::53".parse().unwrap(),
            ],
            host_addrs: Vec::new(),
        };
        for rule in output_rules(&net, &facts) {
            // Open mode adds the host's own addresses; the rest is fixed.
            let line = format!("\t\t{rule}\n");
            assert!(listings[0].contains(&line), "{line:?} in\n{}", listings[0]);
        }
    }
    guard.assert_host_unchanged();
}

/// The hook's wall time as runc sees it: each run meets a fresh namespace
/// (a veth eth0 with a default route), as at a real `runc create`.
/// `cargo test --release -p vibe-hooks --test netns_root -- --ignored --nocapture hook_timing`
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
            check_before_start(pid, &net).unwrap();
            start.push(t.elapsed());
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
    check_before_start(pid, &open).unwrap();
    assert!(lab.container.tcp_answers(netns::UNLISTED_HOST, 8080));

    let t = Instant::now();
    run_network_hook(&st, &allow).unwrap();
    println!("re-apply over an existing table: {:?}", t.elapsed());
    check_before_start(pid, &allow).unwrap();
    let err = check_before_start(pid, &open).unwrap_err();
    assert!(matches!(err, HookError::TableForeign { .. }), "{err}");
    let listing = table(&lab.container);
    assert!(
        !listing.contains("10.0.0.0/8"),
        "open mode's rules stayed:\n{listing}"
    );
    assert!(lab.container.tcp_answers(netns::PUBLIC_HOST, 8080));
    assert!(!lab.container.tcp_answers(netns::UNLISTED_HOST, 8080));
    guard.assert_host_unchanged();
}
