//! Transparent egress's listener: connections the container's nat chain
//! redirected to it (every new TCP connection but to loopback and to the
//! container's own addresses). The original destination (`SO_ORIGINAL_DST`)
//! only says which name the client resolved: it must be a fake address the
//! container's answerer gave, and the TLS SNI or the HTTP `Host` must be
//! that name ([`vibe_policy::egress::transparent`]). From there the
//! connection is judged, resolved, vetted, dialled and logged by the one
//! path a CONNECT (TLS) or an absolute-form request (HTTP) takes. Any other
//! destination (an IP literal, a fake address never given) is refused and
//! logged at once, then answered a 403 if it turns out to be plain HTTP.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use tokio::io::AsyncReadExt;
use vibe_policy::egress::dns::is_fake;
use vibe_policy::egress::request::{Body, Request, Target};
use vibe_policy::egress::transparent::{asked, Asked, AskedError};
use vibe_policy::egress::{Decision, Host};

use super::{Conn, Container, Fakes, Outcome, Proxy, Via};

impl Proxy {
    /// Serves a transparent listener for `container`, whose answerer hands
    /// out `fakes`, until `closing` (as [`Proxy::serve_until`]).
    pub async fn serve_transparent_until(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        container: Arc<Container>,
        fakes: Fakes,
        closing: tokio::sync::watch::Receiver<bool>,
    ) {
        self.accept_until(listener, container, closing, Some(fakes))
            .await
    }
}

/// The log kind of a connection refused before its first bytes said what
/// it is.
const KIND: &str = "transparent";

impl Conn {
    pub(super) async fn run_transparent(mut self, fakes: Fakes) {
        let s = &self.proxy.settings;
        if self._permit.is_none() {
            let why = format!("too many connections (limit {})", s.max_connections);
            self.log(&Outcome::new(Decision::deny("", 0, why), KIND));
            return;
        }
        let dst = match original_dst(&self.client) {
            Ok(dst) => dst,
            Err(e) => {
                let why = format!("no original destination (not redirected here?): {e}");
                self.log(&Outcome::new(Decision::deny("", 0, why), KIND));
                return;
            }
        };
        let port = dst.port();
        let name = match dst.ip() {
            IpAddr::V4(ip) if is_fake(ip) => fakes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .name_of(ip)
                .map(str::to_string),
            _ => None,
        };
        let Some(name) = name else {
            let why = if matches!(dst.ip(), IpAddr::V4(ip) if is_fake(ip)) {
                "a fake address the container's DNS answerer has not given for any name \
                 (or gave before the egress daemon restarted): resolve the name again"
            } else {
                "an IP literal, not an address the container's DNS answerer gave for a name \
                 (transparent egress reaches allowed names by name only)"
            };
            let mut o = Outcome::new(Decision::deny(&dst.ip().to_string(), port, why), KIND);
            o.address = Some(dst);
            // At once: a client that never sends still leaves its line.
            self.log(&o);
            let mut buf = Vec::new();
            let _ = self.read_first(&mut buf, port, None).await;
            // Plain HTTP can read why; anything else is closed.
            if buf.first().is_some_and(u8::is_ascii_uppercase) {
                self.respond(403, "Forbidden", &o.decision.refusal_line())
                    .await;
            }
            return;
        };
        let mut buf = Vec::with_capacity(2048);
        let first = self.read_first(&mut buf, port, Some(&name)).await;
        let asked = match first {
            Err(_) => {
                let why = "no TLS ClientHello or HTTP request head in time \
                           (only TLS and plain HTTP are judged here)";
                return self.refuse_first(&name, port, why.to_string()).await;
            }
            // Closed before it asked for anything: nothing to judge.
            Ok(Ok(None)) => return,
            Ok(Err(e)) => return self.refuse_first(&name, port, e.to_string()).await,
            Ok(Ok(Some(a))) => a,
        };
        let outcome = match asked {
            Asked::Tls(sni) => {
                let host = match Host::parse(&sni) {
                    Ok(h) => h,
                    Err(e) => return self.refuse_first(&name, port, e.to_string()).await,
                };
                let req = Request {
                    target: Target::Connect,
                    host,
                    port,
                    version: "HTTP/1.1".into(),
                    headers: Vec::new(),
                    body: Body::None,
                    head_len: 0,
                };
                // The ClientHello read is `pending`: the CONNECT path's
                // SNI check finds it whole and forwards it untouched.
                self.handle(req, &[], buf).await
            }
            Asked::Http(req) => {
                // The request was read as the absolute-form one it stands
                // for; what follows the client's own head goes on as body.
                let end = buf
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .map_or(buf.len(), |i| i + 4);
                let head = buf[..end].to_vec();
                let pending = buf[end..].to_vec();
                self.handle(*req, &head, pending).await
            }
        };
        self.log(&outcome);
    }

    /// Reads the first bytes of a redirected connection into `buf` until
    /// they say what they ask for ([`asked`]; `name`: the one the client
    /// resolved), within the header timeout, and sets `via` by the first
    /// byte. The outer `Err`: the timeout; `Ok(None)`: closed first.
    async fn read_first(
        &mut self,
        buf: &mut Vec<u8>,
        port: u16,
        name: Option<&str>,
    ) -> Result<Result<Option<Asked>, AskedError>, tokio::time::error::Elapsed> {
        let s = &self.proxy.settings;
        let (header_timeout, cap) = (
            s.header_timeout,
            s.max_header_bytes.max(s.max_client_hello_bytes),
        );
        let client = &mut self.client;
        let first = tokio::time::timeout(header_timeout, async {
            let mut chunk = [0u8; 4096];
            loop {
                match asked(buf, port, name, cap) {
                    Ok(Some(a)) => return Ok(Some(a)),
                    Ok(None) => {}
                    Err(e) => return Err(e),
                }
                match client.read(&mut chunk).await {
                    Ok(0) | Err(_) => return Ok(None),
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await;
        self.via = match buf.first() {
            Some(22) => Via::Tls,
            _ => Via::Http,
        };
        first
    }

    /// Refuses a redirected connection whose first bytes were not judged
    /// (no SNI, another name than the one resolved, not TLS or HTTP): a 403
    /// naming vibe-shim for HTTP, a close for TLS, and the log line.
    async fn refuse_first(&mut self, name: &str, port: u16, why: String) {
        let kind = match self.via {
            Via::Tls => "transparent-tls",
            _ => "transparent-http",
        };
        let o = self
            .refuse(Decision::deny(name, port, why), kind, None)
            .await;
        self.log(&o);
    }
}

/// Where the client was going before the nat chain's redirect.
fn original_dst(stream: &tokio::net::TcpStream) -> std::io::Result<SocketAddr> {
    use nix::sys::socket::{getsockopt, sockopt};
    let v6 = stream.local_addr()?.is_ipv6();
    if v6 {
        let a = getsockopt(stream, sockopt::Ip6tOriginalDst)?;
        let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
        Ok(SocketAddr::from((ip, u16::from_be(a.sin6_port))))
    } else {
        let a = getsockopt(stream, sockopt::OriginalDst)?;
        let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
        Ok(SocketAddr::from((ip, u16::from_be(a.sin_port))))
    }
}
