//! The egress proxy's figures (issue 12), on loopback: the proxy, the
//! upstream and the client each on a thread of their own. A stand-in
//! resolver maps the test name to a documentation address and a stand-in
//! dialer takes that to the loopback upstream, so nothing leaves the host.
//!
//! `packaging/bench-egress.sh` (raises the fd limit) or
//! `cargo run --release -p vibe-hooks --example bench_egress [MiB]`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vibe_hooks::egress::proxy::{Container, Dial, Proxy, ProxySettings, Resolve};
use vibe_policy::config::{NetworkMode, NetworkSection};

struct Resolver;
impl Resolve for Resolver {
    fn resolve<'a>(&'a self, _: &'a str, port: u16) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(vec![SocketAddr::new("203.0.113.5".parse().unwrap(), port)]) })
    }
}

/// Port 9000 is the source (sends N bytes), 9001 the echo server.
struct Dialer {
    source: SocketAddr,
    echo: SocketAddr,
}
impl Dial for Dialer {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        let to = if addr.port() == 9000 {
            self.source
        } else {
            self.echo
        };
        Box::pin(TcpStream::connect(to))
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Runs `f` on a thread of its own with its own runtime; returns its value.
fn on_thread<T: Send + 'static, F>(f: F) -> T
where
    F: std::future::Future<Output = T> + Send + 'static,
{
    std::thread::spawn(move || rt().block_on(f))
        .join()
        .expect("thread")
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn container() -> Arc<Container> {
    Arc::new(Container {
        id: "bench".into(),
        network: NetworkSection {
            mode: NetworkMode::Proxy,
            hosts: vec!["bench.example:9000".into(), "bench.example:9001".into()],
            ..NetworkSection::default()
        },
    })
}

async fn connect_via(proxy: SocketAddr, port: u16) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.expect("proxy");
    s.set_nodelay(true).ok();
    s.write_all(format!("CONNECT bench.example:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut ok = [0u8; 39];
    s.read_exact(&mut ok).await.expect("200");
    assert!(
        ok.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&ok)
    );
    s
}

async fn drain(mut s: TcpStream) -> u64 {
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return n,
            Ok(k) => n += k as u64,
        }
    }
}

fn main() {
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1024);
    let total = mib * 1024 * 1024;
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    // Upstreams: the source and the echo server.
    std::thread::spawn(move || {
        rt().block_on(async move {
            let source = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx
                .send((source.local_addr().unwrap(), echo.local_addr().unwrap()))
                .unwrap();
            tokio::spawn(async move {
                while let Ok((mut s, _)) = echo.accept().await {
                    s.set_nodelay(true).ok();
                    tokio::spawn(async move {
                        let mut b = [0u8; 4096];
                        while let Ok(n) = s.read(&mut b).await {
                            if n == 0 || s.write_all(&b[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                }
            });
            while let Ok((mut s, _)) = source.accept().await {
                tokio::spawn(async move {
                    let buf = vec![7u8; 256 * 1024];
                    let mut left = total;
                    while left > 0 {
                        let n = left.min(buf.len() as u64) as usize;
                        if s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        left -= n as u64;
                    }
                });
            }
        })
    });
    let (source, echo) = addr_rx.recv().unwrap();
    let dir = std::env::temp_dir().join(format!("bench-egress-{}", std::process::id()));
    let settings = ProxySettings {
        log_path: dir.join("egress.jsonl"),
        max_connections: 4096,
        ..ProxySettings::default()
    };
    let proxy = Proxy::with_net(
        settings,
        Arc::new(Resolver),
        Arc::new(Dialer { source, echo }),
    )
    .expect("proxy");
    let (ptx, prx) = std::sync::mpsc::channel();
    let p = proxy.clone();
    std::thread::spawn(move || {
        rt().block_on(async move {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            ptx.send(l.local_addr().unwrap()).unwrap();
            p.serve(l, container()).await
        })
    });
    let paddr = prx.recv().unwrap();

    // 1. 200 idle listeners (200 serve() tasks) in one runtime.
    let p = proxy.clone();
    let (base, with) = on_thread(async move {
        let base = rss_kib();
        let mut tasks = Vec::new();
        for i in 0..200 {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let c = Arc::new(Container {
                id: format!("idle-{i}"),
                network: container().network.clone(),
            });
            tasks.push(tokio::spawn(p.clone().serve(l, c)));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let with = rss_kib();
        for t in tasks {
            t.abort();
        }
        (base, with)
    });
    println!(
        "200 idle listeners: RSS {} KiB -> {} KiB (+{} KiB, {:.1} KiB each); process total {} KiB",
        base,
        with,
        with.saturating_sub(base),
        with.saturating_sub(base) as f64 / 200.0,
        rss_kib()
    );
    // 2. Throughput.
    let direct = on_thread(async move {
        let t = Instant::now();
        let n = drain(TcpStream::connect(source).await.unwrap()).await;
        (n, t.elapsed())
    });
    let proxied = on_thread(async move {
        let t = Instant::now();
        let n = drain(connect_via(paddr, 9000).await).await;
        (n, t.elapsed())
    });
    assert_eq!((direct.0, proxied.0), (total, total));
    let gbps = |d: Duration| total as f64 * 8.0 / d.as_secs_f64() / 1e9;
    println!(
        "throughput {mib} MiB: direct {:.2} Gbit/s, proxy {:.2} Gbit/s, ratio {:.1} %",
        gbps(direct.1),
        gbps(proxied.1),
        100.0 * direct.1.as_secs_f64() / proxied.1.as_secs_f64()
    );

    // 3. Connect latency: connect (+ CONNECT/200) + a 1-byte round trip.
    let (mut d, mut p) = on_thread(async move {
        let (mut d, mut p) = (Vec::new(), Vec::new());
        for i in 0..2000 {
            let t = Instant::now();
            let mut s = TcpStream::connect(echo).await.unwrap();
            s.set_nodelay(true).ok();
            s.write_all(b"x").await.unwrap();
            s.read_exact(&mut [0u8; 1]).await.unwrap();
            let direct = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let mut s2 = connect_via(paddr, 9001).await;
            s2.write_all(b"x").await.unwrap();
            s2.read_exact(&mut [0u8; 1]).await.unwrap();
            let via = t.elapsed().as_secs_f64() * 1e3;
            if i >= 100 {
                d.push(direct);
                p.push(via);
            }
        }
        (d, p)
    });
    let (d50, d99, p50, p99) = (
        pct(&mut d, 0.5),
        pct(&mut d, 0.99),
        pct(&mut p, 0.5),
        pct(&mut p, 0.99),
    );
    println!(
        "connect+1B round trip, 1900 samples: direct p50 {d50:.3} ms p99 {d99:.3} ms; proxy p50 {p50:.3} ms p99 {p99:.3} ms; added p50 {:.3} ms p99 {:.3} ms",
        p50 - d50,
        p99 - d99
    );

    // 4. 1,000 concurrent tunnels, all open at once, each round-tripping.
    let before = rss_kib();
    let (ok, took, during) = on_thread(async move {
        let t = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..1000 {
            set.spawn(async move {
                let mut s = connect_via(paddr, 9001).await;
                s.write_all(b"ping").await.ok()?;
                let mut b = [0u8; 4];
                s.read_exact(&mut b).await.ok()?;
                Some(s)
            });
        }
        let mut open = Vec::new();
        while let Some(r) = set.join_next().await {
            if let Ok(Some(s)) = r {
                open.push(s);
            }
        }
        let took = t.elapsed();
        // All still open: one more round trip on each.
        let mut ok = 0;
        for s in &mut open {
            let mut b = [0u8; 4];
            if s.write_all(b"pong").await.is_ok() && s.read_exact(&mut b).await.is_ok() {
                ok += 1;
            }
        }
        (ok, took, rss_kib())
    });
    println!(
        "1000 concurrent tunnels: {ok} open and answering, set up in {:.0} ms; process RSS +{} KiB while open (client and upstreams included)",
        took.as_secs_f64() * 1e3,
        during.saturating_sub(before)
    );

    let _ = std::fs::remove_dir_all(&dir);
}
