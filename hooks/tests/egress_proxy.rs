//! The egress proxy's engine on the host's loopback: `serve` on a
//! 127.0.0.1:0 listener, a stand-in resolver that maps test names to
//! documentation (or private) addresses, and a stand-in dialer that takes a
//! vetted documentation address to a test upstream on loopback. No root,
//! no container; the in-container end-to-end tests are the daemon's.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vibe_hooks::egress::proxy::{log, Container, Dial, Proxy, ProxySettings, Resolve, CLOSE_GRACE};
use vibe_policy::config::{NetworkMode, NetworkSection};
use vibe_policy::egress::sni::build_client_hello;

pub struct FakeResolver(pub HashMap<String, Vec<&'static str>>);

impl Resolve for FakeResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        let r = match self.0.get(host) {
            Some(ips) => Ok(ips
                .iter()
                .map(|ip| SocketAddr::new(ip.parse().unwrap(), port))
                .collect()),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "unknown name")),
        };
        Box::pin(async move { r })
    }
}

/// Sends every dial to the one upstream, recording what was asked.
pub struct FakeDialer {
    pub upstream: SocketAddr,
    pub dialled: Mutex<Vec<SocketAddr>>,
}

impl Dial for FakeDialer {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        self.dialled.lock().unwrap().push(addr);
        Box::pin(TcpStream::connect(self.upstream))
    }
}

struct Lab {
    proxy_addr: SocketAddr,
    dialer: Arc<FakeDialer>,
    /// What the upstream received, one entry per connection.
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
    log: PathBuf,
    _dir: tempfile::TempDir,
    serve: tokio::task::JoinHandle<()>,
    proxy: Arc<Proxy>,
    container: Arc<Container>,
}

const NAMES: &[(&str, &[&str])] = &[
    ("allowed.example", &["203.0.113.5"]),
    ("other.example", &["203.0.113.5"]),
    ("private.example", &["10.213.7.5"]),
    ("metadata.example", &["169.254.169.254"]),
    ("mixed.example", &["203.0.113.5", "10.0.0.1"]),
    ("nat64.example", &["64:ff9b::a9fe:a9fe"]),
    ("v6.example", &["2001:db8:5::5"]),
];

/// The upstream: HTTP requests get a 200 naming what arrived; anything else
/// is echoed back.
async fn upstream(seen: Arc<Mutex<Vec<Vec<u8>>>>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 65536];
                let idx = {
                    let mut v = seen.lock().unwrap();
                    v.push(Vec::new());
                    v.len() - 1
                };
                loop {
                    let n = match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    got.extend_from_slice(&buf[..n]);
                    seen.lock().unwrap()[idx] = got.clone();
                    if got.starts_with(b"GET ") || got.starts_with(b"POST ") {
                        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&got[..end]).to_string();
                            let body =
                                format!("upstream saw: {}\n", head.lines().next().unwrap_or(""));
                            let resp = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = s.write_all(resp.as_bytes()).await;
                            // Read the rest (a body), then close.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            let _ = s.shutdown().await;
                            while let Ok(n) = s.read(&mut buf).await {
                                if n == 0 {
                                    break;
                                }
                                got.extend_from_slice(&buf[..n]);
                                seen.lock().unwrap()[idx] = got.clone();
                            }
                            return;
                        }
                    } else if s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

async fn lab(hosts: &[&str], enforce: bool, tweak: impl FnOnce(&mut ProxySettings)) -> Lab {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log/egress.jsonl");
    let mut settings = ProxySettings {
        log_path: log.clone(),
        ..ProxySettings::default()
    };
    tweak(&mut settings);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let dialer = Arc::new(FakeDialer {
        upstream: upstream(seen.clone()).await,
        dialled: Mutex::new(Vec::new()),
    });
    let resolver = FakeResolver(
        NAMES
            .iter()
            .map(|(n, ips)| (n.to_string(), ips.to_vec()))
            .collect(),
    );
    let proxy = Proxy::with_net(settings, Arc::new(resolver), dialer.clone()).unwrap();
    let container = Arc::new(Container {
        id: "egress-test".into(),
        network: NetworkSection {
            mode: NetworkMode::Proxy,
            hosts: hosts.iter().map(|s| s.to_string()).collect(),
            enforce,
            ..NetworkSection::default()
        },
        credentials: None,
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_addr = listener.local_addr().unwrap();
    let serve = tokio::spawn(proxy.clone().serve(listener, container.clone()));
    Lab {
        proxy_addr,
        dialer,
        seen,
        log,
        _dir: dir,
        serve,
        proxy,
        container,
    }
}

impl Lab {
    /// Another listener: for the same registration (as the daemon's v4 and
    /// v6 listeners are), or for a new one with the same id (a container of
    /// that id under another runc root).
    async fn listen_again(&self, same_registration: bool) -> SocketAddr {
        let container = if same_registration {
            self.container.clone()
        } else {
            Arc::new(Container {
                id: self.container.id.clone(),
                network: self.container.network.clone(),
                credentials: None,
            })
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(self.proxy.clone().serve(listener, container));
        addr
    }

    /// Another listener for this registration, served until `close` says
    /// true: its address, `close`, and the serving task.
    async fn serve_until(
        &self,
    ) -> (
        SocketAddr,
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (close, closing) = tokio::sync::watch::channel(false);
        let serving = tokio::spawn(self.proxy.clone().serve_until(
            listener,
            self.container.clone(),
            closing,
        ));
        (addr, close, serving)
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.proxy_addr).await.unwrap()
    }

    /// Sends `req`, reads until EOF (or 3 s).
    async fn ask(&self, req: &[u8]) -> String {
        let mut s = self.connect().await;
        s.write_all(req).await.unwrap();
        read_all(&mut s).await
    }

    async fn log_lines(&self) -> Vec<serde_json::Value> {
        // Lines are written when a connection closes.
        for _ in 0..50 {
            if let Ok(text) = std::fs::read_to_string(&self.log) {
                if !text.is_empty() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let text = std::fs::read_to_string(&self.log).unwrap();
                    return text
                        .lines()
                        .map(|l| serde_json::from_str(l).unwrap())
                        .collect();
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Vec::new()
    }
}

async fn read_all(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// A tunnel to allowed.example:443 through the proxy at `addr`, past its
/// 200 and a ClientHello the upstream echoed back: the stream, and the
/// ClientHello's length (the bytes each way so far).
async fn open_tunnel(addr: SocketAddr) -> (TcpStream, usize) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"CONNECT allowed.example:443 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    read_n(&mut s, OK_200.len()).await;
    let hello = build_client_hello(Some("allowed.example"), 16_384);
    s.write_all(&hello).await.unwrap();
    read_n(&mut s, hello.len()).await;
    (s, hello.len())
}

/// Reads until `want` bytes arrived.
async fn read_n(s: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut out = vec![0u8; want];
    tokio::time::timeout(Duration::from_secs(3), s.read_exact(&mut out))
        .await
        .expect("timed out")
        .unwrap();
    out
}

fn body_first_line(resp: &str) -> &str {
    resp.split("\r\n\r\n")
        .nth(1)
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("")
}

const OK_200: &str = "HTTP/1.1 200 Connection established\r\n\r\n";

#[tokio::test]
async fn connect_to_an_allowed_name_reaches_the_vetted_address() {
    let lab = lab(&["allowed.example"], true, |_| {}).await;
    let mut s = lab.connect().await;
    s.write_all(b"CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_n(&mut s, OK_200.len()).await, OK_200.as_bytes());
    // The ClientHello in two pieces, then application bytes: all echoed.
    let hello = build_client_hello(Some("allowed.example"), 16_384);
    s.write_all(&hello[..10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    s.write_all(&hello[10..]).await.unwrap();
    assert_eq!(read_n(&mut s, hello.len()).await, hello);
    s.write_all(b"app data").await.unwrap();
    assert_eq!(read_n(&mut s, 8).await, b"app data");
    drop(s);
    assert_eq!(
        *lab.dialer.dialled.lock().unwrap(),
        vec!["203.0.113.5:443".parse::<SocketAddr>().unwrap()]
    );
    let lines = lab.log_lines().await;
    let l = &lines[0];
    assert_eq!(l["decision"], "allow");
    assert_eq!(l["container"], "egress-test");
    assert_eq!(l["host"], "allowed.example");
    assert_eq!(l["port"], 443);
    assert_eq!(l["address"], "203.0.113.5:443");
    assert_eq!(l["rule"], "[network] hosts \"allowed.example\"");
    assert_eq!(l["bytes_up"], (hello.len() + 8) as u64);
    assert_eq!(l["bytes_down"], (hello.len() + 8) as u64);
    assert!(l["time"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn plain_http_is_forwarded_in_origin_form() {
    let lab = lab(&["allowed.example"], true, |_| {}).await;
    let resp = lab
        .ask(b"GET http://allowed.example/x?y HTTP/1.1\r\nHost: allowed.example\r\nProxy-Connection: keep-alive\r\n\r\n")
        .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    assert_eq!(body_first_line(&resp), "upstream saw: GET /x?y HTTP/1.1");
    let seen = String::from_utf8(lab.seen.lock().unwrap()[0].clone()).unwrap();
    assert!(seen.contains("\r\nHost: allowed.example\r\n"), "{seen}");
    assert!(seen.contains("\r\nConnection: close\r\n"), "{seen}");
    assert!(
        !seen.to_ascii_lowercase().contains("proxy-connection"),
        "{seen}"
    );
    let l = &lab.log_lines().await[0];
    assert_eq!(
        (l["decision"].as_str(), l["kind"].as_str()),
        (Some("allow"), Some("http"))
    );
    assert_eq!(l["address"], "203.0.113.5:80");
}

#[tokio::test]
async fn a_request_body_goes_along_and_nothing_after_it() {
    let lab = lab(&["allowed.example"], true, |_| {}).await;
    // Pipelined: a POST with a body, then a request for a refused host on
    // the same connection. Only the first, judged one reaches upstream.
    let resp = lab
        .ask(b"POST http://allowed.example/p HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n")
        .await;
    assert_eq!(body_first_line(&resp), "upstream saw: POST /p HTTP/1.1");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = String::from_utf8(lab.seen.lock().unwrap()[0].clone()).unwrap();
    assert!(seen.ends_with("\r\n\r\nhello"), "{seen:?}");
    assert!(!seen.contains("evil"), "{seen:?}");
    // Chunked bodies too.
    let resp = lab
        .ask(b"POST http://allowed.example/c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET http://evil.example/ HTTP/1.1\r\n\r\n")
        .await;
    assert_eq!(body_first_line(&resp), "upstream saw: POST /c HTTP/1.1");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = String::from_utf8(lab.seen.lock().unwrap()[1].clone()).unwrap();
    assert!(seen.ends_with("5\r\nhello\r\n0\r\n\r\n"), "{seen:?}");
}

#[tokio::test]
async fn refusals_are_403s_that_name_the_host() {
    let lab = lab(
        &[
            "allowed.example",
            "*.allowed.example",
            "metadata.example",
            "private.example",
            "mixed.example",
            "nat64.example",
        ],
        true,
        |_| {},
    )
    .await;
    let cases: &[(&[u8], &str)] = &[
        (
            b"CONNECT other.example:443 HTTP/1.1\r\n\r\n",
            "vibe-shim egress: denied other.example:443 (not in [network] hosts)",
        ),
        (
            b"GET http://other.example/ HTTP/1.1\r\n\r\n",
            "vibe-shim egress: denied other.example:80 (not in [network] hosts)",
        ),
        (
            b"CONNECT allowed.example:8443 HTTP/1.1\r\n\r\n",
            "vibe-shim egress: denied allowed.example:8443 (port 8443 not allowed for allowed.example in [network] hosts/ports)",
        ),
        (
            b"CONNECT private.example:443 HTTP/1.1\r\n\r\n",
            "vibe-shim egress: denied private.example:443 (resolves to 10.213.7.5, in a private or reserved range 10.0.0.0/8)",
        ),
        (
            b"GET http://metadata.example/latest/meta-data/ HTTP/1.1\r\n\r\n",
            "vibe-shim egress: denied metadata.example:80 (resolves to 169.254.169.254, in a private or reserved range 169.254.0.0/16)",
        ),
        (
            b"CONNECT mixed.example:443 HTTP/1.1\r\n\r\n",
            "vibe-shim egress: denied mixed.example:443 (resolves to 10.0.0.1, in a private or reserved range 10.0.0.0/8)",
        ),
        (
            b"CONNECT nat64.example:443 HTTP/1.1\r\n\r\n",
            "vibe-shim egress: denied nat64.example:443 (resolves to 64:ff9b::a9fe:a9fe (NAT64 form of 169.254.169.254), in a private or reserved range 169.254.0.0/16)",
        ),
        (
            b"CONNECT 203.0.113.5:443 HTTP/1.1\r\n\r\n",
            "vibe-shim egress: denied 203.0.113.5:443 (an IP address, not a name in [network] hosts)",
        ),
        (
            b"CONNECT allowed.example:80 HTTP/1.1\r\n\r\n",
            "vibe-shim egress: denied allowed.example:80 (CONNECT to port 80 (plain HTTP is judged per request; [network] hosts \"allowed.example\"))",
        ),
    ];
    for (req, want) in cases {
        let resp = lab.ask(req).await;
        assert!(resp.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{resp}");
        assert_eq!(body_first_line(&resp), *want);
    }
    assert!(
        lab.dialer.dialled.lock().unwrap().is_empty(),
        "nothing was dialled"
    );
    let lines = lab.log_lines().await;
    assert_eq!(lines.len(), cases.len());
    assert!(lines.iter().all(|l| l["decision"] == "deny"));
    assert_eq!(lines[3]["address"], "10.213.7.5:443");
    // A Host header naming another host than the URI.
    let resp = lab
        .ask(b"GET http://allowed.example/ HTTP/1.1\r\nHost: other.example\r\n\r\n")
        .await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(body_first_line(&resp).contains("other.example"), "{resp}");
}

#[tokio::test]
async fn sni_must_be_the_connect_host() {
    let lab = lab(&["allowed.example"], true, |_| {}).await;
    for (hello, want) in [
        (
            build_client_hello(Some("other.example"), 16_384),
            "vibe-shim egress: denied allowed.example:443 (domain fronting: TLS SNI other.example is not the CONNECT host)",
        ),
        (
            build_client_hello(None, 16_384),
            "vibe-shim egress: denied allowed.example:443 (no SNI in the TLS ClientHello on port 443)",
        ),
        (
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            "vibe-shim egress: denied allowed.example:443 (port 443: not a TLS handshake)",
        ),
    ] {
        let mut s = lab.connect().await;
        s.write_all(b"CONNECT allowed.example:443 HTTP/1.1\r\n\r\n").await.unwrap();
        assert_eq!(read_n(&mut s, OK_200.len()).await, OK_200.as_bytes());
        s.write_all(&hello).await.unwrap();
        let resp = read_all(&mut s).await;
        assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
        assert_eq!(body_first_line(&resp), want);
    }
    assert!(
        lab.dialer.dialled.lock().unwrap().is_empty(),
        "nothing was dialled"
    );
}

#[tokio::test]
async fn report_mode_allows_and_logs_would_deny() {
    let lab = lab(&["allowed.example"], false, |_| {}).await;
    let resp = lab.ask(b"GET http://other.example/ HTTP/1.1\r\n\r\n").await;
    assert_eq!(body_first_line(&resp), "upstream saw: GET / HTTP/1.1");
    let mut s = lab.connect().await;
    s.write_all(b"CONNECT other.example:443 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    read_n(&mut s, OK_200.len()).await;
    let hello = build_client_hello(Some("third.example"), 100);
    s.write_all(&hello).await.unwrap();
    assert_eq!(read_n(&mut s, hello.len()).await, hello);
    drop(s);
    // The address deny set holds in report mode too.
    let resp = lab
        .ask(b"CONNECT metadata.example:443 HTTP/1.1\r\n\r\n")
        .await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lines = lab.log_lines().await;
    let by_host = |h: &str| lines.iter().find(|l| l["host"] == h).unwrap().clone();
    assert_eq!(by_host("other.example")["decision"], "would-deny");
    assert_eq!(by_host("metadata.example")["decision"], "deny");
    let connect = lines
        .iter()
        .find(|l| l["kind"] == "connect" && l["host"] == "other.example")
        .unwrap();
    assert_eq!(connect["decision"], "would-deny");
    let rule = connect["rule"].as_str().unwrap();
    assert!(
        rule.contains("not in [network] hosts") && rule.contains("third.example"),
        "{rule}"
    );
}

#[tokio::test]
async fn limits_answer_misbehaving_clients() {
    let lab = lab(&["allowed.example"], true, |s| {
        s.header_timeout = Duration::from_millis(300);
        s.max_connections = 2;
        s.max_header_bytes = 1024;
    })
    .await;
    // Slowloris: a head that never ends gets a 408.
    let mut s = lab.connect().await;
    s.write_all(b"GET http://allowed.example/ HTTP/1.1\r\nX: ")
        .await
        .unwrap();
    let resp = read_all(&mut s).await;
    assert!(resp.starts_with("HTTP/1.1 408"), "{resp}");
    // A ClientHello that never completes after the 200: refused in time.
    let mut s = lab.connect().await;
    s.write_all(b"CONNECT allowed.example:443 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    read_n(&mut s, OK_200.len()).await;
    let hello = build_client_hello(Some("allowed.example"), 16_384);
    s.write_all(&hello[..hello.len() - 1]).await.unwrap();
    let resp = read_all(&mut s).await;
    assert!(resp.contains("TLS ClientHello timeout"), "{resp}");
    // An oversized head gets a 431.
    let big = format!(
        "GET http://allowed.example/ HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(2000)
    );
    let resp = lab.ask(big.as_bytes()).await;
    assert!(resp.starts_with("HTTP/1.1 431"), "{resp}");
    // Garbage gets a 400.
    let resp = lab.ask(b"\x16\x03\x01garbage\r\n\r\n").await;
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    // Two open tunnels; the third connection gets a 503.
    let mut open = Vec::new();
    for _ in 0..2 {
        let (s, _) = open_tunnel(lab.proxy_addr).await;
        open.push(s);
    }
    let resp = lab
        .ask(b"CONNECT allowed.example:443 HTTP/1.1\r\n\r\n")
        .await;
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    assert!(
        body_first_line(&resp).contains("too many connections (limit 2)"),
        "{resp}"
    );
    // Closing one frees its slot.
    drop(open.pop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let resp = lab
        .ask(b"GET http://allowed.example/ HTTP/1.1\r\n\r\n")
        .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
}

/// One registration's listeners share its slots; another registration with
/// the same id (another runc root) has its own, so it cannot starve this one.
#[tokio::test]
async fn connection_slots_belong_to_the_registration_not_the_id() {
    let lab = lab(&["allowed.example"], true, |s| s.max_connections = 1).await;
    let hold = |addr: SocketAddr| async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"CONNECT allowed.example:443 HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        read_n(&mut s, OK_200.len()).await;
        s
    };
    let ask = |addr: SocketAddr| async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET http://allowed.example/ HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        read_all(&mut s).await
    };
    let _held = hold(lab.proxy_addr).await;
    let sibling = lab.listen_again(true).await;
    let resp = ask(sibling).await;
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    let other = lab.listen_again(false).await;
    let resp = ask(other).await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
}

#[tokio::test]
async fn idle_tunnels_are_closed() {
    let lab = lab(&["allowed.example"], true, |s| {
        s.idle_timeout = Duration::from_millis(300);
    })
    .await;
    let (mut s, _) = open_tunnel(lab.proxy_addr).await;
    let t = std::time::Instant::now();
    assert_eq!(read_all(&mut s).await, "");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let l = &lab.log_lines().await[0];
    assert_eq!(l["error"], "idle timeout");
}

#[tokio::test]
async fn dropping_serve_closes_the_listener_and_its_connections() {
    let lab = lab(&["allowed.example"], true, |_| {}).await;
    let (mut s, _) = open_tunnel(lab.proxy_addr).await;
    lab.serve.abort();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(read_all(&mut s).await, "", "the tunnel is closed");
    assert!(
        TcpStream::connect(lab.proxy_addr).await.is_err(),
        "the listener is closed"
    );
}

/// A container deleted (or the daemon stopping) mid-tunnel: the listener
/// closes, the tunnel ends, and its log line is still written.
#[tokio::test]
async fn closing_a_listener_ends_its_tunnels_with_their_log_lines() {
    let lab = lab(&["allowed.example"], true, |_| {}).await;
    let (addr, close, serving) = lab.serve_until().await;
    let (mut s, moved) = open_tunnel(addr).await;
    close.send(true).unwrap();
    tokio::time::timeout(CLOSE_GRACE + Duration::from_secs(1), serving)
        .await
        .expect("serve_until ends within the grace")
        .unwrap();
    assert_eq!(read_all(&mut s).await, "", "the tunnel is closed");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
    let lines = lab.log_lines().await;
    let l = lines
        .iter()
        .find(|l| l["decision"] == "allow")
        .unwrap_or_else(|| panic!("no log line for the cut tunnel: {lines:?}"));
    assert!(
        l["error"].as_str().unwrap_or("").starts_with("closed:"),
        "{l}"
    );
    assert_eq!(l["bytes_up"], moved as u64);
    assert_eq!(l["bytes_down"], moved as u64);
}

#[tokio::test]
async fn an_ipv6_listener_and_an_ipv6_upstream() {
    let lab = lab(&["v6.example"], true, |_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = ProxySettings {
        log_path: dir.path().join("egress.jsonl"),
        ..ProxySettings::default()
    };
    let resolver = FakeResolver(HashMap::from([(
        "v6.example".to_string(),
        vec!["2001:db8:5::5"],
    )]));
    let proxy = Proxy::with_net(settings, Arc::new(resolver), lab.dialer.clone()).unwrap();
    let Ok(listener) = TcpListener::bind("[::1]:0").await else {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    };
    let addr = listener.local_addr().unwrap();
    let container = Arc::new(Container {
        id: "v6".into(),
        network: NetworkSection {
            mode: NetworkMode::Proxy,
            hosts: vec!["v6.example".into()],
            ..NetworkSection::default()
        },
        credentials: None,
    });
    tokio::spawn(proxy.serve(listener, container));
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET http://v6.example/ HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let resp = read_all(&mut s).await;
    assert_eq!(body_first_line(&resp), "upstream saw: GET / HTTP/1.1");
    assert_eq!(
        *lab.dialer.dialled.lock().unwrap(),
        vec!["[2001:db8:5::5]:80".parse::<SocketAddr>().unwrap()]
    );
}

/// A container refusing itself in a loop filled the log at ~80 MB/s (one
/// line per connection, a 32 KiB Host header copied into `rule`). Lines
/// over the per-container budget are counted instead, and the count is
/// written at close: every connection is still accounted for.
#[tokio::test]
async fn a_refusal_flood_is_counted_not_written_and_fields_are_clipped() {
    let lab = lab(&["allowed.example"], true, |_| {}).await;
    let (addr, close, serving) = lab.serve_until().await;
    let flood = log::BURST as usize + 300;
    let host = "a".repeat(30_000);
    let req = format!("GET http://allowed.example/ HTTP/1.1\r\nHost: {host}\r\n\r\n");
    for _ in 0..flood {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let resp = read_all(&mut s).await;
        assert!(resp.starts_with("HTTP/1.1 403"), "{resp:.80}");
    }
    close.send(true).unwrap();
    let _ = tokio::time::timeout(CLOSE_GRACE + Duration::from_secs(1), serving).await;
    let lines = lab.log_lines().await;
    let written = lines.iter().filter(|l| l["kind"] != "suppressed").count();
    let counted: u64 = lines
        .iter()
        .map(|l| l["suppressed"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        written < flood,
        "every refusal written: {written} of {flood}"
    );
    assert_eq!(
        written as u64 + counted,
        flood as u64,
        "lines written + counted != connections"
    );
    let longest = std::fs::read_to_string(&lab.log)
        .unwrap()
        .lines()
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(
        longest < 2 * log::MAX_FIELD + 1024,
        "a line of {longest} bytes"
    );
}
