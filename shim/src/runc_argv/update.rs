//! `runc update`: its flags as urfave/cli declares them.

use super::go_flag::{int, value, FlagDef, HELP};

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
