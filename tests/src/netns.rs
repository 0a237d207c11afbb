//! Test hosts in network namespaces the tests create themselves, for the
//! network suites. Every address a test sends to lives in one of these
//! namespaces (or is 127.0.0.1 / the bridge gateway); nothing else is a target.
//!
//! Servers answer "ok": TCP through `busybox nc -ll -e /bin/echo ok`, UDP
//! through a few lines of python3 (the busybox here has no UDP nc) whose
//! reply is a TFTP ERROR packet with message "ok", so busybox `tftp` inside a
//! container prints `server error: (0) ok` when the round trip works.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs a command; returns its output whatever the exit status.
pub fn run(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"))
}

/// Runs a command that must succeed; returns its stdout.
pub fn must(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether a TCP connect from the host's namespace to `addr`:`port` gets
/// `want` back within two seconds (a server that writes and closes).
pub fn host_fetch(addr: &str, port: u16, want: &str) -> bool {
    use std::io::Read;
    use std::net::{SocketAddr, TcpStream};
    let Ok(ip) = addr.parse::<std::net::IpAddr>() else {
        return false;
    };
    let Ok(mut s) = TcpStream::connect_timeout(&SocketAddr::new(ip, port), Duration::from_secs(2))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut got = String::new();
    let _ = s.read_to_string(&mut got);
    got.contains(want)
}

/// The host state the network hook must never change: routes of every table
/// and the nftables ruleset (stateless: counters are traffic, not rules).
/// Other engineers' and suites' containers come and go on the same host:
/// their veths and podman's CNI chains are not ours to judge, and are left
/// out; everything the hook could write (any table, any of our routes) is in.
pub fn host_network_snapshot() -> String {
    let mut text = must(&["ip", "-4", "route", "show", "table", "all"]);
    text += &must(&["ip", "-6", "route", "show", "table", "all"]);
    // A bridge route's "linkdown" flag follows whether any container is
    // attached at that moment (other suites run too); it is not a change.
    text = text.replace(" linkdown", "");
    text = text
        .lines()
        .filter(|l| !l.contains(" dev veth") && !l.contains("cni-podman"))
        .map(|l| format!("{l}\n"))
        .collect();
    text += &must(&["ip", "rule", "show"]);
    let ruleset = must(&["nft", "-s", "list", "ruleset"]);
    let mut skip = false;
    for line in ruleset.lines() {
        // podman's CNI chains, and the jump into them, appear with podman.
        if line.trim_start().starts_with("chain CNI-") {
            skip = true;
        }
        if !skip && !line.contains("jump CNI-") {
            text += line;
            text.push('\n');
        }
        if skip && line.trim() == "}" {
            skip = false;
        }
    }
    text
}

/// A named network namespace (`ip netns add`), deleted with everything
/// running in it on drop.
pub struct Netns {
    pub name: String,
    children: Vec<Child>,
}

impl Netns {
    pub fn new(name: &str) -> Netns {
        // A previous run that crashed may have left it behind.
        kill_all_in(name);
        let _ = run(&["ip", "netns", "del", name]);
        must(&["ip", "netns", "add", name]);
        must(&["ip", "-n", name, "link", "set", "lo", "up"]);
        Netns {
            name: name.to_string(),
            children: Vec::new(),
        }
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// `ip netns exec NAME args...`, waited for.
    pub fn exec(&self, args: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    /// `ip -n NAME args...` that must succeed.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "-n", &self.name];
        full.extend_from_slice(args);
        must(&full)
    }

    /// Starts a long-running process inside; killed on drop. Returns its pid
    /// once the process is really inside the namespace.
    pub fn spawn(&mut self, args: &[&str]) -> i32 {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {args:?} in {}: {e}", self.name));
        let pid = child.id() as i32;
        self.children.push(child);
        let want = std::fs::metadata(self.path()).map(|m| ino(&m)).ok();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let now = std::fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| ino(&m));
            if now.ok() == want {
                return pid;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("{args:?} never entered netns {}", self.name);
    }

    /// A TCP server answering "ok" on every address of the namespace.
    pub fn tcp_server(&mut self, port: u16) {
        let port = port.to_string();
        self.spawn(&["busybox", "nc", "-ll", "-p", &port, "-e", "/bin/echo", "ok"]);
        self.wait_listening(&port, "tcp");
    }

    /// A UDP server answering "ok" to every datagram, on `bind` (an address
    /// of the namespace; "::" for all, dual-stack).
    pub fn udp_server(&mut self, bind: &str, port: u16) {
        let script = format!(
            "import socket\n\
             s = socket.socket(socket.AF_INET6 if ':' in {bind:?} else socket.AF_INET, socket.SOCK_DGRAM)\n\
             s.bind(({bind:?}, {port}))\n\
             while True:\n    d, a = s.recvfrom(2048)\n    s.sendto(b'\\x00\\x05\\x00\\x00ok\\x00', a)\n"
        );
        self.spawn(&["/usr/bin/python3", "-c", &script]);
        self.wait_listening(&port.to_string(), "udp");
    }

    /// Waits (5 s at most) until something listens on `port` (`proto`:
    /// "tcp" or "udp") in the namespace; panics otherwise.
    pub fn wait_listening(&self, port: &str, proto: &str) {
        let flag = if proto == "tcp" { "-ltn" } else { "-lun" };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let out = self.exec(&["ss", "-H", flag, "sport", "=", &format!(":{port}")]);
            if !out.stdout.is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "{proto} server on port {port} in {} never listened",
            self.name
        );
    }

    /// Whether a TCP connect from inside this namespace gets "ok" back.
    pub fn tcp_answers(&self, host: &str, port: u16) -> bool {
        let out = self.exec(&["busybox", "nc", "-w", "2", host, &port.to_string()]);
        String::from_utf8_lossy(&out.stdout).contains("ok")
    }

    /// Whether a UDP datagram from inside this namespace gets "ok" back.
    pub fn udp_answers(&self, host: &str, port: u16) -> bool {
        let script = format!(
            "import socket, sys\n\
             s = socket.socket(socket.AF_INET6 if ':' in {host:?} else socket.AF_INET, socket.SOCK_DGRAM)\n\
             s.settimeout(2)\n\
             try:\n    s.sendto(b'hi', ({host:?}, {port}))\n    sys.stdout.write(s.recv(64).decode(errors='ignore'))\n\
             except OSError:\n    pass\n"
        );
        let out = self.exec(&["/usr/bin/python3", "-c", &script]);
        String::from_utf8_lossy(&out.stdout).contains("ok")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        kill_all_in(&self.name);
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

fn ino(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

/// Kills what is left in the namespace (grandchildren of `ip netns exec`).
fn kill_all_in(name: &str) {
    let out = run(&["ip", "netns", "pids", name]);
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        let _ = run(&["kill", "-9", pid]);
    }
}

/// A "container" namespace wired to a "provider" namespace that plays the
/// rest of the world, with no link to the host at all:
///
/// container eth0 198.51.100.2/24, 2001:db8:100::2/64, default routes via
/// provider eth0 198.51.100.1 / 2001:db8:100::1. The provider holds the test
/// hosts on its lo: [`PUBLIC_HOST`], [`UNLISTED_HOST`], [`PRIVATE_HOST`],
/// [`METADATA_HOST`], [`PUBLIC_HOST6`], [`UNLISTED_HOST6`], [`ULA_HOST6`].
pub struct Lab {
    pub container: Netns,
    pub provider: Netns,
}

pub const GATEWAY: &str = "198.51.100.1";
pub const PUBLIC_HOST: &str = "203.0.113.5";
pub const UNLISTED_HOST: &str = "203.0.113.6";
pub const PRIVATE_HOST: &str = "10.213.7.5";
pub const METADATA_HOST: &str = "169.254.169.254";
pub const PUBLIC_HOST6: &str = "2001:db8:5::5";
pub const UNLISTED_HOST6: &str = "2001:db8:6::6";
pub const ULA_HOST6: &str = "fd42:dead:beef::5";
/// The resolvers an administrator lists in `[network] resolvers` (the
/// network-dns test policy); the world answers on port 53 there.
pub const RESOLVER_HOST: &str = "203.0.113.53";
pub const RESOLVER_HOST6: &str = "2001:db8:53::53";
/// The IPv4 test hosts every lab carries, and the public IPv6 ones.
const TEST_HOSTS_V4: [&str; 5] = [
    PUBLIC_HOST,
    UNLISTED_HOST,
    PRIVATE_HOST,
    METADATA_HOST,
    RESOLVER_HOST,
];
const TEST_HOSTS_V6: [&str; 3] = [PUBLIC_HOST6, UNLISTED_HOST6, RESOLVER_HOST6];

impl Lab {
    /// `tag` keeps parallel tests apart (namespace names stay < 16 chars).
    pub fn new(tag: &str) -> Lab {
        let lab = Lab::new_detached(tag);
        lab.attach_container();
        lab
    }

    /// Like [`Lab::new`] but the container has only lo until
    /// [`Lab::attach_container`] (Docker 28 configures the network after
    /// `runc create`).
    pub fn new_detached(tag: &str) -> Lab {
        let mut provider = Netns::new(&format!("vsP{tag}"));
        let container = Netns::new(&format!("vsC{tag}"));
        for host in TEST_HOSTS_V4 {
            provider.ip(&["addr", "add", &format!("{host}/32"), "dev", "lo"]);
        }
        for host in TEST_HOSTS_V6.into_iter().chain([ULA_HOST6]) {
            provider.ip(&["-6", "addr", "add", &format!("{host}/128"), "dev", "lo"]);
        }
        provider.tcp_server(8080);
        provider.tcp_server(8081);
        // One socket per host, so a reply comes from the address asked (a
        // wildcard socket answers from eth0's, which conntrack does not
        // match to the request).
        for host in [PUBLIC_HOST, UNLISTED_HOST, PUBLIC_HOST6, UNLISTED_HOST6] {
            provider.udp_server(host, 8053);
        }
        Lab {
            container,
            provider,
        }
    }

    /// Adds the provider's test-host address `cidr` (e.g. a copy of a host
    /// address, to check that the policy blocks it).
    pub fn add_provider_host(&self, cidr: &str) {
        self.provider.ip(&["addr", "add", cidr, "dev", "lo"]);
    }

    /// Creates the veth between the two namespaces, addresses and the
    /// container's default routes. Never touches the host namespace.
    pub fn attach_container(&self) {
        let (p, c) = (self.provider.name.as_str(), self.container.name.as_str());
        must(&[
            "ip", "-n", p, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns",
            c,
        ]);
        // The provider is .1 / ::1 on the link, the container .2 / ::2.
        for (ns, host) in [(&self.provider, 1), (&self.container, 2)] {
            let v4 = format!("198.51.100.{host}/24");
            ns.ip(&["addr", "add", &v4, "dev", "eth0"]);
            let v6 = format!("2001:db8:100::{host}/64");
            ns.ip(&["-6", "addr", "add", &v6, "dev", "eth0", "nodad"]);
            ns.ip(&["link", "set", "eth0", "up"]);
        }
        self.container
            .ip(&["route", "add", "default", "via", GATEWAY]);
        self.container
            .ip(&["-6", "route", "add", "default", "via", "2001:db8:100::1"]);
    }
}

/// Test hosts for containers on the test dockerd's bridge: a "world"
/// namespace joined to the host by a veth, reachable only from the bridge
/// (`ip rule iif BRIDGE lookup WORLD_TABLE`), so the host's own routing to
/// these addresses never changes and nothing leaves the machine.
///
/// world eth0 198.51.100.254/30 (host side 198.51.100.253/30),
/// 2001:db8:ff::2/64 (host side 2001:db8:ff::1/64); on its lo the same test
/// hosts as [`Lab`] plus servers: TCP 8080, 8081 and 53, UDP 8053 and 53.
pub struct World {
    pub ns: Netns,
    bridge: String,
}

pub const WORLD_TABLE: &str = "7669";
const WORLD_HOST_IF: &str = "vsworld-h";

impl World {
    pub fn new(bridge: &str) -> World {
        World::teardown(bridge);
        let mut ns = Netns::new("vsWorld");
        must(&[
            "ip",
            "link",
            "add",
            WORLD_HOST_IF,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &ns.name,
        ]);
        must(&[
            "ip",
            "addr",
            "add",
            "198.51.100.253/30",
            "dev",
            WORLD_HOST_IF,
        ]);
        must(&[
            "ip",
            "-6",
            "addr",
            "add",
            "2001:db8:ff::1/64",
            "dev",
            WORLD_HOST_IF,
            "nodad",
        ]);
        must(&["ip", "link", "set", WORLD_HOST_IF, "up"]);
        ns.ip(&["addr", "add", "198.51.100.254/30", "dev", "eth0"]);
        ns.ip(&[
            "-6",
            "addr",
            "add",
            "2001:db8:ff::2/64",
            "dev",
            "eth0",
            "nodad",
        ]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["route", "add", "default", "via", "198.51.100.253"]);
        ns.ip(&["-6", "route", "add", "default", "via", "2001:db8:ff::1"]);
        for dst in TEST_HOSTS_V4 {
            ns.ip(&["addr", "add", &format!("{dst}/32"), "dev", "lo"]);
            must(&[
                "ip",
                "route",
                "add",
                dst,
                "via",
                "198.51.100.254",
                "table",
                WORLD_TABLE,
            ]);
        }
        for dst in TEST_HOSTS_V6 {
            ns.ip(&["-6", "addr", "add", &format!("{dst}/128"), "dev", "lo"]);
            must(&[
                "ip",
                "-6",
                "route",
                "add",
                dst,
                "via",
                "2001:db8:ff::2",
                "table",
                WORLD_TABLE,
            ]);
        }
        for family in ["-4", "-6"] {
            must(&world_rule(family, "add", bridge));
        }
        ns.tcp_server(8080);
        ns.tcp_server(8081);
        // One socket per host: a wildcard socket would answer from eth0's
        // address, which the bridge's NAT does not match to the request.
        ns.udp_server(PUBLIC_HOST, 8053);
        ns.udp_server(UNLISTED_HOST, 8053);
        // DNS port: the resolver the policy lists, and hosts it does not.
        ns.tcp_server(53);
        for host in [RESOLVER_HOST, UNLISTED_HOST, RESOLVER_HOST6, UNLISTED_HOST6] {
            ns.udp_server(host, 53);
        }
        wait_link_local(WORLD_HOST_IF);
        World {
            ns,
            bridge: bridge.to_string(),
        }
    }

    fn teardown(bridge: &str) {
        for family in ["-4", "-6"] {
            let _ = run(&world_rule(family, "del", bridge));
            let _ = run(&["ip", family, "route", "flush", "table", WORLD_TABLE]);
        }
        let _ = run(&["ip", "link", "del", WORLD_HOST_IF]);
    }
}

/// The policy rule that sends traffic from the bridge to the world table;
/// one builder, so teardown deletes exactly what setup added.
fn world_rule<'a>(family: &'a str, verb: &'a str, bridge: &'a str) -> [&'a str; 10] {
    [
        "ip",
        family,
        "rule",
        verb,
        "iif",
        bridge,
        "lookup",
        WORLD_TABLE,
        "pref",
        WORLD_TABLE,
    ]
}

/// Waits until the host-side link-local address is configured, so it does
/// not appear in a host snapshot taken later.
fn wait_link_local(dev: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let out = must(&["ip", "-6", "addr", "show", "dev", dev, "scope", "link"]);
        if out.contains("fe80") && !out.contains("tentative") {
            // The kernel adds the fe80 local/anycast routes just after.
            std::thread::sleep(Duration::from_millis(200));
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{dev} never got an IPv6 link-local address");
}

impl Drop for World {
    fn drop(&mut self) {
        World::teardown(&self.bridge);
    }
}

/// An address the host gains while a container runs (as when a client does
/// `docker network create --subnet …` and the host takes `.1`): one end of
/// a veth pair that stays in the host (this kernel has no dummy driver)
/// holding `v4`/32 and `v6`/128, deleted on drop.
pub struct HostAddress {
    dev: String,
}

impl HostAddress {
    pub fn add(dev: &str, v4: &str, v6: &str) -> HostAddress {
        let _ = run(&["ip", "link", "del", dev]);
        let peer = format!("{dev}p");
        must(&[
            "ip", "link", "add", dev, "type", "veth", "peer", "name", &peer,
        ]);
        let host = HostAddress {
            dev: dev.to_string(),
        };
        must(&["ip", "addr", "add", &format!("{v4}/32"), "dev", dev]);
        must(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{v6}/128"),
            "dev",
            dev,
            "nodad",
        ]);
        must(&["ip", "link", "set", dev, "up"]);
        must(&["ip", "link", "set", &peer, "up"]);
        host
    }
}

impl Drop for HostAddress {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.dev]);
    }
}
