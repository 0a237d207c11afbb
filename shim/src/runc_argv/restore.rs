//! `runc restore`: its flags as urfave/cli declares them.

use super::go_flag::{boolean, slice, value, FlagDef, HELP};

pub const RESTORE_FLAGS: &[FlagDef] = &[
    value(&["console-socket"]),
    value(&["image-path"]),
    value(&["work-path"]),
    boolean(&["tcp-established"]),
    boolean(&["ext-unix-sk"]),
    boolean(&["shell-job"]),
    boolean(&["file-locks"]),
    value(&["manage-cgroups-mode"]),
    value(&["bundle", "b"]),
    boolean(&["detach", "d"]),
    value(&["pid-file"]),
    boolean(&["no-subreaper"]),
    boolean(&["no-pivot"]),
    slice(&["empty-ns"]),
    boolean(&["auto-dedup"]),
    boolean(&["lazy-pages"]),
    value(&["lsm-profile"]),
    value(&["lsm-mount-context"]),
    HELP,
];
