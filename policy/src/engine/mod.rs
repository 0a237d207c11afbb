//! The engine, in two floors. [`context`] (what a rule sees, the hook
//! markers) and [`profile`] (which policy file applies) sit below the rules;
//! the chains that run the rules, the input check and the [`invariants`]
//! oracle sit above them.

mod chains;
pub mod context;
pub mod invariants;
pub mod profile;
mod validate;

pub use chains::{
    enforce_create, enforce_exec, enforce_process, enforce_update, Rewrite, PROCESS_RULES,
    SPEC_RULES,
};
pub use context::{
    CreateContext, IdBlock, ProcessRule, RuleContext, SpecRule, KERNEL_TCP_HOOK_MARKER,
    NETWORK_HOOK_MARKER, TMPFS_MODES_HOOK_MARKER,
};
