//! Text made fit for a one-line message. Two shapes, named for what they
//! do: a parser's multi-line error folded onto one line, and client text
//! shown safely (no control characters, bounded length).

/// Every run of whitespace (a TOML error's line breaks and caret lines)
/// becomes one space.
pub fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` on one line (control characters escaped), at most `max` chars.
pub fn one_line(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for (count, c) in text.chars().enumerate() {
        if count >= max {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
