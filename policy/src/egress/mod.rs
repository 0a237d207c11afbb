//! The egress proxy's decisions, pure: the daemon in `hooks`
//! does the I/O and asks these modules what to do.
//!
//! - [`hosts`]: `[network] hosts` patterns and the name/port judgement.
//! - [`request`]: the proxy request head (CONNECT and absolute-form).
//! - [`sni`]: the TLS ClientHello's server name.
//! - [`decision`]: the record of one judgement, as logged and refused.
//! - [`credential`]: a credential bound to a container, as the daemon gets it.
//! - [`dns`]: transparent egress's DNS answerer and its fake addresses.
//! - [`transparent`]: the name a redirected connection's first bytes ask for.
//! - [`inject`]: the judge of each request on a terminated credential connection.

pub mod credential;
pub mod decision;
pub mod dns;
pub(crate) mod hosts;
pub mod inject;
pub mod request;
pub mod sni;
pub mod transparent;

pub use crate::lang::hosts::{Host, HostPattern};
pub use decision::{Decision, Verdict};
pub use hosts::HostList;
