//! A credential bound to a container: what the egress daemon needs to swap
//! the container's placeholder for the real secret, on requests to the
//! credential's own hosts only. It travels in the daemon's register request
//! and in its records; it never carries the secret itself, only where to
//! read it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where the secret goes in a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Inject {
    /// The header `name` (lower case) carries the placeholder, after
    /// `scheme` and one space when a scheme is set (`Bearer <token>`).
    Header {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scheme: Option<String>,
    },
    /// `Authorization: Basic base64(user:placeholder)`, with exactly this
    /// user: decoded strictly and re-encoded with the real secret.
    Basic { user: String },
}

/// One credential of one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// The policy's name for it, as logged.
    pub name: String,
    /// The exact host names (lower case) the secret may be sent to.
    pub hosts: Vec<String>,
    pub inject: Inject,
    /// The root-only file holding the secret, read per request.
    pub source: PathBuf,
    /// The value the container holds instead of the secret: random per
    /// container.
    pub placeholder: String,
}
