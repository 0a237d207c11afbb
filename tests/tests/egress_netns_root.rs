//! The egress proxy with real sockets and the system dialer (root only):
//! the proxy runs inside a test "container" namespace wired to a "provider"
//! namespace holding the test hosts on documentation (and private) ranges
//! (tests/src/netns.rs `Lab`); the host namespace takes no part.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vibe_hooks::egress::proxy::{Container, Proxy, ProxySettings, Resolve, SystemDialer};
use vibe_policy::config::{NetworkMode, NetworkSection};
use vibe_shim_tests::netns::{Lab, METADATA_HOST, PRIVATE_HOST, PUBLIC_HOST};

struct Names(HashMap<&'static str, &'static str>);

impl Resolve for Names {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        let r = self
            .0
            .get(host)
            .map(|ip| vec![SocketAddr::new(ip.parse().unwrap(), port)])
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "unknown"));
        Box::pin(async move { r })
    }
}

fn container(hosts: &[&str]) -> Arc<Container> {
    Arc::new(Container {
        id: "egress-netns".into(),
        network: NetworkSection {
            mode: NetworkMode::Proxy,
            hosts: hosts.iter().map(|s| s.to_string()).collect(),
            ..NetworkSection::default()
        },
        credentials: None,
    })
}

async fn ask(proxy: SocketAddr, req: &str) -> String {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
#[ignore = "needs root and network namespaces: run tests/run.sh"]
fn proxy_in_a_namespace_dials_only_vetted_public_addresses() {
    let lab = Lab::new("Eg1");
    let ns = std::fs::File::open(lab.container.path()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("egress.jsonl");
    let log2 = log.clone();
    std::thread::spawn(move || {
        nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let names = Names(HashMap::from([
                ("allowed.example", PUBLIC_HOST),
                ("other.example", PUBLIC_HOST),
                ("private.example", PRIVATE_HOST),
                ("metadata.example", METADATA_HOST),
            ]));
            let settings = ProxySettings {
                log_path: log2.clone(),
                ..ProxySettings::default()
            };
            let proxy = Proxy::with_net(settings, Arc::new(names), Arc::new(SystemDialer)).unwrap();
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let hosts = [
                "allowed.example:8080",
                "private.example:8080",
                "metadata.example:8080",
            ];
            tokio::spawn(proxy.serve(l, container(&hosts)));

            // Allowed: CONNECT and plain HTTP reach the test host.
            let r = ask(addr, "CONNECT allowed.example:8080 HTTP/1.1\r\n\r\n").await;
            assert_eq!(r, "HTTP/1.1 200 Connection established\r\n\r\nok\n");
            let r = ask(addr, "GET http://allowed.example:8080/ HTTP/1.1\r\n\r\n").await;
            assert_eq!(r, "ok\n");
            // Refused: another name on the same IP, an unlisted port, names
            // resolving to addresses this namespace can really reach.
            for (req, want) in [
                (
                    "CONNECT other.example:8080 HTTP/1.1\r\n\r\n",
                    "denied other.example:8080 (not in [network] hosts)",
                ),
                (
                    "CONNECT allowed.example:8081 HTTP/1.1\r\n\r\n",
                    "denied allowed.example:8081 (port 8081",
                ),
                (
                    "CONNECT private.example:8080 HTTP/1.1\r\n\r\n",
                    "denied private.example:8080 (resolves to 10.213.7.5",
                ),
                (
                    "GET http://metadata.example:8080/ HTTP/1.1\r\n\r\n",
                    "denied metadata.example:8080 (resolves to 169.254.169.254",
                ),
            ] {
                let r = ask(addr, req).await;
                assert!(r.starts_with("HTTP/1.1 403"), "{r}");
                assert!(
                    r.contains(&format!("\r\n\r\nvibe-shim egress: {want}")),
                    "{r}"
                );
            }
            // ...which the namespace does reach without the proxy.
            let mut s = TcpStream::connect((PRIVATE_HOST, 8080)).await.unwrap();
            let mut b = Vec::new();
            s.read_to_end(&mut b).await.unwrap();
            assert_eq!(b, b"ok\n");

            // The system resolver: localhost is loopback, refused.
            let settings = ProxySettings {
                log_path: log2,
                ..ProxySettings::default()
            };
            let proxy = Proxy::new(settings).unwrap();
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            tokio::spawn(proxy.serve(l, container(&["localhost:8080"])));
            let r = ask(addr, "CONNECT localhost:8080 HTTP/1.1\r\n\r\n").await;
            assert!(
                r.contains("vibe-shim egress: denied localhost:8080 (resolves to "),
                "{r}"
            );
        });
    })
    .join()
    .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 7, "{text}");
    assert_eq!(lines[0]["decision"], "allow");
    assert_eq!(lines[0]["address"], "203.0.113.5:8080");
    assert_eq!(lines[0]["bytes_down"], 3);
    assert!(lines[2..].iter().all(|l| l["decision"] == "deny"), "{text}");
}
