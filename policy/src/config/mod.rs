//! The administrator's policy file (`/etc/vibe-shim/config.toml`).
//!
//! Parsing is strict: an unknown key, a wrong type or an invalid value is an
//! error that names the file and, where the TOML parser knows it, the line.
//! Reading the file is the caller's job; this module only parses text.

//!
//! - [`sections`]: the file's tables (`[runtime]`, `[filesystem]`, ...) and
//!   their defaults.
//! - [`scalars`]: the values with their own syntax (sizes, modes, allow
//!   rules) and the name normalisers.
//! - [`validate`]: the checks that run after parsing.
//! - [`merge`]: `policy explain`'s layered view of which file set a key.
//! - [`profiles`]: `[[profiles]]`, other policy files for engine-made bundles.

pub mod merge;
pub mod profiles;
mod scalars;
mod sections;
pub(crate) mod validate;

pub use scalars::*;
pub use sections::*;
pub use validate::{userns_range, USERNS_BLOCK};

#[cfg(test)]
mod tests;

/// Where the shim looks for its policy when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/vibe-shim/config.toml";
/// Where audit lines go unless `[audit] path` says otherwise.
pub const DEFAULT_AUDIT_PATH: &str = "/var/log/vibe-shim/audit.jsonl";
/// The egress daemon's control socket unless `[network] egress_socket` says
/// otherwise: the hook registers proxied containers with it there.
pub const DEFAULT_EGRESS_SOCKET: &str = "/run/vibe-shim/egress.sock";

/// Capabilities that would let a container undo the policy (network rules,
/// mounts, kernel modules). They cannot be granted by any config.
pub const NEVER_GRANTED_CAPABILITIES: &[&str] = &[
    "CAP_NET_ADMIN",
    "CAP_SYS_ADMIN",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_BPF",
    "CAP_SYS_PTRACE",
];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {key}: {message}")]
    Invalid {
        path: String,
        key: String,
        message: String,
    },
}
