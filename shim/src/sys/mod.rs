//! What touches the host for the enforced verbs: the real [`host::RealHost`]
//! the rules read, the staging of bind sources, vibe-shim's per-container
//! state directory, the claim ledger of engine volumes, the sealed memfds
//! runc reads rewritten JSON from, and the one reader of a file inside a
//! container's rootfs.

pub mod credentials;
pub mod evidence;
pub mod host;
pub mod memfd;
pub mod rootfs;
pub mod stage;
pub mod state_dir;
pub mod userns_blocks;
pub mod userns_pin;
pub mod volume_ledger;
