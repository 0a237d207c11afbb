//! What a redirected (transparent) connection asks for, from its first
//! bytes: the TLS ClientHello's SNI, or the plain HTTP request's `Host`.
//! The destination the client dialled is a fake address at best
//! ([`super::dns`]); it only says which name the client resolved, and the
//! name read here must be that one. The caller then judges the name and
//! port exactly as a CONNECT (or absolute-form request) and resolves it
//! again; nothing about the client's destination is trusted.

use super::request::{self, Request, RequestError};

/// The port of the daemon's transparent listener on the container's
/// loopback; the nat chain redirects TCP to fake addresses there.
pub const TRANSPARENT_PORT: u16 = 3129;
use super::sni::{client_hello_sni, SniError};

/// What the first bytes name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// TLS to this (normalised) server name; the bytes go on untouched.
    Tls(String),
    /// One plain HTTP request, read as the proxy reads an absolute-form
    /// one (so it is forwarded alone, with `Connection: close`).
    Http(Box<Request>),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskedError {
    #[error("TLS ClientHello: {0}")]
    Tls(#[from] SniError),
    #[error("no SNI in the TLS ClientHello (an IP literal or no name)")]
    NoSni,
    #[error("HTTP request: {0}")]
    Http(#[from] RequestError),
    #[error("HTTP request without a Host header")]
    NoHost,
    #[error("neither a TLS ClientHello nor an HTTP request")]
    Unknown,
    #[error("{asked} is not {resolved}, the name the client resolved to this address")]
    OtherName { asked: String, resolved: String },
}

/// Reads the first bytes of a redirected connection to `port`.
/// `Ok(None)`: feed more. `resolved`: the name behind the fake address the
/// client dialled, `None` when it dialled another address.
pub fn asked(
    buf: &[u8],
    port: u16,
    resolved: Option<&str>,
    cap: usize,
) -> Result<Option<Asked>, AskedError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let asked = if first == 22 {
        match client_hello_sni(buf, cap)? {
            None => return Ok(None),
            Some(None) => return Err(AskedError::NoSni),
            Some(Some(name)) => Asked::Tls(name),
        }
    } else if first.is_ascii_uppercase() {
        match http(buf, port, cap)? {
            None => return Ok(None),
            Some(req) => Asked::Http(Box::new(req)),
        }
    } else {
        return Err(AskedError::Unknown);
    };
    let name = match &asked {
        Asked::Tls(name) => name.clone(),
        Asked::Http(req) => req.host.text(),
    };
    match resolved {
        Some(r) if r != name => Err(AskedError::OtherName {
            asked: name,
            resolved: r.to_string(),
        }),
        _ => Ok(Some(asked)),
    }
}

/// An origin-form request read as the absolute-form request it stands for
/// (`GET /p` with `Host: h` is `GET http://h:port/p`), so the one strict
/// parser judges it.
fn http(buf: &[u8], port: u16, cap: usize) -> Result<Option<Request>, AskedError> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() >= cap {
            return Err(RequestError::TooLarge(cap).into());
        }
        return Ok(None);
    };
    let head = &buf[..end + 4];
    let text =
        std::str::from_utf8(head).map_err(|_| RequestError::Malformed("header is not UTF-8"))?;
    let (line, rest) = text
        .split_once("\r\n")
        .ok_or(RequestError::Malformed("request line"))?;
    let mut parts = line.splitn(3, ' ');
    let (method, path, version) = match (parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(p), Some(v)) if p.starts_with('/') => (m, p, v),
        _ => return Err(RequestError::Malformed("request line (origin-form)").into()),
    };
    if method == "CONNECT" {
        return Err(RequestError::Malformed("CONNECT to a redirected connection").into());
    }
    let hosts: Vec<&str> = rest
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map(|(_, v)| v.trim_matches([' ', '\t']))
        .collect();
    let host = match hosts.as_slice() {
        [] => return Err(AskedError::NoHost),
        [one] => *one,
        _ => return Err(RequestError::Malformed("more than one Host header").into()),
    };
    // The authority keeps the connection's port: a Host naming another
    // port disagrees with it, and the parser refuses the pair.
    let bare = if let Some(end) = host.find(']').filter(|_| host.starts_with('[')) {
        &host[..=end]
    } else {
        match host.rsplit_once(':') {
            Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        }
    };
    let absolute = format!("{method} http://{bare}:{port}{path} {version}\r\n{rest}");
    let mut rebuilt = absolute.into_bytes();
    rebuilt.extend_from_slice(&buf[end + 4..]);
    let cap = cap + bare.len() + 16;
    Ok(request::parse(&rebuilt, cap)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::request::Target;
    use crate::egress::sni::build_client_hello;
    use crate::egress::Host;

    const CAP: usize = 32 * 1024;

    #[test]
    fn tls_by_sni() {
        let hello = build_client_hello(Some("api.example.com"), 100);
        assert_eq!(
            asked(&hello, 443, Some("api.example.com"), CAP),
            Ok(Some(Asked::Tls("api.example.com".into())))
        );
        assert_eq!(asked(&hello[..20], 443, None, CAP), Ok(None));
        assert!(matches!(
            asked(&hello, 443, Some("other.example"), CAP),
            Err(AskedError::OtherName { .. })
        ));
        // Dialled by address: the SNI alone names it (and is judged).
        assert!(asked(&hello, 443, None, CAP).unwrap().is_some());
    }

    #[test]
    fn tls_without_sni_or_with_an_ip_is_refused() {
        let hello = build_client_hello(None, 16_384);
        assert_eq!(asked(&hello, 443, None, CAP), Err(AskedError::NoSni));
        let hello = build_client_hello(Some("203.0.113.5"), 16_384);
        assert!(matches!(
            asked(&hello, 443, None, CAP),
            Err(AskedError::Tls(SniError::BadName))
        ));
    }

    #[test]
    fn http_by_host() {
        let req = b"GET /x?y HTTP/1.1\r\nHost: API.example.com\r\nAccept: */*\r\n\r\nrest";
        let Ok(Some(Asked::Http(r))) = asked(req, 80, Some("api.example.com"), CAP) else {
            panic!("not read");
        };
        assert_eq!(r.host, Host::parse("api.example.com").unwrap());
        assert_eq!(r.port, 80);
        assert_eq!(
            r.target,
            Target::Absolute {
                method: "GET".into(),
                path: "/x?y".into()
            }
        );
        let head = String::from_utf8(r.forward_head().unwrap()).unwrap();
        assert!(head.starts_with("GET /x?y HTTP/1.1\r\nHost: api.example.com"));
        assert!(head.contains("Connection: close"));
        let with_port = b"GET / HTTP/1.1\r\nHost: api.example.com:8080\r\n\r\n";
        assert!(asked(with_port, 8080, None, CAP).unwrap().is_some());
        assert!(asked(with_port, 80, None, CAP).is_err());
    }

    #[test]
    fn http_refusals() {
        for (req, why) in [
            (&b"GET / HTTP/1.1\r\nAccept: x\r\n\r\n"[..], "no host"),
            (
                b"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n",
                "two",
            ),
            (
                b"GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
                "absolute",
            ),
            (b"CONNECT a.example:443 HTTP/1.1\r\n\r\n", "connect"),
            (b"GET / HTTP/1.1\r\nHost: 203.0.113.5\r\n\r\n", "ip"),
            (b"GET / HTTP/1.1\nHost: a.example\r\n\r\n", "bare lf"),
        ] {
            let got = asked(req, 80, None, CAP);
            let ip_passes_parse = why == "ip";
            if ip_passes_parse {
                // An IP literal is read; the hosts judgement refuses it.
                let Ok(Some(Asked::Http(r))) = got else {
                    panic!("{why}: {got:?}")
                };
                assert!(matches!(r.host, Host::Ip(_)));
            } else {
                assert!(got.is_err(), "{why}: {got:?}");
            }
        }
        let other = b"GET / HTTP/1.1\r\nHost: b.example\r\n\r\n";
        assert!(matches!(
            asked(other, 80, Some("a.example"), CAP),
            Err(AskedError::OtherName { .. })
        ));
        // An uppercase start is read as HTTP until a head is whole.
        assert_eq!(asked(b"SSH-2.0-x\r\n", 443, None, CAP), Ok(None));
        assert_eq!(asked(b"\x00\x01", 443, None, CAP), Err(AskedError::Unknown));
        assert!(asked(&[b'G'; CAP], 80, None, CAP).is_err());
    }
}
