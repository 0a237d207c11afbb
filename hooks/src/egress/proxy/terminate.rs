//! A CONNECT to a credential host, terminated: the client's TLS ends here
//! with a leaf of the container's own CA, the one request on it is judged
//! ([`inject::judge`]), its placeholder swapped for the secret read now
//! from its file, and it goes on over TLS (verified) on the TCP connection
//! already dialled to the vetted address, with `Connection: close`: one
//! request per terminated connection, so every request that reaches the
//! server was judged; a second one the client pipelines is never read.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncBufRead, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use vibe_policy::egress::credential::Binding;
use vibe_policy::egress::inject::{self, Plan, Refusal, Swap};
use vibe_policy::egress::{request, Decision};

use super::relay::{self, UpLimit};
use super::{closed, Conn, Outcome};
use crate::egress::ca::{self, Ca};

/// What a container with credentials brings to its listeners.
#[derive(Debug)]
pub struct Credentials {
    pub bindings: Vec<Binding>,
    pub ca: Ca,
    /// Built at the first terminated connection (the system roots and
    /// `network.upstream_ca`), then kept.
    upstream: Mutex<Option<Arc<ClientConfig>>>,
}

impl Credentials {
    pub fn new(bindings: Vec<Binding>, ca: Ca) -> Credentials {
        Credentials {
            bindings,
            ca,
            upstream: Mutex::new(None),
        }
    }

    /// Whether a CONNECT to `host` is terminated.
    pub fn binds(&self, host: &str) -> bool {
        self.bindings
            .iter()
            .any(|b| b.hosts.iter().any(|h| h == host))
    }

    /// The upstream side's TLS: the host's system roots plus
    /// `upstream_ca`; an unreadable `upstream_ca` fails this connection
    /// (and the next one tries again).
    fn client_config(&self, upstream_ca: Option<&Path>) -> Result<Arc<ClientConfig>, String> {
        let mut cached = self.upstream.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cached.as_ref() {
            return Ok(c.clone());
        }
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(system_roots().iter().cloned());
        if let Some(path) = upstream_ca {
            let why =
                |e: &dyn std::fmt::Display| format!("network.upstream_ca {}: {e}", path.display());
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| why(&e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| why(&e))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(why(&"holds no usable certificate"));
            }
        }
        if roots.is_empty() {
            return Err("no root to verify upstreams with (the system trust store is empty and network.upstream_ca is unset)".into());
        }
        let mut config = ClientConfig::builder_with_provider(ca::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![ca::ALPN_HTTP11.to_vec()];
        let config = Arc::new(config);
        *cached = Some(config.clone());
        Ok(config)
    }
}

/// The host's trust store, read once per daemon.
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

/// The secret in `path`, read now (a rotated file is used by the next
/// request): a regular file, root's, no group or other bits, opened
/// without following a symlink and checked on the opened fd.
pub fn read_secret(path: &Path) -> Result<String, String> {
    let mut bytes = crate::fsio::read_private(path, inject::MAX_SECRET_FILE)
        .map_err(|e| format!("its secret: {e}"))?;
    let secret =
        inject::secret_from_file(&bytes).map_err(|e| format!("its secret {}: {e}", path.display()));
    bytes.fill(0);
    secret
}

/// The plan with `Connection: close` as its only connection header (the
/// hop-by-hop ones, and those `Connection` names, dropped; the swaps
/// renumbered past them).
fn closing(plan: Plan) -> Plan {
    const HOP: &[&str] = &[
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
    ];
    const KEEP: &[&str] = &["host", "content-length", "transfer-encoding"];
    let named: Vec<String> = plan
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| v.split(',').map(|t| t.trim().to_ascii_lowercase()))
        .collect();
    let mut headers = Vec::new();
    let mut index = Vec::new();
    for (name, value) in plan.headers {
        let lower = name.to_ascii_lowercase();
        let keep = KEEP.contains(&lower.as_str());
        if !keep && (HOP.contains(&lower.as_str()) || named.contains(&lower)) {
            index.push(None);
            continue;
        }
        index.push(Some(headers.len()));
        headers.push((name, value));
    }
    headers.push(("Connection".to_string(), "close".to_string()));
    let swaps = plan
        .swaps
        .iter()
        .filter_map(|s| {
            index[s.header].map(|header| Swap {
                binding: s.binding,
                header,
            })
        })
        .collect();
    Plan {
        headers,
        swaps,
        ..plan
    }
}

/// The client's stream with the bytes already read from it (its
/// ClientHello) in front.
struct Prefixed<'a> {
    prefix: Vec<u8>,
    at: usize,
    inner: &'a mut TcpStream,
}

impl AsyncRead for Prefixed<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = (self.prefix.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut *self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed<'_> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.inner).poll_write(cx, buf)
    }
    // rustls hands its queued records over as one vector: without this
    // each record would be a send of its own.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

/// An upstream that closes its TCP without TLS's close_notify (common)
/// ends the response like one that sends it: the response's own framing
/// tells the client whether it was whole.
struct LenientEof<R>(R);

impl<R: AsyncRead + Unpin> AsyncRead for LenientEof<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.0).poll_read(cx, buf) {
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

/// The upstream's response, held back until it cannot be the start of an
/// injected value: a bound host that echoes the request (an echo or debug
/// endpoint, an error page quoting headers) would hand the container the
/// secret. The bytes the daemon injected (the secret, and a Basic value's
/// base64) are searched for across reads; a hit ends the connection
/// before any byte of it is passed on. A best effort: a compressed or
/// otherwise transformed echo is not seen.
///
/// Read as an [`AsyncBufRead`]: the relay writes from this buffer, which
/// gathers what the upstream has ready (several TLS records, up to
/// [`BUF_GUARD`]) so that the client's TLS gets it in one write.
struct Guarded<R> {
    inner: R,
    finders: Vec<memchr::memmem::Finder<'static>>,
    /// Longest needle minus one: what may be held back.
    keep: usize,
    /// [`BUF_GUARD`] plus `keep`, zeroed once; `buf[out..end]` was read
    /// and not yet passed on.
    buf: Box<[u8]>,
    /// `buf[out..ready]` has been searched and may go out.
    out: usize,
    ready: usize,
    end: usize,
    eof: bool,
    /// An injected value was seen: every read fails from then on.
    cut: bool,
}

/// The error a [`Guarded`] read ends with when the response echoed an
/// injected value.
#[derive(Debug, thiserror::Error)]
#[error("the upstream's response echoed the injected credential: connection cut")]
pub(super) struct Reflected;

impl<R> Guarded<R> {
    fn new(inner: R, needles: Vec<Vec<u8>>) -> Self {
        let keep = needles
            .iter()
            .map(Vec::len)
            .max()
            .unwrap_or(1)
            .saturating_sub(1);
        let finders = needles
            .into_iter()
            .filter(|n| !n.is_empty())
            .map(|n| memchr::memmem::Finder::new(&n).into_owned())
            .collect();
        Guarded {
            inner,
            finders,
            keep,
            buf: vec![0; BUF_GUARD + keep].into_boxed_slice(),
            out: 0,
            ready: 0,
            end: 0,
            eof: false,
            cut: false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncBufRead for Guarded<R> {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let me = self.get_mut();
        if me.cut {
            return Poll::Ready(Err(io::Error::other(Reflected)));
        }
        if me.out == me.ready && !me.eof {
            // All that was searched went out: the held tail moves to the
            // front (at most `keep` bytes), and there is room for
            // BUF_GUARD more.
            me.buf.copy_within(me.out..me.end, 0);
            me.end -= me.out;
            (me.out, me.ready) = (0, 0);
            let start = me.end;
            while me.end < me.buf.len() {
                let mut rb = ReadBuf::new(&mut me.buf[me.end..]);
                match Pin::new(&mut me.inner).poll_read(cx, &mut rb) {
                    Poll::Pending if me.end == start => return Poll::Pending,
                    // What came so far goes; the waker is registered for
                    // the rest.
                    Poll::Pending => break,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Ready(Ok(())) => match rb.filled().len() {
                        0 => {
                            me.eof = true;
                            break;
                        }
                        n => me.end += n,
                    },
                }
            }
            // Search what is new, with the held tail before it.
            let from = start.saturating_sub(me.keep);
            let new = &me.buf[from..me.end];
            if me.finders.iter().any(|f| f.find(new).is_some()) {
                me.cut = true;
                return Poll::Ready(Err(io::Error::other(Reflected)));
            }
            me.ready = match me.eof {
                true => me.end,
                false => me.end.saturating_sub(me.keep),
            };
            if me.ready == 0 && !me.eof {
                // Fewer bytes than a needle's start could span, and the
                // upstream has no more yet (its read was pending).
                return Poll::Pending;
            }
        }
        Poll::Ready(Ok(&me.buf[me.out..me.ready]))
    }

    fn consume(self: Pin<&mut Self>, amt: usize) {
        let me = self.get_mut();
        me.out = (me.out + amt).min(me.ready);
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Guarded<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let ready = std::task::ready!(self.as_mut().poll_fill_buf(cx))?;
        let n = ready.len().min(buf.remaining());
        buf.put_slice(&ready[..n]);
        self.consume(n);
        Poll::Ready(Ok(()))
    }
}

/// How much of the response a [`Guarded`] gathers before passing it on.
const BUF_GUARD: usize = 256 * 1024;

/// What is read from the upstream's socket at a time, below its TLS.
const BUF_UPSTREAM: usize = 256 * 1024;

/// How the request head inside TLS ended.
enum Head {
    Plan(Plan, Vec<u8>),
    Refused(Refusal),
    Closed,
    Failed(String),
}

/// A short response inside TLS, then a clean close.
async fn answer<S: AsyncWrite + Unpin>(tls: &mut S, code: u16, text: &str, line: &str) {
    let body = format!("{line}\n");
    let msg = format!(
        "HTTP/1.1 {code} {text}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tls.write_all(msg.as_bytes()).await;
    let _ = tls.shutdown().await;
}

impl Conn {
    /// The terminated path (the CONNECT's 200, its SNI check and the dial
    /// are done; `pending` holds the ClientHello).
    pub(super) async fn terminate(
        &mut self,
        creds: Arc<Credentials>,
        host: String,
        upstream: TcpStream,
        pending: Vec<u8>,
        mut outcome: Outcome,
    ) -> Outcome {
        outcome.kind = "inject";
        let s = &self.proxy.settings;
        let (header_timeout, connect_timeout, idle, cap) = (
            s.header_timeout,
            s.connect_timeout,
            s.idle_timeout,
            s.max_header_bytes,
        );
        let upstream_ca = self.container.network.upstream_ca.clone();
        let deny = |o: &mut Outcome, why: String| {
            o.decision = Decision::deny(&host, 443, why);
        };
        let config = match creds.ca.server_config(&host) {
            Ok(c) => c,
            Err(e) => {
                deny(&mut outcome, format!("credential host: {e}"));
                return outcome;
            }
        };
        let io = Prefixed {
            prefix: pending,
            at: 0,
            inner: &mut self.client,
        };
        let accept = tokio_rustls::TlsAcceptor::from(config).accept(io);
        let mut tls = match tokio::time::timeout(header_timeout, accept).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                let why = format!(
                    "credential host: the client's TLS handshake failed ({e}); terminated connections speak HTTP/1.1 only"
                );
                deny(&mut outcome, why);
                return outcome;
            }
            Err(_) => {
                deny(
                    &mut outcome,
                    "credential host: TLS handshake timeout".into(),
                );
                return outcome;
            }
        };
        // The one request head, inside TLS.
        let read = async {
            let mut buf = Vec::with_capacity(2048);
            let mut chunk = [0u8; 4096];
            let (mut searched, mut pieces) = (0, 0);
            loop {
                if request::head_complete(&buf, searched) || buf.len() >= cap {
                    match inject::judge(&buf, cap, &host, 443, &creds.bindings) {
                        Ok(Some(plan)) => {
                            let rest = buf[plan.head_len..].to_vec();
                            return Head::Plan(plan, rest);
                        }
                        Ok(None) => {}
                        Err(r) => return Head::Refused(r),
                    }
                }
                searched = buf.len();
                if pieces == inject::MAX_HEAD_PIECES {
                    return Head::Refused(Refusal::Scattered);
                }
                pieces += 1;
                match tls.read(&mut chunk).await {
                    Ok(0) => return Head::Closed,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    Err(e) => return Head::Failed(e.to_string()),
                }
            }
        };
        let head = tokio::time::timeout(header_timeout, read)
            .await
            .unwrap_or_else(|_| Head::Failed("request header timeout".into()));
        let (plan, rest) = match head {
            Head::Plan(plan, rest) => (plan, rest),
            Head::Closed => return outcome,
            Head::Failed(e) => {
                if e == "request header timeout" {
                    answer(
                        &mut tls,
                        408,
                        "Request Timeout",
                        &format!("vibe-shim egress: {e}"),
                    )
                    .await;
                }
                deny(&mut outcome, format!("credential host: {e}"));
                return outcome;
            }
            Head::Refused(r) => {
                let (code, text) = r.status();
                let line = format!("vibe-shim egress: refused a request to {host}: {r}");
                answer(&mut tls, code, text, &line).await;
                if matches!(r, Refusal::Misuse { .. }) {
                    outcome.kind = "misuse";
                }
                outcome.credential = r.credential().map(str::to_string);
                deny(&mut outcome, r.to_string());
                return outcome;
            }
        };
        let plan = closing(plan);
        let names: Vec<&str> = plan
            .swaps
            .iter()
            .filter_map(|s| creds.bindings.get(s.binding))
            .map(|b| b.name.as_str())
            .collect();
        if !names.is_empty() {
            outcome.credential = Some(names.join(","));
        }
        // The secrets, read at this request.
        let mut secrets = Vec::new();
        for s in &plan.swaps {
            let Some(b) = creds.bindings.get(s.binding) else {
                continue;
            };
            match read_secret(&b.source) {
                Ok(secret) => secrets.push(secret),
                Err(why) => {
                    let why = format!("credential {}: {why}", b.name);
                    let line = format!("vibe-shim egress: cannot inject {host}'s {why}");
                    answer(&mut tls, 502, "Bad Gateway", &line).await;
                    outcome.credential = Some(b.name.clone());
                    deny(&mut outcome, why);
                    return outcome;
                }
            }
        }
        let refuse_502 = |why: String| format!("vibe-shim egress: cannot reach {host}: {why}");
        let client_config = match creds.client_config(upstream_ca.as_deref()) {
            Ok(c) => c,
            Err(why) => {
                answer(&mut tls, 502, "Bad Gateway", &refuse_502(why.clone())).await;
                outcome.error = Some(why);
                return outcome;
            }
        };
        let name = match ServerName::try_from(host.clone()) {
            Ok(n) => n,
            Err(e) => {
                deny(&mut outcome, format!("not a TLS server name: {e}"));
                return outcome;
            }
        };
        // rustls reads the socket 4 KiB at a time; a buffer below it makes
        // that one recv per BUF_UPSTREAM (and far fewer window updates).
        let upstream = tokio::io::BufReader::with_capacity(BUF_UPSTREAM, upstream);
        let connect = tokio_rustls::TlsConnector::from(client_config).connect(name, upstream);
        let mut up = match tokio::time::timeout(connect_timeout, connect).await {
            Ok(Ok(up)) => up,
            Ok(Err(e)) => {
                let why = format!("TLS to the upstream failed: {e}");
                answer(&mut tls, 502, "Bad Gateway", &refuse_502(why.clone())).await;
                outcome.error = Some(why);
                return outcome;
            }
            Err(_) => {
                let why = "TLS to the upstream timed out".to_string();
                answer(&mut tls, 502, "Bad Gateway", &refuse_502(why.clone())).await;
                outcome.error = Some(why);
                return outcome;
            }
        };
        let inject::Rendered { head, injected } = plan.render(&creds.bindings, &secrets);
        drop(secrets);
        if let Err(e) = up.write_all(&head).await {
            outcome.error = Some(e.to_string());
            return outcome;
        }
        use std::sync::atomic::Ordering;
        outcome
            .counts
            .up
            .fetch_add(head.len() as u64, Ordering::Relaxed);
        let limit = UpLimit::from(plan.body);
        // What the guard passes on at once goes to the client's TLS at
        // once: its records in one vector, one send (64 KiB otherwise).
        tls.get_mut()
            .1
            .set_buffer_limit(Some(BUF_GUARD + BUF_GUARD / 8));
        let (cr, cw) = tokio::io::split(&mut tls);
        let (ur, uw) = tokio::io::split(&mut up);
        let relayed = relay::relay_io(
            cr,
            cw,
            Guarded::new(LenientEof(ur), injected),
            uw,
            &rest,
            limit,
            idle,
            &outcome.counts,
        );
        let mut watch = self.closing.clone();
        let result = tokio::select! {
            r = relayed => r,
            _ = closed(&mut watch) => Err(io::Error::other(
                "closed: the container's listener stopped (delete or daemon stop)",
            )),
        };
        if let Err(e) = result {
            if e.get_ref().is_some_and(|e| e.is::<Reflected>()) {
                outcome.kind = "reflected";
            }
            outcome.error = Some(e.to_string());
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use tokio::io::AsyncBufReadExt;
    use vibe_policy::egress::request::Body;

    /// An upstream that hands out `parts` one read each, pending (and
    /// waking itself) before each when `stall`, then ends.
    struct Script {
        parts: VecDeque<Vec<u8>>,
        stall: bool,
        stalled: bool,
    }

    impl AsyncRead for Script {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if self.stall && !self.stalled {
                self.stalled = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.stalled = false;
            if let Some(p) = self.parts.front_mut() {
                let n = p.len().min(buf.remaining());
                buf.put_slice(&p[..n]);
                p.drain(..n);
                if p.is_empty() {
                    self.parts.pop_front();
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    /// What a guarded `parts` passes on, and the error it ends with.
    async fn guarded(
        parts: Vec<Vec<u8>>,
        stall: bool,
        needles: &[&[u8]],
    ) -> (Vec<u8>, Option<io::Error>) {
        let script = Script {
            parts: parts.into(),
            stall,
            stalled: false,
        };
        let mut g = Guarded::new(script, needles.iter().map(|n| n.to_vec()).collect());
        let mut out = Vec::new();
        loop {
            match g.fill_buf().await {
                Ok([]) => return (out, None),
                Ok(b) => {
                    let n = b.len();
                    out.extend_from_slice(b);
                    g.consume(n);
                }
                Err(e) => return (out, Some(e)),
            }
        }
    }

    const NEEDLE: &[u8] = b"sk-REAL-0123456789";

    /// The response scan's promise: an injected value split anywhere
    /// (across reads, one byte a read, with or without the upstream
    /// pausing between them) cuts the response before its first byte
    /// goes out; a value only begun at the end passes, as does all else.
    #[tokio::test]
    async fn an_echoed_secret_is_cut_before_its_first_byte_wherever_it_splits() {
        let before = vec![b'a'; 3 * BUF_GUARD + 7];
        for stall in [false, true] {
            for k in 0..=NEEDLE.len() {
                let mut first = before.clone();
                first.extend_from_slice(&NEEDLE[..k]);
                let mut second = NEEDLE[k..].to_vec();
                second.extend_from_slice(b"tail");
                let (out, err) =
                    guarded(vec![first, second], stall, &[b"other-needle", NEEDLE]).await;
                let err = err.expect("cut");
                assert!(err.get_ref().is_some_and(|e| e.is::<Reflected>()), "{err}");
                assert!(
                    out.len() <= before.len(),
                    "split at {k}: a secret byte went out"
                );
                assert_eq!(out, before[..out.len()]);
            }
            // A byte a read, the secret in the middle.
            let mut all = b"HTTP/1.1 200 OK\r\n\r\nx-api-key: ".to_vec();
            let at = all.len();
            all.extend_from_slice(NEEDLE);
            all.extend_from_slice(b"\r\n");
            let parts = all.iter().map(|b| vec![*b]).collect();
            let (out, err) = guarded(parts, stall, &[NEEDLE]).await;
            assert!(err.is_some());
            assert!(out.len() <= at, "{}", String::from_utf8_lossy(&out));
        }
    }

    #[tokio::test]
    async fn a_clean_response_passes_whole_with_its_held_tail() {
        let body: Vec<u8> = (0..5 * BUF_GUARD + 123).map(|i| (i % 251) as u8).collect();
        for stall in [false, true] {
            for size in [1usize, 7, 16 * 1024, BUF_GUARD + 1] {
                let mut body = body.clone();
                // A secret's first bytes at the very end: held, then passed.
                body.extend_from_slice(&NEEDLE[..NEEDLE.len() - 1]);
                let parts = body.chunks(size).map(<[u8]>::to_vec).collect();
                let (out, err) = guarded(parts, stall, &[NEEDLE]).await;
                assert!(err.is_none(), "{err:?}");
                assert!(out == body, "chunks of {size}: the response changed");
            }
        }
    }

    #[test]
    fn connection_headers_give_way_to_close_and_swaps_follow() {
        let plan = Plan {
            method: "GET".into(),
            target: "/".into(),
            version: "HTTP/1.1".into(),
            headers: vec![
                ("Host".into(), "a.example".into()),
                ("Connection".into(), "keep-alive, X-Drop".into()),
                ("X-Drop".into(), "1".into()),
                ("x-api-key".into(), "P".into()),
            ],
            body: Body::None,
            head_len: 0,
            swaps: vec![Swap {
                binding: 0,
                header: 3,
            }],
        };
        let p = closing(plan);
        let names: Vec<&str> = p.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Host", "x-api-key", "Connection"]);
        assert_eq!(p.headers[2].1, "close");
        assert_eq!(p.swaps[0].header, 1);
    }

    /// CLOSED (an attacker's review). Headers dropped before the swap's
    /// header (the proxy-only ones in the judge, the hop-by-hop ones and
    /// those `Connection` names here) renumber the swap twice: the secret
    /// still lands on the bound header and on no other, whichever order
    /// and case the client picks.
    #[test]
    fn the_secret_lands_on_the_bound_header_after_both_renumberings() {
        use std::path::PathBuf;
        use vibe_policy::egress::credential::Inject;
        const P: &str = "sk-ant-PLACEHOLDERaaaaaaaaaaaaaaaa";
        let bindings = vec![Binding {
            name: "a".into(),
            hosts: vec!["api.example".into()],
            inject: Inject::Header {
                name: "x-api-key".into(),
                scheme: None,
            },
            source: PathBuf::from("/s"),
            placeholder: P.into(),
        }];
        let heads = [
            format!("GET / HTTP/1.1\r\nProxy-Authorization: x\r\nHost: api.example\r\nConnection: keep-alive, X-Drop\r\nKeep-Alive: 5\r\nX-Drop: 1\r\nTE: trailers\r\nx-api-key: {P}\r\nX-After: y\r\n\r\n"),
            format!("GET / HTTP/1.1\r\nHost: api.example\r\nX-API-KEY: {P}\r\nproxy-connection: keep-alive\r\nconnection: x-before\r\nX-After: y\r\n\r\n"),
            format!("GET / HTTP/1.1\r\nX-Before: z\r\nProxy-Connection: x\r\nHost: api.example\r\nConnection: X-Before\r\nX-API-Key: {P}\r\n\r\n"),
        ];
        for head in &heads {
            let plan = inject::judge(head.as_bytes(), 8192, "api.example", 443, &bindings)
                .unwrap()
                .unwrap();
            let out = closing(plan)
                .render(&bindings, &["SECRET".to_string()])
                .head;
            let out = String::from_utf8(out).unwrap();
            let with: Vec<&str> = out.lines().filter(|l| l.contains("SECRET")).collect();
            assert_eq!(with.len(), 1, "{out}");
            assert!(
                with[0].to_ascii_lowercase().starts_with("x-api-key: "),
                "{out}"
            );
            assert!(!out.contains(P), "{out}");
        }
    }

    #[test]
    fn a_secret_file_must_be_roots_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s");
        std::fs::write(&f, "sk-1\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_secret(&f).unwrap_err();
        if nix::unistd::geteuid().is_root() {
            assert!(e.contains("mode 0644"), "{e}");
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
            assert_eq!(read_secret(&f).unwrap(), "sk-1");
        }
        // A symlink is followed only when it is root's (fsio judges the
        // target's directories too); anyone else's is refused.
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        if nix::unistd::geteuid().is_root() {
            assert_eq!(read_secret(&link).unwrap(), "sk-1");
            nix::unistd::fchownat(
                None,
                &link,
                Some(nix::unistd::Uid::from_raw(65534)),
                None,
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .unwrap();
        }
        assert!(read_secret(&link).is_err());
        assert!(read_secret(dir.path()).is_err());
        assert!(read_secret(&dir.path().join("missing"))
            .unwrap_err()
            .contains("cannot open"));
    }

    /// The daemon takes no longer secret than `create` shaped a placeholder
    /// for: a file grown past the limit after create fails the request.
    #[test]
    fn a_secret_file_longer_than_create_reads_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        if !nix::unistd::geteuid().is_root() {
            panic!("needs root: secret files must be root's");
        }
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s");
        let max = inject::MAX_SECRET_FILE as usize;
        std::fs::write(&f, "k".repeat(max)).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_secret(&f).unwrap().len(), max);
        std::fs::write(&f, "k".repeat(max + 1)).unwrap();
        let e = read_secret(&f).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
    }
}
