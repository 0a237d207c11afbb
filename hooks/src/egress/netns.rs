//! Listeners bound inside a container's network namespace. A socket belongs
//! to the namespace it was created in for its whole life, so a thread that
//! entered the namespace creates and binds them, then ends; the daemon's
//! tokio workers, which dial out, never leave the host's namespace.

use std::fs::File;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::unix::fs::MetadataExt;

#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("not a network namespace, or cannot enter it: {0}")]
    Enter(nix::Error),
    #[error("cannot bind {addr} in the container's network namespace: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot set {addr} non-blocking: {source}")]
    NonBlocking {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("binding thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("binding thread: panicked")]
    Panicked,
    #[error("the namespace is the daemon's own (the host's): refusing to listen there")]
    HostNamespace,
    #[error("cannot inspect the namespace: {0}")]
    Stat(std::io::Error),
}

/// The proxy's listeners in one container namespace.
#[derive(Debug)]
pub struct Bound {
    /// `127.0.0.1:port`, then `[::1]:port` when the namespace has ::1.
    pub listeners: Vec<TcpListener>,
    /// Why a family was left out (for the daemon's log).
    pub notes: Vec<String>,
}

/// (device, inode) of a namespace file: equal means the same namespace.
pub fn ns_id(file: &File) -> Result<(u64, u64), NetnsError> {
    let meta = file.metadata().map_err(NetnsError::Stat)?;
    Ok((meta.dev(), meta.ino()))
}

/// Whether `netns` is the namespace this process (the daemon) runs in, or
/// pid 1's: a listener there would be on the host's loopback.
pub fn is_host_namespace(netns: &File) -> Result<bool, NetnsError> {
    let target = ns_id(netns)?;
    let own = File::open("/proc/thread-self/ns/net").map_err(NetnsError::Stat)?;
    if ns_id(&own)? == target {
        return Ok(true);
    }
    Ok(File::open("/proc/1/ns/net")
        .ok()
        .and_then(|init| ns_id(&init).ok())
        == Some(target))
}

/// Binds `127.0.0.1:port` (required) and `[::1]:port` (when ::1 exists
/// there) inside `netns`, non-blocking, ready for tokio.
pub fn bind_loopback(netns: File, port: u16) -> Result<Bound, NetnsError> {
    in_namespace(netns, move || bind_here(port))
}

/// Transparent egress's sockets in one namespace: the transparent TCP
/// listeners and the DNS answerer's UDP and TCP sockets, each on 127.0.0.1
/// and (when the namespace has it) ::1.
#[derive(Debug)]
pub struct TransparentBound {
    pub listeners: Vec<TcpListener>,
    pub dns_udp: Vec<UdpSocket>,
    pub dns_tcp: Vec<TcpListener>,
    pub notes: Vec<String>,
}

/// Binds [`TransparentBound`] inside `netns`: `port` for the listener,
/// `dns_port` for the answerer.
pub fn bind_transparent(
    netns: File,
    port: u16,
    dns_port: u16,
) -> Result<TransparentBound, NetnsError> {
    in_namespace(netns, move || {
        let tcp = bind_here(port)?;
        let (dns_udp, udp_notes) = both_families(dns_port, udp)?;
        let (dns_tcp, _) = both_families(dns_port, listen)?;
        let mut notes = tcp.notes;
        notes.extend(udp_notes.into_iter().map(|n| format!("DNS answerer: {n}")));
        Ok(TransparentBound {
            listeners: tcp.listeners,
            dns_udp,
            dns_tcp,
            notes,
        })
    })
}

/// Runs `bind` on a thread that entered `netns` (never the host's).
fn in_namespace<T: Send + 'static>(
    netns: File,
    bind: impl FnOnce() -> Result<T, NetnsError> + Send + 'static,
) -> Result<T, NetnsError> {
    if is_host_namespace(&netns)? {
        return Err(NetnsError::HostNamespace);
    }
    let worker = std::thread::Builder::new()
        .name("vibe-egress-ns".into())
        .spawn(move || {
            nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(NetnsError::Enter)?;
            drop(netns);
            bind()
        })
        .map_err(NetnsError::Thread)?;
    // The thread ends here: none of ours stays in a container's namespace.
    worker.join().map_err(|_| NetnsError::Panicked)?
}

/// The binding itself, in the calling thread's namespace.
fn bind_here(port: u16) -> Result<Bound, NetnsError> {
    let (listeners, notes) = both_families(port, listen)?;
    Ok(Bound { listeners, notes })
}

/// `open` on `127.0.0.1:port` (required), then on `[::1]:port` unless the
/// namespace has no ::1.
fn both_families<T>(
    port: u16,
    open: impl Fn(SocketAddr) -> Result<T, NetnsError>,
) -> Result<(Vec<T>, Vec<String>), NetnsError> {
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    let mut sockets = vec![open(v4)?];
    let mut notes = Vec::new();
    match open(v6) {
        Ok(socket) => sockets.push(socket),
        // IPv6 disabled in the namespace (Docker's default): no ::1 to serve.
        Err(NetnsError::Bind { source, .. })
            if matches!(
                source.raw_os_error(),
                Some(nix::libc::EADDRNOTAVAIL) | Some(nix::libc::EAFNOSUPPORT)
            ) =>
        {
            notes.push(format!("no ::1 in the namespace ({source}); IPv4 only"));
        }
        Err(e) => return Err(e),
    }
    Ok((sockets, notes))
}

fn udp(addr: SocketAddr) -> Result<UdpSocket, NetnsError> {
    let socket = UdpSocket::bind(addr).map_err(|source| NetnsError::Bind { addr, source })?;
    socket
        .set_nonblocking(true)
        .map_err(|source| NetnsError::NonBlocking { addr, source })?;
    Ok(socket)
}

fn listen(addr: SocketAddr) -> Result<TcpListener, NetnsError> {
    // std sets SO_REUSEADDR and close-on-exec: a restarted daemon can bind
    // again over connections left in TIME_WAIT.
    let listener = TcpListener::bind(addr).map_err(|source| NetnsError::Bind { addr, source })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| NetnsError::NonBlocking { addr, source })?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_namespace_is_refused() {
        let own = File::open("/proc/self/ns/net").unwrap();
        assert!(matches!(
            bind_loopback(own, 3128),
            Err(NetnsError::HostNamespace)
        ));
    }

    #[test]
    fn a_file_that_is_not_a_namespace_is_refused() {
        let not_ns = File::open("/proc/self/stat").unwrap();
        // As an unprivileged user setns fails too (EPERM): refused either way.
        assert!(bind_loopback(not_ns, 3128).is_err());
    }
}
