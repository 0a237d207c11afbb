//! The egress suites' shared pieces: a `vibe-shim egress` daemon a suite
//! starts itself on the socket its test policy names (inside the work
//! tree's target/, so no system daemon and no other work tree is involved),
//! the names of test hosts in the host's /etc/hosts, and this work tree's
//! slot among work trees that run the suites at the same time.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::env::env;
use crate::netns::{must, run, Netns};

/// This work tree's slot (0..8): keeps the addresses and names of work
/// trees that run this suite at the same time apart. Taken from where this
/// crate was built, so suites that run before the test env is up (the root
/// ones) have it too.
pub fn slot() -> u8 {
    let hash = env!("CARGO_MANIFEST_DIR")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    (hash % 8) as u8
}

/// A test policy's egress socket, resolved as the shim resolves it.
pub fn socket_path(stem: &str) -> PathBuf {
    config_socket(&env().policy_path(stem))
}

/// The egress socket of the policy file `config` merged with its drop-ins
/// (`<stem>.d/*.toml`, in name order), resolved as the shim resolves it:
/// relative to the file's directory.
pub fn config_socket(config: &Path) -> PathBuf {
    use vibe_policy::config::merge::{merge_layers, Layer};
    let layer = |path: &Path| Layer {
        path: path.display().to_string(),
        label: path.display().to_string(),
        text: std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("policy file {}: {e}", path.display())),
    };
    let mut name = config.file_stem().expect("a file name").to_os_string();
    name.push(".d");
    let mut dropins: Vec<PathBuf> = std::fs::read_dir(config.with_file_name(name))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    dropins.sort();
    let dropins: Vec<Layer> = dropins.iter().map(|p| layer(p)).collect();
    let (policy, _) = merge_layers(&layer(config), &dropins)
        .unwrap_or_else(|e| panic!("policy {} does not parse: {e}", config.display()));
    config
        .parent()
        .expect("policy dir")
        .join(policy.network.egress_socket)
}

// ---------------------------------------------------------------------------
// The daemon

pub struct Daemon {
    child: Option<Child>,
    config: PathBuf,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Daemon {
    /// Starts one under `tests/policies/<stem>.toml`, on its socket.
    pub fn start(stem: &str) -> Daemon {
        Daemon::start_config(&env().policy_path(stem))
    }

    /// Starts one under the policy file `config` (and its drop-ins), on
    /// its socket.
    pub fn start_config(config: &Path) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("vibe-egress-")
            .tempdir()
            .expect("temp dir");
        let mut daemon = Daemon {
            child: None,
            config: config.to_path_buf(),
            dir,
            socket: config_socket(config),
        };
        daemon.spawn();
        daemon
    }

    /// The connection log (`--log`).
    pub fn egress_log(&self) -> PathBuf {
        self.dir.path().join("egress.jsonl")
    }

    /// The control socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn records(&self) -> PathBuf {
        self.dir.path().join("records")
    }

    /// Starts the daemon process (again, after [`Daemon::stop`]).
    pub fn spawn(&mut self) {
        let policy = &self.config;
        let log = std::fs::File::create(self.dir.path().join("daemon.log")).expect("daemon log");
        let child = Command::new(&env().shim_bin)
            .arg("egress")
            .arg("--config")
            .arg(policy)
            .arg("--log")
            .arg(self.egress_log())
            .arg("--records")
            .arg(self.records())
            .args(["--sweep-secs", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn vibe-shim egress");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("egress daemon never listened: {}", self.log());
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("daemon running").id()
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// Open fds of the daemon.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .expect("daemon fds")
            .count()
    }

    /// The daemon's resident memory (VmRSS).
    pub fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("daemon status")
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS")
    }

    /// The network namespaces the daemon's threads are in.
    pub fn thread_namespaces(&self) -> BTreeSet<u64> {
        std::fs::read_dir(format!("/proc/{}/task", self.pid()))
            .expect("daemon tasks")
            .flatten()
            .filter_map(|t| std::fs::metadata(t.path().join("ns/net")).ok())
            .map(|m| m.ino())
            .collect()
    }

    /// Record files left under the records directory.
    pub fn record_files(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for dir in std::fs::read_dir(self.records())
            .into_iter()
            .flatten()
            .flatten()
        {
            for file in std::fs::read_dir(dir.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                found.push(file.path());
            }
        }
        found
    }

    /// The number of containers the daemon serves, from `{"op":"status"}`.
    pub fn served(&self) -> usize {
        use std::io::{BufRead, Write};
        let mut stream =
            std::os::unix::net::UnixStream::connect(&self.socket).expect("connect to the daemon");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        stream.write_all(b"{\"op\":\"status\"}\n").expect("status");
        let mut line = String::new();
        std::io::BufReader::new(stream)
            .read_line(&mut line)
            .expect("reply");
        let reply: serde_json::Value = serde_json::from_str(&line).expect("reply is JSON");
        reply["containers"].as_u64().expect("a count") as usize
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Lines in the host's /etc/hosts between two markers of ours.
pub struct HostsBlock {
    begin: String,
    end: String,
}

const HOSTS: &str = "/etc/hosts";

impl HostsBlock {
    /// Adds `names` in a block marked `tag` (a suite's name: suites that
    /// run at the same time keep apart), replacing one left behind.
    pub fn add(tag: &str, names: &[(&str, &str)]) -> HostsBlock {
        let tag = format!("vibe-shim {tag} {}", slot());
        let block = HostsBlock {
            begin: format!("# {tag} begin"),
            end: format!("# {tag} end"),
        };
        block.remove();
        let mut text = std::fs::read_to_string(HOSTS).expect("read /etc/hosts");
        if !text.ends_with('\n') && !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&block.begin);
        text.push('\n');
        for (name, ip) in names {
            text.push_str(&format!("{ip} {name}\n"));
        }
        text.push_str(&block.end);
        text.push('\n');
        // In place: /etc/hosts may be a bind mount, which a rename would break.
        std::fs::write(HOSTS, text).expect("write /etc/hosts");
        block
    }

    fn remove(&self) {
        let Ok(text) = std::fs::read_to_string(HOSTS) else {
            return;
        };
        let mut inside = false;
        let mut kept = String::new();
        for line in text.lines() {
            if line == self.begin {
                inside = true;
            } else if line == self.end {
                inside = false;
            } else if !inside {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        if kept != text {
            let _ = std::fs::write(HOSTS, kept);
        }
    }
}

impl Drop for HostsBlock {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Polls `check` for up to `secs` seconds.
pub fn eventually(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A test host one hop from the host, as the internet is: namespace
/// `<name><slot>` behind veth `<veth><slot>` on 198.51.100.`base+1`/30
/// (host) and `base+2` (its eth0), serving on 203.0.113.`base+2` on its lo,
/// routed via that veth (the proxy refuses a host interface's own subnet).
/// `first` is the suite's first address of 198.51.100.0/24; each work
/// tree's slot gets its own /30 above it. Returns the namespace and the
/// service address.
pub fn one_hop_host(name: &str, veth: &str, first: u32) -> (Netns, String) {
    let slot = slot();
    let base = first + 4 * u32::from(slot);
    let (host_ip, ip) = (
        format!("198.51.100.{}", base + 1),
        format!("198.51.100.{}", base + 2),
    );
    let host_if = format!("{veth}{slot}");
    let ns = Netns::new(&format!("{name}{slot}"));
    let _ = run(&["ip", "link", "del", &host_if]);
    must(&[
        "ip", "link", "add", &host_if, "type", "veth", "peer", "name", "eth0", "netns", &ns.name,
    ]);
    must(&[
        "ip",
        "addr",
        "add",
        &format!("{host_ip}/30"),
        "dev",
        &host_if,
    ]);
    must(&["ip", "link", "set", &host_if, "up"]);
    ns.ip(&["addr", "add", &format!("{ip}/30"), "dev", "eth0"]);
    ns.ip(&["link", "set", "eth0", "up"]);
    let service = format!("203.0.113.{}", base + 2);
    ns.ip(&["addr", "add", &format!("{service}/32"), "dev", "lo"]);
    ns.ip(&["link", "set", "lo", "up"]);
    must(&[
        "ip",
        "route",
        "replace",
        &format!("{service}/32"),
        "via",
        &ip,
        "dev",
        &host_if,
    ]);
    (ns, service)
}
