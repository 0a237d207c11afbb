//! Route work inside the container's namespace, over rtnetlink. Routes are
//! defence in depth behind the nftables table: the container cannot change
//! either (it never holds CAP_NET_ADMIN).

use std::net::IpAddr;

use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteType,
};
use netlink_packet_route::AddressFamily;
use rtnetlink::{Handle, IpVersion};

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("cannot start the netlink runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot open a netlink socket: {0}")]
    Socket(std::io::Error),
    #[error("netlink {what}: {source}")]
    Netlink {
        what: String,
        // Boxed: rtnetlink's error is large and this travels by value.
        source: Box<rtnetlink::Error>,
    },
}

const RT_TABLE_LOCAL: u32 = 255;

/// A default route's next hop, kept to route allowed prefixes through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Gateway {
    addr: IpAddr,
    oif: Option<u32>,
}

/// Runs `work` with a netlink handle on a current-thread runtime built on the
/// calling thread, so the socket belongs to that thread's network namespace.
pub fn with_netlink<T, F, Fut>(work: F) -> Result<T, RouteError>
where
    F: FnOnce(Handle) -> Fut,
    Fut: std::future::Future<Output = Result<T, RouteError>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(RouteError::Runtime)?;
    rt.block_on(async {
        let (conn, handle, _) = rtnetlink::new_connection().map_err(RouteError::Socket)?;
        let driver = tokio::spawn(conn);
        let result = work(handle).await;
        driver.abort();
        result
    })
}

/// One address of an interface: the address, its prefix length and the
/// interface index, as the kernel's address dump lists them.
pub struct AddressEntry {
    pub addr: IpAddr,
    pub prefix_len: u8,
    pub index: u32,
}

/// Every address entry in the namespace `handle` talks to.
pub async fn address_entries(handle: &Handle) -> Result<Vec<AddressEntry>, RouteError> {
    use netlink_packet_route::address::AddressAttribute;
    let mut stream = handle.address().get().execute();
    let mut entries = Vec::new();
    while let Some(msg) = stream
        .try_next()
        .await
        .map_err(|source| RouteError::Netlink {
            what: "address dump".into(),
            source: Box::new(source),
        })?
    {
        for attr in &msg.attributes {
            if let AddressAttribute::Address(a) | AddressAttribute::Local(a) = attr {
                entries.push(AddressEntry {
                    addr: *a,
                    prefix_len: msg.header.prefix_len,
                    index: msg.header.index,
                });
            }
        }
    }
    Ok(entries)
}

/// Every address (with its prefix) on a bridge interface of the namespace
/// `handle` talks to: an engine's side of its containers' links.
pub async fn bridge_addresses(handle: &Handle) -> Result<Vec<IpNet>, RouteError> {
    use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkInfo};
    let mut bridges = Vec::new();
    let mut links = handle.link().get().execute();
    while let Some(msg) = links
        .try_next()
        .await
        .map_err(|source| RouteError::Netlink {
            what: "link dump".into(),
            source: Box::new(source),
        })?
    {
        let is_bridge = msg.attributes.iter().any(|a| {
            matches!(a, LinkAttribute::LinkInfo(infos)
                if infos.iter().any(|i| matches!(i, LinkInfo::Kind(InfoKind::Bridge))))
        });
        if is_bridge {
            bridges.push(msg.header.index);
        }
    }
    Ok(address_entries(handle)
        .await?
        .into_iter()
        .filter(|e| bridges.contains(&e.index))
        .filter_map(|e| IpNet::new(e.addr, e.prefix_len).ok())
        .collect())
}

/// The destination of every route of type `local`, in any table: the
/// ranges the namespace answers as its own (each address's, and those of
/// `ip route add local`, which need no address).
pub async fn local_route_nets(handle: &Handle) -> Result<Vec<IpNet>, RouteError> {
    let mut nets = Vec::new();
    for version in [IpVersion::V4, IpVersion::V6] {
        for route in dump(handle, version).await? {
            if route.header.kind == RouteType::Local {
                nets.extend(destination_of(&route));
            }
        }
    }
    Ok(nets)
}

/// Every address on every interface of the namespace `handle` talks to.
pub async fn all_addresses(handle: &Handle) -> Result<Vec<IpAddr>, RouteError> {
    let mut addrs = Vec::new();
    for entry in address_entries(handle).await? {
        if !addrs.contains(&entry.addr) {
            addrs.push(entry.addr);
        }
    }
    Ok(addrs)
}

/// none: delete every default route. allowlist: remember the default
/// gateways, delete the default routes, then route each allowed prefix via
/// the gateway of its family unless an existing route already covers it.
/// Idempotent, so it can run at create and again before start.
pub async fn confine_routes(
    handle: &Handle,
    allowlist_targets: Option<&[IpNet]>,
) -> Result<(), RouteError> {
    let mut routes = dump(handle, IpVersion::V4).await?;
    routes.extend(dump(handle, IpVersion::V6).await?);

    let (defaults, others): (Vec<RouteMessage>, Vec<RouteMessage>) =
        routes.into_iter().partition(is_default);
    let mut gateways: Vec<Gateway> = Vec::new();
    for route in defaults {
        if let Some(gw) = gateway_of(&route) {
            gateways.push(gw);
        }
        let what = format!("delete default route {}", describe(&route));
        handle
            .route()
            .del(route)
            .execute()
            .await
            .map_err(|source| RouteError::Netlink {
                what,
                source: Box::new(source),
            })?;
    }

    let Some(targets) = allowlist_targets else {
        return Ok(());
    };
    let covered: Vec<IpNet> = others
        .iter()
        .filter(|r| table_of(r) == u32::from(RouteHeader::RT_TABLE_MAIN))
        .filter_map(destination_of)
        .collect();
    for target in targets {
        if covered.iter().any(|c| c.contains(target)) {
            continue;
        }
        let Some(gw) = gateways
            .iter()
            .find(|g| g.addr.is_ipv4() == matches!(target, IpNet::V4(_)))
        else {
            // No way out for this family: the entry is simply unreachable.
            continue;
        };
        add_via(handle, target, gw).await?;
    }
    Ok(())
}

/// The metric of transparent egress's `local default dev lo`.
pub const LOCAL_DEFAULT_METRIC: u32 = u32::MAX;

/// Transparent egress: `local default dev lo` in each family (main table),
/// so every destination off the container's own link is delivered to its
/// own loopback. A query to whatever nameserver its resolv.conf names then
/// reaches the nat chain's redirect to the answerer, and every other TCP
/// connection (to a fake address, or an IP literal of either family)
/// reaches the transparent listener, which serves or refuses it and logs
/// it. Routes on loopback only: nothing is routed off it. Replaces itself,
/// so it can run at create and at start. Its metric is the highest there
/// is: an engine that sets the container's gateway only after create
/// (Docker 28) adds its `default via` beside it (same destination, metric
/// 0: no EEXIST), and the start check removes that one, as in every
/// loopback-only mode, before the process runs. A namespace with IPv6
/// disabled (Docker's default without an IPv6 network) refuses the IPv6
/// route; it sends no IPv6 packet at all, so there is nothing to route.
pub async fn local_default_on_lo(handle: &Handle) -> Result<(), RouteError> {
    // The loopback device is ifindex 1 in every namespace.
    const LO: u32 = 1;
    let scope = netlink_packet_route::route::RouteScope::Host;
    handle
        .route()
        .add()
        .v4()
        .destination_prefix(std::net::Ipv4Addr::UNSPECIFIED, 0)
        .priority(LOCAL_DEFAULT_METRIC)
        .kind(RouteType::Local)
        .scope(scope)
        .output_interface(LO)
        .replace()
        .execute()
        .await
        .map_err(|source| RouteError::Netlink {
            what: "add route local default dev lo".into(),
            source: Box::new(source),
        })?;
    let v6 = handle
        .route()
        .add()
        .v6()
        .destination_prefix(std::net::Ipv6Addr::UNSPECIFIED, 0)
        .priority(LOCAL_DEFAULT_METRIC)
        .kind(RouteType::Local)
        .scope(scope)
        .output_interface(LO)
        .replace()
        .execute()
        .await;
    match v6 {
        Err(rtnetlink::Error::NetlinkError(e)) if ipv6_off(e.raw_code()) => Ok(()),
        other => other.map_err(|source| RouteError::Netlink {
            what: "add route local default dev lo (IPv6)".into(),
            source: Box::new(source),
        }),
    }
}

/// The errors of an IPv6 route add when the namespace has no IPv6: EACCES
/// ("IPv6 is disabled on nexthop device"), EAFNOSUPPORT (no IPv6 in the
/// kernel).
fn ipv6_off(code: i32) -> bool {
    let errno = code.abs();
    errno == nix::libc::EACCES || errno == nix::libc::EAFNOSUPPORT
}

async fn dump(handle: &Handle, version: IpVersion) -> Result<Vec<RouteMessage>, RouteError> {
    handle
        .route()
        .get(version)
        .execute()
        .try_collect()
        .await
        .map_err(|source| RouteError::Netlink {
            what: "route dump".into(),
            source: Box::new(source),
        })
}

async fn add_via(handle: &Handle, target: &IpNet, gw: &Gateway) -> Result<(), RouteError> {
    let what = format!("add route {target} via {}", gw.addr);
    let request = handle.route().add();
    let result = match (target, gw.addr) {
        (IpNet::V4(t), IpAddr::V4(g)) => {
            let mut r = request
                .v4()
                .destination_prefix(t.addr(), t.prefix_len())
                .gateway(g);
            if let Some(oif) = gw.oif {
                r = r.output_interface(oif);
            }
            r.replace().execute().await
        }
        (IpNet::V6(t), IpAddr::V6(g)) => {
            let mut r = request
                .v6()
                .destination_prefix(t.addr(), t.prefix_len())
                .gateway(g);
            // Needed for the usual link-local IPv6 gateway.
            if let Some(oif) = gw.oif {
                r = r.output_interface(oif);
            }
            r.replace().execute().await
        }
        _ => return Ok(()),
    };
    result.map_err(|source| RouteError::Netlink {
        what,
        source: Box::new(source),
    })
}

fn table_of(route: &RouteMessage) -> u32 {
    route
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(route.header.table))
}

fn is_default(route: &RouteMessage) -> bool {
    route.header.destination_prefix_length == 0
        && route.header.kind == RouteType::Unicast
        && table_of(route) != RT_TABLE_LOCAL
}

fn address(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn destination_of(route: &RouteMessage) -> Option<IpNet> {
    let len = route.header.destination_prefix_length;
    let addr = route.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(d) => address(d),
        _ => None,
    });
    let addr = match addr {
        Some(a) => a,
        None if len == 0 => match route.header.address_family {
            AddressFamily::Inet6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            _ => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        },
        None => return None,
    };
    IpNet::new(addr, len).ok()
}

fn gateway_of(route: &RouteMessage) -> Option<Gateway> {
    let addr = route.attributes.iter().find_map(|a| match a {
        RouteAttribute::Gateway(g) => address(g),
        _ => None,
    })?;
    let oif = route.attributes.iter().find_map(|a| match a {
        RouteAttribute::Oif(i) => Some(*i),
        _ => None,
    });
    Some(Gateway { addr, oif })
}

fn describe(route: &RouteMessage) -> String {
    match gateway_of(route) {
        Some(g) => format!("via {}", g.addr),
        None => "(no gateway)".to_string(),
    }
}
