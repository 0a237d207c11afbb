//! `[network] hosts`: which names (and ports) the proxy tunnels to.
//!
//! An entry is `name`, `*.name`, either optionally followed by `:PORT`:
//! - `name` matches that name only; `*.name` matches every name below it
//!   (`a.name`, `a.b.name`) but NOT `name` itself: list both to allow both.
//! - with `:PORT` the entry allows that port only; without one, the ports in
//!   `[network] ports` (default 80 and 443).
//! - names are ASCII (IDNs in their `xn--` form), compared without case and
//!   with one trailing dot removed. IP literals are not names: an entry that
//!   is one is refused at load time (mode "allowlist" takes addresses), and a
//!   request for an IP literal is refused.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::config::{NetworkMode, NetworkSection};

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

/// A container's compiled `hosts` and `ports`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList {
    patterns: Vec<HostPattern>,
    ports: Vec<u16>,
}

impl HostList {
    pub fn new(net: &NetworkSection) -> Result<HostList, String> {
        let patterns = net
            .hosts
            .iter()
            .map(|h| h.parse())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(HostList {
            patterns,
            ports: net.ports.clone(),
        })
    }

    /// Whether `host:port` may be asked for: `Ok(rule)` names the entry
    /// that allows it, `Err(reason)` says why not.
    pub fn judge(&self, host: &Host, port: u16) -> Result<String, String> {
        let name = match host {
            Host::Ip(_) => {
                return Err("an IP address, not a name in [network] hosts".into());
            }
            Host::Name(n) => n,
        };
        let mut named = false;
        for p in self.patterns.iter().filter(|p| p.matches_name(name)) {
            named = true;
            let ok = match p.port {
                Some(only) => only == port,
                None => self.ports.contains(&port),
            };
            if ok {
                return Ok(format!("[network] hosts {:?}", p.text));
            }
        }
        if named {
            Err(format!(
                "port {port} not allowed for {name} in [network] hosts/ports"
            ))
        } else {
            Err("not in [network] hosts".into())
        }
    }
}

/// Checks `hosts`, `ports` and `enforce` of `[network]`; the error names
/// the key.
pub fn validate(net: &NetworkSection) -> Result<(), (&'static str, String)> {
    let defaults = NetworkSection::default();
    if net.mode != NetworkMode::Proxy {
        if !net.hosts.is_empty() {
            return Err(("network.hosts", "only applies with mode \"proxy\"".into()));
        }
        if net.ports != defaults.ports {
            return Err(("network.ports", "only applies with mode \"proxy\"".into()));
        }
        if net.enforce != defaults.enforce {
            return Err(("network.enforce", "only applies with mode \"proxy\"".into()));
        }
        return Ok(());
    }
    for entry in &net.hosts {
        entry
            .parse::<HostPattern>()
            .map_err(|e| ("network.hosts", e))?;
    }
    if net.enforce && net.hosts.is_empty() {
        return Err((
            "network.hosts",
            "mode \"proxy\" needs at least one entry (use mode \"none\" for no egress, or enforce = false to learn what is needed)".into(),
        ));
    }
    for (i, port) in net.ports.iter().enumerate() {
        if *port == 0 {
            return Err(("network.ports", "ports are 1-65535".into()));
        }
        if net.ports[..i].contains(port) {
            return Err(("network.ports", format!("port {port} listed twice")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(hosts: &[&str], ports: &[u16]) -> HostList {
        HostList::new(&NetworkSection {
            mode: NetworkMode::Proxy,
            hosts: hosts.iter().map(|s| s.to_string()).collect(),
            ports: ports.to_vec(),
            ..NetworkSection::default()
        })
        .unwrap()
    }

    fn name(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    #[test]
    fn names_are_normalised() {
        assert_eq!(
            normalize_name("API.Anthropic.COM.").unwrap(),
            "api.anthropic.com"
        );
        assert_eq!(normalize_name("_srv.example").unwrap(), "_srv.example");
        assert_eq!(
            normalize_name("xn--bcher-kva.example").unwrap(),
            "xn--bcher-kva.example"
        );
        for bad in [
            "",
            ".",
            "a..b",
            "a.b..",
            "bücher.example",
            "-a.example",
            "a-.example",
            "a b.example",
            "a/b",
            "a:b",
            "a%2eb",
            "127.1",
            "2130706433",
            "1.2.3.4.5",
            "0x7f.0x1",
            "evil.example\0",
        ] {
            assert!(normalize_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(normalize_name(&"a.".repeat(128)).is_err());
        assert!(normalize_name(&format!("{}.example", "a".repeat(64))).is_err());
        assert!(
            normalize_name("0xcafe.example").is_ok(),
            "a hex-looking label under a TLD is a name"
        );
    }

    #[test]
    fn ip_literals_are_hosts_not_names() {
        assert_eq!(
            Host::parse("203.0.113.5").unwrap(),
            Host::Ip("203.0.113.5".parse().unwrap())
        );
        assert_eq!(
            Host::parse("[2001:db8::1]").unwrap(),
            Host::Ip("2001:db8::1".parse().unwrap())
        );
        assert!(Host::parse("[nope]").is_err());
        let l = list(&["pypi.org"], &[443]);
        assert!(l
            .judge(&name("203.0.113.5"), 443)
            .unwrap_err()
            .contains("IP address"));
    }

    #[test]
    fn exact_and_wildcard_entries() {
        let l = list(&["api.anthropic.com", "*.github.com"], &[80, 443]);
        assert!(l.judge(&name("api.anthropic.com"), 443).is_ok());
        assert!(l.judge(&name("API.ANTHROPIC.COM."), 80).is_ok());
        assert!(l.judge(&name("x.api.anthropic.com"), 443).is_err());
        assert!(l.judge(&name("codeload.github.com"), 443).is_ok());
        assert!(l.judge(&name("a.b.github.com"), 443).is_ok());
        // *.x does not include x.
        assert_eq!(
            l.judge(&name("github.com"), 443).unwrap_err(),
            "not in [network] hosts"
        );
        assert!(l.judge(&name("evilgithub.com"), 443).is_err());
        assert!(l.judge(&name("github.com.evil.example"), 443).is_err());
        assert!(l.judge(&name("evil.example"), 443).is_err());
        assert!(
            Host::parse("*.github.com").is_err(),
            "a '*' in a request is no name"
        );
    }

    #[test]
    fn ports_per_entry_and_default() {
        let l = list(
            &["pypi.org:443", "example.com", "example.com:8443"],
            &[80, 443],
        );
        assert!(l.judge(&name("pypi.org"), 443).is_ok());
        let why = l.judge(&name("pypi.org"), 80).unwrap_err();
        assert!(why.contains("port 80"), "{why}");
        assert!(l.judge(&name("example.com"), 80).is_ok());
        assert!(l.judge(&name("example.com"), 8443).is_ok());
        assert!(l.judge(&name("example.com"), 22).is_err());
        let rule = l.judge(&name("example.com"), 8443).unwrap();
        assert_eq!(rule, "[network] hosts \"example.com:8443\"");
    }

    #[test]
    fn bad_entries_are_refused() {
        for bad in [
            "",
            "*",
            "*.",
            "a.*.example",
            "*example.com",
            "**.example.com",
            "203.0.113.5",
            "203.0.113.5:443",
            "[2001:db8::1]:443",
            "2001:db8::1",
            "bücher.example",
            "example.com:0",
            "example.com:65536",
            "example.com:",
            "exa mple.com",
            "http://example.com",
        ] {
            assert!(bad.parse::<HostPattern>().is_err(), "{bad:?} accepted");
        }
        assert!("*.github.com:443".parse::<HostPattern>().is_ok());
    }

    #[test]
    fn validation() {
        let mut net = NetworkSection::default();
        assert!(validate(&net).is_ok());
        net.hosts = vec!["pypi.org".into()];
        assert_eq!(validate(&net).unwrap_err().0, "network.hosts");
        net.mode = NetworkMode::Proxy;
        assert!(validate(&net).is_ok());
        net.hosts = vec!["203.0.113.5".into()];
        assert_eq!(validate(&net).unwrap_err().0, "network.hosts");
        net.hosts.clear();
        assert_eq!(validate(&net).unwrap_err().0, "network.hosts");
        net.enforce = false;
        assert!(validate(&net).is_ok(), "report mode may start empty");
        net.ports = vec![443, 443];
        assert_eq!(validate(&net).unwrap_err().0, "network.ports");
        net.ports = vec![0];
        assert_eq!(validate(&net).unwrap_err().0, "network.ports");
        let open = NetworkSection {
            mode: NetworkMode::Open,
            ports: vec![443],
            ..NetworkSection::default()
        };
        assert_eq!(validate(&open).unwrap_err().0, "network.ports");
        let open = NetworkSection {
            mode: NetworkMode::Open,
            enforce: false,
            ..NetworkSection::default()
        };
        assert_eq!(validate(&open).unwrap_err().0, "network.enforce");
    }

    #[test]
    fn the_policy_file_is_checked() {
        let parse = |t: &str| crate::Policy::from_toml_str(t, std::path::Path::new("t.toml"));
        let p =
            parse("[network]\nmode = \"proxy\"\nhosts = [\"*.github.com\", \"pypi.org:443\"]\n")
                .unwrap();
        assert_eq!(p.network.ports, vec![80, 443]);
        assert!(p.network.enforce);
        let e = parse("[network]\nmode = \"proxy\"\nhosts = [\"203.0.113.5\"]\n").unwrap_err();
        assert!(e.to_string().contains("network.hosts"), "{e}");
        assert!(parse("[network]\nmode = \"proxy\"\n").is_err());
        assert!(parse("[network]\nmode = \"proxy\"\nenforce = false\n").is_ok());
        assert!(parse("[network]\nhosts = [\"pypi.org\"]\n").is_err());
    }
}
