//! runc's command line, classified exactly as runc classifies it.
//!
//! runc 1.1-1.3 parses argv with urfave/cli v1 over Go's `flag` package:
//!
//! - Globals: Go's `flag` over the whole argv, no reordering. `--f`/`-f`
//!   are the same flag; a value flag takes `=v` or the next token whatever
//!   it looks like; a bool takes only `=v` (strconv.ParseBool); `--` ends the
//!   flags; the first non-flag is the verb; an unknown flag is an error.
//! - A verb's own flags: the same, after urfave/cli's `reorderArgs` moved
//!   flags found after the operands to the front (every verb but `exec` and
//!   `ps`, which set `SkipArgReorder`). `reorderArgs` changed within v1.22:
//!   runc 1.1 pins v1.22.1, 1.2 v1.22.14, 1.3 v1.22.16 (distributions build
//!   with their own), so both readings are run: each one that accepts must
//!   read the same (one that refuses is harmless: that runc refuses).
//!   v1.22.2-5 are left out: runc's go.mod forbids them for a regression
//!   (urfave/cli#1092) that breaks containerd's own `update --resources -`.
//! - `normalizeFlags`: two names of one flag (`-e` and `--env`) is an error;
//!   a plain flag given twice keeps the last value, a slice flag collects.
//!
//! A command line these rules refuse, or that the versions read differently,
//! is refused (see [`classify_verb`]); so is an integer flag value that is
//! not plain decimal (Go reads `010` as octal). Whatever passes is read
//! exactly as runc reads it, and every byte not rewritten reaches runc as
//! given. Tokens stay `OsString`: argv is bytes, not UTF-8.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ArgsError {
    #[error("--config needs a value")]
    ConfigWithoutValue,
    #[error("--config given twice")]
    ConfigTwice,
    #[error("bad flag syntax: {0}")]
    BadSyntax(String),
    #[error("flag provided but not defined: -{0}")]
    Unknown(String),
    #[error("flag needs an argument: -{0}")]
    NeedsValue(String),
    #[error("invalid boolean value {value:?} for -{name}")]
    BadBool { name: String, value: String },
    #[error("invalid value {value:?} for -{name}: {reason}")]
    BadValue {
        name: String,
        value: String,
        reason: &'static str,
    },
    #[error("cannot use two forms of the same flag: -{0} -{1}")]
    TwoForms(String, String),
    #[error("urfave/cli versions used by runc 1.1-1.3 read these arguments differently")]
    VersionsDisagree,
}

/// What a flag's value is, as urfave/cli declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `BoolFlag`: no value, or `=` + strconv.ParseBool.
    Bool,
    /// `StringFlag`: any bytes; the last one given wins.
    Str,
    /// `IntFlag` (Go base-0 integer): only plain decimal is accepted here.
    Int,
    /// `StringSliceFlag`: every value, in order.
    StrSlice,
    /// `Int64SliceFlag`: every value (strconv.ParseInt base 10), in order.
    Int64Slice,
}

/// One flag of a verb (or a global flag).
#[derive(Debug, Clone, Copy)]
pub struct FlagDef {
    /// Every accepted name; the first is the canonical one reported in [`Item`].
    pub names: &'static [&'static str],
    pub kind: Kind,
}

impl FlagDef {
    pub fn takes_value(&self) -> bool {
        self.kind != Kind::Bool
    }
}

const fn value(names: &'static [&'static str]) -> FlagDef {
    FlagDef {
        names,
        kind: Kind::Str,
    }
}

const fn boolean(names: &'static [&'static str]) -> FlagDef {
    FlagDef {
        names,
        kind: Kind::Bool,
    }
}

const fn int(names: &'static [&'static str]) -> FlagDef {
    FlagDef {
        names,
        kind: Kind::Int,
    }
}

const fn slice(names: &'static [&'static str]) -> FlagDef {
    FlagDef {
        names,
        kind: Kind::StrSlice,
    }
}

const fn int64_slice(names: &'static [&'static str]) -> FlagDef {
    FlagDef {
        names,
        kind: Kind::Int64Slice,
    }
}

/// urfave/cli's `HelpFlag`, appended to the app and to every verb.
const HELP: FlagDef = boolean(&["help", "h"]);

/// runc's global flags (before the verb), urfave/cli's help and version
/// flags included. `criu` is a value in every version (ignored from 1.2).
pub const GLOBAL_FLAGS: &[FlagDef] = &[
    boolean(&["debug"]),
    value(&["log"]),
    value(&["log-format"]),
    value(&["root"]),
    value(&["criu"]),
    boolean(&["systemd-cgroup"]),
    value(&["rootless"]),
    HELP,
    boolean(&["version", "v"]),
];

/// The flag tables below are the union of runc 1.1, 1.2 and 1.3 (no flag
/// changed its kind); a flag an older runc lacks makes that runc refuse.
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

/// runc `start` has no flags of its own.
pub const START_FLAGS: &[FlagDef] = &[HELP];

/// The verbs vibe-shim judges: each can start a process, change its
/// limits, or (checkpoint) make runc write host paths as root. Each is read
/// with [`classify_verb`] and refused if unclassifiable.
pub const ENFORCED_VERBS: &[&str] = &[
    "create",
    "run",
    "restore",
    "exec",
    "update",
    "start",
    "checkpoint",
];

/// runc verbs that can neither start a process in a container nor change
/// its limits: they reach runc unmodified. `help`/`h` is urfave/cli's own.
/// Every other verb is refused (a future runc verb is judged before it runs).
pub const PASS_THROUGH_VERBS: &[&str] = &[
    "delete", "events", "features", "kill", "list", "pause", "ps", "resume", "spec", "state",
    "help", "h",
];

/// The most fds `--preserve-fds` may hand on (the usual RLIMIT_NOFILE soft
/// limit): socket activation needs a handful, and the number also places
/// vibe-shim's private memfd above the preserved range.
pub const MAX_PRESERVE_FDS: i64 = 1024;

/// A verb's flag table and whether urfave/cli reorders its arguments.
pub fn verb_table(verb: &str) -> Option<(&'static [FlagDef], bool)> {
    Some(match verb {
        "create" => (CREATE_FLAGS, true),
        "run" => (RUN_FLAGS, true),
        "restore" => (RESTORE_FLAGS, true),
        "exec" => (EXEC_FLAGS, false),
        "update" => (UPDATE_FLAGS, true),
        "start" => (START_FLAGS, true),
        "checkpoint" => (CHECKPOINT_FLAGS, true),
        _ => return None,
    })
}

/// The global part of the command line, with `--config` taken out.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// vibe-shim's own `--config` (global position only).
    pub config: Option<PathBuf>,
    /// Everything runc gets: argv[1..] without `--config`.
    pub runc_args: Vec<OsString>,
    pub root: Option<OsString>,
    pub log: Option<OsString>,
    pub log_format: Option<OsString>,
    /// `--criu` was given (it picks the binary runc 1.1 runs as root).
    pub criu: bool,
    /// `--systemd-cgroup`: runc reads `cgroupsPath` as `slice:prefix:name`.
    pub systemd_cgroup: bool,
    /// Index of the verb in `runc_args`.
    pub verb_index: Option<usize>,
    /// `--help` or `--version`: runc prints and runs no verb.
    pub no_action: bool,
    /// Why runc would refuse the global flags (the verb is then unknown).
    pub error: Option<ArgsError>,
}

impl Invocation {
    /// The verb as text (`""` for none, e.g. `--version`).
    pub fn verb(&self) -> &str {
        self.verb_index
            .and_then(|i| self.runc_args.get(i))
            .and_then(|v| v.to_str())
            .unwrap_or("")
    }

    /// Tokens after the verb.
    pub fn verb_args(&self) -> &[OsString] {
        match self.verb_index {
            Some(i) => &self.runc_args[i + 1..],
            None => &[],
        }
    }

    /// Whether `--log-format json` was given (runc's default is text).
    pub fn log_is_json(&self) -> bool {
        self.log_format.as_deref() == Some(OsStr::new("json"))
    }
}

/// A flag's name and its inline `=value`.
type FlagParts<'a> = (&'a [u8], Option<&'a OsStr>);

/// A flag token as Go's `flag` splits it: the name and an inline `=value`.
/// `None` for a non-flag (`-`, `x`) and for `--`.
fn split_flag(token: &OsStr) -> Option<Result<FlagParts<'_>, ArgsError>> {
    let bytes = token.as_bytes();
    if bytes.len() < 2 || bytes[0] != b'-' || bytes == b"--" {
        return None;
    }
    let body = if bytes[1] == b'-' {
        &bytes[2..]
    } else {
        &bytes[1..]
    };
    if body.is_empty() || body[0] == b'-' || body[0] == b'=' {
        return Some(Err(ArgsError::BadSyntax(lossy(token))));
    }
    Some(Ok(match body.iter().position(|&b| b == b'=') {
        Some(eq) => (&body[..eq], Some(OsStr::from_bytes(&body[eq + 1..]))),
        None => (body, None),
    }))
}

fn lossy(value: &OsStr) -> String {
    value.to_string_lossy().into_owned()
}

fn lookup<'a>(table: &'a [FlagDef], name: &[u8]) -> Option<&'a FlagDef> {
    table
        .iter()
        .find(|f| f.names.iter().any(|n| n.as_bytes() == name))
}

/// Go's strconv.ParseBool.
pub fn parse_go_bool(value: &OsStr) -> Option<bool> {
    match value.as_bytes() {
        b"1" | b"t" | b"T" | b"true" | b"TRUE" | b"True" => Some(true),
        b"0" | b"f" | b"F" | b"false" | b"FALSE" | b"False" => Some(false),
        _ => None,
    }
}

/// An `IntFlag` value Go (base 0) and Rust read alike: optional sign and
/// decimal digits without a leading zero (Go reads `010` as octal).
pub fn parse_plain_int(value: &OsStr) -> Option<i64> {
    let text = value.to_str()?;
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.len() > 1 && digits.starts_with('0') {
        return None;
    }
    text.parse().ok()
}

/// Go's strconv.ParseInt(s, 10, 64): the same grammar and range as Rust's.
pub fn parse_go_int64(value: &OsStr) -> Option<i64> {
    value.to_str()?.parse().ok()
}

fn check_value(def: &FlagDef, value: &OsStr) -> Result<(), ArgsError> {
    let bad = |reason| ArgsError::BadValue {
        name: def.names[0].to_string(),
        value: lossy(value),
        reason,
    };
    match def.kind {
        Kind::Bool if parse_go_bool(value).is_none() => Err(ArgsError::BadBool {
            name: def.names[0].to_string(),
            value: lossy(value),
        }),
        Kind::Int => {
            let n = parse_plain_int(value).ok_or_else(|| bad("not a plain decimal integer"))?;
            if def.names[0] == "preserve-fds" && !(0..=MAX_PRESERVE_FDS).contains(&n) {
                return Err(bad("outside 0..=1024"));
            }
            Ok(())
        }
        Kind::Int64Slice if parse_go_int64(value).is_none() => Err(bad("not an integer")),
        _ => Ok(()),
    }
}

/// One element of a verb's arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Flag {
        /// Canonical name (first of [`FlagDef::names`]), or the name as written if unknown.
        name: String,
        value: Option<OsString>,
        /// Index of the flag token (relative to the scanned slice).
        flag_index: usize,
        /// Index of a separate value token; `None` for `--f=v` and booleans.
        value_index: Option<usize>,
    },
    Positional {
        index: usize,
        value: OsString,
    },
}

/// Go's `FlagSet.Parse` over `tokens` (index into the verb's arguments,
/// token), then urfave/cli's `normalizeFlags`. Flags come out in the order
/// Go sets them, then the operands in `context.Args()` order.
fn go_parse(tokens: &[(usize, &OsStr)], table: &[FlagDef]) -> Result<Vec<Item>, ArgsError> {
    let mut items = Vec::new();
    let mut written: Vec<&[u8]> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let (index, token) = tokens[i];
        if token == "--" {
            i += 1;
            break;
        }
        let Some(split) = split_flag(token) else {
            break;
        };
        let (name, inline) = split?;
        i += 1;
        let def = lookup(table, name)
            .ok_or_else(|| ArgsError::Unknown(String::from_utf8_lossy(name).into_owned()))?;
        let (value, value_index) = match (def.kind, inline) {
            (_, Some(v)) => (Some(v), None),
            (Kind::Bool, None) => (None, None),
            (_, None) => match tokens.get(i) {
                Some(&(vi, v)) => {
                    i += 1;
                    (Some(v), Some(vi))
                }
                None => return Err(ArgsError::NeedsValue(def.names[0].to_string())),
            },
        };
        if let Some(v) = value {
            check_value(def, v)?;
        }
        written.push(name);
        items.push(Item::Flag {
            name: def.names[0].to_string(),
            value: value.map(OsStr::to_os_string),
            flag_index: index,
            value_index,
        });
    }
    for def in table.iter().filter(|d| d.names.len() > 1) {
        let used: Vec<&&str> = def
            .names
            .iter()
            .filter(|n| written.contains(&n.as_bytes()))
            .collect();
        if let [a, b, ..] = used[..] {
            return Err(ArgsError::TwoForms(a.to_string(), b.to_string()));
        }
    }
    items.extend(tokens[i..].iter().map(|&(index, value)| Item::Positional {
        index,
        value: value.to_os_string(),
    }));
    Ok(items)
}

/// Which urfave/cli v1.22 `reorderArgs` to run.
#[derive(Debug, Clone, Copy)]
enum Reorder {
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

fn reorder<'a>(
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

/// Reads a verb's arguments exactly as runc does (see the module docs), or
/// says why not. `reorders` is false for `exec` (urfave's `SkipArgReorder`):
/// there everything after the container id is the process's own argv.
pub fn classify(
    args: &[OsString],
    table: &[FlagDef],
    reorders: bool,
) -> Result<Vec<Item>, ArgsError> {
    if !reorders {
        let tokens: Vec<(usize, &OsStr)> = args
            .iter()
            .enumerate()
            .map(|(i, a)| (i, a.as_os_str()))
            .collect();
        return go_parse(&tokens, table);
    }
    // A version that refuses is harmless (that runc refuses too); every
    // version that accepts must read the same, and one must accept.
    let mut read: Option<Vec<Item>> = None;
    let mut first_error = None;
    for version in [Reorder::V1_22_1, Reorder::V1_22_6] {
        match go_parse(&reorder(args, table, version), table) {
            Ok(items) => match &read {
                None => read = Some(items),
                Some(seen) if *seen == items => {}
                Some(_) => return Err(ArgsError::VersionsDisagree),
            },
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match (read, first_error) {
        (Some(items), _) => Ok(items),
        (None, Some(e)) => Err(e),
        (None, None) => Ok(Vec::new()),
    }
}

/// [`classify`] for one of runc's enforced verbs.
pub fn classify_verb(verb: &str, args: &[OsString]) -> Result<Vec<Item>, ArgsError> {
    match verb_table(verb) {
        Some((table, reorders)) => classify(args, table, reorders),
        None => Err(ArgsError::Unknown(verb.to_string())),
    }
}

/// A verb's items: the exact reading when there is one (always, for a
/// command line `main` let through), else a tolerant scan (vibe-shim's own
/// `policy` verb): known value flags take the next token, unknown flags are
/// boolean, and with `stop_at_positional` the first operand ends the flags.
pub fn scan_verb(args: &[OsString], table: &[FlagDef], stop_at_positional: bool) -> Vec<Item> {
    if let Ok(items) = classify(args, table, !stop_at_positional) {
        return items;
    }
    let mut items = Vec::new();
    let mut i = 0;
    let mut only_positional = false;
    while i < args.len() {
        let token = &args[i];
        if !only_positional && token == "--" {
            only_positional = true;
            i += 1;
            continue;
        }
        let flag = match only_positional {
            true => None,
            false => split_flag(token).and_then(Result::ok),
        };
        let Some((name, inline)) = flag else {
            items.push(Item::Positional {
                index: i,
                value: token.clone(),
            });
            only_positional |= stop_at_positional;
            i += 1;
            continue;
        };
        let def = lookup(table, name);
        let canonical = def.map_or_else(
            || String::from_utf8_lossy(name).into_owned(),
            |d| d.names[0].to_string(),
        );
        let takes_value = def.is_some_and(FlagDef::takes_value);
        let (value, value_index) = match inline {
            Some(v) => (Some(v.to_os_string()), None),
            None if takes_value && i + 1 < args.len() => (Some(args[i + 1].clone()), Some(i + 1)),
            None => (None, None),
        };
        items.push(Item::Flag {
            name: canonical,
            value,
            flag_index: i,
            value_index,
        });
        i += if value_index.is_some() { 2 } else { 1 };
    }
    items
}

/// Scans the global part of argv as Go's `flag` does: finds the verb,
/// records `--root`, `--log`, `--log-format`, `--help`/`--version`, and
/// removes vibe-shim's own `--config`. A flag runc would refuse stops the
/// scan and is kept in [`Invocation::error`]; the verb is then unknown.
pub fn scan_globals(args: Vec<OsString>) -> Result<Invocation, ArgsError> {
    let mut inv = Invocation {
        config: None,
        runc_args: Vec::with_capacity(args.len()),
        root: None,
        log: None,
        log_format: None,
        criu: false,
        systemd_cgroup: false,
        verb_index: None,
        no_action: false,
        error: None,
    };
    let mut written: Vec<String> = Vec::new();
    let mut help = false;
    let mut version = false;
    let mut tokens = args.into_iter();
    while let Some(token) = tokens.next() {
        if token == "--" {
            inv.runc_args.push(token);
            if tokens.len() > 0 {
                inv.verb_index = Some(inv.runc_args.len());
            }
            inv.runc_args.extend(tokens.by_ref());
            break;
        }
        let (name, inline) = match split_flag(&token) {
            None => {
                inv.verb_index = Some(inv.runc_args.len());
                inv.runc_args.push(token);
                inv.runc_args.extend(tokens.by_ref());
                break;
            }
            Some(Err(e)) => {
                inv.error = Some(e);
                inv.runc_args.push(token);
                inv.runc_args.extend(tokens.by_ref());
                break;
            }
            Some(Ok((name, inline))) => (name.to_vec(), inline.map(OsStr::to_os_string)),
        };
        if name == b"config" {
            let value = match inline {
                Some(v) => v,
                None => tokens.next().ok_or(ArgsError::ConfigWithoutValue)?,
            };
            if inv.config.replace(PathBuf::from(value)).is_some() {
                return Err(ArgsError::ConfigTwice);
            }
            continue;
        }
        let Some(def) = lookup(GLOBAL_FLAGS, &name) else {
            inv.error = Some(ArgsError::Unknown(String::from_utf8_lossy(&name).into()));
            inv.runc_args.push(token);
            inv.runc_args.extend(tokens.by_ref());
            break;
        };
        inv.runc_args.push(token);
        let value = match (def.kind, inline) {
            (_, Some(v)) => Some(v),
            (Kind::Bool, None) => None,
            (_, None) => tokens.next().inspect(|v| inv.runc_args.push(v.clone())),
        };
        let checked = match &value {
            Some(v) => check_value(def, v),
            None if def.takes_value() => Err(ArgsError::NeedsValue(def.names[0].into())),
            None => Ok(()),
        };
        if let Err(e) = checked {
            inv.error = Some(e);
            inv.runc_args.extend(tokens.by_ref());
            break;
        }
        written.push(String::from_utf8_lossy(&name).into_owned());
        let on = || {
            value
                .as_deref()
                .is_none_or(|v| parse_go_bool(v) == Some(true))
        };
        match def.names[0] {
            "root" => inv.root = value.clone(),
            "log" => inv.log = value.clone(),
            "log-format" => inv.log_format = value.clone(),
            "criu" => inv.criu = true,
            "systemd-cgroup" => inv.systemd_cgroup = on(),
            "help" => help = on(),
            "version" => version = on(),
            _ => {}
        }
    }
    inv.no_action = help || version;
    for pair in [["help", "h"], ["version", "v"]] {
        if pair.iter().all(|n| written.iter().any(|w| w == n)) && inv.error.is_none() {
            inv.error = Some(ArgsError::TwoForms(pair[0].into(), pair[1].into()));
        }
    }
    Ok(inv)
}

/// The value of the last occurrence of a flag (Go's `flag` keeps the last).
pub fn flag_value<'a>(items: &'a [Item], wanted: &str) -> Option<&'a OsString> {
    items.iter().rev().find_map(|item| match item {
        Item::Flag { name, value, .. } if name == wanted => value.as_ref(),
        _ => None,
    })
}

/// Every value of a slice flag, in order (`--env A --env B`).
pub fn flag_values<'a>(items: &'a [Item], wanted: &str) -> Vec<&'a OsString> {
    items
        .iter()
        .filter_map(|item| match item {
            Item::Flag { name, value, .. } if name == wanted => value.as_ref(),
            _ => None,
        })
        .collect()
}

/// A bool flag as urfave/cli reads it: `None` if not given (`IsSet` false),
/// else the last occurrence (`--f` is true, `--f=false` false).
pub fn flag_bool(items: &[Item], wanted: &str) -> Option<bool> {
    items.iter().rev().find_map(|item| match item {
        Item::Flag { name, value, .. } if name == wanted => Some(
            value
                .as_deref()
                .is_none_or(|v| parse_go_bool(v) == Some(true)),
        ),
        _ => None,
    })
}

/// The operands (`context.Args()`), in runc's order.
pub fn positionals(items: &[Item]) -> Vec<&OsString> {
    items
        .iter()
        .filter_map(|item| match item {
            Item::Positional { value, .. } => Some(value),
            _ => None,
        })
        .collect()
}

/// The first positional argument (the container id for most verbs).
pub fn first_positional(items: &[Item]) -> Option<&OsString> {
    positionals(items).first().copied()
}

/// Edits to a verb's argument list, applied in one pass so indexes stay valid.
#[derive(Debug, Default)]
pub struct Edits {
    /// Separate value tokens replaced whole.
    replace: Vec<(usize, OsString)>,
    /// `--f=v` tokens whose value is replaced.
    inline: Vec<(usize, OsString)>,
    remove: Vec<usize>,
    prepend: Vec<OsString>,
}

impl Edits {
    /// Replaces the value of a flag item, keeping its form (`--f v` / `--f=v`).
    pub fn set_flag_value(&mut self, item: &Item, new_value: &OsStr) {
        if let Item::Flag {
            flag_index,
            value_index,
            ..
        } = item
        {
            match value_index {
                Some(v) => self.replace.push((*v, new_value.to_os_string())),
                None => self.inline.push((*flag_index, new_value.to_os_string())),
            }
        }
    }

    /// Removes a flag item and its separate value token.
    pub fn remove_flag(&mut self, item: &Item) {
        if let Item::Flag {
            flag_index,
            value_index,
            ..
        } = item
        {
            self.remove.push(*flag_index);
            self.remove.extend(*value_index);
        }
    }

    /// The last `--name` flag and its value (empty if it has none), with
    /// every earlier `--name` removed: runc reads the last one, and only the
    /// one vibe-shim rewrites may reach it.
    pub fn keep_last_flag<'a>(
        &mut self,
        items: &'a [Item],
        name: &str,
    ) -> Option<(&'a Item, OsString)> {
        let mut last: Option<(&Item, &Option<OsString>)> = None;
        for item in items {
            if let Item::Flag { name: n, value, .. } = item {
                if n == name {
                    if let Some((earlier, _)) = last.replace((item, value)) {
                        self.remove_flag(earlier);
                    }
                }
            }
        }
        last.map(|(item, value)| (item, value.clone().unwrap_or_default()))
    }

    /// Adds tokens right after the verb (before the container id).
    pub fn prepend(&mut self, tokens: impl IntoIterator<Item = OsString>) {
        self.prepend.extend(tokens);
    }

    /// The edited argument list.
    pub fn apply(&self, args: &[OsString]) -> Vec<OsString> {
        let mut out = self.prepend.clone();
        for (i, token) in args.iter().enumerate() {
            if self.remove.contains(&i) {
                continue;
            }
            if let Some((_, inline)) = self.inline.iter().rev().find(|(j, _)| *j == i) {
                out.push(with_inline_value(token, inline));
            } else if let Some((_, new)) = self.replace.iter().rev().find(|(j, _)| *j == i) {
                out.push(new.clone());
            } else {
                out.push(token.clone());
            }
        }
        out
    }
}

/// `--name=old` with its value replaced; the `-`/`--` prefix and name are kept.
fn with_inline_value(token: &OsStr, value: &OsStr) -> OsString {
    let bytes = token.as_bytes();
    let eq = bytes.iter().position(|&b| b == b'=').unwrap_or(bytes.len());
    let mut out = bytes[..eq].to_vec();
    out.push(b'=');
    out.extend_from_slice(value.as_bytes());
    OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn strs(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn containerd_create() {
        let argv = os(&[
            "--root",
            "/run/vs-dev/exec/runtime-runc/moby",
            "--log",
            "/run/c/abc/log.json",
            "--log-format",
            "json",
            "create",
            "--bundle",
            "/run/c/abc",
            "--pid-file",
            "/run/c/abc/init.pid",
            "abc",
        ]);
        let inv = scan_globals(argv.clone()).unwrap();
        assert_eq!(inv.runc_args, argv);
        assert_eq!(inv.verb(), "create");
        assert_eq!(
            inv.root.as_deref(),
            Some(OsStr::new("/run/vs-dev/exec/runtime-runc/moby"))
        );
        assert_eq!(inv.log.as_deref(), Some(OsStr::new("/run/c/abc/log.json")));
        assert!(inv.log_is_json());
        let items = scan_verb(inv.verb_args(), CREATE_FLAGS, false);
        assert_eq!(flag_value(&items, "bundle").unwrap(), "/run/c/abc");
        assert_eq!(first_positional(&items).unwrap(), "abc");
    }

    #[test]
    fn config_is_removed_in_every_form() {
        for argv in [
            &["--config", "/p.toml", "--root", "/r", "state", "x"][..],
            &["--root", "/r", "--config=/p.toml", "state", "x"],
            &["-config", "/p.toml", "--root", "/r", "state", "x"],
            &["--root", "/r", "-config=/p.toml", "state", "x"],
        ] {
            let inv = scan_globals(os(argv)).unwrap();
            assert_eq!(inv.config, Some(PathBuf::from("/p.toml")), "{argv:?}");
            assert_eq!(
                strs(&inv.runc_args),
                ["--root", "/r", "state", "x"],
                "{argv:?}"
            );
        }
        assert_eq!(
            scan_globals(os(&["--config"])),
            Err(ArgsError::ConfigWithoutValue)
        );
        // After the verb it is runc's business (or a container's argv).
        let inv = scan_globals(os(&["exec", "c", "prog", "--config", "x"])).unwrap();
        assert_eq!(inv.config, None);
        assert_eq!(inv.runc_args.len(), 5);
    }

    #[test]
    fn single_dash_and_equals_globals() {
        let inv = scan_globals(os(&[
            "-root=/r",
            "-log",
            "/l",
            "-log-format=text",
            "--debug",
            "--systemd-cgroup",
            "kill",
            "c",
            "9",
        ]))
        .unwrap();
        assert_eq!(inv.root.as_deref(), Some(OsStr::new("/r")));
        assert_eq!(inv.log.as_deref(), Some(OsStr::new("/l")));
        assert!(!inv.log_is_json());
        assert_eq!(inv.verb(), "kill");
        assert_eq!(strs(inv.verb_args()), ["c", "9"]);
    }

    #[test]
    fn unknown_globals_are_an_error_and_hide_the_verb() {
        // The bypass: a future flag with a value would make `create` the verb.
        let inv = scan_globals(os(&["--future-flag", "v", "create", "c"])).unwrap();
        assert_eq!(inv.error, Some(ArgsError::Unknown("future-flag".into())));
        assert_eq!(inv.verb_index, None);
        assert_eq!(inv.runc_args.len(), 4);
        let inv = scan_globals(os(&["--x=v", "--rootless", "auto", "list"])).unwrap();
        assert!(inv.error.is_some());
        // Bool globals take no separate value: `false` is the verb.
        let inv = scan_globals(os(&["--debug", "false", "create", "c"])).unwrap();
        assert_eq!(inv.verb(), "false");
        let inv = scan_globals(os(&["--debug=maybe", "create", "c"])).unwrap();
        assert!(matches!(inv.error, Some(ArgsError::BadBool { .. })));
        for bad in [
            &["---root", "/r", "create"][..],
            &["-=x", "create"],
            &["--root"],
        ] {
            assert!(scan_globals(os(bad)).unwrap().error.is_some(), "{bad:?}");
        }
    }

    #[test]
    fn double_dash_before_the_verb_is_go_flags_terminator() {
        let inv =
            scan_globals(os(&["--root", "/r", "--", "create", "--bundle", "b", "c"])).unwrap();
        assert_eq!(inv.error, None);
        assert_eq!(inv.verb(), "create");
        assert_eq!(strs(inv.verb_args()), ["--bundle", "b", "c"]);
        assert_eq!(strs(&inv.runc_args)[2], "--");
        // `--root --` : the `--` is root's value, not a terminator.
        let inv = scan_globals(os(&["--root", "--", "exec", "c", "sh"])).unwrap();
        assert_eq!(inv.root.as_deref(), Some(OsStr::new("--")));
        assert_eq!(inv.verb(), "exec");
        let inv = scan_globals(os(&["--"])).unwrap();
        assert_eq!(inv.verb_index, None);
    }

    #[test]
    fn help_and_version_run_nothing_unless_false() {
        let inv = scan_globals(os(&["--help", "create", "c"])).unwrap();
        assert!(inv.no_action);
        let inv = scan_globals(os(&["-h=false", "-v=0", "create", "c"])).unwrap();
        assert!(!inv.no_action);
        assert_eq!(inv.verb(), "create");
        let inv = scan_globals(os(&["--version", "--version=false", "create"])).unwrap();
        assert!(!inv.no_action);
        let inv = scan_globals(os(&["-h", "--help", "create"])).unwrap();
        assert_eq!(
            inv.error,
            Some(ArgsError::TwoForms("help".into(), "h".into()))
        );
        assert_eq!(
            scan_globals(os(&["--config", "/a", "--config=/b", "state"])),
            Err(ArgsError::ConfigTwice)
        );
    }

    /// (flag name, value) pairs and the operands.
    type Reading = (Vec<(String, Option<String>)>, Vec<String>);

    fn classified(verb: &str, args: &[&str]) -> Result<Reading, ArgsError> {
        let items = classify_verb(verb, &os(args))?;
        let flags = items
            .iter()
            .filter_map(|i| match i {
                Item::Flag { name, value, .. } => {
                    Some((name.clone(), value.as_ref().map(|v| lossy(v))))
                }
                _ => None,
            })
            .collect();
        let ops = positionals(&items).iter().map(|v| lossy(v)).collect();
        Ok((flags, ops))
    }

    #[test]
    fn unknown_verb_flags_are_refused_not_guessed() {
        // Today's runc refuses this; the next one might give the flag a value.
        let err = classify_verb(
            "exec",
            &os(&[
                "--future-flag",
                "v",
                "-e",
                "GITHUB_TOKEN=x",
                "--cap",
                "CAP_SYS_ADMIN",
                "c",
                "sh",
            ]),
        )
        .unwrap_err();
        assert_eq!(err, ArgsError::Unknown("future-flag".into()));
        assert!(classify_verb("create", &os(&["--future=1", "c"])).is_err());
        // After the operand, urfave/cli v1.22.6+ leaves an unknown flag an
        // operand (v1.22.1 fails on it): two operands, which `main` refuses.
        let (_, ops) = classified("create", &["c", "--future=1"]).unwrap();
        assert_eq!(ops, ["c", "--future=1"]);
        // After exec's container id everything is the command, flags or not.
        let (flags, ops) = classified("exec", &["-t", "c", "sh", "--future-flag", "-e"]).unwrap();
        assert_eq!(flags, [("tty".to_string(), None)]);
        assert_eq!(ops, ["c", "sh", "--future-flag", "-e"]);
    }

    #[test]
    fn bool_values_ints_and_two_forms() {
        let (flags, _) = classified("exec", &["-t=false", "--no-new-privs=0", "c", "x"]).unwrap();
        assert_eq!(flags[0], ("tty".into(), Some("false".into())));
        let items = classify_verb(
            "exec",
            &os(&["-t=false", "--no-new-privs=0", "-d", "c", "x"]),
        )
        .unwrap();
        assert_eq!(flag_bool(&items, "tty"), Some(false));
        assert_eq!(flag_bool(&items, "no-new-privs"), Some(false));
        assert_eq!(flag_bool(&items, "detach"), Some(true));
        assert_eq!(flag_bool(&items, "ignore-paused"), None);
        assert!(classify_verb("exec", &os(&["-t=yes", "c", "x"])).is_err());
        // Go reads 010 as octal and 0x10 as hex: only plain decimal passes.
        for bad in ["010", "0x10", "1_0", "", " 5"] {
            assert!(
                classify_verb("update", &os(&["--pids-limit", bad, "c"])).is_err(),
                "{bad:?}"
            );
        }
        assert!(classify_verb("update", &os(&["--pids-limit", "-1", "c"])).is_ok());
        assert!(classify_verb("exec", &os(&["--preserve-fds", "1025", "c", "x"])).is_err());
        assert!(classify_verb("exec", &os(&["--preserve-fds=-1", "c", "x"])).is_err());
        assert!(classify_verb("exec", &os(&["--preserve-fds", "3", "c", "x"])).is_ok());
        assert!(classify_verb("exec", &os(&["-g", "x", "c", "x"])).is_err());
        assert_eq!(
            classify_verb("exec", &os(&["--process", "/a", "-p", "/b", "c"])),
            Err(ArgsError::TwoForms("process".into(), "p".into()))
        );
        let items = classify_verb("exec", &os(&["-p", "/a", "-p", "/b", "c"])).unwrap();
        assert_eq!(flag_value(&items, "process").unwrap(), "/b");
        assert!(classify_verb("exec", &os(&["c", "x"])).is_ok());
        assert_eq!(
            classify_verb("create", &os(&["--bundle"])),
            Err(ArgsError::NeedsValue("bundle".into()))
        );
    }

    #[test]
    fn reordering_verbs_read_flags_after_the_id() {
        // urfave/cli moves flags after the operand to the front.
        let (flags, ops) = classified("update", &["c", "--pids-limit", "-1"]).unwrap();
        assert_eq!(flags, [("pids-limit".to_string(), Some("-1".to_string()))]);
        assert_eq!(ops, ["c"]);
        // A trailing value flag takes the first operand as its value.
        let (flags, ops) = classified("create", &["a", "b", "--pid-file"]).unwrap();
        assert_eq!(flags, [("pid-file".to_string(), Some("a".to_string()))]);
        assert_eq!(ops, ["b"]);
        // A bool followed by a word: the word is an operand and ends the flags.
        let (flags, ops) = classified("create", &["--no-pivot", "c", "--bundle", "/x"]).unwrap();
        assert_eq!(flags, [("no-pivot".to_string(), None)]);
        assert_eq!(ops, ["c", "--bundle", "/x"]);
        // `--` ends the flags (and is a value right after a value flag).
        let (flags, ops) = classified("create", &["--", "-weird"]).unwrap();
        assert!(flags.is_empty());
        assert_eq!(ops, ["-weird"]);
        let (flags, ops) = classified("create", &["--pid-file", "--", "c"]).unwrap();
        assert_eq!(flags, [("pid-file".to_string(), Some("--".to_string()))]);
        assert_eq!(ops, ["c"]);
    }

    #[test]
    fn urfave_versions_that_accept_must_agree() {
        let run = |args: &[OsString], v| go_parse(&reorder(args, CREATE_FLAGS, v), CREATE_FLAGS);
        // containerd's own update line reads the same in both.
        let (flags, ops) = classified("update", &["--resources", "-", "c"]).unwrap();
        assert_eq!(flags, [("resources".to_string(), Some("-".to_string()))]);
        assert_eq!(ops, ["c"]);
        let (flags, ops) = classified("create", &["c", "--pid-file", "-q"]).unwrap();
        assert_eq!(flags, [("pid-file".to_string(), Some("-q".to_string()))]);
        assert_eq!(ops, ["c"]);
        // v1.22.1 stops at `--`, so `c` is --pid-file's value and `x` the
        // id; v1.22.6+ takes `--` as the value: two ids. Disagreement.
        let args = os(&["c", "--pid-file", "--", "x"]);
        assert_ne!(
            run(&args, Reorder::V1_22_1).unwrap(),
            run(&args, Reorder::V1_22_6).unwrap()
        );
        assert_eq!(
            classify_verb("create", &args),
            Err(ArgsError::VersionsDisagree)
        );
        // v1.22.1 moves every dash-token (then fails on it); v1.22.6+ keeps
        // an unknown one an operand.
        let args = os(&["c", "-x"]);
        assert!(run(&args, Reorder::V1_22_1).is_err());
        assert!(run(&args, Reorder::V1_22_6).is_ok());
    }

    #[test]
    fn checkpoint_reads_as_runc_reads_it() {
        // containerd's line (runc's go-runc): flags, then the id.
        let (flags, ops) = classified(
            "checkpoint",
            &[
                "--image-path",
                "/i",
                "--work-path",
                "/w",
                "--leave-running",
                "abc",
            ],
        )
        .unwrap();
        assert_eq!(ops, ["abc"]);
        assert_eq!(flags[0], ("image-path".into(), Some("/i".into())));
        assert_eq!(flags[1], ("work-path".into(), Some("/w".into())));
        // Reordered: a flag after the id is still read, value and all.
        let items = classify_verb("checkpoint", &os(&["abc", "--page-server", "h:1"])).unwrap();
        assert_eq!(flag_value(&items, "page-server").unwrap(), "h:1");
        assert_eq!(first_positional(&items).unwrap(), "abc");
        // status-fd is an IntFlag (-1 by default); a bool takes no value.
        assert!(classify_verb("checkpoint", &os(&["--status-fd", "-1", "c"])).is_ok());
        assert!(classify_verb("checkpoint", &os(&["--status-fd", "0x3", "c"])).is_err());
        let (flags, ops) = classified("checkpoint", &["--pre-dump", "c"]).unwrap();
        assert_eq!(flags, [("pre-dump".to_string(), None)]);
        assert_eq!(ops, ["c"]);
        // restore's flags are not checkpoint's.
        assert!(classify_verb("checkpoint", &os(&["--pid-file", "/p", "c"])).is_err());
        assert!(classify_verb("checkpoint", &os(&["--bundle", "/b", "c"])).is_err());
    }

    #[test]
    fn help_after_the_verb_is_a_flag() {
        let items = classify_verb("create", &os(&["c", "--help"])).unwrap();
        assert_eq!(flag_bool(&items, "help"), Some(true));
        let items = classify_verb("start", &os(&["c"])).unwrap();
        assert_eq!(first_positional(&items).unwrap(), "c");
        assert!(classify_verb("start", &os(&["--detach", "c"])).is_err());
    }

    #[test]
    fn version_and_help_have_no_verb() {
        let inv = scan_globals(os(&["--version"])).unwrap();
        assert_eq!(inv.verb(), "");
        let inv = scan_globals(os(&["-h"])).unwrap();
        assert_eq!(inv.verb(), "");
        assert_eq!(strs(&inv.runc_args), ["-h"]);
    }

    #[test]
    fn non_utf8_bytes_survive() {
        let weird = OsString::from_vec(vec![b'/', 0xff, b'x']);
        let argv = vec![
            OsString::from("--root"),
            weird.clone(),
            OsString::from("state"),
            weird.clone(),
        ];
        let inv = scan_globals(argv.clone()).unwrap();
        assert_eq!(inv.runc_args, argv);
        assert_eq!(inv.root, Some(weird));
    }

    #[test]
    fn containerd_exec_and_update() {
        let inv = scan_globals(os(&[
            "--root",
            "/r",
            "--log",
            "/l.json",
            "--log-format",
            "json",
            "exec",
            "--process",
            "/tmp/runc-process3830015844",
            "--detach",
            "--pid-file",
            "/x.pid",
            "abc",
        ]))
        .unwrap();
        let items = scan_verb(inv.verb_args(), EXEC_FLAGS, true);
        assert_eq!(
            flag_value(&items, "process").unwrap(),
            "/tmp/runc-process3830015844"
        );
        assert_eq!(first_positional(&items).unwrap(), "abc");
        let items = scan_verb(&os(&["--resources", "-", "abc"]), UPDATE_FLAGS, false);
        assert_eq!(flag_value(&items, "resources").unwrap(), "-");
        assert_eq!(first_positional(&items).unwrap(), "abc");
    }

    #[test]
    fn podman_style_and_short_forms() {
        // conmon: runc --root R --systemd-cgroup exec -d --pid-file P --process F --console-socket S ID
        let inv = scan_globals(os(&[
            "--root",
            "/run/runc",
            "--systemd-cgroup",
            "exec",
            "-d",
            "--pid-file",
            "/p",
            "--process=/f",
            "--console-socket",
            "/s",
            "ctr",
        ]))
        .unwrap();
        let items = scan_verb(inv.verb_args(), EXEC_FLAGS, true);
        assert_eq!(flag_value(&items, "process").unwrap(), "/f");
        assert_eq!(first_positional(&items).unwrap(), "ctr");
        let items = scan_verb(
            &os(&["-b=/bundle", "-pid-file", "/p", "ctr"]),
            CREATE_FLAGS,
            false,
        );
        assert_eq!(flag_value(&items, "bundle").unwrap(), "/bundle");
        assert_eq!(first_positional(&items).unwrap(), "ctr");
    }

    #[test]
    fn exec_stops_at_the_container_id() {
        let items = scan_verb(
            &os(&["-t", "ctr", "sh", "-c", "echo", "-e", "x"]),
            EXEC_FLAGS,
            true,
        );
        let positionals: Vec<_> = items
            .iter()
            .filter_map(|i| match i {
                Item::Positional { value, .. } => Some(value.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        assert_eq!(positionals, ["ctr", "sh", "-c", "echo", "-e", "x"]);
        // Other verbs reorder flags after the id (urfave/cli), so keep scanning.
        let items = scan_verb(&os(&["ctr", "--pids-limit", "-1"]), UPDATE_FLAGS, false);
        assert_eq!(flag_value(&items, "pids-limit").unwrap(), "-1");
        let items = scan_verb(&os(&["--", "-weird-id"]), CREATE_FLAGS, false);
        assert_eq!(first_positional(&items).unwrap(), "-weird-id");
    }

    #[test]
    fn value_flags_take_dashed_values() {
        let items = scan_verb(&os(&["-e", "-x", "ctr"]), EXEC_FLAGS, true);
        assert_eq!(flag_value(&items, "env").unwrap(), "-x");
        assert_eq!(first_positional(&items).unwrap(), "ctr");
    }

    #[test]
    fn edits_keep_form_and_order() {
        let args = os(&["--process", "/a", "-p=/b", "--cap", "X", "ctr", "sh"]);
        let items = scan_verb(&args, EXEC_FLAGS, true);
        let mut edits = Edits::default();
        edits.set_flag_value(&items[0], OsStr::new("/new"));
        edits.set_flag_value(&items[1], OsStr::new("/new2"));
        edits.remove_flag(&items[2]);
        edits.prepend([OsString::from("--no-new-privs")]);
        assert_eq!(
            strs(&edits.apply(&args)),
            [
                "--no-new-privs",
                "--process",
                "/new",
                "-p=/new2",
                "ctr",
                "sh"
            ]
        );
    }

    #[test]
    fn only_the_last_of_a_repeated_flag_survives() {
        let args = os(&["--process", "/a", "-e", "X=1", "-p=/b", "ctr", "sh"]);
        let items = scan_verb(&args, EXEC_FLAGS, true);
        let mut edits = Edits::default();
        let (last, value) = edits.keep_last_flag(&items, "process").unwrap();
        assert_eq!(value, "/b");
        edits.set_flag_value(last, OsStr::new("/new"));
        assert_eq!(
            strs(&edits.apply(&args)),
            ["-e", "X=1", "-p=/new", "ctr", "sh"]
        );
        assert!(edits.keep_last_flag(&items, "cwd").is_none());
    }

    /// Lines recorded from containerd-shim-runc-v2 (containerd 1.6.20) on
    /// this machine; the shim must hand each to runc unchanged.
    #[test]
    fn recorded_containerd_lines_pass_unchanged() {
        let lines = [
            "--root /run/vs-dev/exec/runtime-runc/moby --log /run/t/log.json --log-format json delete --force abc",
            "--root /run/vs-dev/exec/runtime-runc/moby --log /run/t/log.json --log-format json kill --all abc 9",
            "--root /run/vs-dev/exec/runtime-runc/moby --log /run/t/log.json --log-format json ps --format json abc",
            "--root /run/vs-dev/exec/runtime-runc/moby --log /run/t/log.json --log-format json start abc",
            "--root /run/vs-dev/exec/runtime-runc/moby --log /run/t/log.json --log-format json exec --process /tmp/runc-process1769853297 --console-socket /tmp/pty892541995/pty.sock --detach --pid-file /run/t/e5.pid abc",
        ];
        for line in lines {
            let argv = os(&line.split(' ').collect::<Vec<_>>());
            let inv = scan_globals(argv.clone()).unwrap();
            assert_eq!(inv.runc_args, argv, "{line}");
            assert_eq!(
                inv.root.as_deref(),
                Some(OsStr::new("/run/vs-dev/exec/runtime-runc/moby"))
            );
            assert!(inv.log_is_json());
        }
        for line in &lines[3..] {
            let inv = scan_globals(os(&line.split(' ').collect::<Vec<_>>())).unwrap();
            assert_eq!(inv.error, None);
            assert!(classify_verb(inv.verb(), inv.verb_args()).is_ok(), "{line}");
        }
        let argv = os(&lines[4].split(' ').collect::<Vec<_>>());
        let inv = scan_globals(argv).unwrap();
        let items = scan_verb(inv.verb_args(), EXEC_FLAGS, true);
        assert_eq!(first_positional(&items).unwrap(), "abc");
        assert_eq!(
            flag_value(&items, "console-socket").unwrap(),
            "/tmp/pty892541995/pty.sock"
        );
    }
}
