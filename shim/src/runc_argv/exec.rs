//! `runc exec`: its flags as urfave/cli declares them.

use super::go_flag::{boolean, int, int64_slice, slice, value, FlagDef, HELP};

pub const EXEC_FLAGS: &[FlagDef] = &[
    value(&["console-socket"]),
    value(&["pidfd-socket"]),
    value(&["cwd"]),
    slice(&["env", "e"]),
    boolean(&["tty", "t"]),
    value(&["user", "u"]),
    int64_slice(&["additional-gids", "g"]),
    value(&["process", "p"]),
    boolean(&["detach", "d"]),
    value(&["pid-file"]),
    value(&["process-label"]),
    value(&["apparmor"]),
    boolean(&["no-new-privs"]),
    slice(&["cap", "c"]),
    int(&["preserve-fds"]),
    slice(&["cgroup"]),
    boolean(&["ignore-paused"]),
    HELP,
];
