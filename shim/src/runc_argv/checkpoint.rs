//! `runc checkpoint`: its flags as urfave/cli declares them.

use super::go_flag::{boolean, int, slice, value, FlagDef, HELP};

/// runc 1.3 added `tcp-skip-in-flight` and `link-remap` (1.1 and 1.2
/// refuse them); `status-fd` defaults to -1.
pub const CHECKPOINT_FLAGS: &[FlagDef] = &[
    value(&["image-path"]),
    value(&["work-path"]),
    value(&["parent-path"]),
    boolean(&["leave-running"]),
    boolean(&["tcp-established"]),
    boolean(&["tcp-skip-in-flight"]),
    boolean(&["link-remap"]),
    boolean(&["ext-unix-sk"]),
    boolean(&["shell-job"]),
    boolean(&["lazy-pages"]),
    int(&["status-fd"]),
    value(&["page-server"]),
    boolean(&["file-locks"]),
    boolean(&["pre-dump"]),
    value(&["manage-cgroups-mode"]),
    slice(&["empty-ns"]),
    boolean(&["auto-dedup"]),
    HELP,
];
