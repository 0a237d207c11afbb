//! The egress proxy's decisions, pure: the daemon in `hooks`
//! does the I/O and asks these modules what to do.
//!
//! - [`hosts`]: `[network] hosts` patterns and the name/port judgement.
//! - [`request`]: the proxy request head (CONNECT and absolute-form).
//! - [`sni`]: the TLS ClientHello's server name.
//! - [`decision`]: the record of one judgement, as logged and refused.
//! - [`credential`]: a credential bound to a container, as the daemon gets it.
//! - [`inject`]: the judge of each request on a terminated credential connection.

pub mod credential;
pub mod decision;
pub(crate) mod hosts;
pub mod inject;
pub mod request;
pub mod sni;

pub use crate::lang::hosts::{Host, HostPattern};
pub use decision::{Decision, Verdict};
pub use hosts::HostList;
