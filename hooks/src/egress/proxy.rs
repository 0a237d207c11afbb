//! One container's proxy listener. Contract with the daemon: the daemon
//! binds the listener inside the container's network namespace and runs
//! [`Proxy::serve`] on it; dropping that future closes the listener and
//! every connection it accepted.

use std::path::PathBuf;
use std::sync::Arc;

use vibe_policy::config::NetworkSection;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot open the egress log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Host-wide proxy settings (the daemon's, not a container's).
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// JSON lines, one per connection and per denial.
    pub log_path: PathBuf,
}

/// One registered container: its id and the `[network]` section of the
/// policy it was created under.
#[derive(Debug, Clone)]
pub struct Container {
    pub id: String,
    pub network: NetworkSection,
}

/// The state shared by every listener.
#[derive(Debug)]
pub struct Proxy {
    settings: ProxySettings,
}

impl Proxy {
    pub fn new(settings: ProxySettings) -> Result<Arc<Proxy>, ProxyError> {
        Ok(Arc::new(Proxy { settings }))
    }

    pub fn settings(&self) -> &ProxySettings {
        &self.settings
    }

    /// Serves `listener` for `container` until dropped. Placeholder until
    /// the proxy lands: every connection is closed unanswered (fail closed).
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        container: Arc<Container>,
    ) {
        let _ = &container;
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    }
}
