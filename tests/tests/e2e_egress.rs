//! End to end: network mode "proxy" through the private dockerd
//! (`runtime_for("proxy")`, tests/policies/proxy.toml) and raw runc bundles,
//! against a `vibe-shim egress` daemon this suite starts itself on the
//! socket that policy names (inside the work tree's target/, so no system
//! daemon and no other work tree is involved). Containers are judged from
//! inside with busybox `nc`; the daemon by its own fds and records.
//!
//! The upstream test host lives in a namespace of ours behind a veth from
//! the host on a documentation range (198.51.100.128/27, one /30 per work
//! tree), serving on an address one hop further (203.0.113.x, routed via
//! that veth: the proxy refuses a host interface's own subnet); its names are
//! mapped in the host's /etc/hosts by a marked block that is removed on
//! drop, even when a test fails.

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use vibe_shim_tests::bundle::Bundle;
use vibe_shim_tests::docker::{self, Container, IMAGE};
use vibe_shim_tests::egress::{eventually, one_hop_host, Daemon, HostsBlock};
use vibe_shim_tests::harness::Output;
use vibe_shim_tests::netns::{run, Netns};

const ALLOWED: &str = "allowed.egress.vibe-test";
const PORT: u16 = 8080;
/// Allowed by the policy's wildcard, but mapped to a metadata / private
/// address in /etc/hosts.
const META: &str = "meta.wild.egress.vibe-test";
const PRIVATE: &str = "private.wild.egress.vibe-test";

/// One daemon (one socket) per work tree: the tests here take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------
// The upstream test host and its names

struct Upstream {
    _ns: Netns,
    ip: String,
    _hosts: HostsBlock,
}

impl Upstream {
    fn new() -> Upstream {
        let (mut ns, ip) = one_hop_host("vsEgr", "vethegr", 128);
        ns.tcp_server(PORT);
        ns.tcp_server(8081);
        ns.tcp_server(443);
        let hosts = HostsBlock::add(
            "e2e_egress",
            &[
                (ALLOWED, &ip),
                (&format!("other.{ALLOWED}"), &ip),
                (META, "169.254.169.254"),
                (PRIVATE, "10.213.7.5"),
            ],
        );
        Upstream {
            _ns: ns,
            ip,
            _hosts: hosts,
        }
    }
}

// ---------------------------------------------------------------------------
// Probes from inside

/// `nc` to the proxy port: `proxy=0` when something accepted the connect.
const PROXY_CONNECT: &str =
    "nc -w 2 127.0.0.1 3128 </dev/null >/dev/null 2>/tmp/nc.err; echo proxy=$?; cat /tmp/nc.err;";

fn connected(out: &Output) -> bool {
    out.stdout.lines().any(|l| l.trim() == "proxy=0")
}

fn start_detached(c: &Container, flags: &[&str]) {
    start_detached_under(c, "proxy", flags);
}

fn start_detached_under(c: &Container, stem: &str, flags: &[&str]) {
    let runtime = docker::runtime_for(stem);
    let mut args = vec!["run", "-d", "--name", &c.name, "--runtime", &runtime];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[IMAGE, "sleep", "300"]);
    docker::docker(&args).ok();
}

fn exec(c: &Container, script: &str) -> Output {
    docker::docker(&["exec", &c.name, "sh", "-c", script])
}

// ---------------------------------------------------------------------------
// Docker

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn listener_env_and_no_route() {
    let _serial = serial();
    let daemon = Daemon::start("proxy");
    let upstream = Upstream::new();
    let c = Container::new("egress");
    start_detached(
        &c,
        &[
            "-e",
            "HTTP_PROXY=http://evil.example:1",
            "-e",
            "Https_Proxy=http://evil.example:1",
            "-e",
            "no_proxy=*",
        ],
    );
    let out = exec(
        &c,
        &format!(
            "{PROXY_CONNECT} env; ip route; \
             nc -w 2 {ip} {PORT} </dev/null 2>&1; echo raw=$?",
            ip = upstream.ip
        ),
    );
    assert!(
        connected(&out),
        "no proxy listener inside: {out}\n{}",
        daemon.log()
    );
    for (name, value) in [
        ("HTTP_PROXY", "http://127.0.0.1:3128"),
        ("HTTPS_PROXY", "http://127.0.0.1:3128"),
        ("http_proxy", "http://127.0.0.1:3128"),
        ("https_proxy", "http://127.0.0.1:3128"),
        ("NO_PROXY", "localhost,127.0.0.1,::1"),
        ("no_proxy", "localhost,127.0.0.1,::1"),
        ("NODE_USE_ENV_PROXY", "1"),
    ] {
        let want = format!("{name}={value}");
        assert!(
            out.stdout.lines().any(|l| l == want),
            "{want} missing: {out}"
        );
    }
    assert!(
        !out.stdout.contains("evil") && !out.stdout.contains("no_proxy=*"),
        "{out}"
    );
    assert!(
        !out.stdout.contains("Https_Proxy"),
        "client variant kept: {out}"
    );
    // The proxy is the only way out: no route to the test host itself.
    assert!(!out.stdout.contains("default"), "default route: {out}");
    assert!(
        !out.stdout.lines().any(|l| l.trim() == "ok"),
        "raw connect answered: {out}"
    );
    assert!(
        out.stdout.contains("unreachable"),
        "expected no route: {out}"
    );
    // An exec's client value is replaced too.
    let out = docker::docker(&[
        "exec",
        "-e",
        "HTTPS_PROXY=http://evil.example:1",
        &c.name,
        "sh",
        "-c",
        "env",
    ]);
    assert!(
        out.stdout
            .lines()
            .any(|l| l == "HTTPS_PROXY=http://127.0.0.1:3128")
            && !out.stdout.contains("evil"),
        "{out}"
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn connect_to_an_allowed_name_reaches_the_test_host() {
    // The whole way: container, its 127.0.0.1:3128 listener, the egress
    // daemon's proxy, the upstream test host.
    let _serial = serial();
    let daemon = Daemon::start("proxy");
    let _upstream = Upstream::new();
    let c = Container::new("egress-connect");
    start_detached(&c, &[]);
    let out = exec(
        &c,
        &format!(
            "printf 'CONNECT {ALLOWED}:{PORT} HTTP/1.1\\r\\nHost: {ALLOWED}:{PORT}\\r\\n\\r\\n' \
             | nc -w 3 127.0.0.1 3128"
        ),
    );
    assert!(
        out.stdout.contains(" 200") && out.stdout.lines().any(|l| l.trim() == "ok"),
        "CONNECT did not reach the test host: {out}\n{}",
        daemon.log()
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn daemon_down_refuses_create_and_a_restart_restores_the_proxy() {
    let _serial = serial();
    let mut daemon = Daemon::start("proxy");
    let c = Container::new("egress-restart");
    start_detached(&c, &[]);
    assert!(connected(&exec(&c, PROXY_CONNECT)), "{}", daemon.log());

    daemon.stop();
    // The listener went with the daemon: nothing accepts on 3128 now.
    let out = exec(&c, PROXY_CONNECT);
    assert!(!connected(&out), "listener outlived the daemon: {out}");
    // A create while the daemon is down is refused, with the reason.
    let refused = Container::new("egress-down");
    let runtime = docker::runtime_for("proxy");
    let out = docker::docker(&[
        "run",
        "--rm",
        "--name",
        &refused.name,
        "--runtime",
        &runtime,
        IMAGE,
        "true",
    ]);
    docker::assert_refused_by_shim(&out);
    assert!(
        out.stderr.contains("egress") && out.stderr.contains("egress.sock"),
        "refusal does not say why: {out}"
    );

    daemon.restart();
    assert!(
        eventually(10, || connected(&exec(&c, PROXY_CONNECT))),
        "the running container did not get its proxy back: {}",
        daemon.log()
    );
    assert!(
        daemon.log().contains("serving on 127.0.0.1:3128"),
        "{}",
        daemon.log()
    );
}

/// `printf` format text for `bytes`, every byte as an octal escape (so no
/// `%` or `\\` is read as a directive).
fn printf_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:03o}")).collect()
}

/// A CONNECT request line and headers for `host:port`.
fn connect_head(host: &str, port: u16) -> Vec<u8> {
    format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n").into_bytes()
}

/// A minimal TLS 1.2 ClientHello record whose SNI is `sni`.
fn client_hello(sni: &str) -> Vec<u8> {
    let name = sni.as_bytes();
    let mut sni_ext = Vec::new();
    let list_len = name.len() + 3;
    sni_ext.extend_from_slice(&[0, 0]); // server_name
    sni_ext.extend_from_slice(&((list_len + 2) as u16).to_be_bytes());
    sni_ext.extend_from_slice(&(list_len as u16).to_be_bytes());
    sni_ext.push(0); // host_name
    sni_ext.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni_ext.extend_from_slice(name);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]); // random
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
    body.extend_from_slice(&[1, 0]); // null compression
    body.extend_from_slice(&(sni_ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&sni_ext);
    let mut handshake = vec![1];
    handshake.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend_from_slice(&body);
    let mut record = vec![0x16, 3, 1];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}

/// Sends `bytes` to the proxy from inside `c`; prints `LABEL:` then the
/// answer, each line prefixed so the answers of several probes stay apart.
fn via_proxy(label: &str, bytes: &[u8]) -> String {
    format!(
        "printf '{}' | nc -w 3 127.0.0.1 3128 2>&1 | sed 's/^/{label}: /';",
        printf_bytes(bytes)
    )
}

fn answer<'a>(out: &'a Output, label: &str) -> Vec<&'a str> {
    let prefix = format!("{label}: ");
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(str::trim)
        .collect()
}

/// The cases the proxy refuses, each with the host the 403 must name.
fn refusal_cases() -> Vec<(&'static str, Vec<u8>, String)> {
    let other = format!("other.{ALLOWED}");
    let mut fronted = connect_head(ALLOWED, 443);
    fronted.extend_from_slice(&client_hello("evil.example"));
    vec![
        ("name", connect_head(&other, PORT), other.clone()),
        ("port", connect_head(ALLOWED, 8081), ALLOWED.to_string()),
        ("meta", connect_head(META, PORT), META.to_string()),
        ("private", connect_head(PRIVATE, PORT), PRIVATE.to_string()),
        ("sni", fronted, ALLOWED.to_string()),
    ]
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn refusals_are_403s_that_name_the_host_and_are_logged() {
    let _serial = serial();
    let daemon = Daemon::start("proxy");
    let _upstream = Upstream::new();
    let c = Container::new("egress-refused");
    start_detached(&c, &[]);
    // The control: the right SNI on 443 reaches the test host.
    let mut good = connect_head(ALLOWED, 443);
    good.extend_from_slice(&client_hello(ALLOWED));
    let mut script = via_proxy("good", &good);
    let cases = refusal_cases();
    for (label, bytes, _) in &cases {
        script.push_str(&via_proxy(label, bytes));
    }
    let out = exec(&c, &script);
    let log = || std::fs::read_to_string(daemon.egress_log()).unwrap_or_default();
    assert!(
        answer(&out, "good").contains(&"ok"),
        "control: SNI = CONNECT host must pass: {out}\n{}",
        log()
    );
    for (label, _, host) in &cases {
        let lines = answer(&out, label);
        assert!(
            lines.iter().any(|l| l.contains(" 403 ")),
            "{label}: no 403: {out}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("vibe-shim") && l.contains(host.as_str())),
            "{label}: the 403 does not name vibe-shim and {host}: {out}"
        );
        assert!(
            !lines.contains(&"ok"),
            "{label}: reached the test host: {out}"
        );
    }
    // One JSON line per denial, naming the host.
    let text = log();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("egress log line is JSON"))
        .collect();
    for (label, _, host) in &cases {
        assert!(
            lines
                .iter()
                .any(|l| l["decision"] == "deny" && l["host"] == host.as_str()),
            "{label}: no deny line for {host}: {text}"
        );
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn report_mode_allows_and_logs_would_deny() {
    let _serial = serial();
    let daemon = Daemon::start("proxy");
    let _upstream = Upstream::new();
    let c = Container::new("egress-report");
    start_detached_under(&c, "proxy-report", &[]);
    let other = format!("other.{ALLOWED}");
    let out = exec(&c, &via_proxy("name", &connect_head(&other, PORT)));
    assert!(
        answer(&out, "name").contains(&"ok"),
        "report mode refused a name: {out}\n{}",
        daemon.log()
    );
    let text = std::fs::read_to_string(daemon.egress_log()).unwrap_or_default();
    assert!(
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|l| l["decision"] == "would-deny" && l["host"] == other.as_str()),
        "no would-deny line: {text}"
    );
}

// ---------------------------------------------------------------------------
// Raw runc bundles

fn raw_policy(daemon: &Daemon) -> String {
    format!(
        "[network]\nmode = \"proxy\"\nhosts = [\"{ALLOWED}:{PORT}\"]\negress_socket = \"{}\"\n",
        daemon.socket().display()
    )
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn start_is_refused_when_the_daemon_lost_the_container() {
    let _serial = serial();
    let mut daemon = Daemon::start("proxy");
    let bundle = Bundle::busybox("egress-start", &["sleep", "300"], &raw_policy(&daemon));
    let out = bundle.create();
    assert!(
        out.status.success(),
        "create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(daemon.served(), 1, "{}", daemon.log());
    // Restarted without its records: it does not serve the container.
    daemon.stop();
    let _ = std::fs::remove_dir_all(daemon.records());
    daemon.spawn();
    assert_eq!(daemon.served(), 0);
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(!out.status.success(), "start ran without a proxy");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("vibe-shim") && err.contains("not registered"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn two_hundred_containers_leave_no_listener_fd_namespace_or_record() {
    let _serial = serial();
    let daemon = Daemon::start("proxy");
    let policy = raw_policy(&daemon);
    let own_ns = daemon.thread_namespaces();
    let fds_before = daemon.fds();
    let rss_before = daemon.rss_kib();
    let started = Instant::now();
    // All 200 registered at once (created, not started: idle), then deleted.
    let mut bundles = Vec::new();
    for n in 0..200 {
        let bundle = Bundle::busybox(&format!("egress-{n}"), &["sleep", "300"], &policy);
        let out = bundle.create();
        assert!(
            out.status.success(),
            "create {n}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            daemon.log()
        );
        bundles.push(bundle);
    }
    assert_eq!(daemon.served(), 200, "{}", daemon.log());
    assert_eq!(daemon.record_files().len(), 200);
    assert!(
        daemon.fds() >= fds_before + 200,
        "fewer than one listener fd per container"
    );
    let rss = daemon.rss_kib();
    eprintln!(
        "egress daemon with 200 idle containers: RSS {rss_before} KiB -> {rss} KiB (+{} KiB, {:.1} KiB each)",
        rss.saturating_sub(rss_before),
        rss.saturating_sub(rss_before) as f64 / 200.0
    );
    // A leak check, not a target: the bench's listeners take ~3 KiB each.
    assert!(
        rss.saturating_sub(rss_before) < 200 * 256,
        "over 256 KiB per idle container"
    );
    // Bundle's drop deletes through vibe-shim (`delete -f`): at once, not
    // at the next sweep.
    let first = bundles.remove(0);
    drop(first);
    assert_eq!(daemon.served(), 199, "{}", daemon.log());
    assert_eq!(daemon.record_files().len(), 199);
    drop(bundles);
    eprintln!(
        "200 proxy containers created, held and deleted in {:?}",
        started.elapsed()
    );
    assert!(
        eventually(5, || daemon.fds() <= fds_before),
        "daemon fds {} > {fds_before} before: listeners left",
        daemon.fds()
    );
    assert_eq!(daemon.served(), 0, "{}", daemon.log());
    assert!(
        daemon.record_files().is_empty(),
        "{:?}",
        daemon.record_files()
    );
    // No thread of the daemon stayed in a container's namespace.
    assert_eq!(daemon.thread_namespaces(), own_ns);
}

/// Listeners inside the namespace of the process `pid`, from `ss`.
fn listeners_in(pid: &str) -> String {
    let out = run(&["nsenter", "-t", pid, "-n", "ss", "-Hltn"]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn containers_sharing_a_namespace_share_its_listener() {
    let _serial = serial();
    let daemon = Daemon::start("proxy");
    let policy = raw_policy(&daemon);
    let first = Bundle::busybox("egress-pod", &["sleep", "300"], &policy);
    assert!(first.create().status.success(), "{}", daemon.log());
    let state = first.shim(&["state", &first.id], b"");
    let state: serde_json::Value = serde_json::from_slice(&state.stdout).expect("state JSON");
    let pid = state["pid"].to_string();
    // The second joins the first's namespace (a pod, `--network container:`):
    // the port is already bound there, and that is fine.
    let second = Bundle::busybox("egress-pod2", &["sleep", "300"], &policy);
    let mut spec = second.spec();
    for ns in spec["linux"]["namespaces"]
        .as_array_mut()
        .expect("namespaces")
    {
        if ns["type"] == "network" {
            ns["path"] = format!("/proc/{pid}/ns/net").into();
        }
    }
    second.write_spec(&spec);
    let out = second.create();
    assert!(
        out.status.success(),
        "second create: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    assert_eq!(daemon.served(), 2);
    let second_pid = second.shim(&["state", &second.id], b"");
    let second_pid: serde_json::Value =
        serde_json::from_slice(&second_pid.stdout).expect("state JSON");
    let second_pid = second_pid["pid"].to_string();
    drop(first);
    assert_eq!(daemon.served(), 1);
    assert!(
        listeners_in(&second_pid).contains("127.0.0.1:3128"),
        "the listener went with the first container"
    );
    drop(second);
    assert_eq!(daemon.served(), 0);
}
