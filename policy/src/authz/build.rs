//! `POST /build`, and BuildKit's hijacked `/session` and `/grpc`.
//!
//! A build's steps never pass through a create the gate sees: the legacy
//! builder creates its RUN containers inside dockerd under the daemon's
//! default runtime, and BuildKit's executor execs `runc` from dockerd's
//! PATH. Without lockdown that is plain runc (Docker's default capabilities,
//! no pids limit, `mknod`), so builds are refused unless the server found
//! lockdown holding for this very request ([`Cx::lockdown`]), and the
//! daemon's default runtime is one the gate accepts.
//!
//! The query is read as Go's `url.ParseQuery` fills `r.Form` for moby's
//! build route, and judged parameter by parameter (API 1.41 to 1.51): a
//! parameter the route does not read is refused, as an unknown create field
//! is. What the gate cannot see is not judged: the Dockerfile (inside the
//! tar context, or sent over the BuildKit session), so `ADD <url>` and
//! BuildKit's `/grpc` solve requests are left to lockdown (README Limits).

use serde_json::Value;

use super::{Cx, Request};
use crate::decision::Denial;
use crate::lang::gojson::{self, Field, Kind};
use crate::lang::text::one_line;

pub const RULE_BUILD: &str = "authz-build";
pub const RULE_CGROUP_PARENT: &str = "authz-cgroup-parent";

/// Every parameter moby's `newImageBuildOptions` reads (API 1.41 to 1.51).
const PARAMS: &[&str] = &[
    "dockerfile",
    "t",
    "extrahosts",
    "remote",
    "q",
    "nocache",
    "cachefrom",
    "pull",
    "rm",
    "forcerm",
    "memory",
    "memswap",
    "cpushares",
    "cpusetcpus",
    "cpusetmems",
    "cpuperiod",
    "cpuquota",
    "buildargs",
    "shmsize",
    "squash",
    "labels",
    "networkmode",
    "platform",
    "target",
    "outputs",
    "version",
    "cgroupparent",
    "isolation",
    "ulimits",
    "securityopt",
    "session",
    "buildid",
];
/// Read as lists (`r.Form[key]`); every other parameter as its first value
/// only (`r.FormValue`), so a repeated one is refused.
const LISTS: &[&str] = &["t", "extrahosts", "securityopt"];
/// Network modes of a build's steps that keep a network namespace of their
/// own (`host` shares the host's; `container:<id>` another container's).
const NETWORK_MODES: &[&str] = &["", "default", "bridge", "none"];
/// `remote=client-session` is BuildKit's "the context comes over the
/// session"; any other value makes dockerd fetch the context itself (`git
/// clone`, or an HTTP GET), from the host's network namespace.
const REMOTES: &[&str] = &["", "client-session"];
/// Exporters that write to dockerd's image store or to the client over the
/// session, never to a path on the daemon's host.
const OUTPUT_TYPES: &[&str] = &[
    "moby",
    "image",
    "local",
    "tar",
    "docker",
    "oci",
    "cacheonly",
];

/// `types.ImageBuildOutput`: `outputs` is a JSON list of these.
static OUTPUTS_KIND: Kind = Kind::List(&Kind::Struct(&[
    Field("Type", Kind::Leaf),
    Field("Attrs", Kind::Map(&Kind::Leaf)),
]));

/// `POST /build`.
pub fn judge_build(req: &Request, cx: &Cx) -> Result<(), Denial> {
    refuse_form_body(req)?;
    let params = query_pairs(req.uri)
        .map_err(|reason| denial("RequestURI", one_line(req.uri, 256), reason.to_string()))?;
    for (i, (key, value)) in params.iter().enumerate() {
        let field = format!("?{}", one_line(key, 64));
        if !PARAMS.contains(&key.as_str()) {
            return Err(denial(
                field,
                one_line(value, 256),
                "a build parameter vibe-shim does not judge",
            ));
        }
        if !LISTS.contains(&key.as_str()) && params[..i].iter().any(|(k, _)| k == key) {
            return Err(denial(
                field,
                one_line(value, 256),
                "repeated: dockerd reads only the first",
            ));
        }
        judge_param(key, value, &field, cx)?;
    }
    require_lockdown(cx, "/build")
}

/// `/session` and `/grpc`: BuildKit's own API, whose solve requests (steps,
/// entitlements, contexts) the gate cannot see. They are only for builds.
pub fn judge_buildkit(endpoint: &str, cx: &Cx) -> Result<(), Denial> {
    require_lockdown(cx, endpoint)
}

fn judge_param(key: &str, value: &str, field: &str, cx: &Cx) -> Result<(), Denial> {
    let refuse = |reason: &str| Err(denial(field, one_line(value, 256), reason));
    match key {
        "cgroupparent" => judge_cgroup_parent(value, field, cx),
        "networkmode" if !NETWORK_MODES.contains(&value) => refuse(
            "a build's steps keep a network namespace of their own: networkmode must be \
             default, bridge or none",
        ),
        "remote" if !REMOTES.contains(&value) => refuse(
            "remote build contexts are refused: dockerd fetches them itself (git clone, \
             HTTP) from the host's network namespace",
        ),
        "isolation" if !matches!(value, "" | "default") => refuse("isolation must be default"),
        // Linux dockerd refuses it anyway; present at all is refused here.
        "securityopt" => refuse("security options on build are refused"),
        "version" if !matches!(value, "" | "1" | "2") => refuse("builder version must be 1 or 2"),
        "shmsize" if !value.is_empty() && value.parse::<i64>().is_err() => {
            refuse("not an integer as dockerd reads it")
        }
        "buildargs" => json_param(value, field, |v| {
            v.as_object()
                .is_some_and(|m| m.values().all(|x| x.is_string() || x.is_null()))
        }),
        "labels" => json_param(value, field, |v| {
            v.as_object()
                .is_some_and(|m| m.values().all(Value::is_string))
        }),
        "cachefrom" => json_param(value, field, |v| {
            v.as_array().is_some_and(|l| l.iter().all(Value::is_string))
        }),
        "ulimits" => json_param(value, field, Value::is_array),
        "outputs" => judge_outputs(value, field),
        _ => Ok(()),
    }
}

/// `HostConfig.CgroupParent`, and a build's `cgroupparent`: a parent the
/// client names puts the container's processes in that cgroup's subtree
/// (another container's: `/docker/<id>`), counted against its limits.
pub fn judge_cgroup_parent(value: &str, field: &str, cx: &Cx) -> Result<(), Denial> {
    if value.is_empty() || cx.gate.allow_cgroup_parent {
        return Ok(());
    }
    Err(Denial::new(
        RULE_CGROUP_PARENT,
        field,
        one_line(value, 256),
        "a cgroup parent is refused: it can nest the container under another \
         container's cgroup and its limits (--allow-cgroup-parent lets it through)",
    ))
}

/// A JSON-valued parameter: empty, or JSON that `shape` accepts (what
/// dockerd would decode without error).
fn json_param(value: &str, field: &str, shape: impl Fn(&Value) -> bool) -> Result<(), Denial> {
    if value.is_empty() {
        return Ok(());
    }
    match serde_json::from_str::<Value>(value) {
        Ok(v) if shape(&v) => Ok(()),
        _ => Err(denial(
            field,
            one_line(value, 256),
            "not JSON of the shape dockerd reads",
        )),
    }
}

fn judge_outputs(value: &str, field: &str) -> Result<(), Denial> {
    if value.is_empty() {
        return Ok(());
    }
    let bad = |reason: String| denial(field, one_line(value, 256), reason);
    let outputs = gojson::from_slice(value.as_bytes(), &OUTPUTS_KIND).map_err(|e| match e {
        gojson::Error::Key(denial) => denial,
        gojson::Error::Syntax(e) => bad(format!("not JSON vibe-shim can judge: {e}")),
    })?;
    let Value::Array(list) = outputs else {
        return Err(bad("not a list as dockerd reads it".into()));
    };
    for output in &list {
        let kind = match output.get("Type") {
            None | Some(Value::Null) => "",
            Some(Value::String(t)) => t.as_str(),
            Some(_) => return Err(bad("Type is not a string".into())),
        };
        if !OUTPUT_TYPES.contains(&kind) {
            return Err(bad(format!(
                "output type {kind:?} refused (allowed: {})",
                OUTPUT_TYPES.join(", ")
            )));
        }
    }
    Ok(())
}

/// Go's `ParseForm` also reads the BODY of an urlencoded POST into `r.Form`,
/// ahead of the query (and `FormValue` a multipart one): parameters the
/// plugin is never shown.
fn refuse_form_body(req: &Request) -> Result<(), Denial> {
    for (key, value) in req.headers {
        let lower = value.to_ascii_lowercase();
        if key.eq_ignore_ascii_case("Content-Type") && lower.contains("form") {
            return Err(denial(
                "Content-Type",
                one_line(value, 128),
                "a form body would carry build parameters the plugin is not shown",
            ));
        }
    }
    Ok(())
}

fn require_lockdown(cx: &Cx, what: &str) -> Result<(), Denial> {
    if let Err(reason) = (cx.lockdown)() {
        return Err(denial(
            "lockdown",
            one_line(&reason, 256),
            format!(
                "{what} refused without lockdown: build steps run under the daemon's \
                 runtimes without a create the gate sees, and runc is not vibe-shim here"
            ),
        ));
    }
    let default = cx.gate.default_runtime.as_str();
    if !cx.gate.runtimes.iter().any(|r| r == default) {
        return Err(denial(
            "lockdown",
            format!("(daemon default: {default})"),
            format!(
                "{what} refused: the legacy builder runs its steps under the daemon's \
                 default runtime, which is not one the gate accepts"
            ),
        ));
    }
    Ok(())
}

/// Why a query is refused; the text is the denial's reason.
#[derive(Debug, thiserror::Error)]
pub(crate) enum QueryError {
    #[error("`;` in the query: Go versions read it differently")]
    Semicolon,
    #[error("bad percent escape in the query")]
    BadEscape,
    #[error(transparent)]
    Hex(#[from] std::num::ParseIntError),
    #[error("query is not UTF-8 once decoded")]
    NotUtf8(#[source] std::string::FromUtf8Error),
}

/// The request-target's query as Go (>= 1.17) `url.ParseQuery` reads it,
/// in order: `&`-separated, `+` is a space, `%XX` escapes in keys and
/// values. Refused where Go versions differ or fail: a `;` (Go < 1.17
/// split on it, later ones drop the pair), a bad escape (dropped silently
/// by `FormValue`), a result that is not UTF-8.
pub(crate) fn query_pairs(uri: &str) -> Result<Vec<(String, String)>, QueryError> {
    let Some((_, query)) = uri.split_once('?') else {
        return Ok(Vec::new());
    };
    if query.contains(';') {
        return Err(QueryError::Semicolon);
    }
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((unescape(key)?, unescape(value)?))
        })
        .collect()
}

fn unescape(text: &str) -> Result<String, QueryError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                    .ok_or(QueryError::BadEscape)?;
                out.push(u8::from_str_radix(hex, 16)?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(QueryError::NotUtf8)
}

fn denial(field: impl Into<String>, value: String, reason: impl Into<String>) -> Denial {
    Denial::new(RULE_BUILD, field, value, reason)
}
