//! Go's `flag` package as urfave/cli v1 drives it: the flag kinds, how a
//! token splits into a name and an inline value, Go's value parsers, and
//! `FlagSet.Parse` plus urfave/cli's `normalizeFlags`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use super::items::Item;
use super::ArgsError;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

pub(super) const fn value(names: &'static [&'static str]) -> FlagDef {
    FlagDef {
        names,
        kind: Kind::Str,
    }
}

pub(super) const fn boolean(names: &'static [&'static str]) -> FlagDef {
    FlagDef {
        names,
        kind: Kind::Bool,
    }
}

pub(super) const fn int(names: &'static [&'static str]) -> FlagDef {
    FlagDef {
        names,
        kind: Kind::Int,
    }
}

pub(super) const fn slice(names: &'static [&'static str]) -> FlagDef {
    FlagDef {
        names,
        kind: Kind::StrSlice,
    }
}

pub(super) const fn int64_slice(names: &'static [&'static str]) -> FlagDef {
    FlagDef {
        names,
        kind: Kind::Int64Slice,
    }
}

/// urfave/cli's `HelpFlag`, appended to the app and to every verb.
pub(super) const HELP: FlagDef = boolean(&["help", "h"]);

/// The most fds `--preserve-fds` may hand on (the usual RLIMIT_NOFILE soft
/// limit): socket activation needs a handful, and the number also places
/// vibe-shim's private memfd above the preserved range.
pub const MAX_PRESERVE_FDS: i64 = 1024;

/// A flag's name and its inline `=value`.
pub(super) type FlagParts<'a> = (&'a [u8], Option<&'a OsStr>);

/// A flag token as Go's `flag` splits it: the name and an inline `=value`.
/// `None` for a non-flag (`-`, `x`) and for `--`.
pub(super) fn split_flag(token: &OsStr) -> Option<Result<FlagParts<'_>, ArgsError>> {
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

pub(super) fn lossy(value: &OsStr) -> String {
    value.to_string_lossy().into_owned()
}

pub(super) fn lookup<'a>(table: &'a [FlagDef], name: &[u8]) -> Option<&'a FlagDef> {
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

pub(super) fn check_value(def: &FlagDef, value: &OsStr) -> Result<(), ArgsError> {
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

/// Go's `FlagSet.Parse` over `tokens` (index into the verb's arguments,
/// token), then urfave/cli's `normalizeFlags`. Flags come out in the order
/// Go sets them, then the operands in `context.Args()` order.
pub(super) fn go_parse(
    tokens: &[(usize, &OsStr)],
    table: &[FlagDef],
) -> Result<Vec<Item>, ArgsError> {
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
