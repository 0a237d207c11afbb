//! One container's proxy listener. Contract with the daemon: the daemon
//! binds the listener inside the container's network namespace and runs
//! [`Proxy::serve`] on it; dropping that future closes the listener and
//! every connection it accepted.
//!
//! A connection: read the request head (header timeout, size cap), judge
//! the name and port against `[network] hosts`, resolve (once), refuse if
//! any address is in the deny set, and dial the vetted address itself.
//! CONNECT to 443 answers 200 first and reads the TLS ClientHello, whose
//! SNI must be the CONNECT host, before dialling. An absolute-form request
//! is forwarded alone (`Connection: close` upstream, one request per client
//! connection), so every request that reaches a server was judged.
//! Refusals are a 403 whose body's first line names vibe-shim, the host,
//! the port and the rule; every connection is one JSON line in the log.
//! Report mode (`enforce = false`) lets name, port and SNI refusals through
//! as "would-deny"; the address deny set protects the host and is enforced
//! in both modes.
//!
//! A container with credentials: a CONNECT to 443 of a credential host is
//! terminated after those checks ([`terminate`]); any other request whose
//! head carries one of its placeholders is refused as a misuse (in both
//! modes: the placeholder is worth nothing there, the refusal is the log
//! line).

pub mod answer;
pub mod log;
pub mod net;
mod relay;
mod splice;
mod terminate;
mod transparent;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use ipnet::IpNet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use vibe_policy::config::NetworkSection;
use vibe_policy::egress::decision::authority;
use vibe_policy::egress::inject;
use vibe_policy::egress::request::{self, Request, RequestError, Target};
use vibe_policy::egress::sni::{client_hello_sni, SniError};
use vibe_policy::egress::{Decision, Host, HostList, Verdict};
use vibe_policy::network::DenySet;

pub use net::{Dial, Resolve, SystemDialer, SystemResolver};
pub use relay::Transfer;
use relay::{Counts, UpLimit};
pub use terminate::{read_secret, Credentials};

/// Where connection lines go unless the daemon says otherwise.
pub const DEFAULT_LOG_PATH: &str = "/var/log/vibe-shim/egress.jsonl";

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot open the egress log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Host-wide proxy settings (the daemon's, not a container's).
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// JSON lines, one per connection and per denial.
    pub log_path: PathBuf,
    /// Refused like private ranges: the host's own addresses and the
    /// subnets of its interfaces (the daemon gathers them, and replaces them
    /// with [`Proxy::set_deny_nets`] as they change).
    pub deny_nets: Vec<IpNet>,
    /// Concurrent connections per container (over both its listeners);
    /// one more gets a 503.
    pub max_connections: usize,
    /// The whole request head, and the ClientHello, must arrive within it.
    pub header_timeout: Duration,
    /// A connection with no byte either way for this long is closed.
    pub idle_timeout: Duration,
    /// Resolving, and dialling each address.
    pub connect_timeout: Duration,
    pub max_header_bytes: usize,
    pub max_client_hello_bytes: usize,
    /// How forwarded bytes move: splice(2) unless told otherwise (the
    /// bench compares; credential injection will need `Buffer` for the
    /// connections it rewrites).
    pub transfer: Transfer,
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings {
            log_path: PathBuf::from(DEFAULT_LOG_PATH),
            deny_nets: Vec::new(),
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(10),
            max_header_bytes: 32 * 1024,
            max_client_hello_bytes: 32 * 1024,
            transfer: Transfer::Splice,
        }
    }
}

/// One registered container: its id, the `[network]` section of the
/// policy it was created under, and its credentials (with their CA), if any.
#[derive(Debug, Clone)]
pub struct Container {
    pub id: String,
    pub network: NetworkSection,
    pub credentials: Option<Arc<Credentials>>,
}

/// The state shared by every listener.
pub struct Proxy {
    settings: ProxySettings,
    /// The nets beyond the fixed ranges, and the set built from them;
    /// replaced whole, read once per connection.
    deny: RwLock<(Vec<IpNet>, Arc<DenySet>)>,
    log: log::Log,
    resolver: Arc<dyn Resolve>,
    dialer: Arc<dyn Dial>,
    /// Per-registration connection slots and log budget, shared by its
    /// listeners (the daemon hands them one `Arc<Container>`). Keyed by
    /// that allocation, not the id: a container under another runc root
    /// may reuse an id.
    slots: Mutex<HashMap<usize, Weak<PerContainer>>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

const OK_200: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

impl Proxy {
    pub fn new(settings: ProxySettings) -> Result<Arc<Proxy>, ProxyError> {
        Proxy::with_net(settings, Arc::new(SystemResolver), Arc::new(SystemDialer))
    }

    /// Like [`Proxy::new`] with another resolver and dialer (tests, bench).
    pub fn with_net(
        settings: ProxySettings,
        resolver: Arc<dyn Resolve>,
        dialer: Arc<dyn Dial>,
    ) -> Result<Arc<Proxy>, ProxyError> {
        let log = log::Log::open(&settings.log_path).map_err(|source| ProxyError::Log {
            path: settings.log_path.clone(),
            source,
        })?;
        Ok(Arc::new(Proxy {
            deny: RwLock::new((
                settings.deny_nets.clone(),
                Arc::new(DenySet::new(&settings.deny_nets)),
            )),
            settings,
            log,
            resolver,
            dialer,
            slots: Mutex::new(HashMap::new()),
        }))
    }

    pub fn settings(&self) -> &ProxySettings {
        &self.settings
    }

    /// Replaces the host's addresses and interface subnets; connections
    /// judged from now on see them. Whether they changed.
    pub fn set_deny_nets(&self, nets: Vec<IpNet>) -> bool {
        let mut deny = self.deny.write().unwrap_or_else(|e| e.into_inner());
        if deny.0 == nets {
            return false;
        }
        *deny = (nets.clone(), Arc::new(DenySet::new(&nets)));
        true
    }

    /// The host's addresses and interface subnets refused now.
    pub fn deny_nets(&self) -> Vec<IpNet> {
        self.deny_set().0
    }

    fn deny_set(&self) -> (Vec<IpNet>, Arc<DenySet>) {
        self.deny.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Opens the log path again (after logrotate moved the file); on
    /// failure the old file stays in use.
    pub fn reopen_log(&self) -> std::io::Result<()> {
        self.log.reopen()
    }

    /// Serves `listener` for `container` until dropped.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        container: Arc<Container>,
    ) {
        let (_never, closing) = tokio::sync::watch::channel(false);
        self.serve_until(listener, container, closing).await
    }

    /// [`Proxy::serve`] until `closing` turns true or its sender is gone
    /// (the container was deleted, the daemon stops): then the listener
    /// closes, every relay ends with its log line (error `closed: ...`),
    /// and connections still unfinished after [`CLOSE_GRACE`] are dropped.
    pub async fn serve_until(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        container: Arc<Container>,
        closing: tokio::sync::watch::Receiver<bool>,
    ) {
        self.accept_until(listener, container, closing, None).await
    }

    /// The accept loop of both listeners: `fakes` is the container's fake
    /// addresses on a transparent listener, `None` on the proxy's.
    async fn accept_until(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        container: Arc<Container>,
        closing: tokio::sync::watch::Receiver<bool>,
        fakes: Option<Fakes>,
    ) {
        // An invalid list (the config check makes this unlikely) refuses all.
        let hosts = Arc::new(HostList::new(&container.network));
        let per = self.per_container(&container);
        let mut tasks = JoinSet::new();
        let mut watch = closing.clone();
        loop {
            tokio::select! {
                _ = closed(&mut watch) => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        let _ = nix::sys::socket::setsockopt(
                            &stream,
                            nix::sys::socket::sockopt::SndBuf,
                            &CLIENT_SNDBUF,
                        );
                        let permit = per.slots.clone().try_acquire_owned().ok();
                        let conn = Conn {
                            proxy: self.clone(),
                            container: container.clone(),
                            per: per.clone(),
                            hosts: hosts.clone(),
                            client: stream,
                            _permit: permit,
                            closing: closing.clone(),
                            via: Via::Proxy,
                        };
                        match &fakes {
                            None => tasks.spawn(conn.run()),
                            Some(f) => tasks.spawn(conn.run_transparent(f.clone())),
                        };
                    }
                    // EMFILE and the like: back off instead of spinning.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        drop(listener);
        let drained = async { while tasks.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(CLOSE_GRACE, drained).await;
        self.report_suppressed(&container, &per);
    }

    fn per_container(&self, container: &Arc<Container>) -> Arc<PerContainer> {
        // The address stays ours while a listener or connection holds the
        // Arc, which is as long as this can be alive.
        let key = Arc::as_ptr(container) as usize;
        let mut map = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, w| w.strong_count() > 0);
        if let Some(s) = map.get(&key).and_then(Weak::upgrade) {
            return s;
        }
        let s = Arc::new(PerContainer {
            slots: Arc::new(Semaphore::new(self.settings.max_connections)),
            budget: log::Budget::default(),
        });
        map.insert(key, Arc::downgrade(&s));
        s
    }

    /// The count of lines `per` did not write, as a line of its own.
    fn report_suppressed(&self, container: &Container, per: &PerContainer) {
        let suppressed = per.budget.drain();
        if suppressed == 0 {
            return;
        }
        self.log.write(&log::Line {
            time: log::now(),
            container: &container.id,
            decision: vibe_policy::egress::Verdict::Deny,
            kind: "suppressed",
            host: "",
            port: 0,
            address: None,
            rule: "lines over the container's log budget, not written",
            error: None,
            bytes_up: 0,
            bytes_down: 0,
            suppressed,
            credential: None,
        });
    }
}

/// What the listeners of one registration share.
struct PerContainer {
    slots: Arc<Semaphore>,
    budget: log::Budget,
}

/// What the proxy lets the kernel hold for a client that does not read:
/// the container's socket is on loopback, so a small buffer costs no
/// throughput, and autotuning would grow it to MiBs per tunnel, charged to
/// the daemon and the host's TCP memory, not to the container.
const CLIENT_SNDBUF: usize = 256 * 1024;

/// Until `closing` turns true, or its sender is gone.
async fn closed(closing: &mut tokio::sync::watch::Receiver<bool>) {
    // The guard wait_for returns is dropped at once (it is not Send).
    let _ = closing.wait_for(|c| *c).await.map(drop);
}

/// How long a closing listener waits for its connections' log lines.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// A container's fake addresses, shared by its DNS answerer and its
/// transparent listener.
pub type Fakes = Arc<Mutex<vibe_policy::egress::dns::FakePool>>;

/// How a connection reached the proxy: as a proxy request, or redirected
/// (transparent egress) with TLS or plain HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Proxy,
    Tls,
    Http,
}

struct Conn {
    /// Set once the first bytes of a transparent connection are read.
    via: Via,
    proxy: Arc<Proxy>,
    container: Arc<Container>,
    per: Arc<PerContainer>,
    hosts: Arc<Result<HostList, String>>,
    client: TcpStream,
    _permit: Option<OwnedSemaphorePermit>,
    /// True once the listener closes: a relay in progress ends, logged.
    closing: tokio::sync::watch::Receiver<bool>,
}

/// What one connection did, for its log line.
struct Outcome {
    decision: Decision,
    kind: &'static str,
    address: Option<SocketAddr>,
    error: Option<String>,
    counts: Counts,
    /// The credential(s) injected, or whose placeholder was misused.
    credential: Option<String>,
}

impl Outcome {
    fn new(decision: Decision, kind: &'static str) -> Outcome {
        Outcome {
            decision,
            kind,
            address: None,
            error: None,
            counts: Counts::default(),
            credential: None,
        }
    }
}

impl Conn {
    async fn run(mut self) {
        let s = &self.proxy.settings;
        if self._permit.is_none() {
            let why = format!("too many connections (limit {})", s.max_connections);
            let d = Decision::deny("", 0, why.clone());
            self.respond(
                503,
                "Service Unavailable",
                &format!("vibe-shim egress: {why}"),
            )
            .await;
            self.log(&Outcome::new(d, ""));
            return;
        }
        let mut buf = Vec::with_capacity(2048);
        let head = tokio::time::timeout(s.header_timeout, self.read_head(&mut buf)).await;
        let req = match head {
            Err(_) => {
                return self
                    .fail(408, "Request Timeout", "request header timeout")
                    .await
            }
            Ok(Ok(Some(r))) => r,
            Ok(Ok(None)) => return, // closed before a whole head: nothing asked
            Ok(Err(HeadError::Io)) => return,
            Ok(Err(HeadError::Request(e))) => {
                let (code, text) = match e {
                    RequestError::TooLarge(_) => (431, "Request Header Fields Too Large"),
                    RequestError::HostMismatch { .. } => (403, "Forbidden"),
                    _ => (400, "Bad Request"),
                };
                return self.fail(code, text, &e.to_string()).await;
            }
        };
        let pending = buf[req.head_len..].to_vec();
        let head_len = req.head_len;
        let outcome = self.handle(req, &buf[..head_len], pending).await;
        self.log(&outcome);
    }

    async fn read_head(&mut self, buf: &mut Vec<u8>) -> Result<Option<Request>, HeadError> {
        let cap = self.proxy.settings.max_header_bytes;
        let mut chunk = [0u8; 4096];
        loop {
            let searched = buf.len();
            let n = self
                .client
                .read(&mut chunk)
                .await
                .map_err(|_| HeadError::Io)?;
            if n == 0 {
                return Ok(None);
            }
            buf.extend_from_slice(&chunk[..n]);
            // Parsed once whole (or too long): a head trickled a byte at a
            // time costs linear time.
            if !request::head_complete(buf, searched) && buf.len() < cap {
                continue;
            }
            if let Some(r) = request::parse(buf, cap).map_err(HeadError::Request)? {
                return Ok(Some(r));
            }
        }
    }

    /// A refused request that never got as far as a target.
    async fn fail(&mut self, code: u16, text: &str, why: &str) {
        let d = Decision::deny("", 0, why);
        self.respond(code, text, &format!("vibe-shim egress: {why}"))
            .await;
        self.log(&Outcome::new(d, ""));
    }

    async fn handle(&mut self, req: Request, head: &[u8], pending: Vec<u8>) -> Outcome {
        let enforce = self.container.network.enforce;
        let host = req.host.text();
        let port = req.port;
        let connect = req.target == Target::Connect;
        let kind = match (self.via, connect) {
            (Via::Proxy, true) => "connect",
            (Via::Proxy, false) => "http",
            (Via::Tls, _) => "transparent-tls",
            (Via::Http, _) => "transparent-http",
        };
        // A redirected client asked no proxy: it gets no proxy's answer.
        let proxied = self.via == Via::Proxy;
        let creds = self.container.credentials.clone();
        // A placeholder in a head the proxy reads itself: never terminated,
        // so never where a placeholder belongs.
        let misused = creds
            .as_ref()
            .and_then(|c| inject::find_placeholder(head, &c.bindings))
            .map(|b| b.name.clone());
        if let Some(name) = misused {
            let why = format!(
                "misuse of credential {name}'s placeholder: in a {} request to {}, which is not where it is injected",
                if connect { "CONNECT" } else { "plain HTTP" },
                authority(&host, port)
            );
            let mut o = self
                .refuse(Decision::deny(&host, port, why), "misuse", None)
                .await;
            o.credential = Some(name);
            return o;
        }
        let judged = match self.hosts.as_ref() {
            Err(e) => Err(format!("invalid [network] hosts: {e}")),
            Ok(list) => list.judge(&req.host, port),
        };
        let mut decision = match judged {
            Ok(rule) if connect && port == 80 => Decision::refuse(
                enforce,
                &host,
                port,
                format!("CONNECT to port 80 (plain HTTP is judged per request; {rule})"),
            ),
            Ok(rule) => Decision::allow(&host, port, rule),
            Err(why) => Decision::refuse(enforce, &host, port, why),
        };
        if !decision.verdict.passes() {
            return self.refuse(decision, kind, None).await;
        }
        // Resolve once; every address must pass; dial only those.
        let addrs = match self.resolve(&req.host, port).await {
            Ok(a) => a,
            Err(e) => {
                let d = Decision::deny(&host, port, format!("cannot resolve {host}: {e}"));
                return self.refuse_with(d, kind, None, 502, "Bad Gateway").await;
            }
        };
        let deny = self.proxy.deny_set().1;
        for a in &addrs {
            if let Err(denied) = deny.check(a.ip()) {
                let d = Decision::deny(&host, port, denied.to_string());
                return self.refuse(d, kind, Some(*a)).await;
            }
        }
        let mut pending = pending;
        let mut terminated = None;
        if connect && port == 443 {
            if proxied && self.client.write_all(OK_200).await.is_err() {
                return Outcome::new(decision, kind);
            }
            match self.read_client_hello(&mut pending).await {
                Ok(sni) => {
                    let name = match &req.host {
                        Host::Name(n) => Some(n.as_str()),
                        Host::Ip(_) => None,
                    };
                    let why = match sni {
                        None => Some("no SNI in the TLS ClientHello on port 443".to_string()),
                        Some(s) if Some(s.as_str()) != name => Some(format!(
                            "domain fronting: TLS SNI {s} is not the CONNECT host"
                        )),
                        Some(_) => None,
                    };
                    match why {
                        Some(why) => decision = escalate(decision, enforce, why),
                        // Only a name the ClientHello agrees with is
                        // terminated, so the leaf names what was asked.
                        None => {
                            terminated = creds
                                .filter(|c| name.is_some_and(|n| c.binds(n)))
                                .zip(name.map(str::to_string))
                        }
                    }
                }
                Err(e) => decision = escalate(decision, enforce, format!("port 443: {e}")),
            }
            if !decision.verdict.passes() {
                return self.refuse(decision, kind, None).await;
            }
        }
        let (mut upstream, address) = match self.dial(&addrs).await {
            Ok(x) => x,
            Err(e) => {
                let mut o = Outcome::new(decision, kind);
                o.error = Some(format!("cannot reach {}: {e}", authority(&host, port)));
                if !(connect && port == 443) {
                    let line = format!(
                        "vibe-shim egress: cannot reach {} ({e})",
                        authority(&host, port)
                    );
                    self.respond(502, "Bad Gateway", &line).await;
                }
                return o;
            }
        };
        let mut outcome = Outcome::new(decision, kind);
        outcome.address = Some(address);
        if let Some((creds, name)) = terminated {
            return self
                .terminate(creds, name, upstream, pending, outcome)
                .await;
        }
        let limit = if connect {
            if port != 443 && proxied && self.client.write_all(OK_200).await.is_err() {
                return outcome;
            }
            UpLimit::All
        } else {
            let head = req.forward_head().unwrap_or_default();
            if let Err(e) = upstream.write_all(&head).await {
                outcome.error = Some(e.to_string());
                return outcome;
            }
            UpLimit::from(req.body)
        };
        let idle = self.proxy.settings.idle_timeout;
        let transfer = self.proxy.settings.transfer;
        let mut closing = self.closing.clone();
        let relayed = relay::relay(
            &mut self.client,
            &mut upstream,
            &pending,
            limit,
            idle,
            &outcome.counts,
            transfer,
        );
        // The counts are the outcome's own: a relay cut here keeps them.
        let result = tokio::select! {
            r = relayed => r,
            _ = closed(&mut closing) => Err(std::io::Error::other(
                "closed: the container's listener stopped (delete or daemon stop)",
            )),
        };
        if let Err(e) = result {
            outcome.error = Some(e.to_string());
        }
        outcome
    }

    async fn resolve(&self, host: &Host, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        let mut addrs = match host {
            // Only in report mode does an IP literal get this far.
            Host::Ip(ip) => vec![SocketAddr::new(*ip, port)],
            Host::Name(n) => {
                let t = self.proxy.settings.connect_timeout;
                tokio::time::timeout(t, self.proxy.resolver.resolve(n, port))
                    .await
                    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"))??
            }
        };
        let mut seen: Vec<IpAddr> = Vec::new();
        addrs.retain(|a| {
            let new = !seen.contains(&a.ip());
            seen.push(a.ip());
            new
        });
        if addrs.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no address",
            ));
        }
        Ok(addrs)
    }

    async fn dial(&self, addrs: &[SocketAddr]) -> std::io::Result<(TcpStream, SocketAddr)> {
        let t = self.proxy.settings.connect_timeout;
        let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
        for a in addrs {
            match tokio::time::timeout(t, self.proxy.dialer.dial(*a)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    return Ok((s, *a));
                }
                Ok(Err(e)) => last = e,
                Err(_) => {
                    last = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
                }
            }
        }
        Err(last)
    }

    /// Reads until `pending` holds a whole ClientHello; its SNI.
    async fn read_client_hello(&mut self, pending: &mut Vec<u8>) -> Result<Option<String>, String> {
        let cap = self.proxy.settings.max_client_hello_bytes;
        let t = self.proxy.settings.header_timeout;
        let read = async {
            let mut chunk = [0u8; 4096];
            loop {
                match client_hello_sni(pending, cap) {
                    Ok(Some(sni)) => return Ok(sni),
                    Ok(None) => {}
                    Err(e) => return Err(e.to_string()),
                }
                match self.client.read(&mut chunk).await {
                    Ok(0) => return Err("closed before the TLS ClientHello".to_string()),
                    Ok(n) => pending.extend_from_slice(&chunk[..n]),
                    Err(e) => return Err(e.to_string()),
                }
            }
        };
        match tokio::time::timeout(t, read).await {
            Ok(r) => r,
            Err(_) => Err(SniError::Malformed("TLS ClientHello timeout").to_string()),
        }
    }

    async fn refuse(
        &mut self,
        d: Decision,
        kind: &'static str,
        addr: Option<SocketAddr>,
    ) -> Outcome {
        self.refuse_with(d, kind, addr, 403, "Forbidden").await
    }

    async fn refuse_with(
        &mut self,
        d: Decision,
        kind: &'static str,
        addr: Option<SocketAddr>,
        code: u16,
        text: &str,
    ) -> Outcome {
        let line = d.refusal_line();
        self.respond(code, text, &line).await;
        let mut o = Outcome::new(d, kind);
        o.address = addr;
        o
    }

    /// A short response, then the connection closes. Bounded: a client
    /// that does not read cannot hold the task.
    async fn respond(&mut self, code: u16, text: &str, first_line: &str) {
        let t = self.proxy.settings.header_timeout;
        if self.via == Via::Tls {
            // A TLS client cannot read an HTTP answer: it is closed, and
            // the log line says why.
            let _ = tokio::time::timeout(t, self.client.shutdown()).await;
            return;
        }
        let body = format!("{first_line}\n");
        let msg = format!(
            "HTTP/1.1 {code} {text}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = tokio::time::timeout(t, async {
            self.client.write_all(msg.as_bytes()).await?;
            self.client.shutdown().await
        })
        .await;
    }

    fn log(&self, o: &Outcome) {
        use std::sync::atomic::Ordering;
        let Some(suppressed) = self.per.budget.take() else {
            return;
        };
        self.proxy.log.write(&log::Line {
            time: log::now(),
            container: &self.container.id,
            decision: o.decision.verdict,
            kind: o.kind,
            host: &log::clip(&o.decision.host),
            port: o.decision.port,
            address: o.address,
            rule: &log::clip(&o.decision.rule),
            error: o.error.as_deref().map(|e| log::clip(e).into_owned()),
            bytes_up: o.counts.up.load(Ordering::Relaxed),
            bytes_down: o.counts.down.load(Ordering::Relaxed),
            suppressed,
            credential: o.credential.as_deref(),
        });
    }
}

enum HeadError {
    Io,
    Request(RequestError),
}

/// A later refusal of an allowed (or already would-deny) request.
fn escalate(d: Decision, enforce: bool, why: String) -> Decision {
    let rule = match d.verdict {
        Verdict::Allow => why,
        _ => format!("{}; {why}", d.rule),
    };
    Decision::refuse(enforce, &d.host, d.port, rule)
}
