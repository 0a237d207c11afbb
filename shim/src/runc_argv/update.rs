//! `runc update`: its flags as urfave/cli declares them, and the values
//! vibe-shim reads.

use std::ffi::OsString;

use super::go_flag::{int, value, FlagDef, HELP};
use super::{first_positional, Item};

pub const UPDATE_FLAGS: &[FlagDef] = &[
    value(&["resources", "r"]),
    int(&["blkio-weight"]),
    value(&["cpu-period"]),
    value(&["cpu-quota"]),
    value(&["cpu-burst"]),
    value(&["cpu-share"]),
    value(&["cpu-rt-period"]),
    value(&["cpu-rt-runtime"]),
    value(&["cpuset-cpus"]),
    value(&["cpuset-mems"]),
    value(&["kernel-memory"]),
    value(&["kernel-memory-tcp"]),
    value(&["memory"]),
    value(&["cpu-idle"]),
    value(&["memory-reservation"]),
    value(&["memory-swap"]),
    int(&["pids-limit"]),
    value(&["l3-cache-schema"]),
    value(&["mem-bw-schema"]),
    HELP,
];

/// `update` as read once. Every limit is judged through the items: the
/// action keeps the last of each flag and rewrites it in place.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateArgs {
    pub items: Vec<Item>,
    pub id: OsString,
}

impl UpdateArgs {
    pub fn from_items(items: Vec<Item>) -> UpdateArgs {
        UpdateArgs {
            id: first_positional(&items).cloned().unwrap_or_default(),
            items,
        }
    }
}
