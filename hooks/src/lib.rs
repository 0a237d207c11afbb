//! vibe-shim's network confinement: an OCI `createRuntime` hook that
//! installs the `inet vibe_shim` nftables table and prunes routes inside the
//! container's network namespace, plus the re-check done before `start`. In
//! open mode both also install `inet vibe_shim_<id>` in the host's namespace
//! (see [`vibe_policy::network::ruleset`]), which [`remove_host_rules`] deletes
//! at `delete`. All talk to nf_tables over netlink in process; only an
//! admin-configured `nft` binary makes the hook run a process.
//!
//! Everything done in the container's namespace runs on a dedicated thread
//! that has entered it; the calling thread never changes namespace, and
//! writes nothing to the host but that one per-container table.

pub mod backend;
pub mod digest;
pub mod egress;
pub mod fsio;
pub mod nfnetlink;
pub mod nft;
pub mod nftables;
pub mod routes;
pub mod state;

use std::fs::File;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use vibe_policy::config::{NetworkMode, NetworkSection};
use vibe_policy::engine::NETWORK_HOOK_MARKER;
use vibe_policy::network::ruleset::{self, Facts};

use crate::backend::{Backend, BackendError};
use crate::nfnetlink::NetlinkError;
use crate::nft::NftError;
use crate::routes::RouteError;
use crate::state::{ContainerState, StateError};

/// PATH given to the hook when the creating process has none.
pub const DEFAULT_HOOK_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Seconds runc waits for the hook before failing the create.
pub const HOOK_TIMEOUT_SECS: u64 = 10;

/// Why the network confinement could not be applied; printed after
/// "vibe-shim: network: ".
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(
        "container process {pid} shares the host's network namespace; \
         the network policy needs a private one"
    )]
    HostNamespace { pid: i32 },
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot enter the container's network namespace: {0}")]
    Enter(#[source] nix::Error),
    #[error("worker thread failed: {0}")]
    Thread(#[source] std::io::Error),
    #[error("the egress daemon returned no CA for the container's credentials")]
    NoCa,
    #[error("worker thread failed: panicked")]
    Panicked,
    #[error("cannot read the container's addresses: {0}")]
    ContainerAddresses(#[source] RouteError),
    #[error("cannot read the host's bridge addresses (network.preview_ports): {0}")]
    HostBridges(#[source] RouteError),
    #[error("container id {0:?} cannot name a host table")]
    BadId(String),
    #[error("host table inet {name}: {source}")]
    HostTable { name: String, source: BackendError },
    #[error(transparent)]
    Nft(#[from] NftError),
    #[error("nftables: {0}")]
    Netlink(#[from] NetlinkError),
    #[error(transparent)]
    Routes(#[from] RouteError),
    #[error(
        "table inet vibe_shim is missing from the container's network namespace; \
         refusing to start"
    )]
    TableMissing,
    #[error(
        "table inet vibe_shim in the container's network namespace is not ours \
         (expected comment \"{expected}\"); refusing to start"
    )]
    TableForeign { expected: String },
    /// Mode "proxy": the egress daemon did not take (or does not hold) the
    /// container.
    #[error("egress proxy: {0}")]
    Egress(#[from] egress::client::ControlError),
}

/// The hook's option naming runc's `--root` (the egress daemon keys
/// containers by root and id; the OCI state has no root).
pub const HOOK_RUNC_ROOT_FLAG: &str = "--runc-root";

/// The OCI hook object the policy appends to `hooks.createRuntime`. The
/// marker is always the last argument so stale entries can be recognised.
pub fn hook_entry(shim_exe: &Path, config: &Path, runc_root: &Path) -> serde_json::Value {
    let path = std::env::var("PATH")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_HOOK_PATH.to_string());
    serde_json::json!({
        "path": shim_exe.to_string_lossy(),
        "args": [
            "vibe-shim",
            "--config",
            config.to_string_lossy(),
            "hook",
            "network",
            HOOK_RUNC_ROOT_FLAG,
            runc_root.to_string_lossy(),
            NETWORK_HOOK_MARKER,
        ],
        "env": [format!("PATH={path}")],
        "timeout": HOOK_TIMEOUT_SECS,
    })
}

/// The `createRuntime` hook body: `state_json` is the OCI state from stdin.
pub fn run_network_hook(state_json: &[u8], net: &NetworkSection) -> Result<(), HookError> {
    let state = ContainerState::parse(state_json)?;
    let netns = open_container_netns(state.pid)?;
    apply(&state.id, netns, net, Phase::Create)
}

/// Which table [`apply`] installs: the `createRuntime` hook's, or the strict
/// one once the container is about to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Create,
    Start,
}

/// Mode "proxy", after [`run_network_hook`] installed the loopback-only
/// wall: registers the container with the egress daemon at
/// `net.egress_socket`, handing it the container's network namespace, so
/// the proxy listens on the container's own loopback. Any failure fails the
/// hook, and so the create. Other modes: nothing to do.
///
/// With `credentials`, the daemon must answer with the CA it terminates
/// them with (returned, for the container's trust bundle); a reply without
/// one fails the hook.
pub fn register_egress(
    state_json: &[u8],
    net: &NetworkSection,
    runc_root: &Path,
    credentials: &[vibe_policy::egress::credential::Binding],
) -> Result<Option<String>, HookError> {
    if net.mode != NetworkMode::Proxy {
        return Ok(None);
    }
    let state = ContainerState::parse(state_json)?;
    let netns = open_container_netns(state.pid)?;
    let reply = egress::client::register(
        &net.egress_socket,
        runc_root,
        &state.id,
        state.pid,
        net,
        credentials,
        &netns,
    )?;
    match (credentials.is_empty(), reply.ca_pem) {
        (true, _) => Ok(None),
        (false, Some(pem)) => Ok(Some(pem)),
        (false, None) => Err(HookError::NoCa),
    }
}

/// Mode "proxy", before `runc start`: the egress daemon must still serve
/// the container (it may have been restarted and not re-adopted it);
/// otherwise the start is refused. Other modes: nothing to do.
pub fn check_egress(net: &NetworkSection, runc_root: &Path, id: &str) -> Result<(), HookError> {
    if net.mode != NetworkMode::Proxy {
        return Ok(());
    }
    egress::client::status(&net.egress_socket, runc_root, id)?;
    Ok(())
}

/// Called by the shim before `runc start`: the table must still be ours;
/// then the work is redone, because Docker 28+ only adds the container's
/// interfaces and default route after `runc create`: the routes, and in
/// open mode the rules that name the container's addresses (in its table
/// and the host's).
pub fn check_before_start(id: &str, pid: i32, net: &NetworkSection) -> Result<(), HookError> {
    let netns = open_container_netns(pid)?;
    if net.mode != NetworkMode::Open {
        return start_loopback_only(id, netns, net);
    }
    let expected = vibe_policy::config::policy_tag(net);
    let reader = clone_fd(&netns)?;
    let (allowed, current) = in_netns(reader, move || {
        let table = nftables::read_table()?.ok_or(HookError::TableMissing)?;
        if !table.is_ours(&expected) {
            return Err(HookError::TableForeign { expected });
        }
        Ok((table.source_addrs(), container_addresses()?))
    })?;
    // Rebuilding a table that has rules waits for an RCU grace period
    // (milliseconds): only when the addresses changed or the host table is
    // gone.
    let name = ruleset::host_table_name(id).ok_or_else(|| HookError::BadId(id.to_string()))?;
    let host_there = nftables::read_table_named(&name)
        .map_err(host_table(&name))?
        .is_some();
    let mut covered = allowed;
    covered.sort();
    let mut wanted = current;
    wanted.sort();
    wanted.dedup();
    if host_there && covered == wanted {
        return Ok(());
    }
    apply(id, netns, net, Phase::Start)
}

/// The start check of the loopback-only modes (none, proxy), in one visit
/// to the namespace when nothing changed since create: the engine's
/// create-time rule is closed by [`ruleset::start_gate`] added in front of
/// it, a transaction that deletes nothing and so waits for nothing, and the
/// route work is done again. When the engine set up the interface only
/// after create (Docker 28), so that preview ports' host side or the own
/// addresses transparent egress leaves alone are new, the whole table is
/// rebuilt instead.
fn start_loopback_only(id: &str, netns: File, net: &NetworkSection) -> Result<(), HookError> {
    let expected = vibe_policy::config::policy_tag(net);
    let backend = Backend::for_policy(net)?;
    let plan = route_plan(net);
    // Preview rules name the host side of the container's subnets.
    let previews = net.mode == NetworkMode::Proxy && !net.preview_ports.is_empty();
    let bridges = match previews {
        true => Some(host_bridges()?),
        false => None,
    };
    let transparent = ruleset::is_transparent(net);
    let reader = clone_fd(&netns)?;
    let done = in_netns(reader, move || {
        let table = nftables::read_table()?.ok_or(HookError::TableMissing)?;
        if !table.is_ours(&expected) {
            return Err(HookError::TableForeign { expected });
        }
        // The create-time rule for the engine, not yet closed by the gate.
        let open_rule = match table.tagged(ruleset::FROM_START_TAG) {
            Some(_) => None,
            None => table.tagged(ruleset::UNTIL_START_TAG).map(|r| r.handle),
        };
        if open_rule.is_some() {
            // Facts the engine may have changed since create (Docker 28
            // adds the interface after it): the table must name them.
            let mut stale = Vec::new();
            if let Some(bridges) = &bridges {
                stale.push((
                    ruleset::preview_sources(&own_subnets()?, bridges),
                    table.preview_sources(),
                ));
            }
            if transparent {
                stale.push((container_addresses()?, table.nat_exempt_addrs()));
            }
            for (mut wanted, mut have) in stale {
                for list in [&mut wanted, &mut have] {
                    list.sort();
                    list.dedup();
                }
                if wanted != have {
                    return Ok(false);
                }
            }
        }
        if let Some(handle) = open_rule {
            backend.insert_before(
                ruleset::TABLE_NAME,
                ruleset::OUTPUT_CHAIN,
                handle,
                &ruleset::start_gate(),
            )?;
        }
        route_work(plan)?;
        Ok(true)
    })?;
    match done {
        true => Ok(()),
        false => apply(id, netns, net, Phase::Start),
    }
}

/// The container's table as the kernel holds it after the start work,
/// hashed for the start's assurance record (`None`: no table).
pub fn table_digest(pid: i32) -> Result<Option<vibe_policy::assurance::TableDigest>, HookError> {
    let netns = open_container_netns(pid)?;
    in_netns(netns, || {
        Ok(nftables::table_digest_named(ruleset::TABLE_NAME)?)
    })
}

/// Removes what [`run_network_hook`] put in the host's namespace for
/// container `id` (open mode's host table); nothing there is not an error.
/// For `delete`, in the runtime's (the host's) namespace.
pub fn remove_host_rules(id: &str) -> Result<(), HookError> {
    // An id that cannot name a table never got one (the hook refused it).
    let Some(name) = ruleset::host_table_name(id) else {
        return Ok(());
    };
    // A lookup is cheap; a delete batch goes through a commit (~10 ms) even
    // when the table is absent, and only open mode makes one.
    let exists = nftables::read_table_named(&name).map_err(host_table(&name))?;
    if exists.is_none() {
        return Ok(());
    }
    nftables::delete_table(&name).map_err(host_table(&name))
}

/// A failure about open mode's host table `name`, whatever went wrong.
fn host_table<E: Into<BackendError>>(name: &str) -> impl FnOnce(E) -> HookError + '_ {
    move |e| HookError::HostTable {
        name: name.to_string(),
        source: e.into(),
    }
}

impl From<BackendError> for HookError {
    /// The container's own table: the backend's error as the hook always
    /// named it.
    fn from(e: BackendError) -> HookError {
        match e {
            BackendError::Nft(e) => HookError::Nft(e),
            BackendError::Netlink(e) => HookError::Netlink(e),
        }
    }
}

/// The whole network work for container `id` in `netns`. Open mode reads
/// the container's addresses first, covers them in the host table, and only
/// then lets them out of the container's table: an address that appears
/// later has no egress until this runs again. Transparent egress reads
/// them too: a connection to one of them is the container's own, not an
/// IP literal for the listener to refuse (an address added after start
/// is refused as one).
fn apply(id: &str, netns: File, net: &NetworkSection, phase: Phase) -> Result<(), HookError> {
    let backend = Backend::for_policy(net)?;
    let mut facts = Facts::default();
    if net.mode == NetworkMode::Open {
        let name = ruleset::host_table_name(id).ok_or_else(|| HookError::BadId(id.to_string()))?;
        let reader = clone_fd(&netns)?;
        facts.container_addrs = in_netns(reader, container_addresses)?;
        let host = ruleset::host_table(&name, net, &facts.container_addrs);
        backend.apply(&host).map_err(host_table(&name))?;
    } else if ruleset::is_transparent(net) {
        // Its nat chain leaves connections to these alone.
        let reader = clone_fd(&netns)?;
        facts.container_addrs = in_netns(reader, container_addresses)?;
    }
    if net.mode == NetworkMode::Proxy && !net.preview_ports.is_empty() {
        let reader = clone_fd(&netns)?;
        facts.preview_sources = preview_sources(reader)?;
    }
    let table = match phase {
        Phase::Create => ruleset::creating_table(net, &facts),
        Phase::Start => ruleset::container_table(net, &facts),
    };
    let plan = route_plan(net);
    in_netns(netns, move || {
        backend.apply(&table)?;
        route_work(plan)
    })
}

/// Mode proxy with preview ports: the host's bridge addresses on the
/// container's subnets (read here, in the host's namespace, and in the
/// container's through `netns`). Before the engine has configured the
/// container's interface (Docker 28 does it after create) there are none,
/// so no preview rule; the start check reads them again.
fn preview_sources(netns: File) -> Result<Vec<IpAddr>, HookError> {
    let container = in_netns(netns, own_subnets)?;
    Ok(ruleset::preview_sources(&container, &host_bridges()?))
}

/// The calling thread's namespace's addresses with their prefixes.
fn own_subnets() -> Result<Vec<IpNet>, HookError> {
    let entries = routes::with_netlink(|h| async move { routes::address_entries(&h).await })
        .map_err(HookError::ContainerAddresses)?;
    Ok(entries
        .into_iter()
        .filter_map(|e| IpNet::new(e.addr, e.prefix_len).ok())
        .collect())
}

/// The addresses of the calling thread's namespace's bridges (the host's).
fn host_bridges() -> Result<Vec<IpAddr>, HookError> {
    let bridges = routes::with_netlink(|h| async move { routes::bridge_addresses(&h).await })
        .map_err(HookError::HostBridges)?;
    Ok(bridges.iter().map(IpNet::addr).collect())
}

/// The calling thread's namespace's addresses that open mode names.
fn container_addresses() -> Result<Vec<IpAddr>, HookError> {
    let all = routes::with_netlink(|h| async move { routes::all_addresses(&h).await })
        .map_err(HookError::ContainerAddresses)?;
    Ok(all
        .into_iter()
        .filter(|a| is_container_source(*a))
        .collect())
}

/// Addresses a packet from the container can carry to another host:
/// loopback and link-local ones never reach past the link.
fn is_container_source(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => !(a.is_loopback() || a.is_link_local() || a.is_unspecified()),
        IpAddr::V6(a) => {
            !(a.is_loopback() || a.is_unspecified() || (a.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

fn clone_fd(file: &File) -> Result<File, HookError> {
    file.try_clone().map_err(HookError::Thread)
}

/// What the network namespace file at `path` (a `/proc/<pid>/ns/net` or a
/// bind-mounted netns) holds: `None` without an `inet vibe_shim` table,
/// else whether it is the one tagged `tag` (the policy's `policy_tag`),
/// judged as the start check judges it.
/// Used before letting a container join a namespace. Only reads: the table
/// is dumped from a thread that entered the namespace; a file that is not a
/// network namespace fails the `setns`.
pub fn netns_policy_table(path: &Path, tag: &str) -> Result<Option<bool>, HookError> {
    let netns = File::open(path).map_err(|source| HookError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let expected = tag.to_string();
    in_netns(netns, move || {
        Ok(nftables::read_table()?.map(|table| table.is_ours(&expected)))
    })
}

/// Opens the namespace first and judges the open file, so the check and the
/// later setns see the same namespace. "The host's" is pid 1's namespace and
/// also the one this process runs in (the runtime's): some sandboxes deny
/// even root a look at /proc/1/ns, so the second one is always checked.
fn open_container_netns(pid: i32) -> Result<File, HookError> {
    let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
    let netns = File::open(&path).map_err(|source| HookError::Open {
        path: path.clone(),
        source,
    })?;
    let meta = netns.metadata().map_err(|source| HookError::Open {
        path: path.clone(),
        source,
    })?;
    let target = (meta.dev(), meta.ino());
    let self_ns = Path::new("/proc/thread-self/ns/net");
    let own = std::fs::metadata(self_ns).map_err(|source| HookError::Open {
        path: self_ns.to_path_buf(),
        source,
    })?;
    let init = std::fs::metadata("/proc/1/ns/net").ok();
    let host_ids = [Some(&own), init.as_ref()];
    if host_ids
        .into_iter()
        .flatten()
        .any(|m| (m.dev(), m.ino()) == target)
    {
        return Err(HookError::HostNamespace { pid });
    }
    Ok(netns)
}

/// Runs `work` on a new thread that has entered `netns`. The thread ends with
/// the work, so no thread of this process is ever reused in the wrong
/// namespace, and the calling thread never changes namespace.
fn in_netns<T, F>(netns: File, work: F) -> Result<T, HookError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, HookError> + Send + 'static,
{
    let worker = std::thread::Builder::new()
        .name("vibe-netns".into())
        .spawn(move || {
            nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(HookError::Enter)?;
            drop(netns);
            work()
        })
        .map_err(HookError::Thread)?;
    worker.join().map_err(|_| HookError::Panicked)?
}

/// What the route work does for a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RoutePlan {
    /// open: the engine's routes stay; the table is the wall.
    Keep,
    /// none: no default route in either family.
    NoDefault,
    /// proxy with `transparent`: none's, then a local default route on lo
    /// ([`routes::local_default_on_lo`]).
    Transparent,
    /// allowlist: no default route, but a route to each of these.
    Only(Vec<IpNet>),
}

fn route_plan(net: &NetworkSection) -> RoutePlan {
    match net.mode {
        NetworkMode::Open => RoutePlan::Keep,
        NetworkMode::Proxy if ruleset::is_transparent(net) => RoutePlan::Transparent,
        NetworkMode::None | NetworkMode::Proxy => RoutePlan::NoDefault,
        NetworkMode::Allowlist => {
            let mut targets: Vec<IpNet> = net.allow.iter().map(|r| r.net).collect();
            targets.extend(
                net.resolvers
                    .iter()
                    .filter(|a| net.dns && !a.is_loopback())
                    .map(|a| IpNet::from(*a)),
            );
            RoutePlan::Only(targets)
        }
    }
}

fn route_work(plan: RoutePlan) -> Result<(), HookError> {
    let local_lo = plan == RoutePlan::Transparent;
    let targets = match plan {
        RoutePlan::Keep => return Ok(()),
        RoutePlan::NoDefault | RoutePlan::Transparent => None,
        RoutePlan::Only(targets) => Some(targets),
    };
    Ok(routes::with_netlink(|h| async move {
        routes::confine_routes(&h, targets.as_deref()).await?;
        if local_lo {
            routes::local_default_on_lo(&h).await?;
        }
        Ok(())
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_entry_shape() {
        let entry = hook_entry(
            Path::new("/usr/bin/vibe-shim"),
            Path::new("/etc/v/c.toml"),
            Path::new("/run/runc"),
        );
        assert_eq!(entry["path"], "/usr/bin/vibe-shim");
        assert_eq!(
            entry["args"],
            serde_json::json!([
                "vibe-shim",
                "--config",
                "/etc/v/c.toml",
                "hook",
                "network",
                "--runc-root",
                "/run/runc",
                NETWORK_HOOK_MARKER
            ])
        );
        assert_eq!(entry["timeout"], 10);
        let env = entry["env"][0].as_str().unwrap();
        assert!(env.starts_with("PATH=/"), "{env}");
    }

    #[test]
    fn container_sources() {
        for (addr, ok) in [
            ("172.30.99.2", true),
            ("127.0.0.1", false),
            ("169.254.1.2", false),
            ("fd42::2", true),
            ("2001:db8::2", true),
            ("fe80::42:acff:fe1e:6302", false),
            ("::1", false),
        ] {
            assert_eq!(is_container_source(addr.parse().unwrap()), ok, "{addr}");
        }
    }

    #[test]
    fn route_plans() {
        let mut net = NetworkSection::default();
        assert_eq!(route_plan(&net), RoutePlan::NoDefault);
        net.mode = NetworkMode::Proxy;
        assert_eq!(route_plan(&net), RoutePlan::NoDefault);
        net.transparent = true;
        assert_eq!(route_plan(&net), RoutePlan::Transparent);
        net.transparent = false;
        net.mode = NetworkMode::Open;
        assert_eq!(route_plan(&net), RoutePlan::Keep);
        net.mode = NetworkMode::Allowlist;
        net.allow = vec!["203.0.113.0/24:443".parse().unwrap()];
        net.dns = true;
        net.resolvers = vec!["127.0.0.11".parse().unwrap(), "192.0.2.53".parse().unwrap()];
        assert_eq!(
            route_plan(&net),
            RoutePlan::Only(vec![
                "203.0.113.0/24".parse().unwrap(),
                "192.0.2.53/32".parse().unwrap()
            ])
        );
    }
}
