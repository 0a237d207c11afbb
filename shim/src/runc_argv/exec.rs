//! `runc exec`: its flags as urfave/cli declares them, and the values
//! vibe-shim reads (those `getProcess` builds the process from, typed).

use std::ffi::OsString;

use super::go_flag::{boolean, int, int64_slice, slice, value, FlagDef, HELP};
use super::{flag_bool, flag_value, flag_values, parse_go_int64, positionals, Item};

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

/// `exec` as read once: the items (for the flags kept as given) and the
/// values that build or place the process.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecArgs {
    pub items: Vec<Item>,
    pub id: OsString,
    /// The operands after the id: the process's argv.
    pub command: Vec<OsString>,
    /// The last `--process`, when not empty: runc then ignores the flags
    /// that build a process.
    pub process: Option<OsString>,
    /// The last `--pid-file`, when not empty.
    pub pid_file: Option<OsString>,
    pub preserve_fds: Option<OsString>,
    /// Every `--cgroup`, in order.
    pub cgroups: Vec<OsString>,
    pub cwd: Option<OsString>,
    pub apparmor: Option<OsString>,
    pub process_label: Option<OsString>,
    pub user: Option<OsString>,
    pub caps: Vec<OsString>,
    pub env: Vec<OsString>,
    pub tty: bool,
    /// `IsSet("no-new-privs")`: only then does it override the spec.
    pub no_new_privs: Option<bool>,
    pub additional_gids: Vec<i64>,
}

impl ExecArgs {
    pub fn from_items(items: Vec<Item>) -> ExecArgs {
        let last = |flag| flag_value(&items, flag).cloned();
        let all = |flag| flag_values(&items, flag).into_iter().cloned().collect();
        let operands = positionals(&items);
        ExecArgs {
            id: operands.first().map(|id| (*id).clone()).unwrap_or_default(),
            command: operands.iter().skip(1).map(|v| (*v).clone()).collect(),
            process: last("process").filter(|p| !p.is_empty()),
            pid_file: last("pid-file").filter(|v| !v.is_empty()),
            preserve_fds: last("preserve-fds"),
            cgroups: all("cgroup"),
            cwd: last("cwd"),
            apparmor: last("apparmor"),
            process_label: last("process-label"),
            user: last("user"),
            caps: all("cap"),
            env: all("env"),
            tty: flag_bool(&items, "tty").unwrap_or(false),
            no_new_privs: flag_bool(&items, "no-new-privs"),
            // Classified already: every value parses (strconv.ParseInt base 10).
            additional_gids: flag_values(&items, "additional-gids")
                .into_iter()
                .filter_map(|v| parse_go_int64(v))
                .collect(),
            items,
        }
    }
}
