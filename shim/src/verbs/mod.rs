//! vibe-shim's own verbs (hook, policy, egress, install, lockdown).

pub mod egress;
pub mod hook;
pub mod install;
pub mod kernel_tcp_hook;
pub mod lockdown;
pub mod policy_cmd;
pub mod tmpfs_hook;
