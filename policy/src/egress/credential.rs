//! A credential bound to a container: what the egress daemon needs to swap
//! the container's placeholder for the real secret, on requests to the
//! credential's own hosts only. It travels in the daemon's register request
//! and in its records; it never carries the secret itself, only where to
//! read it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where the secret goes in a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Inject {
    /// The header `name` (lower case) carries the placeholder, after
    /// `scheme` and one space when a scheme is set (`Bearer <token>`).
    Header {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scheme: Option<String>,
    },
    /// `Authorization: Basic base64(user:placeholder)`, with exactly this
    /// user: decoded strictly and re-encoded with the real secret.
    Basic { user: String },
}

/// One credential of one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// The policy's name for it, as logged.
    pub name: String,
    /// The exact host names (lower case) the secret may be sent to.
    pub hosts: Vec<String>,
    pub inject: Inject,
    /// The root-only file holding the secret, read per request.
    pub source: PathBuf,
    /// The value the container holds instead of the secret: random per
    /// container.
    pub placeholder: String,
}

impl Binding {
    /// The binding of policy entry `section` with the container's
    /// `placeholder`: hosts as the proxy compares them (normalised, lower
    /// case) and the header name in lower case. The config check already
    /// refused what could not be one.
    pub fn new(section: &crate::config::CredentialSection, placeholder: String) -> Binding {
        let hosts = section
            .hosts
            .iter()
            .map(|h| {
                crate::lang::hosts::normalize_name(h).unwrap_or_else(|_| h.to_ascii_lowercase())
            })
            .collect();
        let inject = match (&section.header, &section.basic_user) {
            (_, Some(user)) => Inject::Basic { user: user.clone() },
            (header, None) => Inject::Header {
                name: header
                    .as_deref()
                    .unwrap_or("authorization")
                    .to_ascii_lowercase(),
                scheme: section.scheme.clone(),
            },
        };
        Binding {
            name: section.name.clone(),
            hosts,
            inject,
            source: section.source.clone(),
            placeholder,
        }
    }
}

/// Placeholders shorter than this could match by chance: such a binding
/// fails every request (the policy side never makes one).
pub const MIN_PLACEHOLDER: usize = 16;

/// The characters of a placeholder's random part.
const ALPHABET: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// The format tags clients check at the start of a key, longest first
/// where one extends another. Only a listed tag shows: deriving one from
/// the key's shape would copy its random characters (base64url keys hold
/// `-` and `_` too).
const KNOWN_PREFIXES: &[&str] = &[
    "sk-ant-api03-",
    "sk-ant-admin01-",
    "sk-ant-oat01-",
    "sk-ant-",
    "sk-proj-",
    "sk-svcacct-",
    "sk-admin-",
    "sk-",
    "github_pat_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xapp-",
    "hf_",
    "npm_",
    "pypi-",
];

/// The visible prefix a placeholder keeps from its secret: the longest
/// [`KNOWN_PREFIXES`] tag it starts with (`sk-ant-api03-`, `ghp_`), and
/// never more than half the secret; nothing for any other key.
pub fn visible_prefix(secret: &str) -> &str {
    KNOWN_PREFIXES
        .iter()
        .filter(|tag| secret.starts_with(*tag) && tag.len() * 2 <= secret.len())
        .max_by_key(|tag| tag.len())
        .map_or("", |tag| &secret[..tag.len()])
}

/// The placeholder a container holds for `secret`: its
/// [`visible_prefix`], then characters of `[A-Za-z0-9]` drawn from
/// `random` (one byte each; the caller gives at least as many bytes as the
/// placeholder is long, or they are reused), up to the secret's length or
/// [`MIN_PLACEHOLDER`], whichever is
/// longer. Nothing of the secret past its prefix is used, and the result is
/// never the secret itself.
pub fn placeholder(secret: &str, random: &[u8]) -> String {
    let prefix = visible_prefix(secret);
    let len = secret.len().max(MIN_PLACEHOLDER);
    let mut out = String::with_capacity(len);
    out.push_str(prefix);
    let fill = len - prefix.len();
    for i in 0..fill {
        // An empty `random` still yields a placeholder (a fixed one).
        let byte = random.get(i % random.len().max(1)).copied().unwrap_or(0);
        // 256 = 4 * 62 + 8: the first 8 characters are drawn 5/256 of the
        // time instead of 4/256, a bias that costs a fraction of a bit.
        let c = ALPHABET[usize::from(byte) % ALPHABET.len()];
        out.push(char::from(c));
    }
    if out == secret {
        // One chance in 62^(half the length): change the last character.
        let last = out.pop().map_or(b'A', |c| c as u8);
        let other = if last == b'A' { 'B' } else { 'A' };
        out.push(other);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(seed: u8) -> Vec<u8> {
        (0..200u8)
            .map(|i| i.wrapping_mul(97).wrapping_add(seed).rotate_left(3))
            .collect()
    }

    #[test]
    fn prefixes_of_known_formats_are_kept() {
        let cases = [
            (
                "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
                "sk-ant-api03-",
            ),
            ("sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz", "sk-proj-"),
            ("sk-AbCdEfGhIjKlMnOpQrStUvWxYz", "sk-"),
            ("ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "ghp_"),
            (
                "github_pat_11AbCdEfGhIjKlMnOpQrStUvWxYz_0123456789",
                "github_pat_",
            ),
            ("glpat-AbCdEfGhIjKlMnOpQrSt", "glpat-"),
            ("xoxb-1234567890123-1234567890123-AbCdEfGhIjKl", "xoxb-"),
            // No format tag: nothing shows.
            ("AbCdEfGhIjKlMnOpQrStUvWxYz", ""),
            ("abcdefgh-ijklmnopqrstuvwxyz", ""),
            // Never more than half; no tag read off a key's shape.
            ("sk-ab", ""),
            ("ab-cd-ef", ""),
            ("a-b", ""),
            ("", ""),
        ];
        for (secret, prefix) in cases {
            assert_eq!(visible_prefix(secret), prefix, "{secret}");
            let p = placeholder(secret, &random(1));
            assert!(p.starts_with(prefix), "{secret}: {p}");
        }
    }

    #[test]
    fn length_is_kept_or_padded_to_the_minimum() {
        for secret in [
            "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
            "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
            "short",
            "x",
        ] {
            let p = placeholder(secret, &random(2));
            assert_eq!(p.len(), secret.len().max(MIN_PLACEHOLDER), "{secret}: {p}");
            let rest = &p[visible_prefix(secret).len()..];
            assert!(rest.bytes().all(|b| b.is_ascii_alphanumeric()), "{p}");
            assert_ne!(p, secret);
        }
    }

    #[test]
    fn the_random_part_is_random_and_not_the_secrets() {
        let secret = "sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        let a = placeholder(secret, &random(3));
        let b = placeholder(secret, &random(4));
        assert_ne!(a, b);
        let tail = &secret[visible_prefix(secret).len()..];
        for p in [&a, &b] {
            assert!(!p.contains(tail), "{p}");
            // Not even a quarter of the tail in a row.
            assert!(!p.contains(&tail[..tail.len() / 4]), "{p}");
        }
        // A secret whose tail the random bytes would spell is still
        // never its own placeholder.
        let spelled = placeholder("sk-ant-api03-xxxxxxxxxxxxxxxx", &[0; 64]);
        assert_eq!(placeholder(&spelled, &[0; 64]).len(), spelled.len());
        assert_ne!(placeholder(&spelled, &[0; 64]), spelled);
        // No random bytes at all: still a placeholder, never a panic.
        assert_eq!(placeholder("ghp_abc", &[]).len(), MIN_PLACEHOLDER);
    }
}

/// What the placeholder's shape tells the container about the secret.
#[cfg(test)]
mod attacks {
    use super::*;

    /// The visible prefix is a known format tag, never a run of short
    /// segments read off the key: the random part of many keys uses the
    /// base64url alphabet (`-` and `_` included), and a shape rule copied
    /// its first characters (6 bits each) into the placeholder.
    #[test]
    fn the_visible_prefix_never_copies_the_secrets_random_characters() {
        let cases = [
            (
                "sk-proj-Ab3_x9QmZ0LkPq7RsTuVwXyZa1b2c3d4e5f6g7h8i9j0",
                "sk-proj-",
            ),
            (
                "sk-ant-api03-Q-zYxWvUtSrQpOnMlKjIhGfEdCbA9876543210",
                "sk-ant-api03-",
            ),
            ("a1b2-c3d4-e5f6-g7h8-i9j0", ""),
        ];
        for (secret, shown) in cases {
            assert_eq!(visible_prefix(secret), shown, "{secret}");
            let p = placeholder(secret, &[7u8; 64]);
            assert!(p.starts_with(shown), "{p}");
            assert_eq!(p[shown.len()..].chars().next(), Some('H'), "{p}");
            assert_eq!(p.len(), secret.len(), "{p}");
        }
    }
}
