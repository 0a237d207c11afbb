//! `runc create` (and `run`, `restore`, which the same action judges):
//! its flags as urfave/cli declares them, and the values vibe-shim reads.

use std::ffi::OsString;
use std::path::PathBuf;

use super::go_flag::{boolean, int, value, FlagDef, HELP};
use super::{first_positional, flag_bool, flag_value, Item};

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

/// `create`, `run` or `restore` as read once: the items (for the edits)
/// and what the action judges.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateArgs {
    pub items: Vec<Item>,
    pub id: OsString,
    /// `--bundle`, absolute; runc's default is the current directory.
    pub bundle: PathBuf,
    /// The last `--pid-file`, when not empty.
    pub pid_file: Option<OsString>,
    /// `--no-pivot` given and true.
    pub no_pivot: bool,
}

impl CreateArgs {
    pub fn from_items(items: Vec<Item>) -> CreateArgs {
        let bundle = flag_value(&items, "bundle")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        CreateArgs {
            id: first_positional(&items).cloned().unwrap_or_default(),
            bundle: std::path::absolute(&bundle).unwrap_or(bundle),
            pid_file: flag_value(&items, "pid-file")
                .filter(|v| !v.is_empty())
                .cloned(),
            no_pivot: flag_bool(&items, "no-pivot") == Some(true),
            items,
        }
    }
}
