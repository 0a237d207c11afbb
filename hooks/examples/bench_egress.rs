//! The egress proxy's figures: the proxy, the upstream and the
//! client each on a thread of their own. A stand-in resolver maps the test
//! name to a documentation address and a stand-in dialer takes that to the
//! upstream, so nothing leaves the host.
//!
//! Two layouts. Loopback: all three in the bench's own namespace. `--netns
//! UP,PROXY,CLIENT` (root; `packaging/bench-egress.sh` creates and removes
//! them): the upstream is a test host in namespace UP; the proxy's threads
//! live in PROXY (standing in for the host) and bind their listeners inside
//! CLIENT (the container) on 127.0.0.1, as the daemon does; the client runs
//! in CLIENT. PROXY and CLIENT each reach UP over a veth pair of their own
//! on 198.51.100.0/30 and .4/30, so "direct" (client -> UP over its veth)
//! and "proxied" (client -> loopback -> proxy -> UP over its veth) cross
//! the same kind of link.
//!
//! Throughput is measured three ways per round: direct, through the proxy
//! with splice(2) (what the daemon does), and through the proxy copying in
//! user space (`Transfer::Buffer`).
//!
//! `--rates G1,G2,...` (Gbit/s; 0 = unpaced, the default) repeats the
//! throughput rounds with the test host's sending socket paced at each rate
//! (SO_MAX_PACING_RATE: TCP's own pacing, no qdisc needed), standing in for
//! a server behind a link of that speed. Unpaced, the test host is a thread
//! on the same two cores as the proxy and the client, and the figure is the
//! machine's CPU, not the proxy's capacity.
//!
//! `--credentials [MiB] [requests]` (root: the secret file must be root's)
//! compares, on loopback, a credential host (terminated: TLS ends at the
//! proxy, the secret is injected, TLS again upstream) with a tunnelled one,
//! against the same TLS upstream: the latency of one whole request (new
//! connection, CONNECT, handshake(s), GET, response; p50/p99) and the
//! throughput of one download (256 MiB by default), unpaced and with the
//! upstream's socket paced at each `--rates` rate (default 1,10 Gbit/s):
//! unpaced, the upstream's TLS, the proxy's two TLS sessions and the
//! client's share the same two cores, so the ratio is the CPU per byte.
//! Each download's median run also prints the CPU per GiB of the
//! upstream's, the proxy's and the client's thread (softirq work done on
//! a thread counts as its own), and the run prints the suite the client
//! settled on each way. The client and the upstream keep rustls's default
//! order (AES-256-GCM first, as OpenSSL's); the proxy uses its own.
//!
//! `packaging/bench-egress.sh [MiB] [rounds] [rates]` (raises the fd limit) or
//! `cargo run --release -p vibe-hooks --example bench_egress -- [MiB]
//! [rounds] [--netns UP,PROXY,CLIENT] [--rates G1,G2,...]`.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vibe_hooks::egress::proxy::{Container, Dial, Proxy, ProxySettings, Resolve, Transfer};
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

/// The namespaces of `--netns` (none: loopback).
#[derive(Clone, Default)]
struct Layout {
    up: Option<PathBuf>,
    proxy: Option<PathBuf>,
    client: Option<PathBuf>,
}

/// The test host's sending rate for the next transfer, bytes/s (0: unpaced).
static PACING: AtomicU64 = AtomicU64::new(0);

/// Caps what `s` sends at `bytes_per_sec` (TCP's internal pacing).
fn pace(s: &TcpStream, bytes_per_sec: u64) {
    use nix::libc;
    use std::os::fd::AsRawFd;
    if bytes_per_sec == 0 {
        return;
    }
    // SAFETY: a u64 option value on a live socket fd, sized as passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&bytes_per_sec as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_MAX_PACING_RATE: {}", io::Error::last_os_error());
}

/// The upstream's addresses, as the client (direct) and the proxy see them.
const UP_FROM_PROXY: &str = "198.51.100.2";
const UP_FROM_CLIENT: &str = "198.51.100.6";

/// Moves the calling thread into `ns` (threads it starts follow).
fn enter(ns: &Option<PathBuf>) {
    if let Some(path) = ns {
        let f = File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Runs `f` on a thread of its own (in namespace `ns`) with its own
/// runtime; returns its value.
fn on_thread<T: Send + 'static, F>(ns: &Option<PathBuf>, f: F) -> T
where
    F: std::future::Future<Output = T> + Send + 'static,
{
    let ns = ns.clone();
    std::thread::Builder::new()
        .name("client".into())
        .spawn(move || {
            enter(&ns);
            rt().block_on(f)
        })
        .expect("thread")
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

/// CPU seconds this process (every thread: client, proxy, upstream) used.
fn cpu_secs() -> f64 {
    use nix::libc;
    // SAFETY: getrusage fills the zeroed struct it is given.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// CPU seconds of thread `t` so far (its CPU-time clock).
fn thread_cpu(t: nix::libc::pthread_t) -> f64 {
    use nix::libc;
    // SAFETY: `t` is a live thread of ours (the bench's threads never end);
    // both calls only fill the values they are given.
    unsafe {
        let mut clock: libc::clockid_t = 0;
        if libc::pthread_getcpuclockid(t, &mut clock) != 0 {
            return 0.0;
        }
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(clock, &mut ts);
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    }
}

/// CPU seconds of the calling thread so far.
fn own_cpu() -> f64 {
    // SAFETY: pthread_self is always valid for the caller.
    thread_cpu(unsafe { nix::libc::pthread_self() })
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
        credentials: None,
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

/// One transfer: bytes, wall time, and CPU seconds of each party and of
/// the whole process (which includes softirq work done on its threads).
struct Run {
    bytes: u64,
    wall: Duration,
    upstream: f64,
    proxy: f64,
    client: f64,
    process: f64,
}

impl Run {
    fn cpu(&self, total: u64) -> String {
        let gib = total as f64 / (1u64 << 30) as f64;
        let wall = self.wall.as_secs_f64();
        let part = |c: f64| format!("{:.2} s ({:.0} %)", c / gib, 100.0 * c / wall);
        format!(
            "CPU per GiB (share of one core): upstream {}, proxy {}, client {}; process {:.2} s, {:.2} cores busy",
            part(self.upstream),
            part(self.proxy),
            part(self.client),
            self.process / gib,
            self.process / wall
        )
    }
}

/// Runs one client transfer on a thread in namespace `ns`, timing it and
/// the CPU of the upstream thread, the proxy thread and the client.
fn measure<F>(
    up: nix::libc::pthread_t,
    proxy: Option<nix::libc::pthread_t>,
    ns: &Option<PathBuf>,
    f: F,
) -> Run
where
    F: std::future::Future<Output = u64> + Send + 'static,
{
    let (u0, p0, c0) = (thread_cpu(up), proxy.map_or(0.0, thread_cpu), cpu_secs());
    let (bytes, wall, client) = on_thread(ns, async move {
        let (t, c) = (Instant::now(), own_cpu());
        let n = f.await;
        (n, t.elapsed(), own_cpu() - c)
    });
    Run {
        bytes,
        wall,
        upstream: thread_cpu(up) - u0,
        proxy: proxy.map_or(0.0, thread_cpu) - p0,
        client,
        process: cpu_secs() - c0,
    }
}

fn args() -> (u64, usize, Layout, Vec<f64>) {
    let (mut mib, mut rounds, mut layout) = (1024, 3, Layout::default());
    let mut rates = vec![0.0];
    let mut plain = 0;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--netns" {
            let v = it.next().expect("--netns UP,PROXY,CLIENT");
            let p: Vec<PathBuf> = v.split(',').map(PathBuf::from).collect();
            assert_eq!(p.len(), 3, "--netns UP,PROXY,CLIENT");
            layout = Layout {
                up: Some(p[0].clone()),
                proxy: Some(p[1].clone()),
                client: Some(p[2].clone()),
            };
        } else if a == "--rates" {
            let v = it.next().expect("--rates G1,G2,...");
            rates = v
                .split(',')
                .map(|g| g.parse().expect("a rate in Gbit/s"))
                .collect();
        } else {
            let n: u64 = a.parse().expect("a number");
            match plain {
                0 => mib = n,
                _ => rounds = n as usize,
            }
            plain += 1;
        }
    }
    (mib, rounds.max(1), layout, rates)
}

/// A proxy with `transfer`, serving in its own thread (in the layout's
/// proxy namespace) on a listener in the client's namespace (or loopback).
fn start_proxy(
    layout: &Layout,
    transfer: Transfer,
    dir: &std::path::Path,
    dialer: Arc<Dialer>,
    port: u16,
) -> (Arc<Proxy>, SocketAddr, nix::libc::pthread_t) {
    let settings = ProxySettings {
        log_path: dir.join(format!("egress-{port}.jsonl")),
        max_connections: 4096,
        transfer,
        ..ProxySettings::default()
    };
    let proxy = Proxy::with_net(settings, Arc::new(Resolver), dialer).expect("proxy");
    let (tx, rx) = std::sync::mpsc::channel();
    let p = proxy.clone();
    let layout = layout.clone();
    let thread = std::thread::spawn(move || {
        enter(&layout.proxy);
        rt().block_on(async move {
            let l = match &layout.client {
                // As the daemon does: bound inside the client's namespace.
                Some(cl) => {
                    let bound = vibe_hooks::egress::netns::bind_loopback(
                        File::open(cl).expect("client netns"),
                        port,
                    )
                    .expect("bind in the client namespace");
                    let std = bound.listeners.into_iter().next().expect("127.0.0.1");
                    TcpListener::from_std(std).unwrap()
                }
                None => TcpListener::bind("127.0.0.1:0").await.unwrap(),
            };
            tx.send(l.local_addr().unwrap()).unwrap();
            p.serve(l, container()).await
        })
    });
    use std::os::unix::thread::JoinHandleExt;
    (proxy, rx.recv().unwrap(), thread.into_pthread_t())
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--credentials") {
        let mut rates = vec![1.0, 10.0];
        let mut n: Vec<u64> = Vec::new();
        let mut it = std::env::args().skip(2);
        while let Some(a) = it.next() {
            match a.as_str() {
                "--rates" => {
                    let list = it.next().expect("--rates G1,G2,...");
                    rates = list
                        .split(',')
                        .map(|r| r.parse().expect("Gbit/s"))
                        .collect();
                }
                _ => n.push(a.parse().expect("a number")),
            }
        }
        return credentials::run(
            n.first().copied().unwrap_or(256),
            n.get(1).copied().unwrap_or(300) as usize,
            &rates,
        );
    }
    let (mib, rounds, layout, rates) = args();
    let netns = layout.up.is_some();
    let total = mib * 1024 * 1024;
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    // Upstreams: the source and the echo server.
    let up_ns = layout.up.clone();
    let up_thread = std::thread::spawn(move || {
        enter(&up_ns);
        rt().block_on(async move {
            let any = if up_ns.is_some() {
                "0.0.0.0:0"
            } else {
                "127.0.0.1:0"
            };
            let source = TcpListener::bind(any).await.unwrap();
            let echo = TcpListener::bind(any).await.unwrap();
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
                pace(&s, PACING.load(Ordering::Relaxed));
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
    let (source, echo): (SocketAddr, SocketAddr) = addr_rx.recv().unwrap();
    let at = |host: &str, a: SocketAddr| SocketAddr::new(host.parse().unwrap(), a.port());
    // Where the client (direct) and the proxy find the upstreams.
    let (direct_source, direct_echo, dialer) = if netns {
        let dialer = Dialer {
            source: at(UP_FROM_PROXY, source),
            echo: at(UP_FROM_PROXY, echo),
        };
        (at(UP_FROM_CLIENT, source), at(UP_FROM_CLIENT, echo), dialer)
    } else {
        (source, echo, Dialer { source, echo })
    };
    let dialer = Arc::new(dialer);
    let dir = std::env::temp_dir().join(format!("bench-egress-{}", std::process::id()));
    use std::os::unix::thread::JoinHandleExt;
    let up_thread = up_thread.into_pthread_t();
    let (proxy, paddr, splice_thread) =
        start_proxy(&layout, Transfer::Splice, &dir, dialer.clone(), 3128);
    let (_copying, caddr, copy_thread) = start_proxy(&layout, Transfer::Buffer, &dir, dialer, 3129);
    println!(
        "layout: {}",
        if netns {
            "netns: upstream test host over veth; client and proxy listener in a container-like netns; proxy threads in a host-like netns"
        } else {
            "loopback"
        }
    );
    let cl = layout.client.clone();

    // 1. 200 idle listeners (200 serve() tasks) in one runtime.
    let p = proxy.clone();
    let (base, with) = on_thread(&layout.proxy, async move {
        let base = rss_kib();
        let mut tasks = Vec::new();
        for i in 0..200 {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let c = Arc::new(Container {
                id: format!("idle-{i}"),
                network: container().network.clone(),
                credentials: None,
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
    // 2. Throughput, `rounds` times per rate: direct, spliced, copied.
    let gbps = |d: Duration| total as f64 * 8.0 / d.as_secs_f64() / 1e9;
    // (rate, median splice ratio) of each paced rate.
    let mut paced_medians = Vec::new();
    for gbit in rates {
        PACING.store((gbit * 1e9 / 8.0) as u64, Ordering::Relaxed);
        let paced = if gbit > 0.0 {
            format!("test host paced at {gbit} Gbit/s")
        } else {
            "test host unpaced".to_string()
        };
        let (mut splice_ratios, mut copy_ratios) = (Vec::new(), Vec::new());
        for round in 1..=rounds {
            let direct = measure(up_thread, None, &cl, async move {
                drain(TcpStream::connect(direct_source).await.unwrap()).await
            });
            let spliced = measure(up_thread, Some(splice_thread), &cl, async move {
                drain(connect_via(paddr, 9000).await).await
            });
            let copied = measure(up_thread, Some(copy_thread), &cl, async move {
                drain(connect_via(caddr, 9000).await).await
            });
            assert_eq!(
                (direct.bytes, spliced.bytes, copied.bytes),
                (total, total, total),
                "short transfer"
            );
            let ratio = |r: &Run| 100.0 * direct.wall.as_secs_f64() / r.wall.as_secs_f64();
            splice_ratios.push(ratio(&spliced));
            copy_ratios.push(ratio(&copied));
            println!("throughput {mib} MiB, {paced}, round {round}:");
            for (name, r) in [
                ("direct", &direct),
                ("proxy (splice)", &spliced),
                ("proxy (user-space copy)", &copied),
            ] {
                println!(
                    "  {name:<24} {:6.2} Gbit/s  ratio {:5.1} %  {}",
                    gbps(r.wall),
                    ratio(r),
                    r.cpu(total)
                );
            }
        }
        let median = pct(&mut splice_ratios, 0.5);
        println!(
            "throughput ratio, {paced}, median of {rounds}: splice {median:.1} %, user-space copy {:.1} %",
            pct(&mut copy_ratios, 0.5)
        );
        if gbit > 0.0 {
            paced_medians.push((gbit, median));
        }
    }
    PACING.store(0, Ordering::Relaxed);
    if !paced_medians.is_empty() {
        paced_medians.sort_by(|a, b| a.0.total_cmp(&b.0));
        // The highest rate up to which every paced rate kept 90 %.
        let kept = paced_medians
            .iter()
            .take_while(|(_, m)| *m >= 90.0)
            .last()
            .map_or("none of the paced rates".to_string(), |(g, _)| {
                format!("up to {g} Gbit/s")
            });
        println!("proxy (splice) median >= 90 % of direct: {kept}");
    }

    // 3. Connect latency: connect (+ CONNECT/200) + a 1-byte round trip.
    let (mut d, mut p) = on_thread(&cl, async move {
        let (mut d, mut p) = (Vec::new(), Vec::new());
        for i in 0..2000 {
            let t = Instant::now();
            let mut s = TcpStream::connect(direct_echo).await.unwrap();
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
    let (ok, took, during) = on_thread(&cl, async move {
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

/// `--credentials`: terminated against tunnelled, same TLS upstream.
mod credentials {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use rustls::{ClientConfig, RootCertStore, ServerConfig};
    use vibe_hooks::egress::ca::Ca;
    use vibe_hooks::egress::proxy::Credentials;
    use vibe_policy::egress::credential::{Binding, Inject};

    const PLACEHOLDER: &str = "sk-bench-PLACEHOLDERaaaaaaaaaaaaaaaa";

    /// The client's and the upstream's TLS: rustls's defaults, which like
    /// OpenSSL's put AES-256-GCM first (the tunnelled path runs on that),
    /// not the proxy's own order.
    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    struct ToUpstream(SocketAddr);
    impl Dial for ToUpstream {
        fn dial(&self, _: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
            let to = self.0;
            Box::pin(async move {
                let s = TcpStream::connect(to).await?;
                s.set_nodelay(true).ok();
                Ok(s)
            })
        }
    }

    /// The upstream: `GET /big` gets `big` bytes, anything else 2 bytes;
    /// then it closes (the terminated path asks `Connection: close`).
    /// Also the upstream thread's id (for its CPU clock).
    fn upstream(big: u64) -> (SocketAddr, String, nix::libc::pthread_t) {
        let ca_key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name
            .push(DnType::CommonName, "bench upstream CA");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca = p.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["cred.example".into(), "tunnel.example".into()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], key)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("upstream".into())
            .spawn(move || {
                rt().block_on(async move {
                    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
                    tx.send(l.local_addr().unwrap()).unwrap();
                    while let Ok((s, _)) = l.accept().await {
                        s.set_nodelay(true).ok();
                        pace(&s, PACING.load(Ordering::Relaxed));
                        let acceptor = acceptor.clone();
                        tokio::spawn(async move {
                            let Ok(mut tls) = acceptor.accept(s).await else {
                                return;
                            };
                            let mut got = Vec::new();
                            let mut b = [0u8; 4096];
                            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                                match tls.read(&mut b).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => got.extend_from_slice(&b[..n]),
                                }
                            }
                            let n = if got.starts_with(b"GET /big ") {
                                big
                            } else {
                                2
                            };
                            let head = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n"
                        );
                            let _ = tls.write_all(head.as_bytes()).await;
                            let chunk = vec![b'x'; 256 * 1024];
                            let mut left = n;
                            while left > 0 {
                                let k = left.min(chunk.len() as u64) as usize;
                                if tls.write_all(&chunk[..k]).await.is_err() {
                                    return;
                                }
                                left -= k as u64;
                            }
                            let _ = tls.shutdown().await;
                        });
                    }
                })
            });
        use std::os::unix::thread::JoinHandleExt;
        (
            rx.recv().unwrap(),
            ca.pem(),
            thread.expect("thread").into_pthread_t(),
        )
    }

    /// One request through the proxy: CONNECT, TLS, GET `path`, the
    /// response read to its end; the bytes read.
    async fn request(proxy: SocketAddr, host: &str, path: &str, tls: Arc<ClientConfig>) -> u64 {
        let s = connect_via_host(proxy, host).await;
        s.set_nodelay(true).ok();
        let name = ServerName::try_from(host.to_string()).unwrap();
        let mut t = tokio_rustls::TlsConnector::from(tls)
            .connect(name, s)
            .await
            .expect("handshake");
        let req =
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nx-api-key: {PLACEHOLDER}\r\n\r\n");
        t.write_all(req.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 256 * 1024];
        let mut n = 0u64;
        loop {
            match t.read(&mut buf).await {
                Ok(0) | Err(_) => return n,
                Ok(k) => n += k as u64,
            }
        }
    }

    /// The suite the client's TLS to `host` (through the proxy) settles on.
    async fn suite(proxy: SocketAddr, host: &str, tls: Arc<ClientConfig>) -> String {
        let s = connect_via_host(proxy, host).await;
        let name = ServerName::try_from(host.to_string()).unwrap();
        let t = tokio_rustls::TlsConnector::from(tls)
            .connect(name, s)
            .await
            .expect("handshake");
        let suite = t.get_ref().1.negotiated_cipher_suite();
        suite.map_or("none".into(), |s| format!("{:?}", s.suite()))
    }

    async fn connect_via_host(proxy: SocketAddr, host: &str) -> TcpStream {
        let mut s = TcpStream::connect(proxy).await.expect("proxy");
        s.write_all(format!("CONNECT {host}:443 HTTP/1.1\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut ok = [0u8; 39];
        s.read_exact(&mut ok).await.expect("200");
        assert!(ok.starts_with(b"HTTP/1.1 200"));
        s
    }

    pub fn run(mib: u64, requests: usize, rates: &[f64]) {
        let rates: Vec<f64> = std::iter::once(0.0).chain(rates.iter().copied()).collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let big = mib << 20;
        let (up, up_ca, up_thread) = upstream(big);
        let ca_file = dir.path().join("upstream-ca.pem");
        std::fs::write(&ca_file, &up_ca).unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "sk-bench-REAL-0123456789\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let ca = Ca::generate(&["cred.example".into()]).expect("CA");
        let ca_pem = ca.cert_pem().to_string();
        let creds = Credentials::new(
            vec![Binding {
                name: "bench".into(),
                hosts: vec!["cred.example".into()],
                inject: Inject::Header {
                    name: "x-api-key".into(),
                    scheme: None,
                },
                source: secret,
                placeholder: PLACEHOLDER.into(),
            }],
            ca,
        );
        let container = Arc::new(Container {
            id: "bench-cred".into(),
            network: NetworkSection {
                mode: NetworkMode::Proxy,
                hosts: vec!["cred.example".into(), "tunnel.example".into()],
                upstream_ca: Some(ca_file),
                ..NetworkSection::default()
            },
            credentials: Some(Arc::new(creds)),
        });
        let settings = ProxySettings {
            log_path: dir.path().join("egress.jsonl"),
            ..ProxySettings::default()
        };
        let proxy =
            Proxy::with_net(settings, Arc::new(Resolver), Arc::new(ToUpstream(up))).expect("proxy");
        let (tx, rx) = std::sync::mpsc::channel();
        let proxy_thread = std::thread::Builder::new()
            .name("proxy".into())
            .spawn(move || {
                rt().block_on(async move {
                    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
                    tx.send(l.local_addr().unwrap()).unwrap();
                    proxy.serve(l, container).await
                })
            });
        use std::os::unix::thread::JoinHandleExt;
        let proxy_thread = proxy_thread.expect("thread").into_pthread_t();
        let proxy_addr: SocketAddr = rx.recv().unwrap();
        // The client trusts both: the container's CA and the upstream's.
        let mut roots = RootCertStore::empty();
        use rustls::pki_types::pem::PemObject;
        for pem in [&ca_pem, &up_ca] {
            for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(c.unwrap()).unwrap();
            }
        }
        let mut cc = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cc.alpn_protocols = vec![b"http/1.1".to_vec()];
        let cc = Arc::new(cc);
        on_thread(&None, async move {
            let lat = |host: &'static str| {
                let cc = cc.clone();
                async move {
                    // Warm up (the first leaf is minted here).
                    for _ in 0..10 {
                        request(proxy_addr, host, "/", cc.clone()).await;
                    }
                    let mut v = Vec::with_capacity(requests);
                    for _ in 0..requests {
                        let t = Instant::now();
                        let n = request(proxy_addr, host, "/", cc.clone()).await;
                        assert!(n > 0);
                        v.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    v
                }
            };
            let mut tun = lat("tunnel.example").await;
            let mut term = lat("cred.example").await;
            let (t50, t99) = (pct(&mut tun, 0.5), pct(&mut tun, 0.99));
            let (c50, c99) = (pct(&mut term, 0.5), pct(&mut term, 0.99));
            println!(
                "one request, {requests} each (new connection, CONNECT, TLS, GET, response): tunnelled p50 {t50:.3} ms p99 {t99:.3} ms; terminated p50 {c50:.3} ms p99 {c99:.3} ms; added p50 {:.3} ms p99 {:.3} ms",
                c50 - t50,
                c99 - t99
            );
            // MiB/s and the CPU seconds of upstream, proxy and client.
            println!(
                "the client's TLS: tunnelled (to the upstream) {}, terminated (to the proxy) {}",
                suite(proxy_addr, "tunnel.example", cc.clone()).await,
                suite(proxy_addr, "cred.example", cc.clone()).await
            );
            let rate = |host: &'static str| {
                let cc = cc.clone();
                async move {
                    let (u0, p0, c0, a0) = (
                        thread_cpu(up_thread),
                        thread_cpu(proxy_thread),
                        own_cpu(),
                        cpu_secs(),
                    );
                    let t = Instant::now();
                    let n = request(proxy_addr, host, "/big", cc).await;
                    let wall = t.elapsed();
                    assert!(n >= big, "{host}: {n} of {big} bytes");
                    let run = Run {
                        bytes: n,
                        wall,
                        upstream: thread_cpu(up_thread) - u0,
                        proxy: thread_cpu(proxy_thread) - p0,
                        client: own_cpu() - c0,
                        process: cpu_secs() - a0,
                    };
                    (n as f64 / wall.as_secs_f64() / (1 << 20) as f64, run)
                }
            };
            for gbit in rates {
                PACING.store((gbit * 1e9 / 8.0) as u64, Ordering::Relaxed);
                let (mut tr, mut cr) = (Vec::new(), Vec::new());
                for _ in 0..3 {
                    tr.push(rate("tunnel.example").await);
                    cr.push(rate("cred.example").await);
                }
                // The median run of each, with its CPU.
                let median = |v: &mut Vec<(f64, Run)>| {
                    v.sort_by(|a, b| a.0.total_cmp(&b.0));
                    v.swap_remove(1)
                };
                let ((t, trun), (c, crun)) = (median(&mut tr), median(&mut cr));
                let link = if gbit == 0.0 {
                    "unpaced".to_string()
                } else {
                    format!("upstream paced at {gbit} Gbit/s")
                };
                println!(
                    "{mib} MiB download, {link} (median of 3): tunnelled {t:.0} MiB/s, terminated {c:.0} MiB/s: terminated/tunnelled {:.0} %",
                    100.0 * c / t
                );
                println!("  tunnelled  {}", trun.cpu(trun.bytes));
                println!("  terminated {}", crun.cpu(crun.bytes));
            }
        });
    }
}
