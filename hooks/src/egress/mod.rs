//! The egress proxy (issue 12): `vibe-shim egress`, one root daemon per
//! host, listening inside each mode-"proxy" container's own loopback.
//!
//! - `proxy`: one container's listener: parse, judge, dial, log.
//! - the daemon side (control socket, netns listeners, sweep, re-adoption)
//!   lives beside it.

pub mod control;
pub mod daemon;
pub mod hostnets;
pub mod netns;
pub mod proxy;
pub mod records;
