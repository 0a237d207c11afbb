//! `runc start`: its flags as urfave/cli declares them.

use super::go_flag::{FlagDef, HELP};

/// runc `start` has no flags of its own.
pub const START_FLAGS: &[FlagDef] = &[HELP];
