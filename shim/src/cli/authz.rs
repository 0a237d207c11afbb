//! `vibe-shim authz`: the Docker authorization plugin (plumbing only; the
//! decisions are `vibe_policy::authz`). dockerd POSTs JSON over the unix
//! socket `/run/docker/plugins/<name>.sock`:
//! `/Plugin.Activate` -> `{"Implements":["authz"]}`;
//! `/AuthZPlugin.AuthZReq` (method, URI, headers, base64 body) ->
//! `{"Allow":bool,"Msg":…,"Err":…}`; `/AuthZPlugin.AuthZRes` -> allow (the
//! request was judged already; responses are not filtered).
//!
//! Robustness: a plugin request over [`MAX_REQUEST`] is refused, not read;
//! at most [`MAX_CONNECTIONS`] connections are served at once, each with a
//! header timeout; anything unparseable is refused. One JSON line per
//! denial on stderr. dockerd refuses every request when the plugin is
//! unreachable or answers with an error, so failures stay closed.

use std::convert::Infallible;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use serde::Deserialize;
use serde_json::json;
use tokio::net::UnixListener;
use tokio::sync::Semaphore;
use vibe_policy::authz::{decide, Cx, Decision, Gate, RULE_REQUEST};
use vibe_policy::{Denial, Policy};

use crate::install::lockdown;
use crate::policy_file;
use crate::sys::host::RealHost;

pub const DEFAULT_SOCKET: &str = "/run/docker/plugins/vibe-shim.sock";
/// A plugin request: a body dockerd shows is < 1 MiB, base64 makes 4/3 of
/// it, plus headers and URI.
const MAX_REQUEST: usize = 4 << 20;
const MAX_CONNECTIONS: usize = 32;
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Exit codes, for `--help` and the unit file.
const EXIT_CODES: &str = "Exit codes:\n  0  never while serving (it serves until killed)\n  1  a usage error, a bad policy, or the socket or the runtime could not be set up";

/// `vibe-shim authz`: the plugin's options.
#[derive(Debug, clap::Parser)]
#[command(
    name = "authz",
    bin_name = "vibe-shim authz",
    about = "Serve the Docker authorization plugin (vibe-shim-authz.service)",
    args_override_self = true,
    after_help = EXIT_CODES
)]
pub struct AuthzArgs {
    /// The policy [default: the global --config, else /etc/vibe-shim/config.toml]
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The plugin socket dockerd finds by the plugin's name
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// A runtime name that leads to vibe-shim on this host (repeatable)
    /// [default: vibe-shim]
    #[arg(long = "runtime", value_name = "NAME", action = clap::ArgAction::Append)]
    runtimes: Vec<String>,
    /// What dockerd runs when a client names no runtime [default: runc]
    #[arg(long, value_name = "NAME")]
    default_runtime: Option<String>,
    /// Let through the binds dockerd may create (`-v` host paths)
    #[arg(long)]
    allow_bind_create: bool,
    /// Let through a client's cgroup parent
    #[arg(long)]
    allow_cgroup_parent: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthzError {
    #[error("{0}")]
    Policy(#[from] policy_file::PolicyFileError),
    #[error("socket {path}: {source}")]
    Socket {
        path: String,
        source: std::io::Error,
    },
    #[error("tokio runtime: {0}")]
    Runtime(std::io::Error),
}

struct Options {
    config: PathBuf,
    socket: PathBuf,
    gate: Gate,
}

/// The options from the verb's arguments; `config` is the global
/// `--config` (or the default), which the verb's own overrides.
fn options(config: &Path, args: AuthzArgs) -> Options {
    let mut gate = Gate::default();
    if !args.runtimes.is_empty() {
        gate.runtimes = args.runtimes;
    }
    if let Some(default_runtime) = args.default_runtime {
        gate.default_runtime = default_runtime;
    }
    gate.allow_bind_create = args.allow_bind_create;
    gate.allow_cgroup_parent = args.allow_cgroup_parent;
    Options {
        config: args.config.unwrap_or_else(|| config.to_path_buf()),
        socket: args.socket,
        gate,
    }
}

/// `vibe-shim authz …`: serves until killed. Returns the exit code.
pub fn run(config: &Path, args: &[OsString]) -> i32 {
    let args = match super::parse::<AuthzArgs>("authz", args, 1) {
        Ok(args) => args,
        Err(code) => return code,
    };
    match serve(options(config, args)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("vibe-shim: authz: {e}");
            1
        }
    }
}

fn serve(opts: Options) -> Result<(), AuthzError> {
    let policy = policy_file::load(&opts.config)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(AuthzError::Runtime)?;
    runtime.block_on(async move {
        let listener = bind(&opts.socket)?;
        eprintln!(
            "vibe-shim: authz: serving {} (policy {}, runtimes {:?}, default runtime {}{}{})",
            opts.socket.display(),
            opts.config.display(),
            opts.gate.runtimes,
            opts.gate.default_runtime,
            if opts.gate.allow_bind_create {
                ", --allow-bind-create"
            } else {
                ""
            },
            if opts.gate.allow_cgroup_parent {
                ", --allow-cgroup-parent"
            } else {
                ""
            }
        );
        let state = Arc::new((policy, opts.gate));
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        loop {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return Ok(());
            };
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    eprintln!("vibe-shim: authz: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let state = state.clone();
            tokio::task::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(handle(req, &state.0, &state.1).await) }
                });
                let served = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .max_buf_size(64 << 10)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                if let Err(e) = served {
                    eprintln!("vibe-shim: authz: connection: {e}");
                }
                drop(permit);
            });
        }
    })
}

/// Binds the socket, replacing a stale socket file (never another kind of
/// file), root-only.
fn bind(path: &Path) -> Result<UnixListener, AuthzError> {
    let fail = |source| AuthzError::Socket {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path).map_err(fail)?,
        Ok(_) => {
            return Err(fail(std::io::Error::other(
                "exists and is not a socket; not replaced",
            )))
        }
        Err(_) => {}
    }
    let listener = UnixListener::bind(path).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
    Ok(listener)
}

type Reply = Response<Full<Bytes>>;

fn reply(status: StatusCode, body: serde_json::Value) -> Reply {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/vnd.docker.plugins.v1+json"),
    );
    response
}

fn verdict(allow: bool, msg: &str) -> Reply {
    reply(
        StatusCode::OK,
        json!({"Allow": allow, "Msg": msg, "Err": ""}),
    )
}

async fn handle(req: Request<Incoming>, policy: &Policy, gate: &Gate) -> Reply {
    match req.uri().path() {
        "/Plugin.Activate" => reply(StatusCode::OK, json!({"Implements": ["authz"]})),
        "/AuthZPlugin.AuthZReq" => {
            let bytes = match Limited::new(req.into_body(), MAX_REQUEST).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) => {
                    return refuse_unread(format!(
                        "plugin request unreadable or over {} MiB: {e}",
                        MAX_REQUEST >> 20
                    ))
                }
            };
            let decision = judge(&bytes, policy, gate);
            if decision.allowed() {
                verdict(true, "")
            } else {
                log_denial(&bytes, &decision);
                verdict(false, &decision.message())
            }
        }
        // Responses are not filtered: the body is drained, never kept.
        "/AuthZPlugin.AuthZRes" => {
            let mut body = req.into_body();
            while let Some(frame) = body.frame().await {
                if frame.is_err() {
                    break;
                }
            }
            verdict(true, "")
        }
        _ => reply(StatusCode::NOT_FOUND, json!({"Err": "unknown endpoint"})),
    }
}

/// The fields of dockerd's `authorization.Request` the gate reads.
#[derive(Deserialize, Default)]
#[serde(default)]
struct AuthzRequest {
    #[serde(rename = "RequestMethod")]
    method: String,
    #[serde(rename = "RequestUri")]
    uri: String,
    #[serde(rename = "RequestBody")]
    body: Option<String>,
    #[serde(rename = "RequestHeaders")]
    headers: Option<std::collections::BTreeMap<String, String>>,
}

fn judge(bytes: &[u8], policy: &Policy, gate: &Gate) -> Decision {
    let unreadable = |what: String| Decision {
        endpoint: "unreadable",
        denial: Some(Denial::new(RULE_REQUEST, "plugin request", "", what)),
    };
    let request: AuthzRequest = match serde_json::from_slice(bytes) {
        Ok(r) => r,
        Err(e) => return unreadable(format!("plugin request is not JSON vibe-shim reads: {e}")),
    };
    let body = match request.body.as_deref() {
        None => Vec::new(),
        // Go encodes []byte as standard base64.
        Some(text) => match base64::engine::general_purpose::STANDARD.decode(text) {
            Ok(body) => body,
            Err(e) => return unreadable(format!("RequestBody is not base64: {e}")),
        },
    };
    let headers: Vec<(String, String)> = request.headers.unwrap_or_default().into_iter().collect();
    let host = RealHost::new();
    let cx = Cx {
        policy,
        gate,
        host: &host,
        lockdown: &lockdown_holds,
    };
    decide(
        &vibe_policy::authz::Request {
            method: &request.method,
            uri: &request.uri,
            headers: &headers,
            body: &body,
        },
        &cx,
    )
}

fn refuse_unread(what: String) -> Reply {
    let decision = Decision {
        endpoint: "unreadable",
        denial: Some(Denial::new(RULE_REQUEST, "plugin request", "", what)),
    };
    log_denial(b"", &decision);
    verdict(false, &decision.message())
}

/// One JSON line per denial on stderr (the service's journal).
fn log_denial(request: &[u8], decision: &Decision) {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Brief {
        #[serde(rename = "RequestMethod")]
        method: String,
        #[serde(rename = "RequestUri")]
        uri: String,
        #[serde(rename = "User")]
        user: String,
    }
    let brief: Brief = serde_json::from_slice(request).unwrap_or_default();
    let time = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let line = json!({
        "time": time,
        "level": "deny",
        "method": brief.method,
        "uri": brief.uri.chars().take(512).collect::<String>(),
        "user": brief.user,
        "endpoint": decision.endpoint,
        "denial": decision.denial,
        "msg": decision.message(),
    });
    eprintln!("{line}");
}

/// Whether lockdown holds now, checked afresh for each build request and
/// failing closed. For every running dockerd and containerd (which hands
/// its PATH to the runc shims), inside that process's root (the plugin and
/// the engine may each have a mount namespace of their own): the lockdown
/// record there must name a `runc` that is the recorded vibe-shim, and the
/// first `runc` on the process's PATH, and in divert mode on systemd's
/// default PATH, must be that file. Paths resolve with `RESOLVE_IN_ROOT`.
fn lockdown_holds() -> Result<(), String> {
    let engines: Vec<_> = running_engines()
        .into_iter()
        .map(|(whose, pid, path)| (whose, PathBuf::from(format!("/proc/{pid}/root")), path))
        .collect();
    if engines.is_empty() {
        return Err("no running dockerd or containerd to check".into());
    }
    lockdown_holds_for(&engines)
}

/// [`lockdown_holds`] for these `(name, root, PATH)` engines.
fn lockdown_holds_for(engines: &[(String, PathBuf, String)]) -> Result<(), String> {
    for (whose, root, engine_path) in engines {
        let record = lockdown::recorded_in(root)
            .map_err(|e| format!("{whose}: {e}"))?
            .ok_or_else(|| format!("{whose}: no lockdown record ({})", lockdown::RECORD_PATH))?;
        let root_fd = open_dir(root).map_err(|e| format!("{whose}: {}: {e}", root.display()))?;
        let shim = identity(&root_fd, &record.shim)
            .map_err(|e| format!("{whose}: {}: {e}", record.shim.display()))?;
        if identity(&root_fd, &record.runc).ok() != Some(shim) {
            return Err(format!(
                "{whose}: {} is not {}",
                record.runc.display(),
                record.shim.display()
            ));
        }
        let mut paths = vec![engine_path.clone()];
        if record.mode == lockdown::Mode::Divert {
            paths.push(lockdown::ENGINE_PATH.to_string());
        }
        for path in paths {
            match first_runc(&root_fd, &path) {
                Some((_, id)) if id == shim => {}
                Some((found, _)) => {
                    return Err(format!(
                        "{whose}: PATH {path} finds {} first, not vibe-shim",
                        found.display()
                    ))
                }
                None => return Err(format!("{whose}: PATH {path} finds no runc")),
            }
        }
    }
    Ok(())
}

/// `(name, pid, PATH)` of every running dockerd and containerd.
fn running_engines() -> Vec<(String, String, String)> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in procs.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let dir = entry.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if !matches!(comm, "dockerd" | "containerd") {
            continue;
        }
        // Gone meanwhile: skipped. Unreadable while it still runs: an empty
        // PATH, which finds no runc and so refuses (fail closed).
        let environ = match std::fs::read(dir.join("environ")) {
            Ok(environ) => environ,
            Err(_) if !dir.join("stat").exists() => continue,
            Err(_) => Vec::new(),
        };
        let path = environ
            .split(|b| *b == 0)
            .find_map(|kv| kv.strip_prefix(b"PATH="))
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default();
        found.push((format!("{comm} (pid {pid})"), pid, path));
    }
    found
}

type FileId = (u64, u64);

fn open_dir(path: &Path) -> Result<OwnedFd, nix::Error> {
    let fd = nix::fcntl::open(
        path,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    // SAFETY: open just returned this fd, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// (device, inode) of the regular file at `path`, symlinks resolved as
/// inside `root`.
fn identity(root: &OwnedFd, path: &Path) -> Result<FileId, nix::Error> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = openat2(root.as_raw_fd(), path, how)?;
    // SAFETY: openat2 just returned this fd, and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
    if st.st_mode & nix::libc::S_IFMT != nix::libc::S_IFREG {
        return Err(nix::Error::EINVAL);
    }
    Ok((st.st_dev, st.st_ino))
}

/// The `runc` Go's `exec.LookPath` finds on `path` inside `root`: the first
/// regular file with an execute bit. A relative entry is refused (Go >=
/// 1.19 refuses what it finds there; older ones use it).
fn first_runc(root: &OwnedFd, path: &str) -> Option<(PathBuf, FileId)> {
    // Go splits an empty PATH into no entries at all.
    if path.is_empty() {
        return None;
    }
    for dir in path.split(':') {
        if !dir.starts_with('/') {
            return Some((PathBuf::from(dir).join("runc"), (0, 0)));
        }
        let candidate = Path::new(dir).join("runc");
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let Ok(fd) = openat2(root.as_raw_fd(), &candidate, how) else {
            continue;
        };
        // SAFETY: openat2 just returned this fd, and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let Ok(st) = nix::sys::stat::fstat(fd.as_raw_fd()) else {
            continue;
        };
        if st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG && st.st_mode & 0o111 != 0 {
            return Some((candidate, (st.st_dev, st.st_ino)));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(body: &serde_json::Value) -> Vec<u8> {
        body.to_string().into_bytes()
    }

    #[test]
    fn envelope_is_decoded_and_judged() {
        let policy = Policy::default();
        let gate = Gate::default();
        let body = base64::engine::general_purpose::STANDARD
            .encode(br#"{"HostConfig":{"Binds":["/etc:/x"]}}"#);
        let d = judge(
            &req(
                &json!({"RequestMethod": "POST", "RequestUri": "/v1.41/containers/create",
                "RequestBody": body, "RequestHeaders": {"Content-Type": "application/json"}}),
            ),
            &policy,
            &gate,
        );
        assert_eq!(d.denial.unwrap().rule, "authz-binds");
        let d = judge(
            &req(&json!({"RequestMethod": "GET", "RequestUri": "/_ping", "RequestBody": null})),
            &policy,
            &gate,
        );
        assert!(d.allowed());
        for bad in [&b"{"[..], b"[]", br#"{"RequestBody":"***"}"#] {
            assert!(!judge(bad, &policy, &gate).allowed());
        }
    }

    /// The runc an engine finds is looked up inside its root: an absolute
    /// symlink there resolves there, and a shadow earlier on PATH wins.
    #[test]
    fn runc_is_resolved_inside_the_engines_root() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for dir in ["usr/bin", "usr/sbin", "usr/local/sbin"] {
            std::fs::create_dir_all(r.join(dir)).unwrap();
        }
        let exe = |path: &Path| {
            std::fs::write(path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        exe(&r.join("usr/bin/vibe-shim"));
        symlink("/usr/bin/vibe-shim", r.join("usr/sbin/runc")).unwrap();
        let fd = open_dir(r).unwrap();
        let shim = identity(&fd, Path::new("/usr/bin/vibe-shim")).unwrap();
        assert_eq!(identity(&fd, Path::new("/usr/sbin/runc")).unwrap(), shim);
        let (found, id) = first_runc(&fd, "/usr/local/sbin:/usr/sbin").unwrap();
        assert_eq!((found.as_path(), id), (Path::new("/usr/sbin/runc"), shim));
        // `..` cannot climb out of the root either.
        symlink(
            "../../../../../../usr/bin/vibe-shim",
            r.join("usr/local/sbin/up"),
        )
        .unwrap();
        assert_eq!(
            identity(&fd, Path::new("/usr/local/sbin/up")).unwrap(),
            shim
        );
        // A shadow earlier on PATH, and a relative entry, are what Go finds.
        exe(&r.join("usr/local/sbin/runc"));
        let (found, id) = first_runc(&fd, "/usr/local/sbin:/usr/sbin").unwrap();
        assert_eq!(found, Path::new("/usr/local/sbin/runc"));
        assert_ne!(id, shim);
        assert_ne!(first_runc(&fd, "bin:/usr/sbin").unwrap().1, shim);
        assert!(first_runc(&fd, "").is_none());
        assert!(first_runc(&fd, "/nowhere").is_none());
        // A directory is not a file.
        assert!(identity(&fd, Path::new("/usr/bin")).is_err());
    }

    /// A record in a scratch root, as `install lockdown` writes it (divert).
    fn locked_root() -> tempfile::TempDir {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for dir in ["usr/bin", "usr/sbin", "usr/local/sbin", "etc/vibe-shim"] {
            std::fs::create_dir_all(r.join(dir)).unwrap();
        }
        for file in ["usr/bin/vibe-shim", "usr/sbin/runc.vibe-shim-real"] {
            std::fs::write(r.join(file), "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(r.join(file), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        symlink("/usr/bin/vibe-shim", r.join("usr/sbin/runc")).unwrap();
        let record = r.join("etc/vibe-shim/lockdown.toml");
        std::fs::write(
            &record,
            "mode = \"divert\"\nrunc = \"/usr/sbin/runc\"\n\
             real = \"/usr/sbin/runc.vibe-shim-real\"\nshim = \"/usr/bin/vibe-shim\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o644)).unwrap();
        root
    }

    /// Needs root (tests/run.sh's unit step is): the record must be
    /// root-owned, and a record that is not counts as no lockdown.
    #[test]
    fn lockdown_holds_only_while_every_engine_finds_vibe_shim() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "run as root: the lockdown record must be root-owned"
        );
        let root = locked_root();
        let r = root.path();
        let check = |path: &str| {
            lockdown_holds_for(&[("dockerd (pid 1)".into(), r.to_path_buf(), path.into())])
        };
        assert_eq!(check("/usr/local/sbin:/usr/sbin:/usr/bin"), Ok(()));
        // A runc earlier on the engine's PATH, or on systemd's default one.
        let err = check("/usr/bin/x:/usr/bin").unwrap_err();
        assert!(err.contains("finds no runc"), "{err}");
        std::fs::write(r.join("usr/local/sbin/runc"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            r.join("usr/local/sbin/runc"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let err = check("/usr/sbin").unwrap_err();
        assert!(err.contains("finds /usr/local/sbin/runc first"), "{err}");
        std::fs::remove_file(r.join("usr/local/sbin/runc")).unwrap();
        // runc no longer vibe-shim (restored without the record going).
        std::fs::remove_file(r.join("usr/sbin/runc")).unwrap();
        std::os::unix::fs::symlink("runc.vibe-shim-real", r.join("usr/sbin/runc")).unwrap();
        let err = check("/usr/sbin").unwrap_err();
        assert!(
            err.contains("/usr/sbin/runc is not /usr/bin/vibe-shim"),
            "{err}"
        );
        // A record others can write, or none.
        let root = locked_root();
        let r = root.path();
        let record = r.join("etc/vibe-shim/lockdown.toml");
        let check = |path: &str| {
            lockdown_holds_for(&[("dockerd (pid 1)".into(), r.to_path_buf(), path.into())])
        };
        std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(check("/usr/sbin").is_err());
        std::fs::remove_file(&record).unwrap();
        let err = check("/usr/sbin").unwrap_err();
        assert!(err.contains("no lockdown record"), "{err}");
    }

    fn parse_args(config: &Path, args: &[&str]) -> Result<Options, clap::Error> {
        use clap::Parser;
        let argv = std::iter::once("authz").chain(args.iter().copied());
        AuthzArgs::try_parse_from(argv).map(|a| options(config, a))
    }

    #[test]
    fn args() {
        let c = Path::new("/c");
        let o = parse_args(c, &["--socket=/s", "--runtime", "a", "--runtime", "b"]).unwrap();
        assert_eq!(o.socket, PathBuf::from("/s"));
        assert_eq!(o.config, PathBuf::from("/c"));
        assert_eq!(o.gate.runtimes, ["a", "b"]);
        assert_eq!(o.gate.default_runtime, "runc");
        assert!(!o.gate.allow_bind_create);
        let o = parse_args(c, &[]).unwrap();
        assert_eq!(o.gate.runtimes, ["vibe-shim"]);
        assert_eq!(o.socket, PathBuf::from(DEFAULT_SOCKET));
        let o = parse_args(c, &["--config", "/p", "--default-runtime=crun"]).unwrap();
        assert_eq!(o.config, PathBuf::from("/p"));
        assert_eq!(o.gate.default_runtime, "crun");
        assert!(parse_args(c, &["--nope"]).is_err());
        assert!(parse_args(c, &["--socket"]).is_err());
        let o = parse_args(c, &["--allow-bind-create"]).unwrap();
        assert!(o.gate.allow_bind_create);
        // A switch, not a flag with a value.
        assert!(parse_args(c, &["--allow-bind-create=no"]).is_err());
        assert!(!o.gate.allow_cgroup_parent);
        let o = parse_args(c, &["--allow-cgroup-parent"]).unwrap();
        assert!(o.gate.allow_cgroup_parent);
        assert!(parse_args(c, &["--allow-cgroup-parent=1"]).is_err());
    }
}
