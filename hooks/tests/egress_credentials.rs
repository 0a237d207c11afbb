//! Credential injection through the egress proxy, in-process on loopback:
//! a TLS upstream with a test CA of its own (named by `upstream_ca`), a
//! stand-in resolver taking the test names to a documentation address and
//! a dialer taking that to the upstream. Needs root (secret files must be
//! root's), as the daemon does.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vibe_hooks::egress::ca::{provider, Ca};
use vibe_hooks::egress::proxy::{Container, Credentials, Dial, Proxy, ProxySettings, Resolve};
use vibe_policy::config::{NetworkMode, NetworkSection};
use vibe_policy::egress::credential::{Binding, Inject};
use vibe_policy::egress::inject::basic_encode;

const KEY_P: &str = "sk-ant-PLACEHOLDERaaaaaaaaaaaaaaaa";
const GIT_P: &str = "ghp_PLACEHOLDERbbbbbbbbbbbbbbbbbbbb";
const SECRET: &str = "sk-ant-REAL-SECRET-0123456789";
const GIT_SECRET: &str = "ghs_REAL-GIT-TOKEN-987654321";

struct Resolver;
impl Resolve for Resolver {
    fn resolve<'a>(&'a self, _: &'a str, port: u16) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(vec![SocketAddr::new("203.0.113.5".parse().unwrap(), port)]) })
    }
}

struct Dialer(SocketAddr);
impl Dial for Dialer {
    fn dial(&self, _: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        Box::pin(TcpStream::connect(self.0))
    }
}

/// The upstream's own CA and server certificate (for every test name).
struct UpstreamPki {
    ca_pem: String,
    cert: CertificateDer<'static>,
    key_der: Vec<u8>,
}

fn upstream_pki() -> UpstreamPki {
    let ca_key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::default();
    p.distinguished_name
        .push(DnType::CommonName, "test upstream CA");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca = p.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let names = ["api.example", "git.example", "plain.example"];
    let leaf = CertificateParams::new(names.map(String::from).to_vec())
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    UpstreamPki {
        ca_pem: ca.pem(),
        cert: leaf.der().clone(),
        key_der: key.serialize_der(),
    }
}

/// An HTTPS upstream: answers each connection's first request with the
/// head it saw as its body, then closes; records every byte per connection.
async fn upstream(pki: &UpstreamPki, seen: Arc<Mutex<Vec<Vec<u8>>>>) -> SocketAddr {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.key_der.clone()));
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![pki.cert.clone()], key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let idx = {
                    let mut v = seen.lock().unwrap();
                    v.push(Vec::new());
                    v.len() - 1
                };
                let mut got = Vec::new();
                let mut buf = [0u8; 16384];
                let mut answered = false;
                loop {
                    let n = match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    got.extend_from_slice(&buf[..n]);
                    seen.lock().unwrap()[idx] = got.clone();
                    if !answered {
                        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                            answered = true;
                            // An echo endpoint on /echo only; elsewhere the
                            // test reads what upstream got from `seen`.
                            let body = match got.starts_with(b"GET /echo") {
                                true => got[..end + 4].to_vec(),
                                false => b"ok\n".to_vec(),
                            };
                            let head = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                                body.len()
                            );
                            let _ = tls.write_all(head.as_bytes()).await;
                            let _ = tls.write_all(&body).await;
                            // Wait for anything else the proxy might send.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            let _ = tls.shutdown().await;
                        }
                    }
                }
            });
        }
    });
    addr
}

struct Lab {
    proxy: SocketAddr,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
    log: PathBuf,
    key_file: PathBuf,
    git_file: PathBuf,
    pki: UpstreamPki,
    creds: Arc<Credentials>,
    /// The proxy and the container it serves, for a second container.
    proxy_handle: Arc<Proxy>,
    container: Arc<Container>,
    _dir: tempfile::TempDir,
}

fn write_secret(path: &Path, value: &str) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, format!("{value}\n")).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

async fn lab() -> Lab {
    let dir = tempfile::tempdir().unwrap();
    let pki = upstream_pki();
    let ca_file = dir.path().join("upstream-ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let key_file = dir.path().join("anthropic");
    let git_file = dir.path().join("git");
    write_secret(&key_file, SECRET);
    write_secret(&git_file, GIT_SECRET);
    let bindings = vec![
        Binding {
            name: "anthropic".into(),
            hosts: vec!["api.example".into()],
            inject: Inject::Header {
                name: "x-api-key".into(),
                scheme: None,
            },
            source: key_file.clone(),
            placeholder: KEY_P.into(),
        },
        Binding {
            name: "git".into(),
            hosts: vec!["git.example".into()],
            inject: Inject::Basic {
                user: "x-access-token".into(),
            },
            source: git_file.clone(),
            placeholder: GIT_P.into(),
        },
    ];
    let ca = Ca::generate(&["api.example".into(), "git.example".into()]).unwrap();
    let creds = Arc::new(Credentials::new(bindings, ca));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let up = upstream(&pki, seen.clone()).await;
    let log = dir.path().join("egress.jsonl");
    let settings = ProxySettings {
        log_path: log.clone(),
        ..ProxySettings::default()
    };
    let proxy = Proxy::with_net(settings, Arc::new(Resolver), Arc::new(Dialer(up))).unwrap();
    let container = Arc::new(Container {
        id: "cred-test".into(),
        network: NetworkSection {
            mode: NetworkMode::Proxy,
            hosts: vec![
                "api.example".into(),
                "git.example".into(),
                "plain.example".into(),
            ],
            upstream_ca: Some(ca_file),
            ..NetworkSection::default()
        },
        credentials: Some(creds.clone()),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(proxy.clone().serve(listener, container.clone()));
    Lab {
        proxy: addr,
        seen,
        log,
        key_file,
        git_file,
        pki,
        creds,
        proxy_handle: proxy,
        container,
        _dir: dir,
    }
}

fn client_config(roots_pem: &str, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in rustls_pem(roots_pem) {
        roots.add(c).unwrap();
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

fn rustls_pem(pem: &str) -> Vec<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap()
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

impl Lab {
    /// CONNECT `host`:443, then TLS trusting `roots_pem`.
    async fn tls(&self, host: &str, roots_pem: &str, alpn: &[&[u8]]) -> io::Result<Tls> {
        let mut s = TcpStream::connect(self.proxy).await?;
        s.write_all(format!("CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n").as_bytes())
            .await?;
        let mut ok = vec![0u8; 39];
        s.read_exact(&mut ok).await?;
        assert!(ok.starts_with(b"HTTP/1.1 200"), "{ok:?}");
        let name = ServerName::try_from(host.to_string()).unwrap();
        tokio_rustls::TlsConnector::from(client_config(roots_pem, alpn))
            .connect(name, s)
            .await
    }

    /// One request through a terminated `host`: the response.
    async fn ask(&self, host: &str, req: &str) -> String {
        let mut tls = self
            .tls(host, self.creds.ca.cert_pem(), &[b"http/1.1"])
            .await
            .expect("terminated handshake");
        tls.write_all(req.as_bytes()).await.unwrap();
        read_all(&mut tls).await
    }

    fn upstream_saw(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }

    async fn log_lines(&self, want: usize) -> Vec<serde_json::Value> {
        for _ in 0..100 {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if text.lines().count() >= want {
                return text
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("fewer than {want} log lines");
    }
}

async fn read_all<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 16384];
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    String::from_utf8_lossy(&out).into_owned()
}

fn body(resp: &str) -> &str {
    resp.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("")
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[tokio::test]
async fn the_bound_header_gets_the_secret_once_and_nothing_is_logged_of_it() {
    if !is_root() {
        return;
    }
    let lab = lab().await;
    // A bound path, an unbound one, and a second request pipelined on the
    // same connection (never forwarded).
    for path in ["/v1/messages", "/some/other/path"] {
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\nConnection: keep-alive\r\n\r\n\
             GET /second HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\n\r\n"
        );
        let resp = lab.ask("api.example", &req).await;
        assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
        let saw = lab.upstream_saw().pop().unwrap_or_default();
        assert!(saw.contains(&format!("x-api-key: {SECRET}\r\n")), "{saw}");
        assert!(saw.contains("Connection: close\r\n"), "{saw}");
        assert!(!saw.contains("keep-alive"), "{saw}");
    }
    let all = lab.upstream_saw();
    assert_eq!(all.len(), 2);
    for conn in &all {
        assert_eq!(conn.matches("GET ").count(), 1, "{conn}");
        assert!(!conn.contains("/second"), "{conn}");
        assert!(!conn.contains(KEY_P), "{conn}");
    }
    let lines = lab.log_lines(2).await;
    for l in &lines {
        assert_eq!(l["kind"], "inject", "{l}");
        assert_eq!(l["decision"], "allow", "{l}");
        assert_eq!(l["credential"], "anthropic", "{l}");
        assert!(l["bytes_down"].as_u64().unwrap() > 0, "{l}");
    }
    let text = std::fs::read_to_string(&lab.log).unwrap();
    assert!(
        !text.contains(SECRET) && !text.contains(GIT_SECRET),
        "{text}"
    );
}

#[tokio::test]
async fn basic_is_reencoded_with_the_real_token() {
    if !is_root() {
        return;
    }
    let lab = lab().await;
    let b64 = basic_encode("x-access-token", GIT_P);
    let resp = lab
        .ask(
            "git.example",
            &format!("GET /r.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: git.example\r\nAuthorization: Basic {b64}\r\n\r\n"),
        )
        .await;
    let want = basic_encode("x-access-token", GIT_SECRET);
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let saw = lab.upstream_saw().pop().unwrap_or_default();
    assert!(
        saw.contains(&format!("Authorization: Basic {want}\r\n")),
        "{saw}"
    );
}

#[tokio::test]
async fn a_placeholder_elsewhere_is_a_logged_misuse() {
    if !is_root() {
        return;
    }
    let lab = lab().await;
    // The API key's placeholder to the git host (terminated, not its host).
    let resp = lab
        .ask(
            "git.example",
            &format!("GET / HTTP/1.1\r\nHost: git.example\r\nx-api-key: {KEY_P}\r\n\r\n"),
        )
        .await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(body(&resp).starts_with("vibe-shim egress: "), "{resp}");
    // In plain HTTP to an allowed host.
    let mut s = TcpStream::connect(lab.proxy).await.unwrap();
    s.write_all(
        format!("GET http://plain.example/?k={KEY_P} HTTP/1.1\r\nHost: plain.example\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let resp = read_all(&mut s).await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(body(&resp).starts_with("vibe-shim egress: "), "{resp}");
    // Upgrade on the bound host: refused, never passed on.
    let resp = lab
        .ask(
            "api.example",
            &format!("GET /ws HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
        )
        .await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(body(&resp).contains("Upgrade"), "{resp}");
    assert!(lab.upstream_saw().iter().all(|c| !c.contains("GET ")));
    let lines = lab.log_lines(3).await;
    let misuse: Vec<_> = lines.iter().filter(|l| l["kind"] == "misuse").collect();
    assert_eq!(misuse.len(), 2, "{lines:?}");
    for l in misuse {
        assert_eq!(l["credential"], "anthropic", "{l}");
        assert_eq!(l["decision"], "deny", "{l}");
    }
}

#[tokio::test]
async fn a_rotated_secret_is_used_and_a_missing_one_is_a_502() {
    if !is_root() {
        return;
    }
    let lab = lab().await;
    let req = format!("GET / HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\n\r\n");
    write_secret(&lab.key_file, "sk-ant-ROTATED-1111");
    let resp = lab.ask("api.example", &req).await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let saw = lab.upstream_saw().pop().unwrap_or_default();
    assert!(saw.contains("x-api-key: sk-ant-ROTATED-1111\r\n"), "{saw}");
    std::fs::remove_file(&lab.key_file).unwrap();
    let resp = lab.ask("api.example", &req).await;
    assert!(resp.starts_with("HTTP/1.1 502"), "{resp}");
    let b = body(&resp);
    assert!(
        b.starts_with("vibe-shim egress: ") && b.contains("credential anthropic"),
        "{b}"
    );
    // The git credential is unaffected.
    assert!(lab.git_file.exists());
}

#[tokio::test]
async fn a_host_without_a_credential_is_still_end_to_end_tls() {
    if !is_root() {
        return;
    }
    let lab = lab().await;
    let tls = lab
        .tls("plain.example", &lab.pki.ca_pem, &[b"http/1.1"])
        .await
        .expect("the upstream's own certificate");
    let (_, conn) = tls.get_ref();
    let peer = conn.peer_certificates().unwrap();
    assert_eq!(peer[0], lab.pki.cert);
    // The container's CA would not do for it.
    assert!(lab
        .tls("plain.example", lab.creds.ca.cert_pem(), &[b"http/1.1"])
        .await
        .is_err());
}

#[tokio::test]
async fn an_h2_only_client_fails_the_handshake() {
    if !is_root() {
        return;
    }
    let lab = lab().await;
    let r = lab
        .tls("api.example", lab.creds.ca.cert_pem(), &[b"h2"])
        .await;
    assert!(r.is_err(), "h2-only handshake succeeded");
    let lines = lab.log_lines(1).await;
    assert_eq!(lines[0]["decision"], "deny");
    assert!(
        lines[0]["rule"].as_str().unwrap().contains("HTTP/1.1 only"),
        "{}",
        lines[0]
    );
}

/// A leaf signed by hand with `ca`'s stored key, for `name`.
fn hand_minted(ca: &Ca, name: &str) -> CertificateDer<'static> {
    let stored = ca.stored();
    let key = KeyPair::from_pem(&stored.key_pem).unwrap();
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "vibe-shim egress credential CA");
    dn.push(DnType::OrganizationName, "vibe-shim");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let issuer = p.self_signed(&key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let mut lp = CertificateParams::new(vec![name.to_string()]).unwrap();
    lp.use_authority_key_identifier_extension = true;
    lp.signed_by(&leaf_key, &issuer, &key)
        .unwrap()
        .der()
        .clone()
}

#[tokio::test]
async fn the_leaf_verifies_and_the_ca_vouches_for_no_other_name() {
    if !is_root() {
        return;
    }
    let lab = lab().await;
    let tls = lab
        .tls("api.example", lab.creds.ca.cert_pem(), &[b"http/1.1"])
        .await
        .unwrap();
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let mut roots = RootCertStore::empty();
    for c in rustls_pem(lab.creds.ca.cert_pem()) {
        roots.add(c).unwrap();
    }
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap();
    let verify = |cert: &CertificateDer<'_>, name: &str| {
        verifier.verify_server_cert(
            cert,
            &[],
            &ServerName::try_from(name.to_string()).unwrap(),
            &[],
            UnixTime::now(),
        )
    };
    use rustls::client::danger::ServerCertVerifier;
    verify(&leaf, "api.example").expect("the minted leaf verifies");
    // Signed by hand with the CA's own key: a bound name passes (so the
    // hand-minting is sound), any other name fails on the constraints.
    let ca = &lab.creds.ca;
    verify(&hand_minted(ca, "git.example"), "git.example").expect("a bound name");
    let err = verify(&hand_minted(ca, "evil.example"), "evil.example").unwrap_err();
    assert!(format!("{err:?}").contains("NameConstraint"), "{err:?}");
}

// ---------------------------------------------------------------------------
// An attacker's review: the container sends what it likes through its proxy.
// Each test is named for its door; OPEN ones pin that the attack works today.

/// TRACE on a bound host: an upstream that implements it (Apache httpd
/// does unless `TraceEnable off`) would echo the swapped-in secret, so it
/// is refused before any swap and never reaches upstream.
#[tokio::test]
async fn trace_to_a_bound_host_is_refused_before_any_swap() {
    assert!(is_root(), "needs root: the secret files must be root's");
    let lab = lab().await;
    let resp = lab
        .ask(
            "api.example",
            &format!("TRACE / HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\n\r\n"),
        )
        .await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(
        body(&resp).starts_with("vibe-shim egress: ") && body(&resp).contains("TRACE"),
        "{resp}"
    );
    let git = basic_encode("x-access-token", GIT_P);
    let resp = lab
        .ask(
            "git.example",
            &format!("TRACK / HTTP/1.1\r\nHost: git.example\r\nAuthorization: Basic {git}\r\n\r\n"),
        )
        .await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(
        !resp.contains(SECRET) && !resp.contains(GIT_SECRET),
        "{resp}"
    );
    assert!(
        lab.upstream_saw().iter().all(|c| c.is_empty()),
        "{:?}",
        lab.upstream_saw()
    );
}

/// A bound host that echoes the request (an echo or debug endpoint, an
/// error page quoting headers): the response is scanned for what the
/// daemon injected, and the connection is cut before any byte of it goes
/// to the container; the log names it.
#[tokio::test]
async fn a_bound_host_that_echoes_headers_is_cut_before_the_secret() {
    assert!(is_root(), "needs root: the secret files must be root's");
    let lab = lab().await;
    let resp = lab
        .ask(
            "api.example",
            &format!(
                "GET /echo?show=headers HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\n\r\n"
            ),
        )
        .await;
    assert!(!resp.contains(SECRET), "the container read: {resp}");
    assert!(
        lab.upstream_saw()[0].contains(SECRET),
        "the request was injected"
    );
    let git = basic_encode("x-access-token", GIT_P);
    let resp = lab
        .ask(
            "git.example",
            &format!(
                "GET /echo HTTP/1.1\r\nHost: git.example\r\nAuthorization: Basic {git}\r\n\r\n"
            ),
        )
        .await;
    let real = basic_encode("x-access-token", GIT_SECRET);
    assert!(
        !resp.contains(&real) && !resp.contains(GIT_SECRET),
        "{resp}"
    );
    let lines = lab.log_lines(2).await;
    for l in &lines {
        assert_eq!(l["kind"], "reflected", "{l}");
        assert!(l["error"].as_str().unwrap_or("").contains("echoed"), "{l}");
    }
    let text = std::fs::read_to_string(&lab.log).unwrap();
    assert!(
        !text.contains(SECRET) && !text.contains(GIT_SECRET),
        "{text}"
    );
}

/// Front-end routing headers never go upstream beside the secret: a bound
/// host whose front end routes by X-Forwarded-Host or Forwarded would
/// send the secret where the container said.
#[tokio::test]
async fn routing_headers_are_dropped_beside_the_secret() {
    assert!(is_root(), "needs root: the secret files must be root's");
    let lab = lab().await;
    let resp = lab
        .ask(
            "api.example",
            &format!(
                "GET / HTTP/1.1\r\nHost: api.example\r\nX-Forwarded-Host: evil.example\r\nForwarded: host=evil.example\r\nx-api-key: {KEY_P}\r\n\r\n"
            ),
        )
        .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let saw = &lab.upstream_saw()[0];
    assert!(!saw.contains("evil.example"), "{saw}");
    assert!(saw.contains(&format!("x-api-key: {SECRET}\r\n")), "{saw}");
}

/// A second container on the same daemon: its own placeholder and CA, the
/// same secret file and policy.
async fn second_container(lab: &Lab, placeholder: &str) -> (SocketAddr, Arc<Credentials>) {
    let mut bindings = lab.creds.bindings.clone();
    bindings[0].placeholder = placeholder.into();
    let ca = Ca::generate(&["api.example".into(), "git.example".into()]).unwrap();
    let creds = Arc::new(Credentials::new(bindings, ca));
    let container = Arc::new(Container {
        id: "cred-test-2".into(),
        network: lab.container.network.clone(),
        credentials: Some(creds.clone()),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(lab.proxy_handle.clone().serve(listener, container));
    (addr, creds)
}

/// CLOSED. Container B sends container A's placeholder (learnt from a
/// shared volume, a log, `docker exec A env`) through its own proxy: B's
/// judge knows only B's placeholders, so A's goes upstream as it is, and
/// A's CA is no use to B's clients.
#[tokio::test]
async fn another_containers_placeholder_gets_no_secret() {
    assert!(is_root(), "needs root: the secret files must be root's");
    let lab = lab().await;
    let b_placeholder = "sk-ant-PLACEHOLDERzzzzzzzzzzzzzzzz";
    let (b_proxy, b_creds) = second_container(&lab, b_placeholder).await;
    let b = Lab {
        proxy: b_proxy,
        seen: lab.seen.clone(),
        log: lab.log.clone(),
        key_file: lab.key_file.clone(),
        git_file: lab.git_file.clone(),
        pki: upstream_pki(),
        creds: b_creds,
        proxy_handle: lab.proxy_handle.clone(),
        container: lab.container.clone(),
        _dir: tempfile::tempdir().unwrap(),
    };
    let resp = b
        .ask(
            "api.example",
            &format!("GET / HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\n\r\n"),
        )
        .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let saw = &lab.upstream_saw()[0];
    assert!(saw.contains(&format!("x-api-key: {KEY_P}\r\n")), "{saw}");
    assert!(!saw.contains(SECRET), "{saw}");
    // A's CA does not verify B's leaf.
    assert!(b
        .tls("api.example", lab.creds.ca.cert_pem(), &[b"http/1.1"])
        .await
        .is_err());
    // And B's own placeholder works through B.
    let resp = b
        .ask(
            "api.example",
            &format!("GET / HTTP/1.1\r\nHost: api.example\r\nx-api-key: {b_placeholder}\r\n\r\n"),
        )
        .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let saw = lab.upstream_saw().pop().unwrap_or_default();
    assert!(saw.contains(&format!("x-api-key: {SECRET}\r\n")), "{saw}");
}

/// CLOSED. Requests smuggled after the judged one (after a chunked body,
/// after an HTTP/1.0 request, after `Connection: close`, after a body
/// whose Content-Length covers less than was sent) never reach upstream.
#[tokio::test]
async fn requests_smuggled_after_the_judged_one_never_reach_upstream() {
    assert!(is_root(), "needs root: the secret files must be root's");
    let lab = lab().await;
    let second =
        format!("GET /smuggled HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\n\r\n");
    let heads = [
        format!(
            "POST /a HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n{second}"
        ),
        format!("GET /b HTTP/1.0\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\n\r\n{second}"),
        format!(
            "GET /c HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\nConnection: close\r\n\r\n{second}"
        ),
        format!(
            "POST /d HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\nContent-Length: 2\r\n\r\nhi{second}"
        ),
        // A chunk extension and a trailer, then the smuggled request.
        format!(
            "POST /e HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\nTransfer-Encoding: chunked\r\n\r\n4;x=\"a\"\r\nbody\r\n0\r\nX-T: 1\r\n\r\n{second}"
        ),
    ];
    for head in &heads {
        let resp = lab.ask("api.example", head).await;
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    }
    let all = lab.upstream_saw();
    assert_eq!(all.len(), heads.len());
    for conn in &all {
        assert!(!conn.contains("/smuggled"), "{conn}");
        assert!(!conn.contains(KEY_P), "{conn}");
    }
}

/// CLOSED. A secret file rotated to a value that is no header value
/// (a newline and a header after it) is refused at the request, and the
/// refusal (the 502's body and the log line) quotes none of it.
#[tokio::test]
async fn a_rotated_secret_that_is_no_header_value_is_refused_unquoted() {
    assert!(is_root(), "needs root: the secret files must be root's");
    let lab = lab().await;
    write_secret(&lab.key_file, "sk-ant-ROTATED-2222\r\nX-Injected: evil");
    let req = format!("GET / HTTP/1.1\r\nHost: api.example\r\nx-api-key: {KEY_P}\r\n\r\n");
    let resp = lab.ask("api.example", &req).await;
    assert!(resp.starts_with("HTTP/1.1 502"), "{resp}");
    assert!(
        !resp.contains("ROTATED") && !resp.contains("X-Injected"),
        "{resp}"
    );
    assert!(lab.upstream_saw().iter().all(|c| !c.contains("GET ")));
    let _ = lab.log_lines(1).await;
    let text = std::fs::read_to_string(&lab.log).unwrap();
    assert!(
        !text.contains("ROTATED") && !text.contains("X-Injected"),
        "{text}"
    );
}

/// A head sent a byte per TLS record: each record costs the shared daemon
/// a decryption and a wakeup, so a terminated head in more than
/// `MAX_HEAD_PIECES` records is refused (a client writes its head in one
/// or a few), and the blank line is searched for in the new bytes only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_a_byte_per_record_is_refused() {
    assert!(is_root(), "needs root: the secret files must be root's");
    let lab = lab().await;
    let (proxy, pem) = (lab.proxy, lab.creds.ca.cert_pem().to_string());
    let resp = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(proxy).unwrap();
        s.set_nodelay(true).unwrap();
        s.write_all(b"CONNECT api.example:443 HTTP/1.1\r\nHost: api.example:443\r\n\r\n")
            .unwrap();
        let mut ok = [0u8; 39];
        s.read_exact(&mut ok).unwrap();
        let conn = rustls::ClientConnection::new(
            client_config(&pem, &[b"http/1.1"]),
            ServerName::try_from("api.example").unwrap(),
        )
        .unwrap();
        let mut tls = rustls::StreamOwned::new(conn, s);
        // Exactly the pieces allowed, none of them ending the head: the
        // daemon reads them all, then refuses (nothing unread, so its close
        // is clean and the 400 arrives).
        let head = format!(
            "GET / HTTP/1.1\r\nHost: api.example\r\nX: {}",
            "a".repeat(1024)
        );
        for b in &head.as_bytes()[..64] {
            tls.write_all(std::slice::from_ref(b)).unwrap();
            tls.flush().unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut got = Vec::new();
        let _ = tls.read_to_end(&mut got);
        String::from_utf8_lossy(&got).into_owned()
    })
    .await
    .unwrap();
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    assert!(body(&resp).contains("more than 64 TLS records"), "{resp}");
    assert!(lab.upstream_saw().iter().all(|c| c.is_empty()));
}

/// A secret kept in a directory a user owns (`/home/alice/secrets/github`)
/// would let that user swap the directory for a symlink between two
/// requests, so the daemon read and sent a root-only file of that name from
/// anywhere else. Every directory above a secret must be root's and
/// writable by nobody else; a symlink on the way is followed only if root's.
#[test]
fn a_secret_below_a_user_owned_or_symlinked_directory_is_refused() {
    use std::os::unix::fs::{chown, PermissionsExt};
    assert!(is_root(), "needs root: the secret files must be root's");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.path().join("alice");
    let secrets = home.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    chown(&home, Some(1000), Some(1000)).unwrap();
    chown(&secrets, Some(1000), Some(1000)).unwrap();
    let source = secrets.join("github");
    write_secret(&source, "ghp_THE-BOUND-SECRET");
    let err = vibe_hooks::egress::proxy::read_secret(&source).unwrap_err();
    assert!(err.contains("is not root's"), "{err}");
    // Root's directories, one of them reached through a symlink.
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    write_secret(&real.join("github"), "ghp_THE-BOUND-SECRET");
    assert_eq!(
        vibe_hooks::egress::proxy::read_secret(&real.join("github")).unwrap(),
        "ghp_THE-BOUND-SECRET"
    );
    // A symlinked directory of root's (an admin's layout) is followed, and
    // its target judged; one a user owns is not followed at all.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert_eq!(
        vibe_hooks::egress::proxy::read_secret(&link.join("github")).unwrap(),
        "ghp_THE-BOUND-SECRET"
    );
    std::os::unix::fs::lchown(&link, Some(1000), Some(1000)).unwrap();
    let err = vibe_hooks::egress::proxy::read_secret(&link.join("github")).unwrap_err();
    assert!(err.contains("is a symlink that is not root's"), "{err}");
    // Through a symlink, the target's directories count: alice's again.
    let to_alice = dir.path().join("to-alice");
    std::os::unix::fs::symlink(&secrets, &to_alice).unwrap();
    let err = vibe_hooks::egress::proxy::read_secret(&to_alice.join("github")).unwrap_err();
    assert!(err.contains("is not root's"), "{err}");
    // Missing behind a symlink is missing (an optional secret is skipped).
    let gone = dir.path().join("gone");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &gone).unwrap();
    let err = vibe_hooks::fsio::read_private(&gone.join("github"), 64).unwrap_err();
    assert!(err.is_missing(), "{err}");
    // A group-writable directory of root's.
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o770)).unwrap();
    let err = vibe_hooks::egress::proxy::read_secret(&real.join("github")).unwrap_err();
    assert!(err.contains("writable by group or others"), "{err}");
}
