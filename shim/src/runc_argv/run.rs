//! `runc run`: its flags as urfave/cli declares them.

use super::go_flag::{boolean, int, value, FlagDef, HELP};

pub const RUN_FLAGS: &[FlagDef] = &[
    value(&["bundle", "b"]),
    value(&["console-socket"]),
    value(&["pidfd-socket"]),
    boolean(&["detach", "d"]),
    boolean(&["keep"]),
    value(&["pid-file"]),
    boolean(&["no-subreaper"]),
    boolean(&["no-pivot"]),
    boolean(&["no-new-keyring"]),
    int(&["preserve-fds"]),
    HELP,
];
