//! The host-name grammar of `[network] hosts`: a name (ASCII, IDNs in
//! their `xn--` form, compared without case and one trailing dot), an IP
//! literal (never a name), and the `name` / `*.name` / `:PORT` patterns
//! that the config checks and the egress proxy judges with.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("empty host name")]
    Empty,
    #[error("host name longer than 253 characters")]
    TooLong,
    #[error("host name {0:?} is not ASCII (write an IDN in its xn-- form)")]
    NotAscii(String),
    #[error(
        "host name {0:?} has an empty or over-long label, or a character other than a-z 0-9 - _"
    )]
    BadLabel(String),
    #[error("host {0:?} looks numeric but is not a plain IP address")]
    Numeric(String),
}

/// A request's target host: a normalised name, or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Host {
    /// Parses a host as written in a request (`[v6]` in brackets).
    pub fn parse(text: &str) -> Result<Host, NameError> {
        if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            return inner
                .parse::<std::net::Ipv6Addr>()
                .map(|a| Host::Ip(IpAddr::V6(a)))
                .map_err(|_| NameError::BadLabel(text.to_string()));
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Host::Ip(ip));
        }
        normalize_name(text).map(Host::Name)
    }

    /// The text logged and shown in a refusal (no brackets).
    pub fn text(&self) -> String {
        match self {
            Host::Name(n) => n.clone(),
            Host::Ip(ip) => ip.to_string(),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// Lower-cases `raw`, drops one trailing dot and checks it is a DNS name:
/// labels of 1-63 of `a-z 0-9 - _`, not starting or ending with `-`, at
/// most 253 characters, and a last label that is not all digits (the C
/// resolver reads `127.1` or `2130706433` as an address).
pub fn normalize_name(raw: &str) -> Result<String, NameError> {
    if !raw.is_ascii() {
        return Err(NameError::NotAscii(raw.to_string()));
    }
    let name = raw.strip_suffix('.').unwrap_or(raw).to_ascii_lowercase();
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > 253 {
        return Err(NameError::TooLong);
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !ok {
            return Err(NameError::BadLabel(raw.to_string()));
        }
    }
    // inet_aton's parts are decimal, octal or 0x-hex; no TLD looks like one.
    let last = name.rsplit('.').next().unwrap_or("");
    let hex = last
        .strip_prefix("0x")
        .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    if hex || last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NameError::Numeric(raw.to_string()));
    }
    Ok(name)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum NameMatch {
    Exact(String),
    /// Strictly below this name.
    Below(String),
}

/// One `[network] hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    name: NameMatch,
    port: Option<u16>,
    text: String,
}

impl HostPattern {
    pub fn matches_name(&self, name: &str) -> bool {
        match &self.name {
            NameMatch::Exact(n) => n == name,
            NameMatch::Below(parent) => name
                .strip_suffix(parent.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }

    /// The entry as the admin wrote it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The one port the entry allows; `None`: the list's default ports.
    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

impl FromStr for HostPattern {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: String| format!("invalid hosts entry {text:?}: {why}");
        let (name, port) = match text.rsplit_once(':') {
            Some((n, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                let port: u16 = p.parse().map_err(|_| bad("port must be 1-65535".into()))?;
                if port == 0 {
                    return Err(bad("port must be 1-65535".into()));
                }
                (n, Some(port))
            }
            _ => (text, None),
        };
        let unbracketed = name.trim_start_matches('[').trim_end_matches(']');
        if name.parse::<IpAddr>().is_ok()
            || unbracketed.parse::<IpAddr>().is_ok()
            || text.parse::<IpAddr>().is_ok()
        {
            return Err(bad(
                "an IP address, not a name (mode \"allowlist\" takes addresses)".into(),
            ));
        }
        let (below, rest) = match name.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, name),
        };
        if rest.contains('*') {
            return Err(bad("'*' only as a leading \"*.\"".into()));
        }
        let rest = normalize_name(rest).map_err(|e| bad(e.to_string()))?;
        Ok(HostPattern {
            name: if below {
                NameMatch::Below(rest)
            } else {
                NameMatch::Exact(rest)
            },
            port,
            text: text.to_string(),
        })
    }
}
