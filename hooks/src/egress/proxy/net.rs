//! How the proxy resolves and dials: the system's resolver and sockets,
//! or a test's stand-ins (no /etc/hosts edits, no routes needed).

use std::io;
use std::net::SocketAddr;

use futures::future::BoxFuture;
use tokio::net::TcpStream;

/// Names to addresses. The system one is getaddrinfo, so /etc/hosts counts.
pub trait Resolve: Send + Sync + 'static {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>>;
}

/// Opens the upstream connection to an already vetted address.
pub trait Dial: Send + Sync + 'static {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>>;
}

#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct SystemDialer;

impl Dial for SystemDialer {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        Box::pin(TcpStream::connect(addr))
    }
}
