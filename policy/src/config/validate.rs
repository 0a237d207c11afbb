//! The checks a parsed policy must pass; each error names its key.

use std::path::Path;

use super::sections::default_rlimits;
use super::*;
use crate::lang::hosts::HostPattern;
use crate::lang::text::collapse_whitespace;

impl Policy {
    /// Parses and validates policy text. `origin` names the file in errors.
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Policy, ConfigError> {
        let path = origin.display().to_string();
        let mut policy: Policy = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.clone(),
            message: collapse_whitespace(&e.to_string()),
        })?;
        policy.validate(&path)?;
        Ok(policy)
    }

    fn validate(&mut self, path: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: path.to_string(),
            key: key.to_string(),
            message,
        };
        let mut normalised = Vec::new();
        for cap in &self.process.capabilities {
            let name = normalise_capability(cap).ok_or_else(|| {
                invalid(
                    "process.capabilities",
                    format!("unknown capability {cap:?}"),
                )
            })?;
            if NEVER_GRANTED_CAPABILITIES.contains(&name.as_str()) {
                return Err(invalid(
                    "process.capabilities",
                    format!("{name} can undo the isolation and is never granted"),
                ));
            }
            if !normalised.contains(&name) {
                normalised.push(name);
            }
        }
        self.process.capabilities = normalised;
        if self.process.pids_limit <= 0 {
            return Err(invalid(
                "process.pids_limit",
                format!("must be a positive number, not {}", self.process.pids_limit),
            ));
        }
        if let Some(user) = &self.process.user {
            if parse_uid_gid(user).is_none() {
                return Err(invalid(
                    "process.user",
                    format!("expected numeric \"uid:gid\", got {user:?}"),
                ));
            }
        }
        for pattern in &self.process.env_allow {
            let name = pattern.strip_suffix('*').unwrap_or(pattern);
            if name.contains('*') || name.contains('=') || pattern.is_empty() {
                return Err(invalid(
                    "process.env_allow",
                    format!("{pattern:?} must be a name or PREFIX*"),
                ));
            }
        }
        for (index, entry) in self.filesystem.tmpfs.iter().enumerate() {
            let dir = &entry.path;
            let clean = |p: &Path| crate::lang::json::clean_path(&p.to_string_lossy()).into_owned();
            // Cleaned: "/tmp/.." would be a tmpfs over the whole root.
            if !dir.is_absolute() || clean(dir) == "/" {
                return Err(invalid(
                    "filesystem.tmpfs",
                    format!("{} must be an absolute path other than /", dir.display()),
                ));
            }
            if self.filesystem.tmpfs[..index]
                .iter()
                .any(|e| clean(&e.path) == clean(dir))
            {
                return Err(invalid(
                    "filesystem.tmpfs",
                    format!("{} is listed twice", dir.display()),
                ));
            }
        }
        for bind in &self.filesystem.bind {
            if !bind.source.is_absolute() || bind.source == Path::new("/") {
                return Err(invalid(
                    "filesystem.bind.source",
                    format!(
                        "{} must be an absolute path other than /",
                        bind.source.display()
                    ),
                ));
            }
        }
        for init in &self.filesystem.init_binaries {
            if !init.is_absolute() || init == Path::new("/") {
                return Err(invalid(
                    "filesystem.init_binaries",
                    format!("{} must be an absolute file path", init.display()),
                ));
            }
        }
        for (key, dirs) in [
            ("filesystem.volume_dirs", &self.filesystem.volume_dirs),
            ("runtime.checkpoint_dirs", &self.runtime.checkpoint_dirs),
            ("runtime.pid_file_dirs", &self.runtime.pid_file_dirs),
        ] {
            if let Some(d) = dirs
                .iter()
                .find(|d| !d.is_absolute() || *d == Path::new("/"))
            {
                return Err(invalid(
                    key,
                    format!("{} must be an absolute directory, not /", d.display()),
                ));
            }
        }
        if let Some(p) = &self.filesystem.probe {
            if !p.is_absolute() || p == Path::new("/") {
                return Err(invalid(
                    "filesystem.probe",
                    format!("{} must be an absolute file path", p.display()),
                ));
            }
        }
        if let Some(p) = &self.runtime.path {
            if !p.is_absolute() {
                return Err(invalid(
                    "runtime.path",
                    format!("{} must be absolute", p.display()),
                ));
            }
        }
        if let Some(p) = &self.network.nft {
            if !p.is_absolute() {
                return Err(invalid(
                    "network.nft",
                    format!("{} must be absolute", p.display()),
                ));
            }
        }
        if self.network.mode == NetworkMode::Allowlist && self.network.allow.is_empty() {
            return Err(invalid(
                "network.allow",
                "mode \"allowlist\" needs at least one entry (use mode \"none\" for no egress)"
                    .into(),
            ));
        }
        if self.network.mode != NetworkMode::Allowlist && !self.network.allow.is_empty() {
            return Err(invalid(
                "network.allow",
                "entries only apply with mode \"allowlist\"".into(),
            ));
        }
        if self.network.mode.loopback_only() && self.network.inbound {
            return Err(invalid(
                "network.inbound",
                format!(
                    "mode {:?} allows no traffic but loopback; inbound needs \"allowlist\" or \"open\"{}",
                    self.network.mode.name(),
                    if self.network.mode == NetworkMode::Proxy {
                        " (a dev server in mode \"proxy\": network.preview_ports)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        if !self.network.dns && !self.network.resolvers.is_empty() {
            return Err(invalid(
                "network.resolvers",
                "resolvers only apply with dns = true".into(),
            ));
        }
        network(&self.network).map_err(|(key, message)| invalid(key, message))?;
        credentials(&self.network, &self.process)
            .map_err(|(key, message)| invalid(key, message))?;
        self.hooks
            .validate()
            .map_err(|(key, message)| invalid(key, message))?;
        self.validate_resources(path)?;
        userns(&self.userns).map_err(|(key, message)| invalid(key, message))?;
        super::profiles::validate(&self.profiles).map_err(|e| ConfigError::Invalid {
            path: path.to_string(),
            key: "profiles".into(),
            message: e.to_string(),
        })?;
        Ok(())
    }
}

impl HooksSection {
    /// Checks paths and patterns; the error names the key.
    pub(crate) fn validate(&self) -> Result<(), (&'static str, String)> {
        use crate::lang::pattern::{check_env_pattern, check_pattern};
        for dir in &self.oci_hooks_dirs {
            if !dir.is_absolute() {
                return Err((
                    "hooks.oci_hooks_dirs",
                    format!("{} must be absolute", dir.display()),
                ));
            }
        }
        for allow in &self.allow {
            let path = allow.path.to_string_lossy();
            if crate::lang::json::clean_path(&path) != path || !allow.path.is_absolute() {
                return Err((
                    "hooks.allow.path",
                    format!("{path} must be an absolute, clean path"),
                ));
            }
            if allow.stages.contains(&HookStage::StartContainer) {
                return Err((
                    "hooks.allow.stages",
                    format!(
                        "{path}: startContainer hooks run inside the container (after \
                         pivot_root), where a host binary cannot be judged; only an OCI \
                         hooks.d definition can allow one"
                    ),
                ));
            }
            if allow.stages.is_empty() {
                return Err((
                    "hooks.allow.stages",
                    format!("{path}: name at least one stage"),
                ));
            }
            if allow.args.is_empty() {
                return Err((
                    "hooks.allow.args",
                    format!("{path}: args[0] at least is required"),
                ));
            }
            let patterns = allow.args.iter().chain(allow.options.iter().flatten());
            for pattern in patterns {
                check_pattern(pattern).map_err(|e| ("hooks.allow.args", format!("{path}: {e}")))?;
            }
            if allow.options.iter().any(Vec::is_empty) {
                return Err(("hooks.allow.options", format!("{path}: an empty group")));
            }
            for pattern in &allow.env {
                check_env_pattern(pattern)
                    .map_err(|e| ("hooks.allow.env", format!("{path}: {e}")))?;
            }
        }
        Ok(())
    }
}

impl Policy {
    fn validate_resources(&mut self, path: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: path.to_string(),
            key: format!("resources.{key}"),
            message,
        };
        let r = &mut self.resources;
        // Below a few MiB runc cannot even start the container's init.
        if r.memory_max.0 < 8 << 20 {
            return Err(invalid(
                "memory_max",
                format!("must be at least 8m, not {} bytes", r.memory_max.0),
            ));
        }
        // Below a page per socket TCP cannot move a byte.
        if let Some(tcp) = r.kernel_tcp_max.filter(|t| t.0 < 1 << 20) {
            return Err(invalid(
                "kernel_tcp_max",
                format!("must be at least 1m, not {} bytes", tcp.0),
            ));
        }
        if !(r.cpus.is_finite() && r.cpus >= 0.01 && r.cpus <= 4096.0) {
            return Err(invalid(
                "cpus",
                format!("must be a number of CPUs from 0.01 to 4096, not {}", r.cpus),
            ));
        }
        if !(2..=262_144).contains(&r.cpu_shares_max) {
            return Err(invalid(
                "cpu_shares_max",
                format!("must be 2 to 262144, not {}", r.cpu_shares_max),
            ));
        }
        if r.tmpfs_max.0 < 1 << 20 {
            return Err(invalid(
                "tmpfs_max",
                format!("must be at least 1m, not {} bytes", r.tmpfs_max.0),
            ));
        }
        let mut merged = default_rlimits();
        for (name, max) in &r.rlimits {
            let full = normalise_rlimit(name)
                .ok_or_else(|| invalid("rlimits", format!("unknown rlimit {name:?}")))?;
            merged.insert(full.to_string(), *max);
        }
        r.rlimits = merged;
        Ok(())
    }
}

/// Checks `hosts`, `ports` and `enforce` of `[network]`; the error names
/// the key.
pub(crate) fn network(net: &NetworkSection) -> Result<(), (&'static str, String)> {
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
        if !net.preview_ports.is_empty() {
            return Err((
                "network.preview_ports",
                "only applies with mode \"proxy\" (allowlist and open use inbound = true)".into(),
            ));
        }
        if net.transparent {
            return Err((
                "network.transparent",
                "only applies with mode \"proxy\"".into(),
            ));
        }
        return Ok(());
    }
    if net.transparent && net.dns {
        return Err((
            "network.transparent",
            "the DNS answerer is the container's only DNS: dns = true would keep the engine's \
             resolver (127.0.0.11) reachable, which forwards every name"
                .into(),
        ));
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
    for (i, range) in net.preview_ports.iter().enumerate() {
        if let Some(other) = net.preview_ports[..i].iter().find(|o| o.overlaps(range)) {
            return Err((
                "network.preview_ports",
                format!("{range} overlaps {other}, listed before it"),
            ));
        }
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

/// A name a process environment can carry and a shell can export.
fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// An HTTP header name (RFC 9110 token).
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Headers the proxy itself reads or rewrites to judge a request: a
/// credential in one of them would be judged by a value it changed.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "proxy-authorization",
    "te",
    "trailer",
];

/// Checks `[[network.credentials]]` and `upstream_ca` as written (the
/// source files' owner and mode are host facts: `egress::credential`);
/// the error names the key.
pub(crate) fn credentials(
    net: &NetworkSection,
    process: &ProcessSection,
) -> Result<(), (&'static str, String)> {
    if net.mode != NetworkMode::Proxy {
        if !net.credentials.is_empty() {
            return Err((
                "network.credentials",
                "only applies with mode \"proxy\" (the proxy swaps the secret in)".into(),
            ));
        }
        if net.upstream_ca.is_some() {
            return Err((
                "network.upstream_ca",
                "only applies with mode \"proxy\"".into(),
            ));
        }
    }
    if let Some(ca) = &net.upstream_ca {
        if !ca.is_absolute() {
            return Err((
                "network.upstream_ca",
                format!("{} must be absolute", ca.display()),
            ));
        }
    }
    let patterns: Vec<HostPattern> = net.hosts.iter().filter_map(|h| h.parse().ok()).collect();
    for (index, cred) in net.credentials.iter().enumerate() {
        let name = &cred.name;
        let earlier = &net.credentials[..index];
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
        if !name_ok {
            return Err((
                "network.credentials.name",
                format!("{name:?} must be 1-64 of a-z A-Z 0-9 - _ ."),
            ));
        }
        if earlier.iter().any(|c| &c.name == name) {
            return Err((
                "network.credentials.name",
                format!("{name:?} is listed twice"),
            ));
        }
        if cred.hosts.is_empty() {
            return Err((
                "network.credentials.hosts",
                format!("{name}: name at least one host"),
            ));
        }
        for host in &cred.hosts {
            let exact = crate::lang::hosts::normalize_name(host).map_err(|e| {
                (
                    "network.credentials.hosts",
                    format!("{name}: {e} (exact names only)"),
                )
            })?;
            // 443: the proxy terminates TLS for a credential host.
            let allowed = patterns.iter().any(|p| {
                p.matches_name(&exact)
                    && p.port()
                        .map_or(net.ports.contains(&443), |port| port == 443)
            });
            if !allowed {
                return Err((
                    "network.credentials.hosts",
                    format!("{name}: {host} on port 443 is not allowed by [network] hosts"),
                ));
            }
            let bound = |c: &CredentialSection| {
                c.hosts
                    .iter()
                    .any(|h| crate::lang::hosts::normalize_name(h).is_ok_and(|h| h == exact))
            };
            if let Some(other) = earlier.iter().find(|c| bound(c)) {
                return Err((
                    "network.credentials.hosts",
                    format!("{name}: {host} is already bound to {:?}", other.name),
                ));
            }
        }
        match (&cred.header, &cred.basic_user) {
            (Some(_), Some(_)) | (None, None) => {
                return Err((
                    "network.credentials",
                    format!("{name}: set exactly one of header and basic_user"),
                ))
            }
            (Some(header), None) => {
                let lower = header.to_ascii_lowercase();
                if !is_token(header) || RESERVED_HEADERS.contains(&lower.as_str()) {
                    return Err((
                        "network.credentials.header",
                        format!("{name}: {header:?} is not a header a credential can travel in"),
                    ));
                }
                if lower == "authorization"
                    && cred
                        .scheme
                        .as_deref()
                        .is_some_and(|s| s.eq_ignore_ascii_case("basic"))
                {
                    return Err((
                        "network.credentials.scheme",
                        format!("{name}: HTTP Basic is basic_user, not a scheme"),
                    ));
                }
            }
            (None, Some(user)) => {
                if user.is_empty() || user.contains(':') || user.chars().any(char::is_control) {
                    return Err((
                        "network.credentials.basic_user",
                        format!("{name}: {user:?} must be a non-empty user name without ':'"),
                    ));
                }
                if cred.scheme.is_some() {
                    return Err((
                        "network.credentials.scheme",
                        format!("{name}: scheme only applies with header"),
                    ));
                }
            }
        }
        if let Some(scheme) = &cred.scheme {
            if !is_token(scheme) {
                return Err((
                    "network.credentials.scheme",
                    format!("{name}: {scheme:?} must be one word (Bearer, token)"),
                ));
            }
        }
        let env = &cred.env;
        if !is_env_name(env) {
            return Err((
                "network.credentials.env",
                format!("{name}: {env:?} is not a variable name"),
            ));
        }
        let upper = env.to_ascii_uppercase();
        if upper.ends_with("_PROXY")
            || upper == "NODE_USE_ENV_PROXY"
            || TRUST_BUNDLE_ENV.contains(&upper.as_str())
        {
            return Err((
                "network.credentials.env",
                format!("{name}: {env} is a variable vibe-shim sets itself"),
            ));
        }
        if let Some(other) = earlier.iter().find(|c| c.env.eq_ignore_ascii_case(env)) {
            return Err((
                "network.credentials.env",
                format!("{name}: {env} is already {:?}'s", other.name),
            ));
        }
        if process
            .env_allow
            .iter()
            .any(|p| p.eq_ignore_ascii_case(env))
        {
            return Err((
                "process.env_allow",
                format!(
                    "{env} is credential {name:?}'s placeholder (forced, whatever the client \
                     passes): remove it from env_allow"
                ),
            ));
        }
        if !cred.source.is_absolute() {
            return Err((
                "network.credentials.source",
                format!("{name}: {} must be absolute", cred.source.display()),
            ));
        }
    }
    Ok(())
}

/// A private block is 65,536 ids: a whole 16-bit id space, as nspawn and
/// the kubelet hand out.
pub const USERNS_BLOCK: u32 = 65_536;

/// Host ids no private block may touch, `[start, end)`, with what owns them.
const USERNS_RESERVED: [(u64, u64, &str); 4] = [
    (
        0,
        0x1_0000,
        "host accounts, nobody and systemd's dynamic users (0-65535)",
    ),
    (
        0x8_0000,
        0x7000_0000,
        "systemd-nspawn's container ranges (524288-1879048191)",
    ),
    (
        0x7FFE_0000,
        0x7FFF_0000,
        "systemd's foreign id range (2147352576-2147418111)",
    ),
    (
        0x8000_0000,
        u64::MAX,
        "ids from 2^31 up (read as negative by some tools)",
    ),
];

/// Why `start`/`size` cannot be the reserved range of private blocks, if not.
pub fn userns_range(start: u32, size: u32) -> Result<(), String> {
    if size == 0 || !size.is_multiple_of(USERNS_BLOCK) || !start.is_multiple_of(USERNS_BLOCK) {
        return Err(format!(
            "{start}:{size}: the start and the size must be multiples of 65536, the size not 0"
        ));
    }
    let end = u64::from(start) + u64::from(size);
    for (low, high, what) in USERNS_RESERVED {
        if u64::from(start) < high && low < end {
            return Err(format!("{start}:{size} overlaps {what}"));
        }
    }
    Ok(())
}

fn userns(section: &UsernsSection) -> Result<(), (&'static str, String)> {
    match (section.range_start, section.range_size) {
        (None, None) => Ok(()),
        (Some(start), Some(size)) => {
            userns_range(start, size).map_err(|m| ("userns.range_start", m))
        }
        _ => Err((
            "userns.range_start",
            "range_start and range_size go together".into(),
        )),
    }
}
