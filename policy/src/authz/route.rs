//! Which dockerd endpoint a request reaches, read the way dockerd's router
//! reads it: gorilla/mux matches the percent-DECODED, cleaned path
//! (`/containers/%63reate` is `/containers/create`), with an optional
//! `/v<digits and dots>` version prefix, and the method.

use std::borrow::Cow;

use crate::lang::json::clean_path;

/// The endpoints the gate treats specially; everything else is `Other`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /containers/create`.
    ContainerCreate,
    /// `POST /containers/{id}/start`, with the API version asked for.
    ContainerStart {
        version: Option<(u64, u64)>,
    },
    /// `/containers/{id}/archive` (any method) and the pre-1.24
    /// `POST /containers/{id}/copy`: `docker cp`.
    Archive,
    /// `GET /containers/{id}/export`.
    Export,
    /// `POST /volumes/create`.
    VolumeCreate,
    /// `POST /networks/{id}/connect`: `docker network connect`.
    NetworkConnect,
    /// `POST /networks/create`: `docker network create`.
    NetworkCreate,
    /// Plugin install/enable/configure: `/plugins/pull`, `/plugins/create`,
    /// `/plugins/{name}/enable|set|upgrade`.
    PluginInstall,
    /// Swarm: `/services/create`, `/services/{id}/update`, `/swarm/init`,
    /// `/swarm/join`.
    Swarm,
    /// `POST /build`.
    Build,
    /// `POST /session`, `POST /grpc`: BuildKit's hijacked endpoints.
    BuildKit,
    Other,
}

impl Endpoint {
    /// A short name for the log.
    pub fn name(&self) -> &'static str {
        match self {
            Endpoint::ContainerCreate => "container-create",
            Endpoint::ContainerStart { .. } => "container-start",
            Endpoint::Archive => "container-archive",
            Endpoint::Export => "container-export",
            Endpoint::VolumeCreate => "volume-create",
            Endpoint::NetworkConnect => "network-connect",
            Endpoint::NetworkCreate => "network-create",
            Endpoint::PluginInstall => "plugin-install",
            Endpoint::Swarm => "swarm",
            Endpoint::Build => "build",
            Endpoint::BuildKit => "buildkit",
            Endpoint::Other => "other",
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RouteError {
    #[error("request URI is neither a path nor an absolute URL")]
    NotAPath,
    #[error("request URI has an invalid percent escape")]
    BadEscape,
    #[error("request URI path is not UTF-8 once decoded")]
    NotUtf8,
}

/// Classifies a request by its method and request URI (as dockerd hands it
/// to the plugin: the raw request-target).
pub fn classify(method: &str, uri: &str) -> Result<Endpoint, RouteError> {
    let raw_path = path_of(uri)?;
    let decoded = percent_decode(raw_path)?;
    let cleaned = clean_path(&decoded);
    let (version, path) = strip_version(&cleaned);
    // mux routes never end in `/`; matching without it only adds refusals.
    let path = match path.strip_suffix('/') {
        Some(p) if !p.is_empty() => p,
        _ => path,
    };
    let post = method.eq_ignore_ascii_case("POST");
    let get = method.eq_ignore_ascii_case("GET");
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let last = segments.last().copied().unwrap_or_default();
    let endpoint = match segments.first().copied() {
        Some("containers") if segments.len() == 2 && last == "create" && post => {
            Endpoint::ContainerCreate
        }
        // `{name:.*}`: the id may itself hold slashes.
        Some("containers") if segments.len() >= 3 => match last {
            "start" if post => Endpoint::ContainerStart { version },
            "archive" => Endpoint::Archive,
            "copy" if post => Endpoint::Archive,
            "export" if get => Endpoint::Export,
            _ => Endpoint::Other,
        },
        Some("volumes") if segments.len() == 2 && last == "create" && post => {
            Endpoint::VolumeCreate
        }
        Some("networks") if post && segments.len() == 2 && last == "create" => {
            Endpoint::NetworkCreate
        }
        // `{id:.*}`, as for containers.
        Some("networks") if post && segments.len() >= 3 && last == "connect" => {
            Endpoint::NetworkConnect
        }
        Some("plugins") if post => match (segments.len(), last) {
            (2, "pull" | "create") => Endpoint::PluginInstall,
            (n, "enable" | "set" | "upgrade") if n >= 3 => Endpoint::PluginInstall,
            _ => Endpoint::Other,
        },
        Some("services") if post => match (segments.len(), last) {
            (2, "create") => Endpoint::Swarm,
            (n, "update") if n >= 3 => Endpoint::Swarm,
            _ => Endpoint::Other,
        },
        Some("swarm") if post && segments.len() == 2 && matches!(last, "init" | "join") => {
            Endpoint::Swarm
        }
        Some("build") if post && segments.len() == 1 => Endpoint::Build,
        Some("session" | "grpc") if post && segments.len() == 1 => Endpoint::BuildKit,
        _ => Endpoint::Other,
    };
    Ok(endpoint)
}

/// The path of a request-target: origin form (`/p?q`) or absolute form
/// (`http://host/p?q`, which Go's server accepts too).
fn path_of(uri: &str) -> Result<&str, RouteError> {
    let without_query = uri.split('?').next().unwrap_or_default();
    if without_query.starts_with('/') {
        return Ok(without_query);
    }
    let (scheme, rest) = without_query
        .split_once("://")
        .ok_or(RouteError::NotAPath)?;
    if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(RouteError::NotAPath);
    }
    Ok(rest.find('/').map_or("/", |i| &rest[i..]))
}

fn percent_decode(path: &str) -> Result<Cow<'_, str>, RouteError> {
    if !path.contains('%') {
        return Ok(Cow::Borrowed(path));
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or(RouteError::BadEscape)?;
            let text = std::str::from_utf8(hex).map_err(|_| RouteError::BadEscape)?;
            let byte = u8::from_str_radix(text, 16).map_err(|_| RouteError::BadEscape)?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map(Cow::Owned)
        .map_err(|_| RouteError::NotUtf8)
}

/// Splits off `/v1.41`-style prefixes (mux: `/v{version:[0-9.]+}`).
fn strip_version(path: &str) -> (Option<(u64, u64)>, &str) {
    let Some(rest) = path.strip_prefix("/v") else {
        return (None, path);
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (version, tail) = rest.split_at(end);
    if version.is_empty() || !(tail.is_empty() || tail.starts_with('/')) {
        return (None, path);
    }
    let tail = if tail.is_empty() { "/" } else { tail };
    (Some(parse_version(version)), tail)
}

/// Like moby's `versions.compare`: numeric parts, a part that does not
/// parse counts as 0.
fn parse_version(text: &str) -> (u64, u64) {
    let mut parts = text.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(method: &str, uri: &str) -> Endpoint {
        classify(method, uri).unwrap()
    }

    #[test]
    fn create_with_and_without_version_and_disguises() {
        for uri in [
            "/containers/create",
            "/v1.41/containers/create?name=x",
            "/v1.41/containers/create/",
            "/v1.41/containers/%63reate",
            "/v1.41//containers/./create",
            "/v1.41/images/../containers/create",
            "http://docker/v1.41/containers/create?x=1",
            "/v1/containers/create",
        ] {
            assert_eq!(ep("POST", uri), Endpoint::ContainerCreate, "{uri}");
        }
        assert_eq!(ep("post", "/containers/create"), Endpoint::ContainerCreate);
        assert_eq!(ep("GET", "/containers/create"), Endpoint::Other);
        assert_eq!(ep("POST", "/vx/containers/create"), Endpoint::Other);
    }

    #[test]
    fn other_endpoints() {
        assert_eq!(
            ep("POST", "/v1.23/containers/abc/start"),
            Endpoint::ContainerStart {
                version: Some((1, 23))
            }
        );
        assert_eq!(
            ep("POST", "/containers/abc/start"),
            Endpoint::ContainerStart { version: None }
        );
        for m in ["HEAD", "GET", "PUT"] {
            assert_eq!(
                ep(m, "/v1.41/containers/abc/archive?path=/"),
                Endpoint::Archive
            );
        }
        assert_eq!(ep("PUT", "/containers/a/b/archive"), Endpoint::Archive);
        assert_eq!(ep("POST", "/v1.20/containers/a/copy"), Endpoint::Archive);
        assert_eq!(ep("GET", "/containers/a/export"), Endpoint::Export);
        assert_eq!(ep("POST", "/volumes/create"), Endpoint::VolumeCreate);
        assert_eq!(
            ep("POST", "/v1.51/networks/n/connect"),
            Endpoint::NetworkConnect
        );
        assert_eq!(
            ep("POST", "/networks/a/b/connect"),
            Endpoint::NetworkConnect
        );
        assert_eq!(ep("POST", "/networks/n/disconnect"), Endpoint::Other);
        assert_eq!(
            ep("POST", "/v1.51/networks/create"),
            Endpoint::NetworkCreate
        );
        assert_eq!(ep("POST", "/networks/create/"), Endpoint::NetworkCreate);
        assert_eq!(ep("GET", "/networks/create"), Endpoint::Other);
        assert_eq!(
            ep("POST", "/v1.41/plugins/pull?remote=x"),
            Endpoint::PluginInstall
        );
        assert_eq!(
            ep("POST", "/plugins/x:latest/enable"),
            Endpoint::PluginInstall
        );
        assert_eq!(ep("POST", "/plugins/x/set"), Endpoint::PluginInstall);
        assert_eq!(ep("POST", "/plugins/x/disable"), Endpoint::Other);
        assert_eq!(ep("POST", "/services/create"), Endpoint::Swarm);
        assert_eq!(ep("POST", "/services/s/update"), Endpoint::Swarm);
        assert_eq!(ep("POST", "/swarm/join"), Endpoint::Swarm);
        assert_eq!(ep("POST", "/swarm/leave"), Endpoint::Other);
        assert_eq!(ep("POST", "/v1.41/build?remote=x"), Endpoint::Build);
        assert_eq!(ep("POST", "/%62uild/"), Endpoint::Build);
        assert_eq!(ep("POST", "/build/prune"), Endpoint::Other);
        assert_eq!(ep("POST", "/v1.51/session"), Endpoint::BuildKit);
        assert_eq!(ep("POST", "/grpc"), Endpoint::BuildKit);
        assert_eq!(ep("GET", "/build"), Endpoint::Other);
        assert_eq!(ep("GET", "/containers/json"), Endpoint::Other);
        assert_eq!(ep("POST", "/containers/abc/update"), Endpoint::Other);
    }

    #[test]
    fn unreadable_uris_are_errors() {
        assert_eq!(
            classify("GET", "containers/create"),
            Err(RouteError::NotAPath)
        );
        assert_eq!(classify("GET", "/x%zz"), Err(RouteError::BadEscape));
        assert_eq!(classify("GET", "/x%"), Err(RouteError::BadEscape));
        assert_eq!(classify("GET", "/x%ff"), Err(RouteError::NotUtf8));
    }
}
