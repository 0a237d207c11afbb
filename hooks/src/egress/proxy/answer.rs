//! Transparent egress's DNS answerer, bound by the daemon on the
//! container's loopback (UDP and TCP); the nat chain redirects every query
//! to it, whatever nameserver the container's resolv.conf names. It does
//! the socket work for [`vibe_policy::egress::dns`]: a name some
//! `[network] hosts` entry names gets a fake address from the container's
//! pool, every other name NXDOMAIN. It resolves nothing and sends nothing
//! anywhere but back to the asker, so a query (`<secret>.attacker.example`)
//! reaches no resolver. Queries over the rate are dropped unanswered.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;
use vibe_policy::egress::dns::{self, DnsError, Rcode};
use vibe_policy::egress::{Decision, HostList};

use super::{closed, log, Container, Fakes, PerContainer, Proxy};

/// Queries answered at once, and per second after that, per namespace.
pub const QUERY_BURST: f64 = 1000.0;
pub const QUERY_RATE: f64 = 500.0;
/// TCP connections one answerer serves at once; one more is closed.
const MAX_TCP: usize = 32;
/// A TCP client gets this long for each query.
const TCP_TIMEOUT: Duration = Duration::from_secs(10);

/// One namespace's answerer, shared by its sockets.
pub struct Answerer {
    proxy: Arc<Proxy>,
    container: Arc<Container>,
    per: Arc<PerContainer>,
    hosts: Result<HostList, String>,
    fakes: Fakes,
    rate: Mutex<(f64, Instant)>,
}

impl Proxy {
    /// The answerer for `container`, handing out `fakes` (the same pool
    /// its transparent listener reads).
    pub fn answerer(self: &Arc<Self>, container: Arc<Container>, fakes: Fakes) -> Arc<Answerer> {
        Arc::new(Answerer {
            proxy: self.clone(),
            per: self.per_container(&container),
            hosts: HostList::new(&container.network),
            container,
            fakes,
            rate: Mutex::new((QUERY_BURST, Instant::now())),
        })
    }
}

impl Answerer {
    /// The reply to one query message, or `None` (not a query, over the
    /// rate).
    pub fn reply(&self, msg: &[u8]) -> Option<Vec<u8>> {
        if !self.take() {
            return None;
        }
        let q = match dns::parse_query(msg) {
            Ok(q) => q,
            Err(DnsError::Malformed(_)) => return dns::formerr(msg),
            Err(_) => return None,
        };
        let names = |name: &str| self.hosts.as_ref().is_ok_and(|h| h.names(name));
        // Report mode answers every name (the connection is judged, and
        // logged as would-deny, by the listener); it still asks no one.
        let enforce = self.container.network.enforce;
        let a = {
            let mut pool = self.fakes.lock().unwrap_or_else(|e| e.into_inner());
            dns::answer(&q, |n| !enforce || names(n), &mut pool)
        };
        let name = match &q.name {
            Ok(n) => n.clone(),
            Err(why) => why.clone(),
        };
        let decision = match (a.rcode, a.address) {
            (Rcode::NoError, Some(fake)) if names(&name) => Decision::allow(
                &name,
                0,
                format!("[network] hosts names it: answered {fake} (a fake address)"),
            ),
            (Rcode::NoError, Some(fake)) => Decision::refuse(
                false,
                &name,
                0,
                format!("not in [network] hosts (report mode: answered {fake})"),
            ),
            // Other types of an allowed name: an empty answer, not logged
            // (every lookup asks AAAA beside A).
            (Rcode::NoError, None) => return Some(a.message),
            (Rcode::NxDomain, _) => Decision::deny(
                &name,
                0,
                "not in [network] hosts: NXDOMAIN, no resolver asked",
            ),
            (rcode, _) => Decision::deny(&name, 0, format!("{rcode:?}: not a plain query")),
        };
        self.log(&decision);
        Some(a.message)
    }

    fn take(&self) -> bool {
        let mut r = self.rate.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let tokens = (r.0 + now.duration_since(r.1).as_secs_f64() * QUERY_RATE).min(QUERY_BURST);
        if tokens < 1.0 {
            *r = (tokens, now);
            return false;
        }
        *r = (tokens - 1.0, now);
        true
    }

    fn log(&self, d: &Decision) {
        let Some(suppressed) = self.per.budget.take() else {
            return;
        };
        self.proxy.log.write(&log::Line {
            time: log::now(),
            container: &self.container.id,
            decision: d.verdict,
            kind: "dns",
            host: &log::clip(&d.host),
            port: 0,
            address: None,
            rule: &log::clip(&d.rule),
            error: None,
            bytes_up: 0,
            bytes_down: 0,
            suppressed,
            credential: None,
        });
    }

    /// Answers on `socket` until `closing`.
    pub async fn serve_udp_until(
        self: Arc<Self>,
        socket: tokio::net::UdpSocket,
        mut closing: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut buf = vec![0u8; 4096];
        loop {
            tokio::select! {
                _ = closed(&mut closing) => return,
                got = socket.recv_from(&mut buf) => match got {
                    Ok((n, peer)) => {
                        if let Some(reply) = self.reply(&buf[..n]) {
                            let _ = socket.send_to(&reply, peer).await;
                        }
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                },
            }
        }
    }

    /// Answers DNS over TCP (length-prefixed messages) on `listener`
    /// until `closing`.
    pub async fn serve_tcp_until(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        mut closing: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut tasks = JoinSet::new();
        loop {
            tokio::select! {
                _ = closed(&mut closing) => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) if tasks.len() < MAX_TCP => {
                        tasks.spawn(self.clone().tcp_client(stream));
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        tasks.abort_all();
    }

    async fn tcp_client(self: Arc<Self>, mut stream: tokio::net::TcpStream) {
        loop {
            let one = async {
                let len = usize::from(stream.read_u16().await?);
                let mut msg = vec![0u8; len];
                stream.read_exact(&mut msg).await?;
                std::io::Result::Ok(msg)
            };
            let Ok(Ok(msg)) = tokio::time::timeout(TCP_TIMEOUT, one).await else {
                return;
            };
            let Some(reply) = self.reply(&msg) else {
                return;
            };
            let mut out = (reply.len() as u16).to_be_bytes().to_vec();
            out.extend_from_slice(&reply);
            if stream.write_all(&out).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::proxy::ProxySettings;
    use vibe_policy::config::{NetworkMode, NetworkSection};
    use vibe_policy::egress::dns::{build_query, FakePool};

    fn answerer(dir: &std::path::Path, enforce: bool) -> Arc<Answerer> {
        let proxy = Proxy::new(ProxySettings {
            log_path: dir.join("egress.jsonl"),
            ..ProxySettings::default()
        })
        .unwrap();
        let container = Arc::new(Container {
            id: "c1".into(),
            network: NetworkSection {
                mode: NetworkMode::Proxy,
                hosts: vec!["api.example.com".into()],
                enforce,
                transparent: true,
                ..NetworkSection::default()
            },
            credentials: None,
        });
        proxy.answerer(container, Arc::new(Mutex::new(FakePool::new(16))))
    }

    fn rcode(m: &[u8]) -> u8 {
        m[3] & 0xf
    }

    #[test]
    fn answers_allowed_names_refuses_the_rest_and_logs_both() {
        let dir = tempfile::tempdir().unwrap();
        let a = answerer(dir.path(), true);
        let ok = a.reply(&build_query(1, "api.example.com", 1)).unwrap();
        assert_eq!(rcode(&ok), 0);
        assert_eq!(&ok[ok.len() - 4..ok.len() - 2], &[198, 18]);
        let no = a
            .reply(&build_query(2, "leak.attacker.example", 1))
            .unwrap();
        assert_eq!(rcode(&no), 3);
        // AAAA of an allowed name: empty, not logged.
        let aaaa = a.reply(&build_query(3, "api.example.com", 28)).unwrap();
        assert_eq!((rcode(&aaaa), aaaa[7]), (0, 0));
        // Not a query: nothing; malformed: FORMERR.
        let mut response = build_query(4, "api.example.com", 1);
        response[2] |= 0x80;
        assert!(a.reply(&response).is_none());
        let mut bad = build_query(5, "api.example.com", 1);
        bad[12] = 0xc0;
        assert_eq!(rcode(&a.reply(&bad).unwrap()), 1);
        let log = std::fs::read_to_string(dir.path().join("egress.jsonl")).unwrap();
        let lines: Vec<serde_json::Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{log}");
        assert_eq!(
            (&lines[0]["kind"], &lines[0]["decision"], &lines[0]["host"]),
            (&"dns".into(), &"allow".into(), &"api.example.com".into())
        );
        assert_eq!(
            (
                &lines[1]["container"],
                &lines[1]["decision"],
                &lines[1]["host"]
            ),
            (
                &"c1".into(),
                &"deny".into(),
                &"leak.attacker.example".into()
            )
        );
    }

    #[test]
    fn report_mode_answers_every_name_as_would_deny() {
        let dir = tempfile::tempdir().unwrap();
        let a = answerer(dir.path(), false);
        let m = a.reply(&build_query(1, "other.example", 1)).unwrap();
        assert_eq!(rcode(&m), 0);
        let log = std::fs::read_to_string(dir.path().join("egress.jsonl")).unwrap();
        assert!(log.contains("\"decision\":\"would-deny\""), "{log}");
    }

    #[test]
    fn queries_over_the_rate_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let a = answerer(dir.path(), true);
        let q = build_query(1, "api.example.com", 28);
        let answered = (0..QUERY_BURST as usize + 200)
            .filter(|_| a.reply(&q).is_some())
            .count();
        assert!(
            answered < QUERY_BURST as usize + 100,
            "{answered} answered at once"
        );
        assert!(answered >= QUERY_BURST as usize);
    }
}
