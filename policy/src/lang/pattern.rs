//! The argument and env pattern language of `[[hooks.allow]]`: literal
//! text with placeholders (`{id}`, `{shortid}`, `{path}`, `{target}`,
//! `{word}`) that each accept a narrow shape, so an allowed hook's
//! arguments can vary only where the administrator said.

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum PatternError {
    #[error("{0:?}: unknown placeholder {{{1}}}")]
    Unknown(String, String),
    #[error("{0:?}: unbalanced brace")]
    Brace(String),
    #[error("{0:?}: two placeholders need text between them")]
    Adjacent(String),
    #[error("{0:?}: an env pattern must start with a literal NAME=")]
    EnvName(String),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Slot {
    Id,
    ShortId,
    Path,
    Target,
    Word,
}

#[derive(Debug, PartialEq)]
enum Piece<'a> {
    Text(&'a str),
    Slot(Slot),
}

fn parse(pattern: &str) -> Result<Vec<Piece<'_>>, PatternError> {
    let brace = || PatternError::Brace(pattern.to_string());
    let mut pieces = Vec::new();
    let mut rest = pattern;
    while !rest.is_empty() {
        let Some(open) = rest.find('{') else {
            if rest.contains('}') {
                return Err(brace());
            }
            pieces.push(Piece::Text(rest));
            break;
        };
        let text = &rest[..open];
        if text.contains('}') {
            return Err(brace());
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(brace)?;
        let name = &after[..close];
        let slot = match name {
            "id" => Slot::Id,
            "shortid" => Slot::ShortId,
            "path" => Slot::Path,
            "target" => Slot::Target,
            "word" => Slot::Word,
            _ if name.contains('{') => return Err(brace()),
            _ => return Err(PatternError::Unknown(pattern.into(), name.into())),
        };
        if matches!(pieces.last(), Some(Piece::Slot(_))) {
            return Err(PatternError::Adjacent(pattern.to_string()));
        }
        pieces.push(Piece::Slot(slot));
        rest = &after[close + 1..];
    }
    Ok(pieces)
}

/// Validates an argument pattern (for the config parser).
pub fn check_pattern(pattern: &str) -> Result<(), PatternError> {
    parse(pattern).map(|_| ())
}

/// Validates an env pattern: a literal `NAME=` first, so a placeholder can
/// never choose the variable (`LD_PRELOAD`).
pub fn check_env_pattern(pattern: &str) -> Result<(), PatternError> {
    match parse(pattern)?.first() {
        Some(Piece::Text(text)) if text.find('=').is_some_and(|i| i > 0) => Ok(()),
        _ => Err(PatternError::EnvName(pattern.to_string())),
    }
}

/// Whether `value` matches `pattern` (an invalid pattern matches nothing).
pub fn pattern_matches(pattern: &str, value: &str, id: &str) -> bool {
    parse(pattern).is_ok_and(|pieces| match_pieces(&pieces, value, id))
}

fn match_pieces(pieces: &[Piece], value: &str, id: &str) -> bool {
    match pieces.split_first() {
        None => value.is_empty(),
        Some((Piece::Text(text), rest)) => value
            .strip_prefix(text)
            .is_some_and(|tail| match_pieces(rest, tail, id)),
        Some((Piece::Slot(slot), rest)) => match rest.first() {
            None => slot_accepts(*slot, value, id),
            Some(Piece::Text(text)) => value.match_indices(text).any(|(end, _)| {
                slot_accepts(*slot, &value[..end], id) && match_pieces(rest, &value[end..], id)
            }),
            Some(Piece::Slot(_)) => false,
        },
    }
}

fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "/._+-@%,:=~".contains(c)
}

fn slot_accepts(slot: Slot, value: &str, id: &str) -> bool {
    match slot {
        Slot::Id => !id.is_empty() && value == id,
        Slot::ShortId => {
            value.len() == 12
                && value
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        }
        Slot::Path => {
            value.starts_with('/')
                && value.chars().all(path_char)
                && crate::lang::json::clean_path(value) == value
        }
        Slot::Target => {
            !value.is_empty() && !value.starts_with('-') && value.chars().all(path_char)
        }
        Slot::Word => {
            !value.is_empty()
                && !value.starts_with('-')
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse_strictly() {
        assert!(check_pattern("-exec-root={path}").is_ok());
        assert!(check_pattern("{target}::{path}").is_ok());
        assert!(check_pattern("").is_ok());
        assert_eq!(
            check_pattern("{nope}"),
            Err(PatternError::Unknown("{nope}".into(), "nope".into()))
        );
        for bad in ["{path", "path}", "{{id}}", "a}b{id}"] {
            assert!(
                matches!(check_pattern(bad), Err(PatternError::Brace(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            check_pattern("{path}{id}"),
            Err(PatternError::Adjacent(_))
        ));
        assert!(check_env_pattern("A={word}").is_ok());
        for bad in ["{word}=x", "=x", "NOEQUALS"] {
            assert!(check_env_pattern(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn placeholders_match_exactly() {
        let m = |p: &str, v: &str| pattern_matches(p, v, "abc");
        assert!(m("{id}", "abc"));
        assert!(!m("{id}", "abcd"));
        assert!(!pattern_matches("{id}", "", ""));
        assert!(m("{shortid}", "0123456789ab"));
        assert!(!m("{shortid}", "0123456789abc"));
        assert!(m("{path}", "/"));
        assert!(m("{path}", "/run/docker"));
        for bad in [
            "",
            "run",
            "/run/",
            "/run//x",
            "/run/./x",
            "/run/../x",
            "/a b",
            "/a\nb",
        ] {
            assert!(!m("{path}", bad), "{bad:?}");
        }
        assert!(m(
            "{target}::{path}",
            "../card1::/dev/dri/by-path/pci-0000:38:00.0-card"
        ));
        assert!(!m("{target}::{path}", "-x::/y"));
        assert!(!m("{target}::{path}", "::/y"));
        assert!(m("{word}", "535.104.05"));
        assert!(!m("{word}", "-v"));
        assert!(!m("{word}", "a/b"));
        assert!(m("x", "x"));
        assert!(!m("x", "xx"));
    }
}
