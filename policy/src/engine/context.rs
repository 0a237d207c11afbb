//! What a rule sees and what marks vibe-shim's own hooks: the floor the
//! rules stand on, below the chains that run them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use crate::config::Policy;
use crate::decision::{Denial, Record};
use crate::host::HostView;

/// The argument that marks vibe-shim's own hook entry in `hooks.createRuntime`.
pub const NETWORK_HOOK_MARKER: &str = "vibe-shim-network-hook";
/// The argument that marks vibe-shim's own hook entry in `hooks.createContainer`
/// (the tmpfs modes, [`crate::rules::tmpfs_modes`]).
pub const TMPFS_MODES_HOOK_MARKER: &str = "vibe-shim-tmpfs-modes-hook";
/// The argument that marks vibe-shim's own TCP memory hook in
/// `hooks.createRuntime` ([`crate::rules::resources::apply_hook`]).
pub const KERNEL_TCP_HOOK_MARKER: &str = "vibe-shim-kernel-tcp-hook";

/// What a create-time rewrite needs beyond the spec and the policy.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CreateContext {
    /// The runc container id (for Docker, the container's full id).
    pub container_id: String,
    /// The hook entry to add (`{"path", "args", "env", "timeout"}`); `None`
    /// only in tests and `policy explain`.
    pub network_hook: Option<Value>,
    /// The real runtime vibe-shim will exec; judged by the network rule.
    pub runtime_path: PathBuf,
    /// The engine's bundle directory as given (`--bundle`, or the working
    /// directory), absolute. A relative `root.path` is relative to it.
    pub bundle: PathBuf,
    /// runc's `--root`, absolute and clean (`/run/runc` when not given).
    pub runc_root: PathBuf,
    /// runc's `--systemd-cgroup`: which reading of `cgroupsPath` runc uses.
    pub systemd_cgroup: bool,
    /// The container's credentials (mode "proxy"), placeholders made: see
    /// [`crate::rules::credentials`]. Not serialised: the placeholders stay
    /// out of every record.
    #[serde(skip)]
    pub credentials: Vec<crate::egress::credential::Binding>,
    /// The host path of the container's trust bundle file (bound read-only
    /// at [`crate::config::TRUST_BUNDLE_PATH`]); used only with credentials.
    pub trust_bundle: Option<PathBuf>,
    /// The image's home directories by uid, from `/etc/passwd` in the
    /// container's rootfs (read by the shim inside the rootfs only, see
    /// [`crate::lang::passwd`]); empty when it could not be read. The home
    /// rule looks up the process's final uid here.
    pub image_homes: BTreeMap<u32, String>,
    /// The host path of the container's notice file (bound read-only at
    /// [`crate::config::NOTICE_PATH`]); `None` in tests and `policy explain`.
    pub notice: Option<PathBuf>,
    /// The container's private id block (`[userns] mode = "private"`),
    /// allocated by the shim; `None` otherwise.
    pub userns: Option<IdBlock>,
    /// Where the shim pins the user namespace it makes for that block, owned
    /// by the block's base uid, for runc to join.
    pub userns_pin: Option<PathBuf>,
}

/// A private block: the host uid and gid that container id 0 maps to, and
/// the next 65,535 ids after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IdBlock {
    pub uid: u32,
    pub gid: u32,
}

/// Everything a rule may look at.
pub struct RuleContext<'a> {
    pub policy: &'a Policy,
    pub host: &'a dyn HostView,
    /// Set for create/run/restore; `None` for exec.
    pub create: Option<&'a CreateContext>,
    /// Prefix for `Change::field`: `/process` inside a spec, `` for an exec process.
    pub process_field: &'a str,
}

impl<'a> RuleContext<'a> {
    /// The context of a document that is not a whole spec (an exec process,
    /// an update's resources): no create facts, fields named from the root.
    pub fn standalone(policy: &'a Policy, host: &'a dyn HostView) -> RuleContext<'a> {
        RuleContext {
            policy,
            host,
            create: None,
            process_field: "",
        }
    }
}

/// A rule over the whole spec.
pub type SpecRule = fn(&mut Value, &RuleContext, &mut Record) -> Result<(), Denial>;
/// A rule over one process object (the spec's `process`, or an exec's process.json).
pub type ProcessRule = fn(&mut Value, &RuleContext, &mut Record) -> Result<(), Denial>;
