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

mod checkpoint;
mod create;
mod delete;
mod exec;
mod globals;
mod go_flag;
mod items;
mod reorder;
mod restore;
mod route;
mod run;
mod start;
#[cfg(test)]
mod tests;
mod update;

use std::ffi::{OsStr, OsString};

pub use checkpoint::{CheckpointArgs, CHECKPOINT_FLAGS};
pub use create::{CreateArgs, CREATE_FLAGS};
pub use delete::DELETE_FLAGS;
pub use exec::{ExecArgs, EXEC_FLAGS};
pub use globals::{scan_globals, Invocation};
pub use go_flag::{parse_go_int64, FlagDef};
pub use items::{first_positional, flag_bool, flag_value, flag_values, positionals, Edits, Item};
pub use restore::RESTORE_FLAGS;
pub use route::{argv_denial, check_argv, Enforced, Route};
pub use run::RUN_FLAGS;
pub use start::{StartArgs, START_FLAGS};
pub use update::{UpdateArgs, UPDATE_FLAGS};

use go_flag::{go_parse, lookup, split_flag};
use reorder::{reorder, Reorder};

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

/// What vibe-shim does with a verb (the first operand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// Judged: the verb can start a process, change its limits, or
    /// (checkpoint) make runc write host paths as root. Its arguments are
    /// read with its flag table, after urfave/cli's reorder unless the verb
    /// skips it (`exec`), and refused if unclassifiable.
    Enforced {
        flags: &'static [FlagDef],
        reorders: bool,
    },
    /// A runc verb that can neither start a process in a container nor
    /// change its limits: it reaches runc unmodified.
    PassThrough,
    /// vibe-shim's own verb: refused when vibe-shim runs as `runc` (our own
    /// hook entries run us as `vibe-shim`).
    Own,
}

const fn enforced(flags: &'static [FlagDef], reorders: bool) -> Treatment {
    Treatment::Enforced { flags, reorders }
}

/// Every verb vibe-shim knows, and what it does with it; any other verb is
/// refused (a future runc verb is judged before it runs). The enforced
/// verbs' flag tables are the union of runc 1.1, 1.2 and 1.3 (no flag
/// changed its kind); a flag an older runc lacks makes that runc refuse.
/// `help`/`h` is urfave/cli's own.
pub const VERBS: &[(&str, Treatment)] = &[
    ("create", enforced(CREATE_FLAGS, true)),
    ("run", enforced(RUN_FLAGS, true)),
    ("restore", enforced(RESTORE_FLAGS, true)),
    ("exec", enforced(EXEC_FLAGS, false)),
    ("update", enforced(UPDATE_FLAGS, true)),
    ("start", enforced(START_FLAGS, true)),
    ("checkpoint", enforced(CHECKPOINT_FLAGS, true)),
    ("delete", Treatment::PassThrough),
    ("events", Treatment::PassThrough),
    ("features", Treatment::PassThrough),
    ("kill", Treatment::PassThrough),
    ("list", Treatment::PassThrough),
    ("pause", Treatment::PassThrough),
    ("ps", Treatment::PassThrough),
    ("resume", Treatment::PassThrough),
    ("spec", Treatment::PassThrough),
    ("state", Treatment::PassThrough),
    ("help", Treatment::PassThrough),
    ("h", Treatment::PassThrough),
    ("hook", Treatment::Own),
    ("policy", Treatment::Own),
    ("authz", Treatment::Own),
    ("doctor", Treatment::Own),
    ("install", Treatment::Own),
    ("uninstall", Treatment::Own),
    ("egress", Treatment::Own),
    ("explain", Treatment::Own),
    ("probe", Treatment::Own),
    ("audit", Treatment::Own),
];

/// What vibe-shim does with `verb`; `None` for a verb it does not know.
pub fn treatment(verb: &str) -> Option<Treatment> {
    VERBS.iter().find(|(v, _)| *v == verb).map(|&(_, t)| t)
}

/// Whether `verb` is one vibe-shim judges.
pub fn is_enforced(verb: &str) -> bool {
    matches!(treatment(verb), Some(Treatment::Enforced { .. }))
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
    match treatment(verb) {
        Some(Treatment::Enforced { flags, reorders }) => classify(args, flags, reorders),
        _ => Err(ArgsError::Unknown(verb.to_string())),
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
