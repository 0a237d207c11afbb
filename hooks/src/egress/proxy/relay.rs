//! Copies bytes both ways with an idle timeout, counting them. The
//! client-to-upstream direction can be limited to one request body.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use vibe_policy::egress::request::{Body, Chunked};

const BUF: usize = 64 * 1024;

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
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
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
    let up = async {
        if done || limit.done() {
            return Ok(());
        }
        pump_up(&mut cr, &mut uw, &mut limit, &counts.up, &activity).await
    };
    let down = pump(&mut ur, &mut cw, &counts.down, &activity);
    let watch = async {
        loop {
            let last = Duration::from_millis(activity.last_ms.load(Ordering::Relaxed));
            let quiet = activity.start.elapsed().saturating_sub(last);
            if quiet >= idle {
                return;
            }
            tokio::time::sleep(idle - quiet).await;
        }
    };
    tokio::select! {
        r = async { tokio::try_join!(up, down) } => r.map(|_| ()),
        _ = watch => Err(io::Error::new(io::ErrorKind::TimedOut, "idle timeout")),
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
