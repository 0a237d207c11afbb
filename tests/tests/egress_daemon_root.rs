//! The `vibe-shim egress` daemon as a process (root only): run with
//! `ip netns exec` in a namespace of the test's own, which stands in for the
//! host (its addresses and bridges are what the daemon must refuse), serving
//! a "container" namespace of the test's own. Nothing touches the real
//! host's interfaces or routes. Its socket, log and records live in a temp
//! dir, so no other daemon is involved.
//!
//! `cargo build --release && cargo test --release -p vibe-shim-tests --test
//! egress_daemon_root -- --ignored --test-threads=1`

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vibe_hooks::egress::client;
use vibe_policy::config::{NetworkMode, NetworkSection};
use vibe_shim_tests::bundle::shim_bin;
use vibe_shim_tests::netns::Netns;

const ROOT: &str = "/run/vibe-test-egress-daemon-root";

/// A host-like namespace running the daemon, and a container-like one with
/// a process in it, registered.
struct Rig {
    host: Netns,
    container: Netns,
    pid: i32,
    dir: tempfile::TempDir,
    daemon: Option<Child>,
}

impl Rig {
    fn new(tag: &str) -> Rig {
        let host = Netns::new(&format!("vibe-egd-{tag}-h"));
        let mut container = Netns::new(&format!("vibe-egd-{tag}-c"));
        let pid = container.spawn(&["sleep", "600"]);
        let dir = tempfile::Builder::new()
            .prefix("vibe-egress-daemon-")
            .tempdir()
            .unwrap();
        let mut rig = Rig {
            host,
            container,
            pid,
            dir,
            daemon: None,
        };
        rig.start();
        rig
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("run/egress.sock")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("log/egress.jsonl")
    }

    fn records(&self) -> PathBuf {
        self.dir.path().join("records")
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.err")).unwrap_or_default()
    }

    /// Starts the daemon (sweeps only hourly: what happens here is not the
    /// sweep's doing) and waits for its socket.
    fn start(&mut self) {
        let err = File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join("daemon.err"))
            .unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.host.name])
            .arg(shim_bin())
            .arg("egress")
            .arg("--socket")
            .arg(self.socket())
            .arg("--log")
            .arg(self.log())
            .arg("--records")
            .arg(self.records())
            .args(["--sweep-secs", "3600"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap();
        self.daemon = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(self.socket()).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the daemon never listened: {}", self.stderr());
    }

    fn daemon_pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.daemon.as_ref().unwrap().id() as i32)
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(self.daemon_pid(), sig).unwrap();
    }

    /// The daemon's exit status, waiting up to 5 s.
    fn wait(&mut self) -> Option<std::process::ExitStatus> {
        let child = self.daemon.as_mut()?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                self.daemon = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Registers the container in report mode with no hosts: every name is
    /// a would-deny, so only the address deny set can refuse.
    fn register(&self) -> Vec<String> {
        let network = NetworkSection {
            mode: NetworkMode::Proxy,
            enforce: false,
            ..NetworkSection::default()
        };
        let netns = File::open(self.container.path()).unwrap();
        client::register(
            &self.socket(),
            Path::new(ROOT),
            "daemon-test",
            self.pid,
            &network,
            &[],
            &netns,
        )
        .unwrap_or_else(|e| panic!("register: {e}; {}", self.stderr()))
        .listeners
    }

    /// Registers the container enforcing, with `hosts`: only those names
    /// pass, and then only if what they resolve to is not refused.
    fn register_hosts(&self, hosts: &[&str]) -> Vec<String> {
        let network = NetworkSection {
            mode: NetworkMode::Proxy,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..NetworkSection::default()
        };
        let netns = File::open(self.container.path()).unwrap();
        client::register(
            &self.socket(),
            Path::new(ROOT),
            "daemon-test",
            self.pid,
            &network,
            &[],
            &netns,
        )
        .unwrap_or_else(|e| panic!("register: {e}; {}", self.stderr()))
        .listeners
    }

    fn served(&self) -> bool {
        client::status(&self.socket(), Path::new(ROOT), "daemon-test").is_ok()
    }

    /// One request to the proxy from inside the container: the response.
    fn ask(&self, req: &str) -> Result<String, std::io::Error> {
        let ns = File::open(self.container.path()).unwrap();
        let req = req.to_string();
        std::thread::spawn(move || {
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let mut s = std::net::TcpStream::connect("127.0.0.1:3128")?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(req.as_bytes())?;
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            Ok(String::from_utf8_lossy(&out).into_owned())
        })
        .join()
        .unwrap()
    }

    /// Waits (up to 5 s) for `path` to hold `n` lines: the proxy writes a
    /// connection's line just after closing it. The text.
    fn lines(&self, path: &Path, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if text.lines().count() >= n || Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn connect(&self, target: &str) -> String {
        self.ask(&format!("CONNECT {target} HTTP/1.1\r\n\r\n"))
            .unwrap_or_else(|e| panic!("proxy: {e}; {}", self.stderr()))
    }

    /// Asks until the answer names `want` (the daemon learns of a new
    /// address asynchronously), up to 5 s; the last answer.
    fn connect_until(&self, target: &str, want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let r = self.connect(target);
            if r.contains(want) || Instant::now() > deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
#[ignore = "needs root and network namespaces: run tests/run.sh"]
fn addresses_and_bridges_added_after_start_are_refused() {
    let rig = Rig::new("dn");
    rig.register();
    // At start the "host" has only loopback: a documentation address is
    // public, so the proxy tries it (and finds no route: 502).
    let before = rig.connect("203.0.113.77:8080");
    assert!(before.starts_with("HTTP/1.1 502"), "{before}");
    // The host gains an address, and a bridge on a public range.
    // (A veth: this kernel may have no dummy driver.)
    rig.host.ip(&[
        "link",
        "add",
        "vibe-egd-dummy",
        "type",
        "veth",
        "peer",
        "name",
        "vibe-egd-peer",
    ]);
    rig.host
        .ip(&["addr", "add", "203.0.113.77/32", "dev", "vibe-egd-dummy"]);
    rig.host.ip(&["link", "set", "vibe-egd-dummy", "up"]);
    rig.host
        .ip(&["link", "add", "vibe-egd-br", "type", "bridge"]);
    rig.host
        .ip(&["addr", "add", "198.51.100.65/26", "dev", "vibe-egd-br"]);
    let own = rig.connect_until("203.0.113.77:8080", "403");
    assert!(own.starts_with("HTTP/1.1 403"), "{own}\n{}", rig.stderr());
    assert!(
        own.contains("denied 203.0.113.77:8080 (resolves to 203.0.113.77, in a host network 203.0.113.77/32)"),
        "{own}"
    );
    let bridged = rig.connect_until("198.51.100.100:8080", "403");
    assert!(
        bridged.contains("in a host network 198.51.100.64/26"),
        "{bridged}\n{}",
        rig.stderr()
    );
    // And when the address goes, so does the refusal.
    rig.host
        .ip(&["addr", "del", "203.0.113.77/32", "dev", "vibe-egd-dummy"]);
    let after = rig.connect_until("203.0.113.77:8080", "502");
    assert!(after.starts_with("HTTP/1.1 502"), "{after}");
}

#[test]
#[ignore = "needs root and network namespaces: run tests/run.sh"]
fn sighup_reopens_the_log() {
    let rig = Rig::new("hup");
    rig.register();
    rig.connect("203.0.113.77:8080");
    rig.lines(&rig.log(), 1);
    // logrotate: move the file, then signal.
    let rotated = rig.log().with_extension("jsonl.1");
    std::fs::rename(rig.log(), &rotated).unwrap();
    rig.signal(nix::sys::signal::Signal::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !rig.log().exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    rig.connect("203.0.113.78:8080");
    let new = rig.lines(&rig.log(), 1);
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert_eq!(old.lines().count(), 1, "{old}");
    assert!(old.contains("203.0.113.77"), "{old}");
    assert_eq!(new.lines().count(), 1, "{new}");
    assert!(new.contains("203.0.113.78"), "{new}");
    // Still serving.
    assert!(rig.served(), "{}", rig.stderr());
}

#[test]
#[ignore = "needs root and network namespaces: run tests/run.sh"]
fn sigterm_stops_cleanly_and_a_restart_readopts() {
    for sig in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
    ] {
        let mut rig = Rig::new("term");
        rig.register();
        let records = rig.records();
        let record_count = || vibe_hooks::egress::records::list(&records).len();
        assert_eq!(record_count(), 1);
        rig.signal(sig);
        let status = rig.wait();
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "{sig}: {status:?}; {}",
            rig.stderr()
        );
        // The listeners are closed, the socket gone, the record kept.
        let refused = rig.ask("CONNECT 203.0.113.77:8080 HTTP/1.1\r\n\r\n");
        assert!(refused.is_err(), "{refused:?}");
        assert!(!rig.socket().exists());
        assert_eq!(record_count(), 1, "{}", rig.stderr());
        // A new daemon serves the running container again.
        rig.start();
        assert!(rig.served(), "{}", rig.stderr());
        let again = rig.connect("203.0.113.77:8080");
        assert!(again.starts_with("HTTP/1.1 502"), "{again}");
    }
}

/// `/etc/netns/<ns>/hosts`, which `ip netns exec <ns>` mounts over
/// /etc/hosts for what it runs (the daemon here): the daemon's resolver
/// answers the test's names, and the real /etc/hosts is untouched.
struct NetnsHosts(PathBuf);

impl NetnsHosts {
    fn new(ns: &str, text: &str) -> NetnsHosts {
        let dir = Path::new("/etc/netns").join(ns);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("hosts"), text).unwrap();
        NetnsHosts(dir)
    }
}

impl Drop for NetnsHosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // Only when empty: another namespace's files stay.
        let _ = std::fs::remove_dir("/etc/netns");
    }
}

#[test]
#[ignore = "needs root and network namespaces: run tests/run.sh"]
fn a_neighbour_on_a_non_bridge_subnet_is_refused() {
    // A LAN on a public range: the "host" has 198.51.100.1/24 on a plain
    // veth (no bridge), whose far end is a neighbour, 198.51.100.7, with a
    // server. A listed name resolves to the neighbour.
    let _hosts = NetnsHosts::new("vibe-egd-lan-h", "198.51.100.7 lan.test\n");
    let rig = Rig::new("lan");
    let mut lan = Netns::new("vibe-egd-lan-n");
    rig.register_hosts(&["lan.test:8080"]);
    rig.host.ip(&[
        "link",
        "add",
        "vibe-egd-lan",
        "type",
        "veth",
        "peer",
        "name",
        "vibe-egd-lanp",
    ]);
    rig.host
        .ip(&["link", "set", "vibe-egd-lanp", "netns", &lan.name]);
    rig.host
        .ip(&["addr", "add", "198.51.100.1/24", "dev", "vibe-egd-lan"]);
    rig.host.ip(&["link", "set", "vibe-egd-lan", "up"]);
    lan.ip(&["addr", "add", "198.51.100.7/24", "dev", "vibe-egd-lanp"]);
    lan.ip(&["link", "set", "vibe-egd-lanp", "up"]);
    lan.tcp_server(8080);
    // The neighbour is there and answers the host.
    assert!(
        rig.host.tcp_answers("198.51.100.7", 8080),
        "the test neighbour does not answer"
    );
    let r = rig.connect_until("lan.test:8080", "403");
    assert!(r.starts_with("HTTP/1.1 403"), "{r}\n{}", rig.stderr());
    assert!(
        r.contains(
            "denied lan.test:8080 (resolves to 198.51.100.7, in a host network 198.51.100.0/24)"
        ),
        "{r}"
    );
    let log = rig.lines(&rig.log(), 1);
    let line = log.lines().last().unwrap_or_default();
    assert!(
        line.contains("\"decision\":\"deny\"") && line.contains("198.51.100.7"),
        "{log}"
    );
}

#[test]
#[ignore = "needs root and network namespaces: run tests/run.sh"]
fn a_prefix_on_loopback_is_refused_whole() {
    // 192.0.2.1/24 on lo makes all of 192.0.2.0/24 local: 192.0.2.50 is the
    // host itself, where a server listens on every address.
    let mut rig = Rig::new("lo");
    rig.register();
    rig.host.tcp_server(8080);
    rig.host.ip(&["addr", "add", "192.0.2.1/24", "dev", "lo"]);
    assert!(
        rig.host.tcp_answers("192.0.2.50", 8080),
        "192.0.2.50 is not the host's own"
    );
    let r = rig.connect_until("192.0.2.50:8080", "403");
    assert!(r.starts_with("HTTP/1.1 403"), "{r}\n{}", rig.stderr());
    assert!(
        r.contains("(resolves to 192.0.2.50, in a host network 192.0.2.0/24)"),
        "{r}"
    );
}

#[test]
#[ignore = "needs root and network namespaces: run tests/run.sh"]
fn a_local_route_range_is_refused_whole() {
    // `ip route add local` makes a range the host's own with no address.
    let mut rig = Rig::new("lr");
    rig.register();
    rig.host.tcp_server(8080);
    rig.host
        .ip(&["route", "add", "local", "203.0.113.0/24", "dev", "lo"]);
    assert!(
        rig.host.tcp_answers("203.0.113.50", 8080),
        "203.0.113.50 is not the host's own"
    );
    let r = rig.connect_until("203.0.113.50:8080", "403");
    assert!(r.starts_with("HTTP/1.1 403"), "{r}\n{}", rig.stderr());
    assert!(
        r.contains("(resolves to 203.0.113.50, in a host network 203.0.113.0/24)"),
        "{r}"
    );
}
