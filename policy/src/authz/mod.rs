//! The Docker API gate: dockerd's authorization-plugin interface shows the
//! plugin every API request before dockerd acts on it. [`decide`] judges one
//! request (method, URI, headers, body bytes) against the same [`Policy`]
//! the runtime enforces, for what the runtime cannot see: binds dockerd
//! would create or use itself, volumes that are host mounts, `docker cp`,
//! the runtime a client picks, and the doors that bypass the runtime.
//! Pure: host facts only through [`HostView`]; the server is
//! shim/src/authz.rs.
//!
//! Refused (see README "API gate"):
//! - container create (and a pre-1.24 start with a HostConfig) with a bind
//!   or mount source outside `[[filesystem.bind]]`, a local volume that is a
//!   host mount, or a runtime not in the gate's list ([`create`]); a mount
//!   of type image/cluster/npipe, a volume `Subpath`, `DeviceRequests`
//!   (`--gpus`, CDI), `Annotations`, and any HostConfig or mount field
//!   Docker 28.5 (API 1.51) does not have: what the gate cannot judge;
//! - `POST /volumes/create` of such a local volume ([`volume`]);
//! - per-interface sysctls dockerd sets itself: endpoint driver option
//!   `com.docker.network.endpoint.sysctls` at create and at
//!   `POST /networks/{id}/connect`, `HostConfig.Sysctls` `net.ipv*.conf.*`
//!   ([`network`]);
//! - `docker cp` (`/containers/{id}/archive`, legacy `/copy`): dockerd
//!   mounts the container's binds on the host and walks them as root,
//!   outside the runtime, so a client that can write in a bind can race
//!   those paths as in the bind-source race; there is no safe subset;
//! - plugin install/enable/set/upgrade: plugins run privileged with mounts
//!   of their own choosing;
//! - swarm service create/update and swarm init/join: tasks are created by
//!   dockerd's executor inside the daemon, never through this API.
//!
//! - `HostConfig.CgroupParent` and a build's `cgroupparent`, unless
//!   [`Gate::allow_cgroup_parent`] ([`build`]);
//! - `/build`, `/session` and `/grpc` unless lockdown holds (build steps
//!   reach the daemon's runtimes without a create the gate sees), and a
//!   build parameter that is unknown, a remote context, or a network mode
//!   that is not the steps' own ([`build`]).
//!
//! Allowed on purpose: `docker export` (moby's `containerExport` tars the
//! container's own layer mount, not its binds), exec and update (the
//! runtime enforces both), everything else.
//!
//! A body that is needed but not shown, too large, not JSON, or spelled so
//! dockerd (Go's `encoding/json`) would read other keys than the gate does
//! is refused: fail closed.

mod build;
mod create;
mod network;
pub mod route;
pub mod schema;
mod volume;

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::config::Policy;
use crate::decision::Denial;
use crate::host::HostView;
use crate::lang::gojson::{self, Kind};
use crate::lang::text::one_line;
use crate::rules::binds;
pub use route::Endpoint;

pub const RULE_BINDS: &str = "authz-binds";
pub const RULE_BODY: &str = "authz-body";
pub const RULE_REQUEST: &str = "authz-request";
pub const RULE_ARCHIVE: &str = "authz-archive";
pub const RULE_PLUGINS: &str = "authz-plugins";
pub const RULE_SWARM: &str = "authz-swarm";
pub const RULE_DEVICES: &str = "authz-devices";
pub const RULE_ANNOTATIONS: &str = "authz-annotations";
pub use build::{RULE_BUILD, RULE_CGROUP_PARENT};
pub use create::{RULE_LOG, RULE_RUNTIME, RULE_VOLUMES_FROM};
pub use network::{RULE_NETWORK, RULE_SYSCTLS};
pub use volume::RULE as RULE_VOLUME;

/// dockerd shows the plugin a body only below this size
/// (pkg/authorization `maxBodySize`); anything larger is refused.
pub const MAX_BODY: usize = 1 << 20;
/// Longest host path judged (Linux PATH_MAX).
const MAX_PATH: usize = 4096;

/// Settings of the gate itself (flags of `vibe-shim authz`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    /// Runtime names that lead to vibe-shim on this host.
    pub runtimes: Vec<String>,
    /// What dockerd runs when a client names no runtime (its
    /// `default-runtime`, `runc` unless configured): judged by that name.
    pub default_runtime: String,
    /// Let through the binds dockerd may create (`-v` host paths, and
    /// `CreateMountpoint`). Off: dockerd creates a missing source with
    /// `MkdirAll` as root when the container starts, following any symlink
    /// a container planted in a directory it writes after this judgement;
    /// `--mount type=bind` never creates and is always judged as usual.
    pub allow_bind_create: bool,
    /// Let through a client's cgroup parent (`--cgroup-parent`, a build's
    /// `cgroupparent`). Off: a parent such as `/docker/<id>` nests the
    /// container under another container's cgroup, so what it forks counts
    /// against that container's pids and memory limits.
    pub allow_cgroup_parent: bool,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            runtimes: vec!["vibe-shim".to_string()],
            default_runtime: "runc".to_string(),
            allow_bind_create: false,
            allow_cgroup_parent: false,
        }
    }
}

/// Whether lockdown holds on this host now (`Err`: why not). The server
/// checks it afresh for each request that needs it; a record that does not
/// hold counts as no lockdown.
pub type LockdownCheck<'a> = &'a dyn Fn() -> Result<(), String>;

/// What one decision reads.
pub struct Cx<'a> {
    pub policy: &'a Policy,
    pub gate: &'a Gate,
    pub host: &'a dyn HostView,
    /// Asked only for builds.
    pub lockdown: LockdownCheck<'a>,
}

/// One API request as dockerd shows it to the plugin.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The raw request-target.
    pub uri: &'a str,
    /// Flattened headers (Go canonical names).
    pub headers: &'a [(String, String)],
    /// Empty when dockerd did not send one.
    pub body: &'a [u8],
}

/// The decision on one request: which endpoint, and the refusal if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub endpoint: &'static str,
    pub denial: Option<Denial>,
}

impl Decision {
    pub fn allowed(&self) -> bool {
        self.denial.is_none()
    }

    /// The one line the client sees after dockerd's "authorization denied
    /// by plugin NAME: ".
    pub fn message(&self) -> String {
        match &self.denial {
            None => String::new(),
            Some(denial) => one_line(&format!("vibe-shim: {denial}"), 1024),
        }
    }
}

/// Judges one request. Never panics, whatever the input.
pub fn decide(req: &Request, cx: &Cx) -> Decision {
    let endpoint = match route::classify(req.method, req.uri) {
        Ok(endpoint) => endpoint,
        Err(e) => {
            return Decision {
                endpoint: "unreadable",
                denial: Some(Denial::new(
                    RULE_REQUEST,
                    "RequestURI",
                    one_line(req.uri, 256),
                    e.to_string(),
                )),
            }
        }
    };
    let result = match &endpoint {
        Endpoint::ContainerCreate => body(req).and_then(|b| create::judge_create(b, cx)),
        Endpoint::ContainerStart {
            version: Some(v), ..
        } if *v < (1, 24) => judge_old_start(req, cx),
        Endpoint::VolumeCreate => body(req).and_then(|b| judge_volume_create(b, cx)),
        Endpoint::NetworkConnect => body(req).and_then(network::judge_connect),
        Endpoint::NetworkCreate => body(req).and_then(network::judge_create),
        Endpoint::Archive => Err(Denial::new(
            RULE_ARCHIVE,
            "RequestURI",
            one_line(req.uri, 256),
            "docker cp is refused: dockerd reads and writes the container's binds on the host \
             itself, outside the runtime, where a client can race those paths",
        )),
        Endpoint::PluginInstall => Err(Denial::new(
            RULE_PLUGINS,
            "RequestURI",
            one_line(req.uri, 256),
            "installing, enabling or configuring a plugin is refused: plugins run privileged \
             with host mounts of their own",
        )),
        Endpoint::Swarm => Err(Denial::new(
            RULE_SWARM,
            "RequestURI",
            one_line(req.uri, 256),
            "swarm services and swarm init/join are refused: dockerd creates their containers \
             inside the daemon, where this gate cannot judge them",
        )),
        Endpoint::Build => build::judge_build(req, cx),
        Endpoint::BuildKit => build::judge_buildkit("BuildKit (/session, /grpc)", cx),
        Endpoint::ContainerStart { .. } | Endpoint::Export | Endpoint::Other => Ok(()),
    };
    Decision {
        endpoint: endpoint.name(),
        denial: result.err(),
    }
}

/// The body a judged endpoint needs.
fn body<'a>(req: &Request<'a>) -> Result<&'a [u8], Denial> {
    if req.body.is_empty() {
        return Err(Denial::new(
            RULE_BODY,
            "RequestBody",
            "",
            "dockerd did not show the request body to the plugin (chunked, not \
             application/json, or 1 MiB or more), so it cannot be judged",
        ));
    }
    if req.body.len() >= MAX_BODY {
        return Err(Denial::new(
            RULE_BODY,
            "RequestBody",
            format!("{} bytes", req.body.len()),
            "request body over 1 MiB",
        ));
    }
    Ok(req.body)
}

/// Before API 1.24, `start` took a HostConfig body that replaces the one
/// judged at create. A body the plugin cannot see (chunked, or not JSON)
/// is refused; a short one dockerd ignores (<= 7 bytes) is fine.
fn judge_old_start(req: &Request, cx: &Cx) -> Result<(), Denial> {
    if !req.body.is_empty() {
        return body(req).and_then(|b| create::judge_start_host_config(b, cx));
    }
    let length = req
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("Content-Length"))
        .and_then(|(_, v)| v.trim().parse::<u64>().ok());
    match length {
        Some(n) if n <= 7 => Ok(()),
        _ => Err(Denial::new(
            RULE_BODY,
            "RequestBody",
            "",
            "a pre-1.24 start with a HostConfig body the plugin cannot see",
        )),
    }
}

fn judge_volume_create(body: &[u8], cx: &Cx) -> Result<(), Denial> {
    let doc = parse_body(body, &schema::VOLUME_CREATE_KIND)?;
    let Value::Object(doc) = doc else {
        return Err(Denial::new(
            RULE_BODY,
            "/",
            "",
            "request body is not a JSON object",
        ));
    };
    let driver = match doc.get("Driver") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            return Err(Denial::new(
                RULE_BODY,
                "/Driver",
                "",
                "not a string as dockerd reads it",
            ))
        }
    };
    match doc.get("DriverOpts") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(options)) if volume::is_local(driver) => {
            volume::judge_local_options(options, "/DriverOpts", cx.policy, cx.host)
        }
        Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(Denial::new(
            RULE_BODY,
            "/DriverOpts",
            "",
            "not an object as dockerd reads it",
        )),
    }
}

/// Parses a judged body as dockerd (Go) will read it into `kind`.
fn parse_body(body: &[u8], kind: &'static Kind) -> Result<Value, Denial> {
    gojson::from_slice(body, kind).map_err(|e| match e {
        gojson::Error::Key(denial) => denial,
        gojson::Error::Syntax(e) => Denial::new(
            RULE_BODY,
            "RequestBody",
            "",
            format!("not JSON vibe-shim can judge: {e}"),
        ),
    })
}

/// Judges a host path a client names (a bind source, a volume's device)
/// against `[[filesystem.bind]]` with the runtime's own matching
/// ([`binds::judge_host_path`]). A source that does not exist yet (dockerd
/// creates a missing `-v` source) is judged by its nearest existing
/// ancestor, resolved, plus the rest.
pub(crate) fn host_path(
    source: &str,
    field: &str,
    rule: &'static str,
    policy: &Policy,
    host: &dyn HostView,
) -> Result<(), Denial> {
    let refuse = |value: String, reason: &str| Err(Denial::new(rule, field, value, reason));
    let shown = || one_line(source, 256);
    if !source.starts_with('/') {
        return refuse(shown(), "host path must be absolute");
    }
    if source.len() > MAX_PATH || source.contains('\0') {
        return refuse(shown(), "host path is too long or holds a NUL byte");
    }
    let path = Path::new(source);
    // dockerd cleans `..` lexically, the kernel resolves it after symlinks:
    // a path the two may read differently is refused.
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return refuse(shown(), "host path holds `.` or `..`");
    }
    let Some(canonical) = canonical_or_nearest(host, path) else {
        return refuse(shown(), "host path cannot be resolved");
    };
    binds::judge_host_path(policy, host, &canonical).map_err(|reason| {
        let value = if canonical == path {
            shown()
        } else {
            one_line(
                &format!("{source} (resolves to {})", canonical.display()),
                512,
            )
        };
        Denial::new(rule, field, value, reason.to_string())
    })?;
    Ok(())
}

/// The canonical path, or for a path that does not exist, its nearest
/// existing ancestor's canonical path joined with the rest.
fn canonical_or_nearest(host: &dyn HostView, path: &Path) -> Option<PathBuf> {
    for ancestor in path.ancestors() {
        if let Some(canonical) = host.canonicalize(ancestor) {
            let rest = path.strip_prefix(ancestor).ok()?;
            return Some(if rest.as_os_str().is_empty() {
                canonical
            } else {
                canonical.join(rest)
            });
        }
    }
    None
}

#[cfg(test)]
mod tests;
