//! A verb's arguments as read: flags and operands with the index of each
//! token, the lookups on them, and the edits that keep every other byte.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use super::go_flag::parse_go_bool;

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
