//! `runc start`: its flags as urfave/cli declares them, and the id.

use std::ffi::OsString;

use super::go_flag::{FlagDef, HELP};
use super::{first_positional, Item};

/// runc `start` has no flags of its own.
pub const START_FLAGS: &[FlagDef] = &[HELP];

/// `start` as read once: the container id is all there is.
#[derive(Debug, Clone, PartialEq)]
pub struct StartArgs {
    pub id: OsString,
}

impl StartArgs {
    pub fn from_items(items: &[Item]) -> StartArgs {
        StartArgs {
            id: first_positional(items).cloned().unwrap_or_default(),
        }
    }
}
