//! The network policy's pure halves: what the nftables wall holds
//! ([`ruleset`]) and the addresses that are never "the internet"
//! ([`denyset`]), which both the wall and the egress proxy refuse. The
//! hooks crate does the netns I/O and asks these modules what to install.

pub mod denyset;
pub mod ruleset;

pub use denyset::DenySet;
