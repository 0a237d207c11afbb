//! `runc delete`: its flags as urfave/cli declares them (read only to
//! know whether runc will remove the container; the line passes through).

use super::go_flag::{boolean, FlagDef};

/// runc's `delete` flags.
pub const DELETE_FLAGS: &[FlagDef] = &[boolean(&["force", "f"])];
