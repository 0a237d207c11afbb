//! The head of a request to the proxy: `CONNECT host:port` or an
//! absolute-form `METHOD http://host[:port]/path`. Strict on purpose: the
//! proxy forwards a head it writes itself, so what upstream sees is what
//! was judged, and anything ambiguous (bare LF, folded or duplicate
//! framing headers, a Host header naming another host) is refused.

use crate::lang::hosts::{Host, NameError};

/// Headers that belong to one hop and are never forwarded; the proxy
/// writes its own `Host` and `Connection: close`.
const HOP_BY_HOP: &[&str] = &[
    "host",
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("request header larger than {0} bytes")]
    TooLarge(usize),
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error("bad host: {0}")]
    Host(#[from] NameError),
    #[error("not a proxy request: {0}")]
    NotProxy(&'static str),
    #[error("Host header {header:?} disagrees with the request target {target:?}")]
    HostMismatch { header: String, target: String },
}

/// How the request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    None,
    Length(u64),
    Chunked,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `CONNECT host:port`: a tunnel.
    Connect,
    /// `METHOD http://host[:port]/path`: one forwarded request.
    Absolute { method: String, path: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub target: Target,
    pub host: Host,
    pub port: u16,
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub version: String,
    pub headers: Vec<(String, String)>,
    pub body: Body,
    /// Bytes of the head, including the blank line.
    pub head_len: usize,
}

/// Parses the head at the start of `buf`. `Ok(None)`: not complete yet.
pub fn parse(buf: &[u8], cap: usize) -> Result<Option<Request>, RequestError> {
    let end = match find(buf, b"\r\n\r\n") {
        Some(i) => i + 4,
        None if buf.len() >= cap => return Err(RequestError::TooLarge(cap)),
        None => return Ok(None),
    };
    if end > cap {
        return Err(RequestError::TooLarge(cap));
    }
    let head = std::str::from_utf8(&buf[..end - 4])
        .map_err(|_| RequestError::Malformed("header is not UTF-8"))?;
    if head.bytes().any(|b| b == b'\0') {
        return Err(RequestError::Malformed("NUL in header"));
    }
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or("");
    if line.contains(['\r', '\n']) {
        return Err(RequestError::Malformed("bare CR or LF"));
    }
    let mut parts = line.split(' ');
    let (method, uri, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(u), Some(v), None) => (m, u, v),
        _ => return Err(RequestError::Malformed("request line")),
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Err(RequestError::Malformed("method"));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(RequestError::Malformed("version (HTTP/1.0 or HTTP/1.1)"));
    }
    let headers = header_lines(lines)?;
    let (target, authority, default_port) = if method == "CONNECT" {
        (Target::Connect, uri, None)
    } else {
        let rest = strip_prefix_ci(uri, "http://").ok_or(
            if strip_prefix_ci(uri, "https://").is_some() {
                RequestError::NotProxy("https:// needs CONNECT")
            } else {
                RequestError::NotProxy("use an absolute http:// URI or CONNECT")
            },
        )?;
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], &rest[i..]),
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(RequestError::Malformed("path"));
        }
        (
            Target::Absolute {
                method: method.to_string(),
                path,
            },
            authority,
            Some(80),
        )
    };
    let (host, port) = split_authority(authority, default_port)?;
    let mut host_headers = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("host"));
    if let Some((_, value)) = host_headers.next() {
        if host_headers.next().is_some() {
            return Err(RequestError::Malformed("more than one Host header"));
        }
        let mismatch = || RequestError::HostMismatch {
            header: value.clone(),
            target: authority.to_string(),
        };
        // A Host without a port means the scheme's (80), or for CONNECT
        // the target's.
        let (h, p) =
            split_authority(value, Some(default_port.unwrap_or(port))).map_err(|_| mismatch())?;
        if h != host || p != port {
            return Err(mismatch());
        }
    }
    let body = match target {
        Target::Connect => Body::None,
        Target::Absolute { .. } => body(&headers, version)?,
    };
    Ok(Some(Request {
        target,
        host,
        port,
        version: version.to_string(),
        headers,
        body,
        head_len: end,
    }))
}

impl Request {
    /// The head sent upstream for an absolute-form request: origin-form,
    /// our own Host, no hop-by-hop headers (nor those `Connection` names,
    /// except the framing headers: the body goes on by the framing that
    /// was judged, so upstream must read the same), and `Connection:
    /// close` (one request per upstream connection).
    pub fn forward_head(&self) -> Option<Vec<u8>> {
        let Target::Absolute { method, path } = &self.target else {
            return None;
        };
        let named: Vec<String> = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
            .flat_map(|(_, v)| v.split(',').map(|t| t.trim().to_ascii_lowercase()))
            .collect();
        let mut out = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.authority());
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            let framing = matches!(lower.as_str(), "content-length" | "transfer-encoding");
            if HOP_BY_HOP.contains(&lower.as_str()) || (named.contains(&lower) && !framing) {
                continue;
            }
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str("Connection: close\r\n\r\n");
        Some(out.into_bytes())
    }

    /// `host[:port]` as the Host header names it.
    pub fn authority(&self) -> String {
        let host = match &self.host {
            Host::Ip(std::net::IpAddr::V6(a)) => format!("[{a}]"),
            h => h.text(),
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// The header lines of a head (after the request line), strictly: no bare
/// CR or LF, no folding, token names, no control characters in values.
pub(crate) fn header_lines<'a>(
    lines: impl Iterator<Item = &'a str>,
) -> Result<Vec<(String, String)>, RequestError> {
    let mut headers = Vec::new();
    for line in lines {
        if line.contains(['\r', '\n']) {
            return Err(RequestError::Malformed("bare CR or LF"));
        }
        if line.starts_with([' ', '\t']) {
            return Err(RequestError::Malformed("folded header line"));
        }
        let (name, value) = line
            .split_once(':')
            .ok_or(RequestError::Malformed("header line without ':'"))?;
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(RequestError::Malformed("header name"));
        }
        let value = value.trim_matches([' ', '\t']);
        if value.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) {
            return Err(RequestError::Malformed("control character in header value"));
        }
        headers.push((name.to_string(), value.to_string()));
    }
    Ok(headers)
}

/// How the body of a request with these headers is framed, or a refusal
/// of any framing two parsers could read differently.
pub(crate) fn body(headers: &[(String, String)], version: &str) -> Result<Body, RequestError> {
    let get = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let lengths = get("content-length");
    let codings = get("transfer-encoding");
    match (lengths.as_slice(), codings.as_slice()) {
        ([], []) => Ok(Body::None),
        ([len], []) => {
            if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) || len.len() > 18 {
                return Err(RequestError::Malformed("Content-Length"));
            }
            len.parse()
                .map(Body::Length)
                .map_err(|_| RequestError::Malformed("Content-Length"))
        }
        ([], [coding]) if coding.eq_ignore_ascii_case("chunked") && version == "HTTP/1.1" => {
            Ok(Body::Chunked)
        }
        ([], _) => Err(RequestError::Malformed(
            "Transfer-Encoding other than a single \"chunked\"",
        )),
        _ => Err(RequestError::Malformed(
            "more than one Content-Length, or both Content-Length and Transfer-Encoding",
        )),
    }
}

/// `host:port` / `[v6]:port`; `default` when the port is absent (None: a
/// port is required).
pub(crate) fn split_authority(
    text: &str,
    default: Option<u16>,
) -> Result<(Host, u16), RequestError> {
    if text.contains('@') {
        return Err(RequestError::Malformed("userinfo in the target"));
    }
    let (host, port) = if text.starts_with('[') {
        match text.find(']') {
            Some(i) => {
                let (h, rest) = text.split_at(i + 1);
                match rest.strip_prefix(':') {
                    Some(p) => (h, Some(p)),
                    None if rest.is_empty() => (h, None),
                    None => return Err(RequestError::Malformed("target")),
                }
            }
            None => return Err(RequestError::Malformed("target")),
        }
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if !host.starts_with('[') && host.contains(':') {
        return Err(RequestError::Malformed("an IPv6 target goes in brackets"));
    }
    let port = match (port, default) {
        (Some(p), _) => {
            if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(RequestError::Malformed("port"));
            }
            match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => return Err(RequestError::Malformed("port")),
            }
        }
        (None, Some(d)) => d,
        (None, None) => return Err(RequestError::Malformed("CONNECT needs host:port")),
    };
    Ok((Host::parse(host)?, port))
}

fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Whether `buf` holds a whole head (its blank line), searching only what
/// arrived after the first `searched` bytes (and the 3 before them), so a
/// head sent a byte at a time costs linear time, not quadratic.
pub fn head_complete(buf: &[u8], searched: usize) -> bool {
    let from = searched.saturating_sub(3).min(buf.len());
    find(&buf[from..], b"\r\n\r\n").is_some()
}

/// Follows a chunked body byte by byte, so the proxy forwards exactly one
/// request's body and nothing after it.
#[derive(Debug, Clone, Default)]
pub struct Chunked {
    state: ChunkState,
    size: u64,
    line: usize,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    Trailer,
    TrailerLf,
    FinalLf,
    Done,
}

/// Longest chunk-size or trailer line accepted.
const CHUNK_LINE_CAP: usize = 8192;

impl Chunked {
    /// Consumes from `buf` what belongs to the body: `(n, done)`, where
    /// `n` bytes of `buf` are body bytes (to forward as they are).
    pub fn feed(&mut self, buf: &[u8]) -> Result<(usize, bool), RequestError> {
        use ChunkState::*;
        let bad = RequestError::Malformed("chunked body");
        let mut i = 0;
        while i < buf.len() && self.state != Done {
            if self.state == Data {
                let take = (buf.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                i += take;
                self.size -= take as u64;
                if self.size == 0 {
                    self.state = DataCr;
                }
                continue;
            }
            let b = buf[i];
            i += 1;
            self.line += 1;
            if self.line > CHUNK_LINE_CAP {
                return Err(bad);
            }
            self.state = match (self.state, b) {
                (Size, b) if b.is_ascii_hexdigit() => {
                    if self.size > u64::MAX >> 8 {
                        return Err(bad);
                    }
                    self.size = self.size * 16 + u64::from((b as char).to_digit(16).unwrap_or(0));
                    Size
                }
                (Size, b';') if self.line > 1 => Ext,
                (Size, b'\r') if self.line > 1 => SizeLf,
                (Ext, b'\r') => SizeLf,
                (Ext, b'\n') => return Err(bad),
                (Ext, _) => Ext,
                (SizeLf, b'\n') => {
                    self.line = 0;
                    if self.size == 0 {
                        TrailerStart
                    } else {
                        Data
                    }
                }
                (DataCr, b'\r') => DataLf,
                (DataLf, b'\n') => {
                    self.line = 0;
                    Size
                }
                (TrailerStart, b'\r') => FinalLf,
                (TrailerStart, b'\n') => return Err(bad),
                (TrailerStart, _) | (Trailer, _) if b != b'\r' && b != b'\n' => Trailer,
                (Trailer, b'\r') => TrailerLf,
                (TrailerLf, b'\n') => {
                    self.line = 0;
                    TrailerStart
                }
                (FinalLf, b'\n') => Done,
                _ => return Err(bad),
            };
        }
        Ok((i, self.state == Done))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: usize = 8192;

    fn ok(text: &str) -> Request {
        parse(text.as_bytes(), CAP).unwrap().unwrap()
    }

    fn err(text: &str) -> RequestError {
        parse(text.as_bytes(), CAP).unwrap_err()
    }

    #[test]
    fn connect() {
        let r =
            ok("CONNECT API.example.com.:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\nrest");
        assert_eq!(r.target, Target::Connect);
        assert_eq!(r.host, Host::Name("api.example.com".into()));
        assert_eq!(r.port, 443);
        assert_eq!(r.head_len, 68);
        assert_eq!(r.body, Body::None);
        let r = ok("CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n");
        assert_eq!(r.host, Host::Ip("2001:db8::1".parse().unwrap()));
        let r = ok("CONNECT a.example:8443 HTTP/1.1\r\nHost: a.example\r\n\r\n");
        assert_eq!(r.port, 8443);
        assert!(matches!(
            err("CONNECT a.example HTTP/1.1\r\n\r\n"),
            RequestError::Malformed(_)
        ));
        assert!(matches!(
            err("CONNECT a.example:0 HTTP/1.1\r\n\r\n"),
            RequestError::Malformed(_)
        ));
        assert!(matches!(
            err("CONNECT a.example:65536 HTTP/1.1\r\n\r\n"),
            RequestError::Malformed(_)
        ));
        assert!(matches!(
            err("CONNECT u@a.example:443 HTTP/1.1\r\n\r\n"),
            RequestError::Malformed(_)
        ));
    }

    #[test]
    fn absolute_form() {
        let r = ok(
            "GET http://Example.COM/a/b?c=d HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n",
        );
        assert_eq!(
            r.target,
            Target::Absolute {
                method: "GET".into(),
                path: "/a/b?c=d".into()
            }
        );
        assert_eq!((r.host.text().as_str(), r.port), ("example.com", 80));
        let r = ok("POST HTTP://example.com:8080 HTTP/1.0\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(r.port, 8080);
        assert_eq!(r.body, Body::Length(5));
        assert!(matches!(r.target, Target::Absolute { ref path, .. } if path == "/"));
        let r = ok("GET http://example.com?x HTTP/1.1\r\n\r\n");
        assert!(matches!(r.target, Target::Absolute { ref path, .. } if path == "/?x"));
        assert!(matches!(
            err("GET /x HTTP/1.1\r\nHost: a\r\n\r\n"),
            RequestError::NotProxy(_)
        ));
        assert!(matches!(
            err("GET https://a.example/ HTTP/1.1\r\n\r\n"),
            RequestError::NotProxy(_)
        ));
        assert!(matches!(
            err("GET ftp://a.example/ HTTP/1.1\r\n\r\n"),
            RequestError::NotProxy(_)
        ));
    }

    #[test]
    fn host_header_must_agree() {
        for bad in [
            "GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nHost: a.example:8080\r\n\r\n",
            "GET http://a.example:8080/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
            "CONNECT a.example:443 HTTP/1.1\r\nHost: b.example:443\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nHost: \r\n\r\n",
        ] {
            assert!(
                matches!(err(bad), RequestError::HostMismatch { .. }),
                "{bad:?}"
            );
        }
        let twice = "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nhost: a.example\r\n\r\n";
        assert!(matches!(err(twice), RequestError::Malformed(_)));
        ok("GET http://a.example/ HTTP/1.1\r\nhost: A.EXAMPLE.:80\r\n\r\n");
    }

    #[test]
    fn strict_syntax() {
        for bad in [
            "GET http://a.example/ HTTP/1.1\nHost: a.example\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nX: a\rb\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\n folded\r\n\r\n",
            "GET  http://a.example/ HTTP/1.1\r\n\r\n",
            "GET http://a.example/ HTTP/2\r\n\r\n",
            "G(T http://a.example/ HTTP/1.1\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nBad Name: x\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nX: \x01\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "GET http://a.example/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET http://bücher.example/ HTTP/1.1\r\n\r\n",
        ] {
            assert!(parse(bad.as_bytes(), CAP).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn incomplete_and_too_large() {
        assert_eq!(parse(b"CONNECT a.example:443 HTTP/1.1\r\n", CAP), Ok(None));
        let big = format!(
            "GET http://a.example/ HTTP/1.1\r\nX: {}\r\n",
            "a".repeat(100)
        );
        assert_eq!(parse(big.as_bytes(), 64), Err(RequestError::TooLarge(64)));
        let big = format!("{big}\r\n");
        assert_eq!(parse(big.as_bytes(), 64), Err(RequestError::TooLarge(64)));
    }

    #[test]
    fn forwarded_head() {
        // `Connection` cannot drop the framing the body is forwarded by:
        // the upstream would read the body as a second, unjudged request.
        let r = ok("POST http://a.example/ HTTP/1.1\r\nConnection: content-length, Transfer-Encoding\r\nContent-Length: 5\r\n\r\n");
        let head = String::from_utf8(r.forward_head().unwrap()).unwrap();
        assert!(head.contains("\r\nContent-Length: 5\r\n"), "{head}");
        let r = ok("GET http://a.example:8080/x HTTP/1.1\r\nHost: a.example:8080\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nAccept: */*\r\n\r\n");
        assert_eq!(
            String::from_utf8(r.forward_head().unwrap()).unwrap(),
            "GET /x HTTP/1.1\r\nHost: a.example:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        assert!(ok("CONNECT a.example:443 HTTP/1.1\r\n\r\n")
            .forward_head()
            .is_none());
    }

    #[test]
    fn chunked_stops_at_the_end_of_the_body() {
        let body = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nX-T: 1\r\n\r\nGET http://b.example/ HTTP/1.1\r\n\r\n";
        let end = body.len() - "GET http://b.example/ HTTP/1.1\r\n\r\n".len();
        let mut c = Chunked::default();
        assert_eq!(c.feed(body).unwrap(), (end, true));
        // Byte by byte gives the same end.
        let mut c = Chunked::default();
        let mut total = 0;
        for b in body.iter() {
            let (n, done) = c.feed(std::slice::from_ref(b)).unwrap();
            total += n;
            if done {
                break;
            }
        }
        assert_eq!(total, end);
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"4\r\nWikiXX",
            b"0\r\n\n",
            b"4\nWiki",
        ] {
            assert!(Chunked::default().feed(bad).is_err(), "{bad:?}");
        }
        assert!(Chunked::default().feed(b"fffffffffffffffff\r\n").is_err());
    }
}
