//! The network modes end to end: `docker run` on the private test dockerd with
//! the runtimes `runtime_for("network-{none,allow,open,nonft,dns,inbound}")`
//! (vibe-shim-network-* in CI), judged from inside the
//! container with busybox (`ip route`, `nc`, `tftp`). Every target is a test
//! host in the "world" namespace built here, or the bridge gateway, where the
//! test itself listens. Each negative has a control: the same probe under
//! plain runc answers, so "no answer" means the policy, not a broken lab.

use std::io::Write;
use std::net::TcpListener;
use std::sync::Mutex;

use vibe_shim_tests::docker::{self, Container, IMAGE};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::Output;
use vibe_shim_tests::netns::{self, World};

/// One world at a time: it owns fixed names and a host ip rule.
static SERIAL: Mutex<()> = Mutex::new(());

struct Lab {
    _world: World,
    gateway: String,
    gateway_port: u16,
    _serial: std::sync::MutexGuard<'static, ()>,
}

fn lab() -> Lab {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = env();
    let bridge = env.var("VIBE_TEST_BRIDGE").to_string();
    let gateway = env.var("VIBE_TEST_GATEWAY").to_string();
    // A server on the bridge gateway (the host), bound to that address only.
    let listener = TcpListener::bind((gateway.as_str(), 0)).expect("bind on the bridge gateway");
    let gateway_port = listener.local_addr().expect("local addr").port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let _ = conn.write_all(b"ok\n");
        }
    });
    Lab {
        _world: World::new(&bridge),
        gateway,
        gateway_port,
        _serial: serial,
    }
}

/// Runs `script` in a fresh container; returns stdout+stderr of the run.
fn probe(runtime: &str, script: &str) -> Output {
    probe_with(runtime, &[], script)
}

/// [`probe`] with extra `docker run` flags.
fn probe_with(runtime: &str, flags: &[&str], script: &str) -> Output {
    let c = Container::new("net");
    let mut args = vec!["run", "--rm", "--name", &c.name, "--runtime", runtime];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[IMAGE, "sh", "-c", script]);
    docker::docker(&args)
}

/// `nc` to HOST PORT, printing `LABEL=ok` when the test server answered.
fn tcp(label: &str, host: &str, port: u16) -> String {
    format!("echo {label}=$(nc -w 2 {host} {port} </dev/null 2>/dev/null);")
}

/// A UDP round trip through busybox tftp (the server replies TFTP ERROR "ok").
fn udp(label: &str, host: &str, port: u16) -> String {
    format!("echo {label}=$(timeout 4 tftp -g -r x -l /dev/null {host} {port} 2>&1 | grep -o 'error: (0) ok' | head -1 | cut -c12-);")
}

fn answered(out: &Output, label: &str) -> bool {
    out.stdout
        .lines()
        .any(|l| l.trim() == format!("{label}=ok"))
}

fn ran(out: Output) -> Output {
    assert!(out.success(), "container did not run: {out}");
    out
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn none_mode_no_route_no_gateway_no_metadata() {
    let lab = lab();
    let script = format!(
        "ip route; ip -6 route; {} {} {} \
         ip route add default via {} 2>/dev/null; echo addroute=$?; \
         nft flush ruleset 2>/dev/null; echo nft=$?",
        tcp("gw", &lab.gateway, lab.gateway_port),
        tcp("meta", netns::METADATA_HOST, 8080),
        tcp("pub", netns::PUBLIC_HOST, 8080),
        lab.gateway,
    );
    let control = ran(probe("runc", &script));
    assert!(
        answered(&control, "gw"),
        "control: gateway server must answer: {control}"
    );
    assert!(
        answered(&control, "pub"),
        "control: test host must answer: {control}"
    );

    let out = ran(probe(&docker::runtime_for("network-none"), &script));
    assert!(!out.stdout.contains("default"), "default route left: {out}");
    for label in ["gw", "meta", "pub"] {
        assert!(!answered(&out, label), "{label} answered under none: {out}");
    }
    assert!(
        !out.stdout.contains("addroute=0"),
        "ip route add worked: {out}"
    );
    // busybox has no nft; if a binary were there, it would fail the same way
    // (no CAP_NET_ADMIN): either way the ruleset cannot be flushed.
    assert!(!out.stdout.contains("nft=0"), "nft flush worked: {out}");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn allowlist_mode_exactly_the_listed_entries() {
    let lab = lab();
    let v6 = "ip -6 addr show scope global | grep -q inet6 && echo has_v6=ok;";
    let script = format!(
        "ip route; {v6} {} {} {} {} {} {} {} {}",
        tcp("listed", netns::PUBLIC_HOST, 8080),
        tcp("otherport", netns::PUBLIC_HOST, 8081),
        tcp("unlisted", netns::UNLISTED_HOST, 8080),
        tcp("gw", &lab.gateway, lab.gateway_port),
        udp("udp", netns::PUBLIC_HOST, 8053),
        udp("udpunlisted", netns::UNLISTED_HOST, 8053),
        tcp("v6", netns::PUBLIC_HOST6, 8080),
        tcp("v6unlisted", netns::UNLISTED_HOST6, 8080),
    );
    let control = ran(probe("runc", &script));
    for label in ["listed", "otherport", "unlisted", "udp", "udpunlisted"] {
        assert!(
            answered(&control, label),
            "control: {label} must answer: {control}"
        );
    }
    let has_v6 = answered(&control, "has_v6");
    if has_v6 {
        assert!(
            answered(&control, "v6unlisted"),
            "control: v6 must answer: {control}"
        );
    }

    let out = ran(probe(&docker::runtime_for("network-allow"), &script));
    assert!(answered(&out, "listed"), "listed host:port: {out}");
    assert!(answered(&out, "udp"), "listed UDP entry: {out}");
    for label in ["otherport", "unlisted", "gw", "udpunlisted", "v6unlisted"] {
        assert!(
            !answered(&out, label),
            "{label} answered under allowlist: {out}"
        );
    }
    if has_v6 {
        assert!(answered(&out, "v6"), "listed IPv6 entry: {out}");
    } else {
        eprintln!(
            "note: the test daemon gives containers no IPv6; v6 is covered by tests/netns_root.rs"
        );
    }
    assert!(
        !out.stdout.contains("default"),
        "allowlist keeps no default route: {out}"
    );
    assert!(
        out.stdout.contains("203.0.113.5 via"),
        "route to the listed host: {out}"
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn open_mode_public_yes_private_no() {
    let lab = lab();
    let script = format!(
        "{} {} {} {} {} {}",
        tcp("pub", netns::PUBLIC_HOST, 8080),
        tcp("pub2", netns::UNLISTED_HOST, 8081),
        udp("udp", netns::PUBLIC_HOST, 8053),
        tcp("gw", &lab.gateway, lab.gateway_port),
        tcp("rfc1918", netns::PRIVATE_HOST, 8080),
        tcp("meta", netns::METADATA_HOST, 8080),
    );
    let control = ran(probe("runc", &script));
    for label in ["pub", "gw", "rfc1918", "meta"] {
        assert!(
            answered(&control, label),
            "control: {label} must answer: {control}"
        );
    }
    let out = ran(probe(&docker::runtime_for("network-open"), &script));
    for label in ["pub", "pub2", "udp"] {
        assert!(
            answered(&out, label),
            "{label} must answer under open: {out}"
        );
    }
    for label in ["gw", "rfc1918", "meta"] {
        assert!(!answered(&out, label), "{label} answered under open: {out}");
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn host_unchanged_across_50_runs_and_no_table_left() {
    let _lab = lab();
    let before = netns::host_network_snapshot();
    for i in 0..50 {
        let runtime = ["network-none", "network-allow", "network-open"][i % 3];
        ran(probe(&docker::runtime_for(runtime), "true"));
    }
    assert_eq!(
        before,
        netns::host_network_snapshot(),
        "host routes or ruleset changed"
    );
    let tables = netns::must(&["nft", "list", "tables"]);
    assert!(
        !tables.contains("vibe_shim"),
        "vibe_shim table on the host: {tables}"
    );
    // The engine's own namespace files: every container is gone, so none is
    // left, and none of what is left (other suites) may carry our table
    // unless a container is still running in it.
    let dir = env().state.join("exec/netns");
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let path = entry.path().display().to_string();
        // The engine's netns files are mounts in its own mount namespace.
        let net = format!("--net={path}");
        let env = env();
        let out = netns::run(&env.in_engine_ns(&["nsenter", &net, "nft", "list", "tables"]));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("vibe_shim") {
            let running = docker::docker(&["ps", "-q"]).stdout;
            assert!(
                !running.trim().is_empty(),
                "vibe_shim table left in {path} with no container running"
            );
        }
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn missing_nft_refuses_the_run() {
    let c = Container::new("nonft");
    let out = docker::docker(&[
        "run",
        "--name",
        &c.name,
        "--runtime",
        &docker::runtime_for("network-nonft"),
        IMAGE,
        "sleep",
        "30",
    ]);
    docker::assert_refused_by_shim(&out);
    assert!(out.stderr.contains("nft"), "the reason names nft: {out}");
    let state = docker::docker(&["inspect", "-f", "{{.State.Running}}", &c.name]);
    assert!(
        !state.stdout.contains("true"),
        "container left running: {state}"
    );
}

// ---------------------------------------------------------------------------
// Inbound: dropped unless network.inbound allows it. The host (the test process, in the host's
// namespace) is the client; the container serves "secret" on 8080.

/// What the host could fetch from a container serving on 8080.
#[derive(Debug)]
struct Inbound {
    published: bool,
    v4: bool,
    v6: Option<bool>,
}

fn fetch(addr: &str, port: u16, want: &str) -> bool {
    netns::host_fetch(addr, port, want)
}

/// Starts a container publishing 8080 on 127.0.0.1 (through the engine's
/// proxy) and fetches from it: through the published port, and straight to
/// its bridge addresses, IPv4 and IPv6 (`None`: the container has no IPv6).
fn inbound(runtime: &str) -> Inbound {
    let c = Container::new("inbound");
    docker::docker(&[
        "run",
        "-d",
        "--name",
        &c.name,
        "--runtime",
        runtime,
        "-p",
        "127.0.0.1::8080",
        IMAGE,
        "sh",
        "-c",
        "ip -o addr show dev eth0 scope global; exec nc -ll -p 8080 -e /bin/echo secret",
    ])
    .ok();
    let port: u16 = docker::docker(&["port", &c.name, "8080/tcp"])
        .ok()
        .stdout
        .lines()
        .filter_map(|l| l.rsplit(':').next()?.trim().parse().ok())
        .next()
        .expect("published port");
    let mut logs = String::new();
    for _ in 0..50 {
        logs = docker::docker(&["logs", &c.name]).stdout;
        if logs.contains("inet ") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let addr = |family: &str| {
        logs.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace().skip_while(|w| *w != family);
                w.next()?;
                Some(w.next()?.split('/').next()?.to_string())
            })
            .next()
    };
    let v4 = addr("inet").expect("container IPv4 address");
    let v6 = addr("inet6");
    // The server needs a moment; positives retry, negatives get the same time.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let attempt = |f: &dyn Fn() -> bool| (0..3).any(|_| f());
    Inbound {
        published: attempt(&|| fetch("127.0.0.1", port, "secret")),
        v4: attempt(&|| fetch(&v4, 8080, "secret")),
        v6: v6.map(|a| attempt(&|| fetch(&a, 8080, "secret"))),
    }
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn none_mode_published_port_cannot_be_fetched() {
    let _serial = serial();
    let control = inbound("runc");
    assert!(control.published && control.v4, "control: {control:?}");
    let out = inbound(&docker::runtime_for("network-none"));
    assert!(
        !out.published,
        "published port answered under none: {out:?}"
    );
    assert!(!out.v4, "IPv4 inbound under none: {out:?}");
    assert_ne!(out.v6, Some(true), "IPv6 inbound under none: {out:?}");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn inbound_false_drops_new_connections_in_allowlist_and_open() {
    let _serial = serial();
    let control = inbound("runc");
    assert!(control.published && control.v4, "control: {control:?}");
    if control.v6.is_none() {
        eprintln!("note: no IPv6 on the test bridge; v6 is covered by tests/netns_root.rs");
    }
    for stem in ["network-allow", "network-open"] {
        let out = inbound(&docker::runtime_for(stem));
        assert!(!out.published, "{stem}: published port answered: {out:?}");
        assert!(!out.v4, "{stem}: IPv4 inbound: {out:?}");
        assert_ne!(out.v6, Some(true), "{stem}: IPv6 inbound: {out:?}");
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn inbound_true_publishes_ports_in_open_mode() {
    let _serial = serial();
    let out = inbound(&docker::runtime_for("network-inbound"));
    assert!(
        out.published,
        "published port under inbound = true: {out:?}"
    );
    assert!(out.v4, "IPv4 inbound under inbound = true: {out:?}");
    assert_ne!(
        out.v6,
        Some(false),
        "IPv6 inbound under inbound = true: {out:?}"
    );
}

// ---------------------------------------------------------------------------
// An address the host gains after the container started: the wall is
// judged on the host's addresses now, not those it had at create.

/// A TCP server in the host's namespace on `addr`, answering "ok".
fn host_server(addr: &str) -> u16 {
    let listener = TcpListener::bind((addr, 0)).expect("bind on the new host address");
    let port = listener.local_addr().expect("local addr").port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let _ = conn.write_all(b"ok\n");
        }
    });
    port
}

/// Starts a container, then gives the host a new address (v4 and v6 on a
/// dummy interface, documentation ranges) with a server on it, then
/// connects from inside the container.
fn reach_new_host_address(runtime: &str) -> Output {
    const V4: &str = "192.0.2.77";
    const V6: &str = "2001:db8:77::1";
    let c = Container::new("hostaddr");
    docker::docker(&[
        "run",
        "-d",
        "--name",
        &c.name,
        "--runtime",
        runtime,
        IMAGE,
        "sleep",
        "60",
    ])
    .ok();
    let _addr = netns::HostAddress::add("vsnewaddr", V4, V6);
    let (p4, p6) = (host_server(V4), host_server(V6));
    let script = format!("{} {}", tcp("v4", V4, p4), tcp("v6", V6, p6));
    docker::docker(&["exec", &c.name, "sh", "-c", &script]).ok()
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn open_mode_host_address_added_after_create_is_unreachable() {
    let _serial = serial();
    let control = reach_new_host_address("runc");
    assert!(answered(&control, "v4"), "control: {control}");
    let has_v6 = answered(&control, "v6");
    let out = reach_new_host_address(&docker::runtime_for("network-open"));
    assert!(
        !answered(&out, "v4"),
        "new IPv4 host address reached: {out}"
    );
    assert!(
        !answered(&out, "v6"),
        "new IPv6 host address reached: {out}"
    );
    if !has_v6 {
        eprintln!("note: no IPv6 on the test bridge; v6 is covered by tests/netns_root.rs");
    }
}

// ---------------------------------------------------------------------------
// DNS only to the administrator's resolvers: a container's own resolver
// choice is no way out.

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn dns_only_to_the_configured_resolvers_never_to_client_dns() {
    let _lab = lab();
    // The client names the unlisted test hosts as its resolvers.
    let flags = [
        "--dns",
        netns::UNLISTED_HOST,
        "--dns",
        netns::UNLISTED_HOST6,
    ];
    let script = format!(
        "cat /etc/resolv.conf; {} {} {} {} {} {}",
        tcp("r4", netns::RESOLVER_HOST, 53),
        udp("r4u", netns::RESOLVER_HOST, 53),
        tcp("r6", netns::RESOLVER_HOST6, 53),
        tcp("c4", netns::UNLISTED_HOST, 53),
        udp("c4u", netns::UNLISTED_HOST, 53),
        tcp("c6", netns::UNLISTED_HOST6, 53),
    );
    let control = ran(probe_with("runc", &flags, &script));
    for label in ["r4", "r4u", "c4", "c4u"] {
        assert!(answered(&control, label), "control: {label}: {control}");
    }
    let has_v6 = answered(&control, "c6");
    let out = ran(probe_with(
        &docker::runtime_for("network-dns"),
        &flags,
        &script,
    ));
    assert!(
        out.stdout.contains(netns::UNLISTED_HOST),
        "the client's --dns reached resolv.conf: {out}"
    );
    for label in ["c4", "c4u", "c6"] {
        assert!(
            !answered(&out, label),
            "client-named resolver {label}: {out}"
        );
    }
    for label in ["r4", "r4u"] {
        assert!(answered(&out, label), "configured resolver {label}: {out}");
    }
    if has_v6 {
        assert!(answered(&out, "r6"), "configured IPv6 resolver: {out}");
    }
}
