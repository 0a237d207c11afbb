//! `runc checkpoint`: its flags as urfave/cli declares them, and the
//! values vibe-shim reads.

use std::ffi::OsString;

use super::go_flag::{boolean, int, slice, value, FlagDef, HELP};
use super::{first_positional, flag_bool, flag_value, Item};

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

/// `checkpoint` as read once: the items (for the rewritten paths) and the
/// host paths and network flags that are judged.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointArgs {
    pub items: Vec<Item>,
    pub id: OsString,
    /// The last `--image-path`, `--work-path`, `--parent-path`, when not empty.
    pub image_path: Option<OsString>,
    pub work_path: Option<OsString>,
    pub parent_path: Option<OsString>,
    /// A non-empty `--page-server`.
    pub page_server: bool,
    /// `--lazy-pages` given and true.
    pub lazy_pages: bool,
}

impl CheckpointArgs {
    pub fn from_items(items: Vec<Item>) -> CheckpointArgs {
        let path = |flag| flag_value(&items, flag).filter(|v| !v.is_empty()).cloned();
        CheckpointArgs {
            id: first_positional(&items).cloned().unwrap_or_default(),
            image_path: path("image-path"),
            work_path: path("work-path"),
            parent_path: path("parent-path"),
            page_server: path("page-server").is_some(),
            lazy_pages: flag_bool(&items, "lazy-pages") == Some(true),
            items,
        }
    }
}
