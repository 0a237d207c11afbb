//! The egress proxy: `vibe-shim egress`, one root daemon per host,
//! listening inside each mode-"proxy" container's own loopback, so a
//! container with no route out still reaches the names its policy allows.
//!
//! - `proxy`: one container's listener: parse, judge, dial, log; `ca`: the
//!   per-container CA its credential hosts are terminated with.
//! - `daemon`: the daemon side (control socket, netns listeners, sweep,
//!   re-adoption); `client`: what the hook and the shim ask it; `control`:
//!   the framing both share.

pub mod ca;
pub mod client;
pub mod control;
pub mod daemon;
pub mod hostnets;
pub mod netns;
pub mod proxy;
pub mod records;
