//! The judge of one request on a terminated credential connection: given
//! the request head the container sent inside TLS, the host it CONNECTed to
//! (whose SNI was already checked) and the container's bindings, decide
//! whether the request goes upstream, with which placeholder swapped for
//! which secret, or why not.
//!
//! - The head is parsed as strictly as the proxy's own (no bare LF, no
//!   folding, no duplicate or disagreeing framing), it must be origin-form,
//!   and it must carry exactly one `Host`, naming the CONNECT host.
//! - A binding of this host is injected only in its own header, in its
//!   exact form (`Scheme <placeholder>`, or `Basic base64(user:placeholder)`
//!   decoded strictly).
//! - A placeholder of ANY binding anywhere else in the head (the target,
//!   another header, percent- or base64-encoded, a binding of another host)
//!   is a misuse: the request is refused.
//! - Upgrades (WebSocket) and HTTP/2 are refused: what follows an upgrade
//!   could not be judged.
//!
//! The head upstream gets is written from what was parsed, so upstream
//! reads what was judged; the body goes on by the framing judged here.
//! Bodies are not scanned: a placeholder there is only a placeholder.

use base64::Engine;

use super::credential::{Binding, Inject};
use super::request::{self, Body, RequestError};
use crate::lang::hosts::Host;

pub use super::credential::MIN_PLACEHOLDER;

/// Why a request on a terminated connection was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0}")]
    Request(#[from] RequestError),
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error("Host header missing (one is required on a credential host)")]
    NoHost,
    #[error("Host header {header:?} is not the CONNECT host {host}")]
    HostMismatch { header: String, host: String },
    #[error("{0} is not offered on a credential host's terminated connection (HTTP/1.1 only)")]
    Unsupported(&'static str),
    #[error("misuse of credential {credential}'s placeholder: {place}")]
    Misuse { credential: String, place: String },
    #[error("credential {credential} has an unusable placeholder")]
    BadBinding { credential: String },
    #[error("method {0} is refused on a credential host (its answer could echo the secret)")]
    Method(String),
    #[error("the request head came in more than {MAX_HEAD_PIECES} TLS records")]
    Scattered,
}

impl Refusal {
    /// The status the client gets.
    pub fn status(&self) -> (u16, &'static str) {
        match self {
            Refusal::Request(RequestError::TooLarge(_)) => (431, "Request Header Fields Too Large"),
            Refusal::Request(_) | Refusal::Malformed(_) | Refusal::NoHost | Refusal::Scattered => {
                (400, "Bad Request")
            }
            Refusal::BadBinding { .. } => (502, "Bad Gateway"),
            _ => (403, "Forbidden"),
        }
    }

    /// The refusal with every placeholder of `bindings` in its text (a
    /// header name or Host value the client wrote) as `<placeholder>`: the
    /// 403 and the egress log quote the request, never a placeholder.
    fn redacted(self, bindings: &[Binding]) -> Refusal {
        let clean = |mut text: String| {
            for b in bindings
                .iter()
                .filter(|b| b.placeholder.len() >= MIN_PLACEHOLDER)
            {
                while let Some(at) = find_ci(text.as_bytes(), b.placeholder.as_bytes()) {
                    text.replace_range(at..at + b.placeholder.len(), "<placeholder>");
                }
            }
            text
        };
        match self {
            Refusal::HostMismatch { header, host } => Refusal::HostMismatch {
                header: clean(header),
                host,
            },
            Refusal::Misuse { credential, place } => Refusal::Misuse {
                credential,
                place: clean(place),
            },
            Refusal::Method(m) => Refusal::Method(clean(m)),
            other => other,
        }
    }

    /// The credential a misuse names (logged as such).
    pub fn credential(&self) -> Option<&str> {
        match self {
            Refusal::Misuse { credential, .. } | Refusal::BadBinding { credential } => {
                Some(credential)
            }
            _ => None,
        }
    }
}

/// Why a secret cannot go into a header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("the secret file is empty")]
    Empty,
    #[error("the secret holds a control character or surrounding space (one trailing newline is allowed)")]
    NotAHeaderValue,
    #[error("the secret is not UTF-8")]
    NotUtf8,
}

/// The longest secret file read, by `create` and by the egress daemon
/// alike: a longer one is no header value a server takes, and is refused
/// before it is read whole.
pub const MAX_SECRET_FILE: u64 = 8 * 1024;

/// The secret in a source file's bytes: one trailing `\n` (or `\r\n`)
/// dropped, nothing else changed; refused if it could not be one header
/// value (a CR or LF would let the file's owner write headers, but also
/// turns a typo into a smuggled header).
pub fn secret_from_file(bytes: &[u8]) -> Result<String, SecretError> {
    let bytes = bytes
        .strip_suffix(b"\r\n")
        .or_else(|| bytes.strip_suffix(b"\n"))
        .unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).map_err(|_| SecretError::NotUtf8)?;
    if text.is_empty() {
        return Err(SecretError::Empty);
    }
    let bad = |c: char| c.is_control() || c == '\u{7f}';
    if text.chars().any(bad) || text.trim() != text {
        return Err(SecretError::NotAHeaderValue);
    }
    Ok(text.to_string())
}

/// Encodes `user:password` as a Basic credential's base64.
pub fn basic_encode(user: &str, password: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

/// Decodes a Basic credential strictly: canonical base64 only (padding
/// present, no trailing bits, no whitespace), so exactly one byte string
/// has this encoding; then `user:password` split at the one colon the
/// user part may not hold. `None` when any of that fails.
pub fn basic_decode(b64: &str) -> Option<(String, String)> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.as_bytes())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// Any base64 reading of `text`, however lax, for the misuse scan only.
fn lax_base64(text: &str) -> Option<Vec<u8>> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    let config = GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent);
    let std = GeneralPurpose::new(&base64::alphabet::STANDARD, config);
    let url = GeneralPurpose::new(&base64::alphabet::URL_SAFE, config);
    let t = text.trim();
    std.decode(t).ok().or_else(|| url.decode(t).ok())
}

/// Percent-decoding (bytes that are not a valid escape stay as they are).
fn percent_decode(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    find_ci(hay, needle).is_some()
}

/// Where `needle` first is in `hay`, ASCII case ignored.
fn find_ci(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
}

/// Whether `text` holds `placeholder` as it is, percent-decoded, or in a
/// base64 reading of any run of base64 characters in it (`Basic xxx`,
/// `a=xxx`). A best effort: the placeholder is worth nothing elsewhere, the
/// scan is there to log an agent that tries.
fn hides(text: &str, placeholder: &str) -> bool {
    let p = placeholder.as_bytes();
    if contains_ci(text.as_bytes(), p) || contains_ci(&percent_decode(text), p) {
        return true;
    }
    let b64 = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '-' | '_');
    text.split(|c: char| !b64(c))
        .filter(|t| t.len() * 3 / 4 >= p.len())
        .filter_map(lax_base64)
        .any(|raw| contains_ci(&raw, p))
}

/// One swap the request gets: header `header` (an index into the head's
/// headers) carries binding `binding`'s placeholder in its exact form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swap {
    pub binding: usize,
    pub header: usize,
}

/// A judged request: what goes upstream once the secrets are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub method: String,
    pub target: String,
    pub version: String,
    pub headers: Vec<(String, String)>,
    pub body: Body,
    /// Bytes of the head in the client's stream, blank line included.
    pub head_len: usize,
    pub swaps: Vec<Swap>,
}

/// Headers never sent upstream: they were meant for a proxy.
const PROXY_ONLY: &[&str] = &["proxy-authorization", "proxy-connection"];

/// Headers a front end may route or rewrite by: next to an injected
/// secret they would let the container choose where a bound host's own
/// proxy sends it, so a terminated request never carries them upstream.
const ROUTING: &[&str] = &[
    "forwarded",
    "x-forwarded-host",
    "x-forwarded-server",
    "x-host",
    "x-original-url",
    "x-rewrite-url",
];

/// Methods whose answer echoes the request (TRACE, TRACK), or that open
/// a tunnel no one judges (CONNECT): with the secret swapped in, the echo
/// would hand it to the container.
const REFUSED_METHODS: &[&str] = &["TRACE", "TRACK", "CONNECT"];

/// Headers some servers take as the method instead of the request line's.
const METHOD_OVERRIDES: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// A terminated head in more TLS records than this is refused: each record
/// costs the shared daemon a decryption, and a client writes its head in
/// one or a few.
pub const MAX_HEAD_PIECES: usize = 64;

/// Judges the head at the start of `buf` (`Ok(None)`: not complete yet)
/// for a connection to `host:port`.
pub fn judge(
    buf: &[u8],
    cap: usize,
    host: &str,
    port: u16,
    bindings: &[Binding],
) -> Result<Option<Plan>, Refusal> {
    judge_head(buf, cap, host, port, bindings).map_err(|r| r.redacted(bindings))
}

fn judge_head(
    buf: &[u8],
    cap: usize,
    host: &str,
    port: u16,
    bindings: &[Binding],
) -> Result<Option<Plan>, Refusal> {
    let end = match request::find(buf, b"\r\n\r\n") {
        Some(i) => i + 4,
        None if buf.len() >= cap => return Err(RequestError::TooLarge(cap).into()),
        None => return Ok(None),
    };
    if end > cap {
        return Err(RequestError::TooLarge(cap).into());
    }
    if buf.starts_with(b"PRI * HTTP/2.0\r\n") {
        return Err(Refusal::Unsupported("HTTP/2"));
    }
    let head = std::str::from_utf8(&buf[..end - 4])
        .map_err(|_| Refusal::Malformed("header is not UTF-8"))?;
    if head.bytes().any(|b| b == 0) {
        return Err(Refusal::Malformed("NUL in header"));
    }
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or("");
    if line.contains(['\r', '\n']) {
        return Err(Refusal::Malformed("bare CR or LF"));
    }
    let mut parts = line.split(' ');
    let (method, target, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v), None) => (m, t, v),
        _ => return Err(Refusal::Malformed("request line")),
    };
    if method.is_empty() || !method.bytes().all(request::is_tchar) {
        return Err(Refusal::Malformed("method"));
    }
    if REFUSED_METHODS
        .iter()
        .any(|m| m.eq_ignore_ascii_case(method))
    {
        return Err(Refusal::Method(method.to_ascii_uppercase()));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(Refusal::Malformed("version (HTTP/1.0 or HTTP/1.1)"));
    }
    let origin = target.starts_with('/') || (target == "*" && method == "OPTIONS");
    if !origin {
        return Err(Refusal::Malformed("the target must be origin-form (/path)"));
    }
    if target.bytes().any(|b| b <= b' ' || b >= 0x7f) {
        return Err(Refusal::Malformed("target"));
    }
    let headers = request::header_lines(lines)?;
    let named = |name: &'static str| {
        headers
            .iter()
            .enumerate()
            .filter(move |(_, (n, _))| n.eq_ignore_ascii_case(name))
    };
    // Host: exactly one, naming the CONNECT host and port.
    let mut hosts = named("host");
    let (_, (_, value)) = hosts.next().ok_or(Refusal::NoHost)?;
    if hosts.next().is_some() {
        return Err(Refusal::Malformed("more than one Host header"));
    }
    let mismatch = || Refusal::HostMismatch {
        header: value.clone(),
        host: host.to_string(),
    };
    let (h, p) = request::split_authority(value, Some(443)).map_err(|_| mismatch())?;
    if h != Host::Name(host.to_string()) || p != port {
        return Err(mismatch());
    }
    // Nothing may switch the connection to bytes no one judges.
    let upgrade = named("connection").any(|(_, (_, v))| {
        v.split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
    });
    if upgrade || named("upgrade").next().is_some() {
        return Err(Refusal::Unsupported("Upgrade (WebSocket, h2c)"));
    }
    if named("http2-settings").next().is_some() {
        return Err(Refusal::Unsupported("HTTP/2"));
    }
    for o in METHOD_OVERRIDES {
        for (_, (_, v)) in named(o) {
            let v = v.trim();
            if REFUSED_METHODS.iter().any(|m| m.eq_ignore_ascii_case(v)) {
                return Err(Refusal::Method(v.to_ascii_uppercase()));
            }
        }
    }
    let body = request::body(&headers, version)?;
    for b in bindings {
        if b.placeholder.len() < MIN_PLACEHOLDER {
            return Err(Refusal::BadBinding {
                credential: b.name.clone(),
            });
        }
    }
    let swaps = swaps(&headers, host, bindings)?;
    // Every other place a placeholder could hide.
    let misuse = |b: &Binding, place: String| Refusal::Misuse {
        credential: b.name.clone(),
        place,
    };
    for b in bindings {
        if hides(target, &b.placeholder) || hides(method, &b.placeholder) {
            return Err(misuse(b, "in the request target".into()));
        }
        for (i, (name, value)) in headers.iter().enumerate() {
            if swaps.iter().any(|s| s.header == i) {
                continue;
            }
            if hides(name, &b.placeholder) || hides(value, &b.placeholder) {
                let place = if b.hosts.iter().any(|h| h == host) {
                    format!("in header {name}, not where it is bound")
                } else {
                    format!("in header {name}, on a request to {host}, which it is not bound to")
                };
                return Err(misuse(b, place));
            }
        }
    }
    // Drop the proxy-only and routing headers, renumbering the swaps past
    // them; Host goes upstream in its one canonical spelling.
    let mut kept = Vec::new();
    let mut index = Vec::new();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if PROXY_ONLY.contains(&lower.as_str()) || ROUTING.contains(&lower.as_str()) {
            index.push(None);
            continue;
        }
        index.push(Some(kept.len()));
        let value = match lower == "host" {
            true if port == 443 => host.to_string(),
            true => format!("{host}:{port}"),
            false => value,
        };
        kept.push((name, value));
    }
    let swaps = swaps
        .into_iter()
        .filter_map(|s| {
            index[s.header].map(|header| Swap {
                binding: s.binding,
                header,
            })
        })
        .collect();
    Ok(Some(Plan {
        method: method.to_string(),
        target: target.to_string(),
        version: version.to_string(),
        headers: kept,
        body,
        head_len: end,
        swaps,
    }))
}

/// The headers that carry a binding of `host` in its exact form.
fn swaps(
    headers: &[(String, String)],
    host: &str,
    bindings: &[Binding],
) -> Result<Vec<Swap>, Refusal> {
    let mut out: Vec<Swap> = Vec::new();
    for (bi, b) in bindings.iter().enumerate() {
        if !b.hosts.iter().any(|h| h == host) {
            continue;
        }
        let misuse = |place: String| Refusal::Misuse {
            credential: b.name.clone(),
            place,
        };
        let name = match &b.inject {
            Inject::Header { name, .. } => name.as_str(),
            Inject::Basic { .. } => "authorization",
        };
        for (hi, (n, value)) in headers.iter().enumerate() {
            if !n.eq_ignore_ascii_case(name) || !hides(value, &b.placeholder) {
                continue;
            }
            if out.iter().any(|s| s.header == hi) {
                return Err(misuse(format!(
                    "header {n} already carries another credential"
                )));
            }
            if out.iter().any(|s| s.binding == bi) {
                return Err(misuse(format!("more than one {n} header carries it")));
            }
            if !exact_form(&b.inject, value, &b.placeholder) {
                let form = match &b.inject {
                    Inject::Header {
                        scheme: Some(s), ..
                    } => format!("{s} <placeholder>"),
                    Inject::Header { scheme: None, .. } => "<placeholder>".to_string(),
                    Inject::Basic { user } => format!("Basic base64({user}:<placeholder>)"),
                };
                return Err(misuse(format!("header {n} is not exactly {form}")));
            }
            out.push(Swap {
                binding: bi,
                header: hi,
            });
        }
    }
    Ok(out)
}

/// Whether `value` is exactly the binding's form around `placeholder`.
fn exact_form(inject: &Inject, value: &str, placeholder: &str) -> bool {
    match inject {
        Inject::Header { scheme: None, .. } => value == placeholder,
        Inject::Header {
            scheme: Some(scheme),
            ..
        } => value
            .split_once(' ')
            .is_some_and(|(s, rest)| s.eq_ignore_ascii_case(scheme) && rest == placeholder),
        Inject::Basic { user } => value
            .split_once(' ')
            .filter(|(s, _)| s.eq_ignore_ascii_case("basic"))
            .and_then(|(_, b64)| basic_decode(b64))
            .is_some_and(|(u, p)| &u == user && p == placeholder),
    }
}

/// A head as it goes upstream, and what the daemon put into it.
#[derive(Debug)]
pub struct Rendered {
    pub head: Vec<u8>,
    /// Each injected secret, and a Basic value's base64 of it: what the
    /// response must never carry back.
    pub injected: Vec<Vec<u8>>,
}

impl Plan {
    /// The head upstream gets, with `secrets[i]` (the secret of each swap,
    /// in order) in place of the placeholders.
    pub fn render(&self, bindings: &[Binding], secrets: &[String]) -> Rendered {
        let mut injected = Vec::new();
        let mut out = format!("{} {} {}\r\n", self.method, self.target, self.version);
        for (i, (name, value)) in self.headers.iter().enumerate() {
            let swapped = self
                .swaps
                .iter()
                .zip(secrets)
                .find(|(s, _)| s.header == i)
                .and_then(|(s, secret)| {
                    let b = bindings.get(s.binding)?;
                    injected.push(secret.as_bytes().to_vec());
                    Some(match &b.inject {
                        Inject::Header {
                            scheme: Some(scheme),
                            ..
                        } => format!("{scheme} {secret}"),
                        Inject::Header { scheme: None, .. } => secret.clone(),
                        Inject::Basic { user } => {
                            let b64 = basic_encode(user, secret);
                            let value = format!("Basic {b64}");
                            injected.push(b64.into_bytes());
                            value
                        }
                    })
                });
            out.push_str(name);
            out.push_str(": ");
            out.push_str(swapped.as_deref().unwrap_or(value));
            out.push_str("\r\n");
        }
        out.push_str("\r\n");
        Rendered {
            head: out.into_bytes(),
            injected,
        }
    }
}

/// The first binding whose placeholder a plain (unterminated) request head
/// carries anywhere: such a request goes nowhere.
pub fn find_placeholder<'a>(head: &[u8], bindings: &'a [Binding]) -> Option<&'a Binding> {
    let text = String::from_utf8_lossy(head);
    bindings.iter().find(|b| {
        b.placeholder.len() >= MIN_PLACEHOLDER
            && text
                .split("\r\n")
                .flat_map(|l| std::iter::once(l).chain(l.split([' ', ':', '\t'])))
                .any(|part| hides(part, &b.placeholder))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const P1: &str = "sk-ant-PLACEHOLDERaaaaaaaaaaaaaaaa";
    const P2: &str = "ghp_PLACEHOLDERbbbbbbbbbbbbbbbbbb";
    const P3: &str = "sk-PLACEHOLDERcccccccccccccccccccc";

    fn bindings() -> Vec<Binding> {
        vec![
            Binding {
                name: "anthropic".into(),
                hosts: vec!["api.example.com".into()],
                inject: Inject::Header {
                    name: "x-api-key".into(),
                    scheme: None,
                },
                source: PathBuf::from("/s/a"),
                placeholder: P1.into(),
            },
            Binding {
                name: "git".into(),
                hosts: vec!["git.example.com".into()],
                inject: Inject::Basic {
                    user: "x-access-token".into(),
                },
                source: PathBuf::from("/s/g"),
                placeholder: P2.into(),
            },
            Binding {
                name: "openai".into(),
                hosts: vec!["api.example.com".into()],
                inject: Inject::Header {
                    name: "authorization".into(),
                    scheme: Some("Bearer".into()),
                },
                source: PathBuf::from("/s/o"),
                placeholder: P3.into(),
            },
        ]
    }

    fn run(head: &str, host: &str) -> Result<Plan, Refusal> {
        judge(head.as_bytes(), 8192, host, 443, &bindings()).map(|p| p.expect("complete"))
    }

    fn rendered(head: &str, host: &str) -> String {
        let b = bindings();
        let plan = run(head, host).unwrap();
        let secrets: Vec<String> = plan
            .swaps
            .iter()
            .map(|s| format!("SECRET-{}", b[s.binding].name))
            .collect();
        String::from_utf8(plan.render(&b, &secrets).head).unwrap()
    }

    #[test]
    fn the_bound_header_is_swapped_and_nothing_else_changes() {
        let head = format!(
            "POST /v1/messages HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P1}\r\nContent-Length: 2\r\n\r\nhi"
        );
        let plan = run(&head, "api.example.com").unwrap();
        assert_eq!(plan.body, Body::Length(2));
        assert_eq!(plan.head_len, head.len() - 2);
        assert_eq!(
            rendered(&head, "api.example.com"),
            "POST /v1/messages HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: SECRET-anthropic\r\nContent-Length: 2\r\n\r\n"
        );
        // Bearer, scheme compared without case; two bindings of one host.
        let head = format!(
            "GET /x HTTP/1.1\r\nHost: API.example.com:443\r\nAuthorization: bearer {P3}\r\nX-Api-Key: {P1}\r\n\r\n"
        );
        let out = rendered(&head, "api.example.com");
        assert!(
            out.contains("\r\nAuthorization: Bearer SECRET-openai\r\n"),
            "{out}"
        );
        assert!(out.contains("\r\nX-Api-Key: SECRET-anthropic\r\n"), "{out}");
        // Without a placeholder, nothing to inject.
        let head = "GET / HTTP/1.1\r\nHost: api.example.com\r\nProxy-Authorization: x\r\n\r\n";
        assert_eq!(run(head, "api.example.com").unwrap().swaps, vec![]);
        assert_eq!(
            rendered(head, "api.example.com"),
            "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
        );
    }

    #[test]
    fn basic_is_decoded_strictly_and_reencoded() {
        let b64 = basic_encode("x-access-token", P2);
        let head = format!(
            "GET /r.git/info/refs HTTP/1.1\r\nHost: git.example.com\r\nAuthorization: Basic {b64}\r\n\r\n"
        );
        let out = rendered(&head, "git.example.com");
        let want = basic_encode("x-access-token", "SECRET-git");
        assert!(
            out.contains(&format!("Authorization: Basic {want}\r\n")),
            "{out}"
        );
        // What the response scan looks for: the secret and its base64.
        let plan = run(&head, "git.example.com").unwrap();
        let injected = plan.render(&bindings(), &["SECRET-git".into()]).injected;
        assert_eq!(injected, [b"SECRET-git".to_vec(), want.into_bytes()]);
        // Another user, a non-canonical encoding, a password with the
        // placeholder and more: refused.
        for b64 in [
            basic_encode("someone", P2),
            // Padded to a length with '=': the strict reading fails.
            format!(
                "{}=",
                basic_encode("x-access-token", &format!("{P2}x")).trim_end_matches('=')
            ),
            basic_encode("x-access-token", &format!("{P2}:x")),
        ] {
            let head = format!(
                "GET / HTTP/1.1\r\nHost: git.example.com\r\nAuthorization: Basic {b64}\r\n\r\n"
            );
            let r = run(&head, "git.example.com");
            assert!(matches!(r, Err(Refusal::Misuse { .. })), "{b64}: {r:?}");
        }
    }

    #[test]
    fn the_basic_codec_is_canonical() {
        assert_eq!(basic_encode("u", "pw"), "dTpwdw==");
        assert_eq!(basic_decode("dTpwdw=="), Some(("u".into(), "pw".into())));
        // No padding, trailing bits set, whitespace, no colon: none decode.
        for bad in ["dTpwdw", "dTpwdx==", " dTpwdw==", "dTpwdw==\t", "dXB3", ""] {
            assert_eq!(basic_decode(bad), None, "{bad:?}");
        }
        // The user part ends at the first colon.
        assert_eq!(
            basic_decode(&basic_encode("u", "a:b")),
            Some(("u".into(), "a:b".into()))
        );
    }

    #[test]
    fn a_placeholder_anywhere_else_is_a_misuse() {
        let enc = basic_encode("u", P1);
        let cases = [
            // Another host than the binding's.
            format!("GET / HTTP/1.1\r\nHost: git.example.com\r\nx-api-key: {P1}\r\n\r\n"),
            format!("GET / HTTP/1.1\r\nHost: git.example.com\r\nAuthorization: Basic {enc}\r\n\r\n"),
            // The target, raw or percent-encoded.
            format!("GET /?k={P1} HTTP/1.1\r\nHost: api.example.com\r\n\r\n"),
            "GET /?k=%73k-ant-PLACEHOLDERaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
                .to_string(),
            // Another header of the bound host.
            format!("GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Log: {P1}\r\n\r\n"),
            format!("GET / HTTP/1.1\r\nHost: api.example.com\r\nCookie: a={enc}\r\n\r\n"),
            // The right header, the wrong form.
            format!("GET / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: pre{P1}\r\n\r\n"),
            format!("GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: {P3}\r\n\r\n"),
            // Twice.
            format!(
                "GET / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P1}\r\nx-api-key: {P1}\r\n\r\n"
            ),
        ];
        for head in &cases {
            for host in ["api.example.com", "git.example.com"] {
                if !head.contains(&format!("Host: {host}")) {
                    continue;
                }
                let r = run(head, host);
                assert!(matches!(r, Err(Refusal::Misuse { .. })), "{head:?}: {r:?}");
                assert_eq!(r.unwrap_err().status().0, 403);
            }
        }
    }

    #[test]
    fn host_framing_and_upgrades_are_strict() {
        let cases: &[(&str, u16)] = &[
            ("GET / HTTP/1.1\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: other.example\r\n\r\n", 403),
            ("GET / HTTP/1.1\r\nHost: api.example.com:8443\r\n\r\n", 403),
            ("GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: api.example.com\r\n\r\n", 400),
            ("GET http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 400),
            ("GET / HTTP/1.1\nHost: api.example.com\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: api.example.com\r\nX: a\r\n b\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: api.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", 403),
            ("GET / HTTP/1.1\r\nHost: api.example.com\r\nUpgrade: h2c\r\n\r\n", 403),
            ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 403),
            ("CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 403),
        ];
        for (head, code) in cases {
            let r = run(head, "api.example.com");
            assert_eq!(
                r.as_ref().map_err(|e| e.status().0),
                Err(*code),
                "{head:?}: {r:?}"
            );
        }
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(200));
        let r = judge(big.as_bytes(), 64, "api.example.com", 443, &bindings());
        assert_eq!(r.unwrap_err().status().0, 431);
        assert_eq!(
            judge(
                b"GET / HTTP/1.1\r\n",
                64,
                "api.example.com",
                443,
                &bindings()
            ),
            Ok(None)
        );
        let chunked =
            "POST / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(run(chunked, "api.example.com").unwrap().body, Body::Chunked);
    }

    #[test]
    fn a_short_placeholder_fails_every_request() {
        let mut b = bindings();
        b[0].placeholder = "x".into();
        let r = judge(
            b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n",
            8192,
            "a.example",
            443,
            &b,
        );
        assert!(matches!(r, Err(Refusal::BadBinding { .. })), "{r:?}");
    }

    #[test]
    fn secrets_from_files() {
        assert_eq!(secret_from_file(b"sk-1\n").unwrap(), "sk-1");
        assert_eq!(secret_from_file(b"sk-1\r\n").unwrap(), "sk-1");
        assert_eq!(secret_from_file(b"sk-1").unwrap(), "sk-1");
        assert_eq!(secret_from_file(b"\n"), Err(SecretError::Empty));
        for bad in [&b"a\nb"[..], b"a\rb", b" a", b"a\n\n", b"a\tb"] {
            assert_eq!(
                secret_from_file(bad),
                Err(SecretError::NotAHeaderValue),
                "{bad:?}"
            );
        }
        assert_eq!(secret_from_file(b"\xff"), Err(SecretError::NotUtf8));
    }

    #[test]
    fn plain_heads_are_scanned_too() {
        let b = bindings();
        let head = format!("GET http://x.example/?q={P2} HTTP/1.1\r\n\r\n");
        assert_eq!(
            find_placeholder(head.as_bytes(), &b).map(|b| b.name.as_str()),
            Some("git")
        );
        let head = format!(
            "GET http://x.example/ HTTP/1.1\r\nAuthorization: Basic {}\r\n\r\n",
            basic_encode("u", P3)
        );
        assert_eq!(
            find_placeholder(head.as_bytes(), &b).map(|b| b.name.as_str()),
            Some("openai")
        );
        assert!(find_placeholder(b"GET http://x.example/ HTTP/1.1\r\n\r\n", &b).is_none());
    }
}

/// An attacker's review of the judge (the container sends the head; the
/// bound host is honest but ordinary). Each test is named for its door and
/// pins what the judge does today: `_is_judged_like_any_request` and
/// `_pass_` tests pin doors that are open, `_are_refused` ones pin doors
/// that are closed.
#[cfg(test)]
mod attacks {
    use super::*;
    use std::path::PathBuf;

    const P: &str = "sk-ant-PLACEHOLDERaaaaaaaaaaaaaaaa";

    fn bindings() -> Vec<Binding> {
        vec![Binding {
            name: "anthropic".into(),
            hosts: vec!["api.example.com".into()],
            inject: Inject::Header {
                name: "x-api-key".into(),
                scheme: None,
            },
            source: PathBuf::from("/s/a"),
            placeholder: P.into(),
        }]
    }

    fn judged(head: &str) -> Result<Plan, Refusal> {
        judge(
            head.as_bytes(),
            32 * 1024,
            "api.example.com",
            443,
            &bindings(),
        )
        .map(|p| p.expect("complete"))
    }

    fn rendered(head: &str) -> String {
        let plan = judged(head).unwrap();
        let secrets = vec!["SECRET".to_string(); plan.swaps.len()];
        String::from_utf8(plan.render(&bindings(), &secrets).head).unwrap()
    }

    /// TRACE makes a server echo the request it got, headers included, in
    /// its body (Apache httpd answers it unless `TraceEnable off`): with
    /// the secret swapped in, the echo would hand it to the container. So
    /// TRACE, TRACK, CONNECT, and a method override naming one, are
    /// refused before any swap.
    #[test]
    fn trace_and_its_overrides_are_refused_on_a_bound_host() {
        for method in ["TRACE", "TRACK", "trace", "CONNECT"] {
            let head =
                format!("{method} / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P}\r\n\r\n");
            let r = judged(&head);
            assert!(matches!(r, Err(Refusal::Method(_))), "{method}: {r:?}");
            assert_eq!(r.unwrap_err().status().0, 403);
        }
        for o in [
            "X-HTTP-Method-Override",
            "x-http-method",
            "X-Method-Override",
        ] {
            let head = format!(
                "POST / HTTP/1.1\r\nHost: api.example.com\r\n{o}: trace \r\nx-api-key: {P}\r\nContent-Length: 0\r\n\r\n"
            );
            assert!(matches!(judged(&head), Err(Refusal::Method(_))), "{o}");
        }
        // An override naming an ordinary method is an API's business.
        let head = format!(
            "POST / HTTP/1.1\r\nHost: api.example.com\r\nX-HTTP-Method-Override: PATCH\r\nx-api-key: {P}\r\nContent-Length: 0\r\n\r\n"
        );
        assert!(rendered(&head).contains("X-HTTP-Method-Override: PATCH\r\n"));
    }

    /// Headers a front end may route or rewrite by (X-Forwarded-Host,
    /// Forwarded, X-Original-URL, X-Rewrite-URL, X-Host,
    /// X-Forwarded-Server) never go upstream beside the swapped secret: a
    /// bound host whose front end honours one would send the secret to the
    /// host or path the container named.
    #[test]
    fn routing_override_headers_are_dropped_beside_an_injected_secret() {
        let overrides = [
            "X-Forwarded-Host: evil.example",
            "Forwarded: host=evil.example;proto=https",
            "X-Original-URL: /admin/echo",
            "X-Rewrite-URL: /admin/echo",
            "X-Host: evil.example",
            "X-Forwarded-Server: evil.example",
        ];
        for o in overrides {
            let head =
                format!("GET / HTTP/1.1\r\nHost: api.example.com\r\n{o}\r\nx-api-key: {P}\r\n\r\n");
            let out = rendered(&head);
            assert!(
                !out.contains("evil") && !out.contains("/admin"),
                "{o}: {out}"
            );
            assert!(out.contains("x-api-key: SECRET\r\n"), "{o}: {out}");
        }
    }

    /// The Host header is compared after normalising (case, a trailing
    /// dot, the port's leading zeros), and goes upstream in the one
    /// spelling judged: the name upstream routes by is the judged one.
    #[test]
    fn the_host_header_goes_upstream_as_judged() {
        for host in [
            "API.EXAMPLE.COM",
            "api.example.com.",
            "api.example.com:0443",
            "api.example.com.:00443",
        ] {
            let head = format!("GET / HTTP/1.1\r\nHost: {host}\r\nx-api-key: {P}\r\n\r\n");
            let out = rendered(&head);
            assert!(out.contains("\r\nHost: api.example.com\r\n"), "{out}");
            assert!(out.contains("x-api-key: SECRET\r\n"), "{out}");
        }
    }

    /// CLOSED. Every head two HTTP parsers could read differently, around
    /// the bound header or the framing, is refused before any swap.
    #[test]
    fn smuggling_heads_around_the_bound_header_are_refused() {
        let cases = [
            // The name with space before the colon, a tab, or two colons.
            format!("GET / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key : {P}\r\n\r\n"),
            format!("GET / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key\t: {P}\r\n\r\n"),
            // Twice, in two cases; once folded onto the next line.
            format!(
                "GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: {P}\r\nx-api-key: {P}\r\n\r\n"
            ),
            format!("GET / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key:\r\n {P}\r\n\r\n"),
            // A bare LF or CR inside the bound header.
            format!("GET / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P}\nX: 1\r\n\r\n"),
            format!("GET / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P}\rX: 1\r\n\r\n"),
            // Absolute-form naming another host; a Host naming another one.
            format!("GET https://evil.example/ HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P}\r\n\r\n"),
            format!("GET / HTTP/1.1\r\nHost: evil.example\r\nx-api-key: {P}\r\n\r\n"),
            format!("GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: evil.example\r\nx-api-key: {P}\r\n\r\n"),
            format!("GET / HTTP/1.1\r\nHost: api.example.com@evil.example\r\nx-api-key: {P}\r\n\r\n"),
            // Framing: CL + TE, two CL, a signed CL, TE on HTTP/1.0, TE twice.
            format!("POST / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"),
            format!("POST / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P}\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\n"),
            format!("POST / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P}\r\nContent-Length: +4\r\n\r\n"),
            format!("POST / HTTP/1.0\r\nHost: api.example.com\r\nx-api-key: {P}\r\nTransfer-Encoding: chunked\r\n\r\n"),
            format!("POST / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P}\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"),
            // A tab as the request line's separator; HTTP/2 and 0.9 lines.
            format!("GET\t/ HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P}\r\n\r\n"),
            format!("GET / HTTP/2\r\nHost: api.example.com\r\nx-api-key: {P}\r\n\r\n"),
            format!("GET /\r\nHost: api.example.com\r\nx-api-key: {P}\r\n\r\n"),
            // Upgrade by any spelling.
            format!("GET / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P}\r\nconnection: keep-alive, UPGRADE\r\nupgrade: h2c\r\n\r\n"),
        ];
        for head in &cases {
            let r = judged(head);
            assert!(r.is_err(), "{head:?} accepted: {r:?}");
        }
        // Over the cap, whole or still coming.
        let long = format!(
            "GET / HTTP/1.1\r\nHost: api.example.com\r\nx-api-key: {P}\r\nX: {}\r\n\r\n",
            "a".repeat(40 * 1024)
        );
        assert!(matches!(
            judged(&long),
            Err(Refusal::Request(RequestError::TooLarge(_)))
        ));
        assert!(matches!(
            judge(
                &long.as_bytes()[..33 * 1024],
                32 * 1024,
                "api.example.com",
                443,
                &bindings()
            ),
            Err(Refusal::Request(RequestError::TooLarge(_)))
        ));
    }

    /// CLOSED. A header listed in `Connection` is dropped by the
    /// terminated path, but the judge still counts it as the bound one:
    /// the swap never lands in a header the client renamed.
    #[test]
    fn only_the_bound_name_gets_the_secret() {
        for name in [
            "x-api-key-2",
            "x-api-keyx",
            "xx-api-key",
            "x_api_key",
            "authorization",
        ] {
            let head = format!("GET / HTTP/1.1\r\nHost: api.example.com\r\n{name}: {P}\r\n\r\n");
            assert!(
                matches!(judged(&head), Err(Refusal::Misuse { .. })),
                "{name}"
            );
        }
    }

    /// A placeholder in a header's name, or in a Host that does not match,
    /// is found, and the refusal's text (the 403 body and the egress log's
    /// rule) quotes it as `<placeholder>`, never the placeholder itself.
    #[test]
    fn a_refusal_never_quotes_a_placeholder() {
        let head = format!("GET / HTTP/1.1\r\nHost: api.example.com\r\nx-{P}: 1\r\n\r\n");
        let r = judged(&head).unwrap_err();
        assert!(matches!(r, Refusal::Misuse { .. }), "{r:?}");
        assert!(
            !r.to_string().contains(P) && r.to_string().contains("<placeholder>"),
            "{r}"
        );
        let head = format!(
            "GET / HTTP/1.1\r\nHost: {}.example\r\n\r\n",
            P.to_lowercase()
        );
        let r = judged(&head).unwrap_err();
        assert!(matches!(r, Refusal::HostMismatch { .. }), "{r:?}");
        assert!(
            !r.to_string().to_lowercase().contains(&P.to_lowercase()),
            "{r}"
        );
    }

    /// The terminated path asks `head_complete` after each read, which
    /// searches only the new bytes (and the three before them): a blank
    /// line split across reads at any point is still found, and a head
    /// sent a byte at a time is searched once over, not once per byte.
    #[test]
    fn a_head_split_anywhere_is_complete_exactly_once_its_blank_line_arrives() {
        let head = b"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
        let mut searched = 0;
        for n in 1..=head.len() {
            let done = request::head_complete(&head[..n], searched);
            assert_eq!(done, n == head.len(), "{n}");
            searched = n;
        }
        for cut in 1..head.len() {
            assert!(request::head_complete(head, cut), "{cut}");
        }
    }
}
