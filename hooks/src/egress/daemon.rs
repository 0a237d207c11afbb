//! `vibe-shim egress`: the daemon's plumbing. It listens on a root-only
//! control socket; each registration brings a container's network namespace
//! (an fd), in which a short-lived thread binds the proxy's loopback
//! listeners; tokio then runs [`Proxy::serve`] on them until the container is
//! unregistered, found dead by the sweep, or the daemon exits. Records under
//! the records directory let a restarted daemon serve running containers
//! again.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::runtime::Handle;
use vibe_policy::config::{NetworkMode, NetworkSection};
use vibe_policy::egress::dns::{FakePool, DEFAULT_POOL_NAMES, DNS_PORT};
use vibe_policy::egress::transparent::TRANSPARENT_PORT;
use vibe_policy::lang::container_id;
use vibe_policy::network::ruleset;
use vibe_policy::rules::proxy_env::PROXY_PORT;

use super::ca::{Ca, CaError};
use super::control::{self, Reply, Request};
use super::netns;
use super::proxy::{Container, Credentials, Fakes, Proxy, ProxyError, ProxySettings};
use super::records::{self, Record};

pub use super::proxy::DEFAULT_LOG_PATH;
/// Seconds between two sweeps unless told otherwise.
pub const DEFAULT_SWEEP_SECS: u64 = 10;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("control socket {path}: {source}")]
    Socket { path: PathBuf, source: SocketError },
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    #[error("control socket: accept: {0}")]
    Accept(std::io::Error),
    #[error("cannot read the host's addresses: {0}")]
    HostNets(crate::routes::RouteError),
}

/// Why the control socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("needs a directory")]
    NoDirectory,
    #[error("cannot create {dir}: {source}")]
    CreateDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Io(#[source] std::io::Error),
    #[error("{dir} must be a directory of ours with mode 0700")]
    NotPrivate { dir: PathBuf },
    #[error("another daemon is listening there")]
    Busy,
    #[error("cannot remove the stale one: {0}")]
    RemoveStale(#[source] std::io::Error),
}

/// Why a registration (or a re-adoption) was refused; the daemon's reply
/// carries the text.
#[derive(Debug, thiserror::Error)]
enum RegisterError {
    #[error("invalid container id {0:?}")]
    BadId(String),
    #[error("runc root {} is not absolute", .0.display())]
    RootNotAbsolute(PathBuf),
    #[error("the container's policy is not [network] mode \"proxy\"")]
    NotProxy,
    #[error("process {pid} is gone or is not the one registered (start time {start_time})")]
    NotTheProcess { pid: i32, start_time: u64 },
    #[error("cannot read process {pid}'s namespace: {source}")]
    PidNamespace { pid: i32, source: std::io::Error },
    #[error(transparent)]
    Netns(#[from] netns::NetnsError),
    #[error("the fd is not process {pid}'s network namespace")]
    NotItsNamespace { pid: i32 },
    #[error("cannot write the record: {0}")]
    Record(#[source] records::RecordError),
    #[error("its network namespace is already served under another [network] policy")]
    SharedNamespace,
    #[error("its network namespace is shared with another container; credentials need a namespace of their own")]
    SharedCredentials,
    #[error("cannot make the container's credential CA: {0}")]
    Ca(#[source] CaError),
    #[error("the record has credentials but no CA")]
    NoCa,
    #[error("cannot hand {addr} to the runtime: {source}")]
    ToRuntime {
        addr: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("process gone")]
    Gone,
}

/// How the daemon was started.
#[derive(Debug, Clone)]
pub struct Options {
    pub socket: PathBuf,
    pub log_path: PathBuf,
    pub records: PathBuf,
    pub sweep: Duration,
}

/// The signals the daemon takes (see the module's comment).
fn signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(sig);
    }
    set
}

/// Runs the daemon in the foreground until SIGTERM or SIGINT.
pub fn run(options: Options) -> Result<(), DaemonError> {
    // Before any thread exists: every thread inherits the mask, so the
    // signals wait for the one thread that takes them.
    signals()
        .thread_block()
        .map_err(|e| DaemonError::Runtime(e.into()))?;
    // Before the runtime: the netlink read runs one of its own.
    let deny_nets = super::hostnets::host_deny_nets().map_err(DaemonError::HostNets)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("vibe-egress")
        .build()
        .map_err(DaemonError::Runtime)?;
    let result = runtime.block_on(serve(options, deny_nets));
    // Control requests still in the blocking pool answer within their own
    // timeouts; don't wait for them to exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// Takes the signals on a thread of its own: SIGHUP reopens the log,
/// SIGTERM/SIGINT fire `stop`. Without that thread the daemon does not
/// start: every thread blocks these signals, so none would take them.
fn take_signals(
    proxy: Arc<Proxy>,
    stop: tokio::sync::oneshot::Sender<&'static str>,
) -> Result<(), DaemonError> {
    use nix::sys::signal::Signal;
    let spawned = std::thread::Builder::new()
        .name("vibe-egress-sig".into())
        .spawn(move || loop {
            match signals().wait() {
                Ok(Signal::SIGHUP) => match proxy.reopen_log() {
                    Ok(()) => log(format_args!(
                        "SIGHUP: reopened {}",
                        proxy.settings().log_path.display()
                    )),
                    Err(e) => log(format_args!(
                        "SIGHUP: cannot reopen {}: {e} (still writing the old file)",
                        proxy.settings().log_path.display()
                    )),
                },
                Ok(sig) => {
                    let _ = stop.send(sig.as_str());
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        });
    spawned
        .map(drop)
        .map_err(|e| DaemonError::Runtime(std::io::Error::other(format!("signal thread: {e}"))))
}

fn local(addr: std::io::Result<std::net::SocketAddr>) -> String {
    addr.map(|a| a.to_string()).unwrap_or_default()
}

fn log(message: impl std::fmt::Display) {
    eprintln!("vibe-shim egress: {message}");
}

/// A container by runc root and id: two engines may reuse an id.
type Key = (PathBuf, String);

/// The proxy's listeners in one network namespace; dropping the last
/// reference stops them.
struct Listening {
    /// (device, inode) of the namespace: pinned while the listeners live,
    /// so no other namespace can reuse the inode meanwhile.
    ns: (u64, u64),
    network: NetworkSection,
    /// The container's credentials and CA (never shared: see `serve`).
    credentials: Option<Arc<Credentials>>,
    addrs: Vec<String>,
    /// Set on drop: the serve tasks close the listeners at once, end every
    /// connection with its log line, and are gone within CLOSE_GRACE, so
    /// the namespace is no longer pinned.
    close: tokio::sync::watch::Sender<bool>,
}

impl Listening {
    fn ca_pem(&self) -> Option<String> {
        self.credentials
            .as_ref()
            .map(|c| c.ca.cert_pem().to_string())
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.close.send(true);
    }
}

/// A registered container. Containers sharing a namespace (a pod, or
/// `--network container:<id>`) share its listeners: the port can be bound
/// only once there.
struct Served {
    pid: i32,
    start_time: u64,
    listening: Arc<Listening>,
}

struct Daemon {
    proxy: Arc<Proxy>,
    records: PathBuf,
    handle: Handle,
    served: Mutex<HashMap<Key, Served>>,
    /// One deny-net refresh at a time: an older read never replaces a newer.
    refreshing: Mutex<()>,
    /// One register or re-adoption at a time: register writes the record
    /// before it serves it, and a sweep in between would adopt the same
    /// record, so both would bind the port and one create would fail.
    serving: Mutex<()>,
    /// Cloned into every serve task; at stop, the daemon drops its own and
    /// waits until the channel closes: every connection logged.
    done: Mutex<Option<tokio::sync::mpsc::Sender<()>>>,
}

async fn serve(options: Options, deny_nets: Vec<ipnet::IpNet>) -> Result<(), DaemonError> {
    let listener = bind_control(&options.socket)?;
    log(format_args!(
        "refusing the host's addresses and interface subnets: {}",
        deny_nets
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    ));
    let proxy = Proxy::new(ProxySettings {
        log_path: options.log_path.clone(),
        deny_nets,
        ..ProxySettings::default()
    })?;
    let (stop_tx, mut stop) = tokio::sync::oneshot::channel();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<()>(1);
    take_signals(proxy.clone(), stop_tx)?;
    let daemon = Arc::new(Daemon {
        proxy,
        records: options.records.clone(),
        handle: Handle::current(),
        served: Mutex::new(HashMap::new()),
        refreshing: Mutex::new(()),
        serving: Mutex::new(()),
        done: Mutex::new(Some(done_tx)),
    });
    // From here on no change of the host's addresses is missed; the first
    // sweep's read (below) covers one made since the first read.
    let watcher = daemon.clone();
    if let Err(e) = super::hostnets::watch(move || watcher.refresh_deny_nets()) {
        log(format_args!(
            "cannot watch the host's addresses ({e}): read again at each registration and sweep only"
        ));
    }
    log(format_args!(
        "control socket {}, records {}, log {}, sweep every {:?}",
        options.socket.display(),
        options.records.display(),
        options.log_path.display(),
        options.sweep
    ));
    // Re-adopt before taking requests, so a status sees the adopted ones.
    let first = daemon.clone();
    let _ = tokio::task::spawn_blocking(move || first.sweep()).await;
    let sweeper = daemon.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(options.sweep).await;
            let daemon = sweeper.clone();
            let _ = tokio::task::spawn_blocking(move || daemon.sweep()).await;
        }
    });
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            sig = &mut stop => {
                let sig = sig.unwrap_or("signal thread gone");
                drop(listener);
                let _ = std::fs::remove_file(&options.socket);
                let count = {
                    let mut served = daemon.served();
                    let count = served.len();
                    // Dropping the listeners closes them and their connections;
                    // the records stay for the next daemon.
                    served.clear();
                    count
                };
                // Open connections end with their log lines.
                drop(daemon.done.lock().unwrap_or_else(|e| e.into_inner()).take());
                let grace = crate::egress::proxy::CLOSE_GRACE + Duration::from_secs(1);
                let _ = tokio::time::timeout(grace, done_rx.recv()).await;
                log(format_args!(
                    "{sig}: stopped; {count} container(s) left recorded for re-adoption"
                ));
                return Ok(());
            }
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // EMFILE and friends: say so, breathe, go on.
                log(DaemonError::Accept(e));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let root = stream.peer_cred().map(|c| c.uid() == 0).unwrap_or(false);
        let Ok(stream) = stream.into_std() else {
            continue;
        };
        let daemon = daemon.clone();
        tokio::task::spawn_blocking(move || daemon.connection(stream, root));
    }
}

/// The control socket: its directory root-only (made 0700 when missing),
/// the socket 0600, a stale socket replaced, a live one left alone.
fn bind_control(path: &Path) -> Result<tokio::net::UnixListener, DaemonError> {
    let fail = |source: SocketError| DaemonError::Socket {
        path: path.to_path_buf(),
        source,
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| fail(SocketError::NoDirectory))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| {
            fail(SocketError::CreateDir {
                dir: dir.to_path_buf(),
                source,
            })
        })?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| fail(SocketError::Io(e)))?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o077 != 0 {
        return Err(fail(SocketError::NotPrivate {
            dir: dir.to_path_buf(),
        }));
    }
    if std::fs::symlink_metadata(path).is_ok() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(fail(SocketError::Busy));
        }
        std::fs::remove_file(path).map_err(|e| fail(SocketError::RemoveStale(e)))?;
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(|e| fail(SocketError::Io(e)))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| fail(SocketError::Io(e)))?;
    Ok(listener)
}

impl Daemon {
    fn served(&self) -> MutexGuard<'_, HashMap<Key, Served>> {
        self.served.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the host's addresses and interface subnets again (blocking: from
    /// a plain thread, never an async task). On failure the old ones stay.
    fn refresh_deny_nets(&self) {
        let _one = self.refreshing.lock().unwrap_or_else(|e| e.into_inner());
        match super::hostnets::host_deny_nets() {
            Ok(nets) => {
                let text = nets
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(" ");
                if self.proxy.set_deny_nets(nets) {
                    log(format_args!(
                        "the host's addresses and interface subnets changed; refusing {text}"
                    ));
                }
            }
            Err(e) => log(format_args!(
                "cannot read the host's addresses again ({e}); still refusing {:?}",
                self.proxy.deny_nets()
            )),
        }
    }

    /// One control connection: one request, one reply.
    fn connection(&self, mut stream: std::os::unix::net::UnixStream, root: bool) {
        let reply = if root {
            self.request(&stream)
        } else {
            Reply::refused("the egress control socket is root's only")
        };
        if let Err(e) = control::send_reply(&mut stream, &reply) {
            log(format_args!("reply: {e}"));
        }
    }

    fn request(&self, stream: &std::os::unix::net::UnixStream) -> Reply {
        let setup = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_read_timeout(Some(control::TIMEOUT)))
            .and_then(|()| stream.set_write_timeout(Some(control::TIMEOUT)));
        if let Err(e) = setup {
            return Reply::refused(e.to_string());
        }
        let (line, mut fds) = match control::receive_request(stream) {
            Ok(got) => got,
            Err(e) => return Reply::refused(format!("cannot read the request: {e}")),
        };
        let request: Request = match serde_json::from_slice(&line) {
            Ok(request) => request,
            Err(e) => return Reply::refused(format!("bad request: {e}")),
        };
        match request {
            Request::Register {
                id,
                runc_root,
                network,
                pid,
                start_time,
                credentials,
            } => {
                if fds.len() != 1 {
                    return Reply::refused(format!(
                        "a registration carries exactly one network namespace fd ({} given)",
                        fds.len()
                    ));
                }
                let netns = File::from(fds.remove(0));
                let record = Record {
                    id,
                    runc_root,
                    pid,
                    start_time,
                    network,
                    credentials,
                    ca: None,
                };
                match self.register(record, netns) {
                    Ok((listeners, ca_pem)) => Reply {
                        listeners,
                        ca_pem,
                        ..Reply::ok()
                    },
                    Err(e) => Reply::refused(e.to_string()),
                }
            }
            Request::Unregister { id, runc_root } => {
                self.unregister(&(runc_root, id), "unregistered");
                Reply::ok()
            }
            Request::Status {
                id: Some(id),
                runc_root: Some(runc_root),
            } => match self.served().get(&(runc_root, id)) {
                Some(served) => Reply {
                    listeners: served.listening.addrs.clone(),
                    ..Reply::ok()
                },
                None => Reply::refused("the container is not registered with the egress daemon"),
            },
            Request::Status { .. } => Reply {
                containers: Some(self.served().len()),
                ..Reply::ok()
            },
        }
    }

    /// Checks a registration, binds the listeners in `netns`, writes the
    /// record, and serves. Returns the listening addresses and the PEM of
    /// the container's CA (with credentials), or why not.
    fn register(
        &self,
        mut record: Record,
        netns: File,
    ) -> Result<(Vec<String>, Option<String>), RegisterError> {
        if !container_id::is_valid(&record.id) {
            return Err(RegisterError::BadId(record.id));
        }
        if !record.runc_root.is_absolute() {
            return Err(RegisterError::RootNotAbsolute(record.runc_root));
        }
        if record.network.mode != NetworkMode::Proxy {
            return Err(RegisterError::NotProxy);
        }
        if !records::same_process(record.pid, record.start_time) {
            return Err(RegisterError::NotTheProcess {
                pid: record.pid,
                start_time: record.start_time,
            });
        }
        // The fd must be that process's namespace: the record (and a later
        // re-adoption) names the namespace by the pid.
        let of_pid = File::open(format!("/proc/{}/ns/net", record.pid))
            .and_then(|f| f.metadata())
            .map(|m| (m.dev(), m.ino()))
            .map_err(|source| RegisterError::PidNamespace {
                pid: record.pid,
                source,
            })?;
        if netns::ns_id(&netns)? != of_pid {
            return Err(RegisterError::NotItsNamespace { pid: record.pid });
        }
        let key = (record.runc_root.clone(), record.id.clone());
        let _one = self.serving.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(served) = self.served().get(&key) {
            if (served.pid, served.start_time) == (record.pid, record.start_time) {
                let ca_pem = served.listening.ca_pem();
                return Ok((served.listening.addrs.clone(), ca_pem));
            }
        }
        // A CA of its own, made before anything is served or written.
        if !record.credentials.is_empty() {
            let hosts: Vec<String> = record
                .credentials
                .iter()
                .flat_map(|b| b.hosts.iter().cloned())
                .collect();
            record.ca = Some(Ca::generate(&hosts).map_err(RegisterError::Ca)?.stored());
        }
        // Same key, another process: the old container is gone.
        self.unregister(&key, "replaced");
        // A new container often comes with a new engine network.
        self.refresh_deny_nets();
        records::write(&self.records, &record).map_err(RegisterError::Record)?;
        self.serve(record, netns)
            .map(|listening| (listening.addrs.clone(), listening.ca_pem()))
            .inspect_err(|_| {
                records::remove(&self.records, &key.0, &key.1);
            })
    }

    /// Serves a checked record: the listeners already in its namespace, or
    /// new ones bound there.
    fn serve(&self, record: Record, netns: File) -> Result<Arc<Listening>, RegisterError> {
        let ns = netns::ns_id(&netns)?;
        let shared = self
            .served()
            .values()
            .find(|s| s.listening.ns == ns)
            .map(|s| s.listening.clone());
        // Placeholders and CA are per container: a listener serving two
        // containers could not tell whose request it judges.
        let listening = match shared {
            Some(l) if l.credentials.is_some() || !record.credentials.is_empty() => {
                return Err(RegisterError::SharedCredentials)
            }
            Some(listening) if listening.network == record.network => listening,
            Some(_) => return Err(RegisterError::SharedNamespace),
            None => Arc::new(self.listen(&record, netns, ns)?),
        };
        let addrs = listening.addrs.clone();
        log(format_args!(
            "{} (root {}, pid {}): serving on {}",
            record.id,
            record.runc_root.display(),
            record.pid,
            addrs.join(" ")
        ));
        let served = Served {
            pid: record.pid,
            start_time: record.start_time,
            listening: listening.clone(),
        };
        self.served().insert((record.runc_root, record.id), served);
        Ok(listening)
    }

    /// Binds the listeners in `netns` and spawns the proxy on them.
    fn listen(
        &self,
        record: &Record,
        netns: File,
        ns: (u64, u64),
    ) -> Result<Listening, RegisterError> {
        // Transparent egress binds in the same namespace, before anything
        // is served: the namespace fd is used once per binding thread.
        let transparent = if ruleset::is_transparent(&record.network) {
            let again = netns.try_clone().map_err(|source| RegisterError::Open {
                path: "the namespace fd".into(),
                source,
            })?;
            Some(netns::bind_transparent(again, TRANSPARENT_PORT, DNS_PORT)?)
        } else {
            None
        };
        let bound = netns::bind_loopback(netns, PROXY_PORT)?;
        let notes = transparent.iter().flat_map(|t| t.notes.iter());
        for note in bound.notes.iter().chain(notes) {
            log(format_args!("{}: {note}", record.id));
        }
        let credentials = match (&record.ca, record.credentials.is_empty()) {
            (_, true) => None,
            (None, false) => return Err(RegisterError::NoCa),
            (Some(stored), false) => {
                let ca = Ca::restore(stored).map_err(RegisterError::Ca)?;
                Some(Arc::new(Credentials::new(record.credentials.clone(), ca)))
            }
        };
        let container = Arc::new(Container {
            id: record.id.clone(),
            network: record.network.clone(),
            credentials: credentials.clone(),
        });
        let _entered = self.handle.enter();
        let (close, closing) = tokio::sync::watch::channel(false);
        let mut listening = Listening {
            ns,
            network: record.network.clone(),
            credentials,
            addrs: Vec::new(),
            close,
        };
        for std_listener in bound.listeners {
            let addr = std_listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            // On failure, dropping `listening` stops what was spawned.
            let listener = tokio::net::TcpListener::from_std(std_listener).map_err(|source| {
                RegisterError::ToRuntime {
                    addr: addr.clone(),
                    source,
                }
            })?;
            listening.addrs.push(addr);
            let serving =
                self.proxy
                    .clone()
                    .serve_until(listener, container.clone(), closing.clone());
            let done = self.done.lock().unwrap_or_else(|e| e.into_inner()).clone();
            // Detached: `close` (on drop) is what ends it.
            self.handle.spawn(async move {
                serving.await;
                drop(done);
            });
        }
        if let Some(bound) = transparent {
            self.serve_transparent(bound, &container, &closing, &mut listening)?;
        }
        Ok(listening)
    }

    /// Spawns transparent egress's listener and DNS answerer on sockets
    /// bound in the container's namespace; they share the container's fake
    /// addresses, and stop with `listening`.
    fn serve_transparent(
        &self,
        bound: netns::TransparentBound,
        container: &Arc<Container>,
        closing: &tokio::sync::watch::Receiver<bool>,
        listening: &mut Listening,
    ) -> Result<(), RegisterError> {
        let fakes: Fakes = Arc::new(Mutex::new(FakePool::new(DEFAULT_POOL_NAMES)));
        let answerer = self.proxy.answerer(container.clone(), fakes.clone());
        let to_runtime = |addr: String| {
            move |source| RegisterError::ToRuntime {
                addr: addr.clone(),
                source,
            }
        };
        let mut tasks: Vec<futures::future::BoxFuture<'static, ()>> = Vec::new();
        for l in bound.listeners {
            let addr = local(l.local_addr());
            let l = tokio::net::TcpListener::from_std(l).map_err(to_runtime(addr.clone()))?;
            listening.addrs.push(format!("{addr} (transparent)"));
            let p = self.proxy.clone();
            tasks.push(Box::pin(p.serve_transparent_until(
                l,
                container.clone(),
                fakes.clone(),
                closing.clone(),
            )));
        }
        for u in bound.dns_udp {
            let addr = local(u.local_addr());
            let u = tokio::net::UdpSocket::from_std(u).map_err(to_runtime(addr.clone()))?;
            listening.addrs.push(format!("{addr}/udp (DNS)"));
            tasks.push(Box::pin(
                answerer.clone().serve_udp_until(u, closing.clone()),
            ));
        }
        for l in bound.dns_tcp {
            let addr = local(l.local_addr());
            let l = tokio::net::TcpListener::from_std(l).map_err(to_runtime(addr.clone()))?;
            listening.addrs.push(format!("{addr}/tcp (DNS)"));
            tasks.push(Box::pin(
                answerer.clone().serve_tcp_until(l, closing.clone()),
            ));
        }
        for task in tasks {
            let done = self.done.lock().unwrap_or_else(|e| e.into_inner()).clone();
            self.handle.spawn(async move {
                task.await;
                drop(done);
            });
        }
        Ok(())
    }

    fn unregister(&self, key: &Key, why: &str) {
        let removed = self.served().remove(key);
        records::remove(&self.records, &key.0, &key.1);
        if removed.is_some() {
            log(format_args!("{} (root {}): {why}", key.1, key.0.display()));
        }
    }

    /// Drops containers whose process is gone (or whose pid now names
    /// another process), and serves every record not served yet whose
    /// process is still the recorded one; other records go.
    fn sweep(&self) {
        self.refresh_deny_nets();
        let dead: Vec<Key> = self
            .served()
            .iter()
            .filter(|(_, s)| !records::same_process(s.pid, s.start_time))
            .map(|(key, _)| key.clone())
            .collect();
        for key in dead {
            self.unregister(&key, "process gone: dropped");
        }
        for (path, parsed) in records::list(&self.records) {
            let record = match parsed {
                Ok(record) => record,
                Err(e) => {
                    log(format_args!("dropping unreadable record: {e}"));
                    let _ = std::fs::remove_file(&path);
                    continue;
                }
            };
            let key = (record.runc_root.clone(), record.id.clone());
            // A record filed under another name than its content says.
            if records::path(&self.records, &key.0, &key.1).ok().as_ref() != Some(&path) {
                log(format_args!("dropping misplaced record {}", path.display()));
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let _one = self.serving.lock().unwrap_or_else(|e| e.into_inner());
            if self.served().contains_key(&key) {
                continue;
            }
            if !records::same_process(record.pid, record.start_time) {
                log(format_args!(
                    "{} (root {}): process {} gone: record dropped",
                    record.id,
                    record.runc_root.display(),
                    record.pid
                ));
                records::remove(&self.records, &key.0, &key.1);
                continue;
            }
            if let Err(e) = self.adopt(record) {
                // Kept: the next sweep tries again (e.g. the port was busy).
                log(format_args!(
                    "{} (root {}): cannot re-adopt: {e}",
                    key.1,
                    key.0.display()
                ));
            }
        }
    }

    fn adopt(&self, record: Record) -> Result<(), RegisterError> {
        let path = format!("/proc/{}/ns/net", record.pid);
        let netns = File::open(&path).map_err(|source| RegisterError::Open {
            path: path.clone(),
            source,
        })?;
        // Opened, then checked: the namespace is that of the recorded process.
        if !records::same_process(record.pid, record.start_time) {
            return Err(RegisterError::Gone);
        }
        self.serve(record, netns).map(|_| ())
    }
}
