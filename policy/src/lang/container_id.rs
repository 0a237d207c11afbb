//! The one rule for a container id, wherever vibe-shim uses one as a name:
//! a file name (state directories, the egress daemon's records) and part of
//! an nftables table name (open mode's host table).
//!
//! It is the strictest rule that still accepts every id an engine makes:
//! Docker, podman and CRI give runc 64 hex digits; containerd's and the
//! engines' names are `[A-Za-z0-9][A-Za-z0-9_.-]*`. runc itself also allows
//! `+` and a leading `.`, `_` or `-`; nft's parser takes no `+`, and a
//! leading `-` reads as an option, so neither is accepted here. The length
//! bound keeps `vibe_shim_<id>` within nftables' 256-byte names and
//! `<id>.json` within a file name.

/// Longest id accepted.
pub const MAX_LEN: usize = 200;

/// Whether `id` is a container id vibe-shim can name things after: 1 to
/// [`MAX_LEN`] bytes, an ASCII letter or digit first, then letters, digits,
/// `_`, `.` or `-`. Never `.` or `..`, never a `/`.
pub fn is_valid(id: &str) -> bool {
    let bytes = id.as_bytes();
    match bytes.split_first() {
        Some((first, rest)) => {
            bytes.len() <= MAX_LEN
                && first.is_ascii_alphanumeric()
                && rest
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_what_the_engines_make() {
        let docker = "0123456789abcdef".repeat(4);
        for ok in [
            docker.as_str(),
            "abc",
            "a.b-c_d",
            "web-1",
            "k8s_POD_x.y",
            "0",
            &"x".repeat(MAX_LEN),
        ] {
            assert!(is_valid(ok), "{ok}");
        }
    }

    #[test]
    fn refuses_what_could_escape_or_not_name_a_table() {
        for bad in [
            "",
            ".",
            "..",
            ".x",
            "_x",
            "-x",
            "a/b",
            "../x",
            "a b",
            "a+b",
            "a\"b",
            "ä",
            "x\n",
            &"x".repeat(MAX_LEN + 1),
        ] {
            assert!(!is_valid(bad), "{bad:?}");
        }
    }
}
