//! urfave/cli v1.22's `reorderArgs`, in the two forms runc's pins use.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use super::go_flag::{lookup, FlagDef};

/// Which urfave/cli v1.22 `reorderArgs` to run.
#[derive(Debug, Clone, Copy)]
pub(super) enum Reorder {
    /// v1.22.0-1 (runc 1.1's pin): every `-x` moves, with one value after it.
    V1_22_1,
    /// v1.22.6+ (runc 1.2, 1.3): only the verb's own flags move, with the
    /// next non-flag (`-` and `--` included) as a possible value.
    V1_22_6,
}

/// urfave/cli's `argIsFlag` (v1.22.2+).
/// `-` and `--` are never flags (`--` strips to an empty name).
fn arg_is_flag(table: &[FlagDef], arg: &[u8]) -> bool {
    if arg == b"-" || !arg.starts_with(b"-") {
        return false;
    }
    let mut name = arg.strip_prefix(b"--").unwrap_or(arg);
    name = name.strip_prefix(b"-").unwrap_or(name);
    let name = name.split(|&b| b == b'=').next().unwrap_or(name);
    lookup(table, name).is_some()
}

pub(super) fn reorder<'a>(
    args: &'a [OsString],
    table: &[FlagDef],
    version: Reorder,
) -> Vec<(usize, &'a OsStr)> {
    let tokens: Vec<(usize, &OsStr)> = args
        .iter()
        .enumerate()
        .map(|(i, a)| (i, a.as_os_str()))
        .collect();
    let mut moved = Vec::new();
    let mut rest = Vec::new();
    let mut may_be_value = false;
    for (pos, &(i, arg)) in tokens.iter().enumerate() {
        let bytes = arg.as_bytes();
        let has_eq = bytes.contains(&b'=');
        match version {
            Reorder::V1_22_1 => {
                if bytes == b"--" {
                    rest.extend_from_slice(&tokens[pos..]);
                    break;
                }
                if may_be_value && !bytes.starts_with(b"-") {
                    may_be_value = false;
                    moved.push((i, arg));
                    continue;
                }
                may_be_value = false;
                if bytes != b"-" && bytes.starts_with(b"-") {
                    moved.push((i, arg));
                    may_be_value = !has_eq;
                } else {
                    rest.push((i, arg));
                }
            }
            Reorder::V1_22_6 => {
                if may_be_value && !arg_is_flag(table, bytes) {
                    may_be_value = false;
                    moved.push((i, arg));
                } else if bytes == b"--" {
                    rest.insert(0, (i, arg));
                    rest.extend_from_slice(&tokens[pos + 1..]);
                    break;
                } else if arg_is_flag(table, bytes) {
                    moved.push((i, arg));
                    may_be_value = !has_eq;
                } else {
                    rest.push((i, arg));
                }
            }
        }
    }
    moved.extend(rest);
    moved
}
