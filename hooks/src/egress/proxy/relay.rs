//! Copies bytes both ways with an idle timeout, counting them. The
//! client-to-upstream direction can be limited to one request body.
//!
//! A direction that goes through unread (a tunnel's both ways, a plain
//! request's response) moves with splice(2), socket -> pipe -> socket, so
//! its bytes never enter user space ([`Transfer::Splice`]). A bounded request
//! body, and any connection told [`Transfer::Buffer`] (what credential injection
//! will need), goes through a buffer. Without a pipe (out of fds) the
//! buffer serves too. A terminated connection's TLS streams go through
//! [`relay_io`], buffered.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
};
use tokio::net::TcpStream;
use vibe_policy::egress::request::{Body, Chunked};

use super::splice::Pipe;

const BUF: usize = 64 * 1024;

/// How the bytes that go through unread are moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// splice(2) through a pipe per direction: no user-space copy.
    Splice,
    /// Through a buffer in user space (for a path that must see the bytes).
    Buffer,
}

/// How much of the client's stream goes upstream.
#[derive(Debug)]
pub enum UpLimit {
    /// Everything, until the client closes (a tunnel).
    All,
    /// One request body; then the client is no longer read.
    Length(u64),
    Chunked(Chunked),
}

impl From<Body> for UpLimit {
    fn from(b: Body) -> UpLimit {
        match b {
            Body::None => UpLimit::Length(0),
            Body::Length(n) => UpLimit::Length(n),
            Body::Chunked => UpLimit::Chunked(Chunked::default()),
        }
    }
}

impl UpLimit {
    /// How many of `buf` to forward, and whether the body is complete.
    fn take(&mut self, buf: &[u8]) -> io::Result<(usize, bool)> {
        match self {
            UpLimit::All => Ok((buf.len(), false)),
            UpLimit::Length(left) => {
                let n = (buf.len() as u64).min(*left) as usize;
                *left -= n as u64;
                Ok((n, *left == 0))
            }
            UpLimit::Chunked(c) => c
                .feed(buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }

    fn done(&self) -> bool {
        matches!(self, UpLimit::Length(0))
    }
}

#[derive(Debug, Default)]
pub struct Counts {
    pub up: AtomicU64,
    pub down: AtomicU64,
}

struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    /// Returns once no byte moved either way for `idle`.
    async fn quiet_for(&self, idle: Duration) {
        loop {
            let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let quiet = self.start.elapsed().saturating_sub(last);
            if quiet >= idle {
                return;
            }
            tokio::time::sleep(idle - quiet).await;
        }
    }

    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }
}

/// Relays until both sides are done, an error, or `idle` without a byte
/// either way. `pending` (bytes already read from the client) goes first,
/// under `limit`.
pub async fn relay(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    pending: &[u8],
    mut limit: UpLimit,
    idle: Duration,
    counts: &Counts,
    transfer: Transfer,
) -> io::Result<()> {
    let activity = Activity {
        start: Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let (mut cr, mut cw) = client.split();
    let (mut ur, mut uw) = upstream.split();
    let (n, done) = limit.take(pending)?;
    if n > 0 {
        uw.write_all(&pending[..n]).await?;
        counts.up.fetch_add(n as u64, Ordering::Relaxed);
    }
    let kernel = transfer == Transfer::Splice;
    // A pipe each way when splicing; none (the buffer) if none can be had.
    let up_pipe = (kernel && matches!(limit, UpLimit::All))
        .then(Pipe::new)
        .and_then(Result::ok);
    let down_pipe = kernel.then(Pipe::new).and_then(Result::ok);
    let up = async {
        if done || limit.done() {
            return Ok(());
        }
        match &up_pipe {
            Some(pipe) => splice_pump(&mut cr, &mut uw, pipe, &counts.up, &activity).await,
            None => pump_up(&mut cr, &mut uw, &mut limit, &counts.up, &activity).await,
        }
    };
    let down = async {
        match &down_pipe {
            Some(pipe) => splice_pump(&mut ur, &mut cw, pipe, &counts.down, &activity).await,
            None => pump(&mut ur, &mut cw, &counts.down, &activity).await,
        }
    };
    let watch = activity.quiet_for(idle);
    tokio::select! {
        r = async { tokio::try_join!(up, down) } => r.map(|_| ()),
        _ = watch => Err(io::Error::new(io::ErrorKind::TimedOut, "idle timeout")),
    }
}

/// [`relay`] over any streams (a terminated connection's TLS halves):
/// `pending`, then the client's stream under `limit`, up; the upstream's
/// until it closes, down (then the client's write side is shut: TLS's
/// close_notify). Through a buffer: these bytes are decrypted. Down is
/// written from `ur`'s own buffer, as large as it comes (one write to the
/// client's TLS: its records go out in one vector).
#[allow(clippy::too_many_arguments)]
pub async fn relay_io<CR, CW, UR, UW>(
    mut cr: CR,
    mut cw: CW,
    mut ur: UR,
    mut uw: UW,
    pending: &[u8],
    mut limit: UpLimit,
    idle: Duration,
    counts: &Counts,
) -> io::Result<()>
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    UR: AsyncBufRead + Unpin,
    UW: AsyncWrite + Unpin,
{
    let activity = Activity {
        start: Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let (n, done) = limit.take(pending)?;
    if n > 0 {
        uw.write_all(&pending[..n]).await?;
        counts.up.fetch_add(n as u64, Ordering::Relaxed);
    }
    let up = async {
        if !(done || limit.done()) {
            pump_up(&mut cr, &mut uw, &mut limit, &counts.up, &activity).await?;
        }
        uw.flush().await
    };
    let down = pump_buf(&mut ur, &mut cw, &counts.down, &activity);
    let watch = activity.quiet_for(idle);
    tokio::select! {
        r = async { tokio::try_join!(up, down) } => r.map(|_| ()),
        _ = watch => Err(io::Error::new(io::ErrorKind::TimedOut, "idle timeout")),
    }
}

/// [`pump`] from a reader's own buffer.
async fn pump_buf<R, W>(r: &mut R, w: &mut W, count: &AtomicU64, act: &Activity) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            let _ = w.shutdown().await;
            return Ok(());
        }
        let n = buf.len();
        w.write_all(buf).await?;
        r.consume(n);
        count.fetch_add(n as u64, Ordering::Relaxed);
        act.touch();
    }
}

async fn pump<R, W>(r: &mut R, w: &mut W, count: &AtomicU64, act: &Activity) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUF];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(());
        }
        w.write_all(&buf[..n]).await?;
        count.fetch_add(n as u64, Ordering::Relaxed);
        act.touch();
    }
}

/// [`pump`] without the copy: `r`'s socket -> `pipe` -> `w`'s socket,
/// waiting on tokio's readiness (both sockets are non-blocking, and so is
/// the pipe). The pipe is empty whenever the socket is read, so EAGAIN from
/// the read side is the socket's; from the write side, the socket's too.
async fn splice_pump<R, W>(
    r: &mut R,
    w: &mut W,
    pipe: &Pipe,
    count: &AtomicU64,
    act: &Activity,
) -> io::Result<()>
where
    R: AsRef<TcpStream>,
    W: AsRef<TcpStream> + AsyncWrite + Unpin,
{
    use std::os::fd::AsFd;
    use tokio::io::Interest;
    loop {
        let src = r.as_ref();
        src.readable().await?;
        let n = match src.try_io(Interest::READABLE, || pipe.fill(src.as_fd())) {
            Ok(n) => n,
            Err(e) if retry(&e) => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(());
        }
        act.touch();
        let mut left = n;
        while left > 0 {
            let dst = w.as_ref();
            dst.writable().await?;
            match dst.try_io(Interest::WRITABLE, || pipe.drain(dst.as_fd(), left)) {
                // Bytes in the pipe and none taken: never spin on it.
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "splice wrote nothing",
                    ))
                }
                Ok(k) => {
                    left -= k;
                    count.fetch_add(k as u64, Ordering::Relaxed);
                    act.touch();
                }
                Err(e) if retry(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Not ready yet (readiness is cleared by `try_io`), or interrupted.
fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

async fn pump_up<R, W>(
    r: &mut R,
    w: &mut W,
    limit: &mut UpLimit,
    count: &AtomicU64,
    act: &Activity,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if matches!(limit, UpLimit::All) {
        return pump(r, w, count, act).await;
    }
    let mut buf = vec![0u8; BUF];
    loop {
        let got = r.read(&mut buf).await?;
        if got == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "client closed inside the request body",
            ));
        }
        let (n, done) = limit.take(&buf[..got])?;
        w.write_all(&buf[..n]).await?;
        count.fetch_add(n as u64, Ordering::Relaxed);
        act.touch();
        if done {
            // Whatever the client sends after this request is not read.
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// Two connected pairs: (client side, proxy's client end) and
    /// (proxy's upstream end, upstream side).
    async fn pairs() -> ((TcpStream, TcpStream), (TcpStream, TcpStream)) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        let (c, pc) = tokio::join!(TcpStream::connect(a), l.accept());
        let (pu, u) = tokio::join!(TcpStream::connect(a), l.accept());
        ((c.unwrap(), pc.unwrap().0), (pu.unwrap(), u.unwrap().0))
    }

    async fn both_ways(transfer: Transfer) {
        let ((mut c, mut pc), (mut pu, mut u)) = pairs().await;
        let counts = Counts::default();
        let idle = Duration::from_secs(5);
        let relay = relay(
            &mut pc,
            &mut pu,
            b"hi",
            UpLimit::All,
            idle,
            &counts,
            transfer,
        );
        let peers = async {
            // 3 MiB up, then the client half-closes; the upstream still
            // answers after seeing that end of stream, and then closes.
            let up = vec![5u8; 3 << 20];
            c.write_all(&up).await.unwrap();
            c.shutdown().await.unwrap();
            let mut got = Vec::new();
            u.read_to_end(&mut got).await.unwrap();
            assert_eq!(got.len(), 2 + (3 << 20));
            assert_eq!(&got[..3], b"hi\x05");
            u.write_all(&vec![9u8; 5 << 20]).await.unwrap();
            u.shutdown().await.unwrap();
            let mut down = Vec::new();
            c.read_to_end(&mut down).await.unwrap();
            assert_eq!(down.len(), 5 << 20);
            assert!(down.iter().all(|b| *b == 9));
        };
        let (r, ()) = tokio::join!(relay, peers);
        r.unwrap();
        assert_eq!(counts.up.load(Ordering::Relaxed), 2 + (3 << 20));
        assert_eq!(counts.down.load(Ordering::Relaxed), 5 << 20);
    }

    #[tokio::test]
    async fn a_tunnel_relays_both_ways_with_half_close_and_counts() {
        both_ways(Transfer::Splice).await;
        both_ways(Transfer::Buffer).await;
    }

    #[tokio::test]
    async fn a_request_body_is_bounded_and_the_response_spliced() {
        let ((mut c, mut pc), (mut pu, mut u)) = pairs().await;
        let counts = Counts::default();
        let idle = Duration::from_secs(5);
        let relay = relay(
            &mut pc,
            &mut pu,
            b"ab",
            UpLimit::Length(5),
            idle,
            &counts,
            Transfer::Splice,
        );
        let peers = async {
            c.write_all(b"cdeNOT FORWARDED").await.unwrap();
            let mut got = [0u8; 5];
            u.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"abcde");
            u.write_all(b"response").await.unwrap();
            u.shutdown().await.unwrap();
            let mut down = Vec::new();
            c.read_to_end(&mut down).await.unwrap();
            assert_eq!(down, b"response");
        };
        let (r, ()) = tokio::join!(relay, peers);
        r.unwrap();
        assert_eq!(counts.up.load(Ordering::Relaxed), 5);
        assert_eq!(counts.down.load(Ordering::Relaxed), 8);
    }

    #[tokio::test]
    async fn a_quiet_spliced_tunnel_times_out() {
        let ((_c, mut pc), (mut pu, _u)) = pairs().await;
        let counts = Counts::default();
        let idle = Duration::from_millis(200);
        let t = Instant::now();
        let r = relay(
            &mut pc,
            &mut pu,
            b"",
            UpLimit::All,
            idle,
            &counts,
            Transfer::Splice,
        )
        .await;
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
