//! vibe-policy: the pure half of vibe-shim.
//!
//! [`engine`] turns an OCI runtime spec (or an exec process, or an update's
//! resources) plus the administrator's [`config::Policy`] into a rewritten
//! document and the list of [`decision::Change`]s it made, or a
//! [`decision::Refusal`]. It never touches the host: what it must know about
//! the host comes through [`host::HostView`].

pub mod assurance;
pub mod authz;
pub mod config;
pub mod decision;
pub mod egress;
pub mod engine;
pub mod host;
pub mod lang;
pub mod network;
pub mod notice;
pub mod rules;
pub mod runc;

pub use config::{ConfigError, Policy};
pub use decision::{Change, Denial, Record, Refusal};
pub use engine::{
    enforce_create, enforce_process, enforce_update, CreateContext, Rewrite, NETWORK_HOOK_MARKER,
};
pub use engine::{KERNEL_TCP_HOOK_MARKER, TMPFS_MODES_HOOK_MARKER};
#[cfg(any(test, feature = "test-support"))]
pub use host::FakeHost;
pub use host::HostView;
