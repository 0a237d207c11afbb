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

use crate::config::NetworkSection;
use crate::lang::hosts::{Host, HostPattern};

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

    /// Whether some entry names `name` (a normalised name), on any port:
    /// what the DNS answerer of transparent egress asks.
    pub fn names(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| p.matches_name(name))
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
            let ok = match p.port() {
                Some(only) => only == port,
                None => self.ports.contains(&port),
            };
            if ok {
                return Ok(format!("[network] hosts {:?}", p.text()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::validate::network as validate;
    use crate::config::NetworkMode;
    use crate::lang::hosts::normalize_name;

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
        assert!(l.names("codeload.github.com") && l.names("api.anthropic.com"));
        assert!(!l.names("github.com") && !l.names("evil.example"));
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
