//! `runc create`: its flags as urfave/cli declares them.

use super::go_flag::{boolean, int, value, FlagDef, HELP};

pub const CREATE_FLAGS: &[FlagDef] = &[
    value(&["bundle", "b"]),
    value(&["console-socket"]),
    value(&["pidfd-socket"]),
    value(&["pid-file"]),
    boolean(&["no-pivot"]),
    boolean(&["no-new-keyring"]),
    int(&["preserve-fds"]),
    HELP,
];
