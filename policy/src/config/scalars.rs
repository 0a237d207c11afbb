//! The policy's values that have a syntax of their own, and the
//! normalisers that map every spelling of a name onto one.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::sections::RLIMIT_NAMES;

/// One `filesystem.tmpfs` entry: a private tmpfs at `path`, root-owned,
/// with exactly `mode` (runc would copy the image directory's mode onto it;
/// vibe-shim's createContainer hook sets this one after runc's mounts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TmpfsEntry {
    pub path: PathBuf,
    pub mode: TmpfsMode,
}

impl TmpfsEntry {
    /// An entry written as a plain path: mode 1777.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            mode: TmpfsMode::DEFAULT,
        }
    }
}

impl<'de> Deserialize<'de> for TmpfsEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            path: PathBuf,
            mode: TmpfsMode,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Path(PathBuf),
            Table(Table),
        }
        match Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "a tmpfs entry is \"/path\" or { path = \"/path\", mode = \"0755\" } \
                 (both keys, no others)",
            )
        })? {
            Raw::Path(path) => Ok(TmpfsEntry::new(path)),
            Raw::Table(t) => Ok(TmpfsEntry {
                path: t.path,
                mode: t.mode,
            }),
        }
    }
}

/// A tmpfs directory's permission bits: 3 or 4 octal digits, at most
/// `1777` (set-id bits are refused), written as a string (`"0700"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmpfsMode(pub u32);

impl TmpfsMode {
    /// Sticky and world-writable, like `/tmp` on every distribution.
    pub const DEFAULT: TmpfsMode = TmpfsMode(0o1777);
}

impl fmt::Display for TmpfsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

impl FromStr for TmpfsMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad =
            || format!("invalid tmpfs mode {text:?}: expected 3 or 4 octal digits, at most 1777");
        if !(3..=4).contains(&text.len()) || !text.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return Err(bad());
        }
        let mode = u32::from_str_radix(text, 8).map_err(|_| bad())?;
        if mode > 0o1777 {
            return Err(bad());
        }
        Ok(TmpfsMode(mode))
    }
}

impl Serialize for TmpfsMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TmpfsMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
pub(crate) fn parse_uid_gid(text: &str) -> Option<(u32, u32)> {
    let (uid, gid) = text.split_once(':')?;
    Some((uid.parse().ok()?, gid.parse().ok()?))
}

/// One `network.preview_ports` entry: a container TCP port (`8000`) or an
/// inclusive range (`"3000-3999"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl PortRange {
    pub fn overlaps(&self, other: &PortRange) -> bool {
        self.lo <= other.hi && other.lo <= self.hi
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

impl FromStr for PortRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("invalid port range {text:?}: expected PORT or LOW-HIGH, 1-65535");
        let (lo, hi) = text.split_once('-').unwrap_or((text, text));
        let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(bad());
        }
        let lo: u16 = lo.parse().map_err(|_| bad())?;
        let hi: u16 = hi.parse().map_err(|_| bad())?;
        if lo == 0 || lo > hi {
            return Err(bad());
        }
        Ok(PortRange { lo, hi })
    }
}

impl<'de> Deserialize<'de> for PortRange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Port(i64),
            Text(String),
        }
        let msg = "a port entry is a number (8000) or a range string (\"3000-3999\"), 1-65535";
        match Raw::deserialize(d).map_err(|_| serde::de::Error::custom(msg))? {
            Raw::Port(p) => match u16::try_from(p) {
                Ok(p) if p > 0 => Ok(PortRange { lo: p, hi: p }),
                _ => Err(serde::de::Error::custom(msg)),
            },
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl Serialize for PortRange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.lo == self.hi {
            s.serialize_u16(self.lo)
        } else {
            s.collect_str(self)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
}

/// One `[network] allow` entry: `IP|CIDR[:PORT[-PORT]][/tcp|/udp]`; IPv6
/// addresses with a port are written `[2001:db8::1]:443`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllowRule {
    pub net: IpNet,
    /// Inclusive port range; `None` means every port.
    pub ports: Option<(u16, u16)>,
    pub protocol: Protocol,
}

impl fmt::Display for AllowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = match (self.net, self.ports) {
            (IpNet::V6(n), Some(_)) => format!("[{n}]"),
            (n, _) => n.to_string(),
        };
        write!(f, "{host}")?;
        match self.ports {
            Some((lo, hi)) if lo == hi => write!(f, ":{lo}")?,
            Some((lo, hi)) => write!(f, ":{lo}-{hi}")?,
            None => {}
        }
        match self.protocol {
            Protocol::Tcp => Ok(()),
            Protocol::Udp => write!(f, "/udp"),
        }
    }
}

impl FromStr for AllowRule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("invalid allow entry {text:?}: {why}");
        // A trailing /tcp or /udp names the protocol; /NN is a prefix length.
        let (rest, protocol) = if let Some(r) = text.strip_suffix("/udp") {
            (r, Protocol::Udp)
        } else if let Some(r) = text.strip_suffix("/tcp") {
            (r, Protocol::Tcp)
        } else {
            (text, Protocol::Tcp)
        };
        let (host, port) = if let Some(inner) = rest.strip_prefix('[') {
            let (addr, after) = inner.split_once(']').ok_or_else(|| bad("missing ']'"))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad("expected ':' after ']'"))?,
                ),
            };
            (addr, port)
        } else if rest.matches(':').count() == 1 {
            let (h, p) = rest.split_once(':').ok_or_else(|| bad("bad port"))?;
            (h, Some(p))
        } else {
            (rest, None)
        };
        let net = if host.contains('/') {
            IpNet::from_str(host).map_err(|e| bad(&e.to_string()))?
        } else {
            IpNet::from(IpAddr::from_str(host).map_err(|e| bad(&e.to_string()))?)
        };
        let ports = match port {
            None => None,
            Some(p) => {
                let (lo, hi) = match p.split_once('-') {
                    Some((lo, hi)) => (lo, hi),
                    None => (p, p),
                };
                let lo: u16 = lo.parse().map_err(|_| bad("bad port"))?;
                let hi: u16 = hi.parse().map_err(|_| bad("bad port"))?;
                if lo == 0 || lo > hi {
                    return Err(bad("port range must be 1-65535 and low-high"));
                }
                Some((lo, hi))
            }
        };
        Ok(AllowRule {
            net: net.trunc(),
            ports,
            protocol,
        })
    }
}

impl Serialize for AllowRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AllowRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A byte count: an integer, or a string with a binary suffix (`"64m"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bytes(n) => Ok(ByteSize(n)),
            Raw::Text(text) => parse_size(&text).map(ByteSize).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "invalid size {text:?}: expected bytes or a number with k, m, g or t"
                ))
            }),
        }
    }
}

/// `123`, `64k`, `64m`, `4g`, `1t` (binary multiples, either case, an
/// optional `b`/`ib`), as the kernel's `memparse` and Docker read them.
/// Only decimal digits: `None` for anything else, or on overflow.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    let (number, suffix) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let suffix = suffix.to_ascii_lowercase();
    let unit = suffix
        .strip_suffix("ib")
        .or_else(|| suffix.strip_suffix('b').filter(|s| !s.is_empty()))
        .unwrap_or(&suffix);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

/// `nofile`, `NOFILE` and `RLIMIT_NOFILE` all name one limit.
pub fn normalise_rlimit(name: &str) -> Option<&'static str> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("RLIMIT_") {
        upper
    } else {
        format!("RLIMIT_{upper}")
    };
    RLIMIT_NAMES.iter().copied().find(|n| *n == full)
}

/// `net_admin`, `NET_ADMIN` and `CAP_NET_ADMIN` all name one capability.
pub fn normalise_capability(name: &str) -> Option<String> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("CAP_") {
        upper
    } else {
        format!("CAP_{upper}")
    };
    caps::Capability::from_str(&full).ok().map(|_| full)
}
