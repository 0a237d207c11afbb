//! The start-time assurance check: what the kernel shows of a created
//! container (its init, stopped on runc's exec fifo) against the policy and
//! the judged spec. Pure: the shim reads the files and the netns, this
//! module parses their text and judges it.
//!
//! One [`Contradiction`] per broken rule; any one refuses the start.

use std::collections::BTreeMap;
use std::str::FromStr;

use serde::Serialize;
use serde_json::Value;

use crate::config::{normalise_capability, Policy, UsernsMode, NEVER_GRANTED_CAPABILITIES};
use crate::lang::json::{clean_path, clean_path_within, str_field, str_items};
use crate::lang::text::unescape_octal;

/// The record's format version.
pub const RECORD_VERSION: u32 = 1;

/// The capability and security lines of `/proc/<pid>/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Status {
    pub cap_eff: u64,
    pub cap_prm: u64,
    pub cap_bnd: u64,
    pub cap_amb: u64,
    pub no_new_privs: u8,
    /// 0 none, 1 strict, 2 filter.
    pub seccomp: u8,
    /// `Seccomp_filters` (Linux 5.9+); `None` on older kernels.
    pub seccomp_filters: Option<u32>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("{file}: no {key} line")]
    Missing {
        file: &'static str,
        key: &'static str,
    },
    #[error("{file}: cannot read {key} {value:?}")]
    Bad {
        file: &'static str,
        key: &'static str,
        value: String,
    },
}

fn status_value<'a>(text: &'a str, key: &'static str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        line.strip_prefix(key)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// Parses `/proc/<pid>/status`.
pub fn parse_status(text: &str) -> Result<Status, ParseError> {
    let get = |key: &'static str| {
        status_value(text, key).ok_or(ParseError::Missing {
            file: "status",
            key,
        })
    };
    let bad = |key: &'static str, value: &str| ParseError::Bad {
        file: "status",
        key,
        value: value.to_string(),
    };
    let hex = |key: &'static str| {
        let v = get(key)?;
        u64::from_str_radix(v, 16).map_err(|_| bad(key, v))
    };
    let dec = |key: &'static str| {
        let v = get(key)?;
        v.parse::<u8>().map_err(|_| bad(key, v))
    };
    let filters = match status_value(text, "Seccomp_filters") {
        None => None,
        Some(v) => Some(v.parse().map_err(|_| bad("Seccomp_filters", v))?),
    };
    Ok(Status {
        cap_eff: hex("CapEff")?,
        cap_prm: hex("CapPrm")?,
        cap_bnd: hex("CapBnd")?,
        cap_amb: hex("CapAmb")?,
        no_new_privs: dec("NoNewPrivs")?,
        seccomp: dec("Seccomp")?,
        seccomp_filters: filters,
    })
}

/// One line of `uid_map` / `gid_map`: inside, outside, count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IdRange {
    pub inside: u64,
    pub outside: u64,
    pub count: u64,
}

pub fn parse_id_map(text: &str, file: &'static str) -> Result<Vec<IdRange>, ParseError> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let nums: Vec<u64> = line
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(|_| ParseError::Bad {
                    file,
                    key: "range",
                    value: line.to_string(),
                })?;
            match nums[..] {
                [inside, outside, count] => Ok(IdRange {
                    inside,
                    outside,
                    count,
                }),
                _ => Err(ParseError::Bad {
                    file,
                    key: "range",
                    value: line.to_string(),
                }),
            }
        })
        .collect()
}

/// One mount of the container, as its init's mountinfo shows it (mount
/// points relative to the container's root).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    /// The superblock's device (`major:minor`): a bind shows its source's.
    pub majmin: String,
    pub point: String,
    /// The path inside the mounted filesystem that is its root here.
    pub root: String,
    pub fstype: String,
    pub source: String,
    /// Neither the mount nor its superblock is read-only.
    pub writable: bool,
    /// Out of the container's sight: another mount sits on its root (runc
    /// binds a `readonlyPaths` entry over itself), or on an ancestor's.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub covered: bool,
    /// Where its files are on the host ([`locate`]); `None` for a
    /// filesystem the host has not mounted (the container's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
}

fn unescape(field: &str) -> String {
    String::from_utf8_lossy(&unescape_octal(field.as_bytes())).into_owned()
}

fn has_ro(options: &str) -> bool {
    options.split(',').any(|o| o == "ro")
}

/// Parses `/proc/<pid>/mountinfo`.
pub fn parse_mountinfo(text: &str) -> Result<Vec<Mount>, ParseError> {
    let mut ids = Vec::new();
    let mut mounts = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let bad = || ParseError::Bad {
                file: "mountinfo",
                key: "line",
                value: line.to_string(),
            };
            let (left, right) = line.split_once(" - ").ok_or_else(bad)?;
            let left: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            if left.len() < 6 || right.len() < 3 {
                return Err(bad());
            }
            let id = |f: &str| f.parse::<u64>().map_err(|_| bad());
            ids.push((id(left[0])?, id(left[1])?));
            Ok(Mount {
                majmin: left[2].to_string(),
                point: unescape(left[4]),
                root: unescape(left[3]),
                fstype: right[0].to_string(),
                source: unescape(right[1]),
                writable: !has_ro(left[5]) && !has_ro(right[2]),
                covered: false,
                host_path: None,
            })
        })
        .collect::<Result<Vec<Mount>, ParseError>>()?;
    for (i, covered) in covered_mounts(&ids, &mounts).into_iter().enumerate() {
        mounts[i].covered = covered;
    }
    Ok(mounts)
}

/// Which mounts a later one hides, as a path walk finds them. A mount made
/// on top of mount M at M's own point has M as its parent, and the last
/// such mount is the one seen there; whatever hangs below a covered mount
/// is covered too. The process's root (a mount whose parent is outside the
/// table) is the exception: a walk starts on it, not on what is stacked
/// over it, so it is never covered and a mount stacked on it at its point
/// is (a client's `maskedPaths: ["/"]` puts a tmpfs there). `ids` holds
/// each mount's (id, parent id). Anything unclear counts as in sight.
fn covered_mounts(ids: &[(u64, u64)], mounts: &[Mount]) -> Vec<bool> {
    let index: BTreeMap<u64, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (*id, i))
        .collect();
    // (parent id, point) -> the last mount there.
    let top: BTreeMap<(u64, &str), usize> = ids
        .iter()
        .zip(mounts)
        .enumerate()
        .map(|(i, ((_, parent), m))| ((*parent, m.point.as_str()), i))
        .collect();
    let parent_of = |i: usize| index.get(&ids[i].1).copied().filter(|&p| p != i);
    let covered_at = |i: usize| top.contains_key(&(ids[i].0, mounts[i].point.as_str()));
    (0..mounts.len())
        .map(|i| {
            if parent_of(i).is_none() {
                return false;
            }
            if covered_at(i) {
                return true;
            }
            let mut at = i;
            for _ in 0..mounts.len() {
                let Some(parent) = parent_of(at) else {
                    return false;
                };
                let stacked = mounts[at].point == mounts[parent].point;
                if parent_of(parent).is_none() {
                    return stacked;
                }
                let hidden = if stacked {
                    top.get(&(ids[parent].0, mounts[parent].point.as_str())) != Some(&at)
                } else {
                    covered_at(parent)
                };
                if hidden {
                    return true;
                }
                at = parent;
            }
            false
        })
        .collect()
}

/// One limit of `/proc/<pid>/limits`; `None` is unlimited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rlimit {
    pub name: &'static str,
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// `/proc/<pid>/limits`' row titles, by the policy's names (the shim's
/// host view reads its own limits by them too).
pub const LIMIT_ROWS: &[(&str, &str)] = &[
    ("RLIMIT_CPU", "Max cpu time"),
    ("RLIMIT_FSIZE", "Max file size"),
    ("RLIMIT_DATA", "Max data size"),
    ("RLIMIT_STACK", "Max stack size"),
    ("RLIMIT_CORE", "Max core file size"),
    ("RLIMIT_RSS", "Max resident set"),
    ("RLIMIT_NPROC", "Max processes"),
    ("RLIMIT_NOFILE", "Max open files"),
    ("RLIMIT_MEMLOCK", "Max locked memory"),
    ("RLIMIT_AS", "Max address space"),
    ("RLIMIT_LOCKS", "Max file locks"),
    ("RLIMIT_SIGPENDING", "Max pending signals"),
    ("RLIMIT_MSGQUEUE", "Max msgqueue size"),
    ("RLIMIT_NICE", "Max nice priority"),
    ("RLIMIT_RTPRIO", "Max realtime priority"),
    ("RLIMIT_RTTIME", "Max realtime timeout"),
];

pub fn parse_limits(text: &str) -> Result<Vec<Rlimit>, ParseError> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((name, rest)) = LIMIT_ROWS
            .iter()
            .find_map(|(name, title)| line.strip_prefix(title).map(|rest| (*name, rest)))
        else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let mut value = || -> Result<Option<u64>, ParseError> {
            match words.next() {
                Some("unlimited") => Ok(None),
                Some(v) => v.parse().map(Some).map_err(|_| ParseError::Bad {
                    file: "limits",
                    key: name,
                    value: line.to_string(),
                }),
                None => Err(ParseError::Missing {
                    file: "limits",
                    key: name,
                }),
            }
        };
        let soft = value()?;
        let hard = value()?;
        out.push(Rlimit { name, soft, hard });
    }
    Ok(out)
}

/// A namespace of the container's init against the runtime's (the host's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Namespace {
    pub kind: &'static str,
    pub inode: u64,
    pub host_inode: u64,
}

/// The kinds read, as `/proc/<pid>/ns/` names them.
pub const NAMESPACE_KINDS: &[&str] = &["pid", "ipc", "uts", "mnt", "net", "cgroup", "user"];

/// The cgroup limits the init's cgroup holds; `None` is "max".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CgroupLimits {
    /// The cgroup path of the pids controller (v2: the one path).
    pub path: String,
    pub version: u8,
    pub pids_max: Option<u64>,
    pub memory_max: Option<u64>,
    /// CFS quota and period in microseconds; no quota is `None`.
    pub cpu_quota: Option<u64>,
    pub cpu_period: u64,
}

/// Reads a cgroup file's number: "max" (v2), -1 (v1 quota) or v1's
/// page-rounded "unlimited" (>= 2^62) are `None`.
pub fn parse_cgroup_value(text: &str) -> Option<u64> {
    let t = text.trim();
    match t.parse::<i64>() {
        Ok(v) if v < 0 => None,
        Ok(v) if v >= 1 << 62 => None,
        Ok(v) => Some(v as u64),
        Err(_) => None,
    }
}

/// v2 `cpu.max`: "QUOTA PERIOD" or "max PERIOD".
pub fn parse_cpu_max(text: &str) -> (Option<u64>, u64) {
    let mut words = text.split_whitespace();
    let quota = words.next().and_then(parse_cgroup_value);
    let period = words.next().and_then(|p| p.parse().ok()).unwrap_or(100_000);
    (quota, period)
}

/// What runc's state.json says it loads just before exec: with
/// `no_new_privileges` runc installs the filter after `start` opens the
/// fifo, so at start the kernel still shows no filter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RuncSeccomp {
    /// Syscall rules in runc's config (0: none, or no seccomp config).
    pub syscall_rules: usize,
    pub configured: bool,
}

/// The nft table read back from the container's netns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableDigest {
    pub sha256: String,
    pub chains: usize,
    pub rules: usize,
}

/// Everything read at start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    pub status: Status,
    pub runc_seccomp: RuncSeccomp,
    pub uid_map: Vec<IdRange>,
    pub gid_map: Vec<IdRange>,
    pub mounts: Vec<Mount>,
    pub namespaces: Vec<Namespace>,
    /// The host uid owning its user namespace: the kernel charges per-user
    /// budgets (inotify, processes) to it as well as to the user.
    /// `None`: the kernel cannot say (before 4.11).
    pub userns_owner: Option<u32>,
    pub cgroup: CgroupLimits,
    pub rlimits: Vec<Rlimit>,
    pub nft: Option<TableDigest>,
}

/// One rule the evidence breaks: which rule, what was seen, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Contradiction {
    pub rule: &'static str,
    pub evidence: String,
    pub reason: String,
}

fn contradiction(
    rule: &'static str,
    evidence: impl Into<String>,
    reason: impl Into<String>,
) -> Contradiction {
    Contradiction {
        rule,
        evidence: evidence.into(),
        reason: reason.into(),
    }
}

/// The capability names of a mask (unknown bits as `bit N`).
pub fn capability_names(mask: u64) -> Vec<String> {
    (0..64)
        .filter(|bit| mask & (1 << bit) != 0)
        .map(|bit| {
            caps::all()
                .into_iter()
                .find(|c| u32::from(c.index()) == bit)
                .map(|c| c.to_string())
                .unwrap_or_else(|| format!("bit {bit}"))
        })
        .collect()
}

fn capability_mask(names: &[String]) -> u64 {
    names
        .iter()
        .filter_map(|n| normalise_capability(n))
        .filter(|n| !NEVER_GRANTED_CAPABILITIES.contains(&n.as_str()))
        .filter_map(|n| caps::Capability::from_str(&n).ok())
        .fold(0, |mask, c| mask | (1 << c.index()))
}

/// Writable mount points the judged spec explains, each with the one
/// filesystem type it may have (`None`: any): its own writable mounts,
/// runc's masks and device binds, and the console. The tmpfs runc makes
/// under a cgroup v1 mount is not among them: the judged spec lists it in
/// `readonlyPaths`, so a writable one is a contradiction.
fn judged_writable(spec: &Value) -> BTreeMap<String, Option<&'static str>> {
    let mut out = BTreeMap::new();
    for m in spec
        .get("mounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if !str_items(m.get("options")).any(|o| o == "ro") {
            out.insert(clean_path(str_field(m, "destination")).into_owned(), None);
        }
    }
    let linux = spec.get("linux");
    for p in str_items(linux.and_then(|l| l.get("maskedPaths"))) {
        out.insert(clean_path(p).into_owned(), None);
    }
    for d in linux
        .and_then(|l| l.get("devices"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.insert(clean_path(str_field(d, "path")).into_owned(), None);
    }
    // runc's default devices, bound from the host in a user namespace.
    for dev in [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
        "/dev/console",
    ] {
        out.insert(dev.to_string(), None);
    }
    out
}

/// Adds, for each of `spec`'s mounts whose destination runc placed
/// elsewhere (`placed`: where it resolved inside the rootfs, as the shim
/// found it), the same mount at that place: the judged spec as runc
/// carried it out.
pub fn add_placed_mounts(spec: &mut Value, placed: impl Fn(&str) -> Option<String>) {
    let Some(mounts) = spec.get_mut("mounts").and_then(Value::as_array_mut) else {
        return;
    };
    let moved: Vec<Value> = mounts
        .iter()
        .filter_map(|m| {
            let dest = clean_path(str_field(m, "destination")).into_owned();
            let at = placed(&dest).filter(|at| clean_path(at) != dest)?;
            let mut copy = m.clone();
            copy.as_object_mut()?
                .insert("destination".into(), Value::from(at));
            Some(copy)
        })
        .collect();
    mounts.extend(moved);
}

/// Filesystems whose superblock the container shares with the host by
/// design (a cgroup hierarchy); their mounts are judged as writable or not.
const SHARED_FS: &[&str] = &["cgroup", "cgroup2"];

/// The device nodes runc binds from the host's /dev in a user namespace,
/// and over masked paths there.
const DEVICE_ROOTS: &[&str] = &["/null", "/zero", "/full", "/random", "/urandom", "/tty"];

/// `dir` joined with the clean absolute `rest` (`/` adds nothing).
fn join(dir: &str, rest: &str) -> String {
    match (dir, rest) {
        (_, "" | "/") => dir.to_string(),
        ("/", _) => rest.to_string(),
        _ => format!("{dir}{rest}"),
    }
}

/// The host mount that shows `path` (the deepest mount point above it; of
/// mounts stacked on one point, the last), and `path` relative to it.
fn host_mount_of<'a>(host: &'a [Mount], path: &str) -> Option<(&'a Mount, String)> {
    let mount = host
        .iter()
        .filter(|h| clean_path_within(path, &h.point))
        .max_by_key(|h| h.point.len())?;
    let rest = match mount.point.as_str() {
        "/" => path.to_string(),
        point => path[point.len()..].to_string(),
    };
    Some((mount, rest))
}

/// What a bind of host path `source` shows: its superblock and the path
/// inside it (a container mount's `majmin` and `root`).
fn resolve<'a>(host: &'a [Mount], source: &str) -> Option<(&'a str, String)> {
    let (mount, rest) = host_mount_of(host, &clean_path(source))?;
    Some((mount.majmin.as_str(), join(&mount.root, &rest)))
}

/// Fills each container mount's host path from the host's mountinfo: of the
/// host's mounts of the same superblock whose root holds this mount's, the
/// one nearest the filesystem's root (a staging bind of the same files is
/// another name for them).
pub fn locate(mounts: &mut [Mount], host: &[Mount]) {
    for m in mounts.iter_mut() {
        let found = host
            .iter()
            .filter(|h| h.majmin == m.majmin && clean_path_within(&m.root, &h.root))
            .min_by_key(|h| h.root.len());
        m.host_path = found.map(|h| {
            let rest = match h.root.as_str() {
                "/" => m.root.clone(),
                root => m.root[root.len()..].to_string(),
            };
            join(&h.point, &rest)
        });
    }
}

/// The syscall rules runc keeps for a spec's seccomp profile: one per name.
fn judged_syscall_rules(spec: &Value) -> usize {
    spec.pointer("/linux/seccomp/syscalls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|call| str_items(call.get("names")).count())
        .sum()
}

/// Judges the evidence: every contradiction with the policy or with the
/// judged spec (`None`: vibe-shim has no judged spec for this container,
/// which is itself a contradiction).
///
/// `host` is the runtime's own mountinfo (the host's), which names where
/// each bind comes from.
pub fn judge(
    evidence: &Evidence,
    policy: &Policy,
    judged: Option<&Value>,
    host: &[Mount],
) -> Vec<Contradiction> {
    let mut out = Vec::new();
    let s = &evidence.status;
    let allowed = capability_mask(&policy.process.capabilities);
    for (set, mask) in [
        ("CapBnd", s.cap_bnd),
        ("CapPrm", s.cap_prm),
        ("CapEff", s.cap_eff),
        ("CapAmb", s.cap_amb),
    ] {
        let extra = mask & !allowed;
        if extra != 0 {
            out.push(contradiction(
                "capabilities",
                format!("{set} {mask:016x}"),
                format!(
                    "{} not granted by process.capabilities",
                    capability_names(extra).join(",")
                ),
            ));
        }
    }
    if policy.process.no_new_privileges && s.no_new_privs != 1 {
        out.push(contradiction(
            "no_new_privileges",
            format!("NoNewPrivs {}", s.no_new_privs),
            "the policy sets no_new_privileges",
        ));
    }
    let filtered = s.seccomp == 2 && s.seccomp_filters.is_none_or(|n| n > 0);
    // With NNP runc loads the filter after start opens the fifo: then what
    // it will load is the judged profile, rule for rule.
    let runc = &evidence.runc_seccomp;
    let judged_rules = judged.map(judged_syscall_rules);
    let pending = s.seccomp == 0
        && s.no_new_privs == 1
        && runc.configured
        && runc.syscall_rules > 0
        && judged_rules == Some(runc.syscall_rules);
    if !filtered && !pending {
        out.push(contradiction(
            "seccomp",
            format!(
                "Seccomp {} (filters {}), runc's config has {} rules, the judged spec {}",
                s.seccomp,
                s.seccomp_filters
                    .map_or("unknown".to_string(), |n| n.to_string()),
                runc.syscall_rules,
                judged_rules.map_or("none".to_string(), |n| n.to_string())
            ),
            "no seccomp filter is loaded, nor is the judged one loaded by runc at exec",
        ));
    }
    judge_mounts(evidence, policy, judged, host, &mut out);
    for ns in &evidence.namespaces {
        let must_differ = ns.kind != "user" || policy.userns.mode == UsernsMode::Private;
        if must_differ && ns.inode == ns.host_inode {
            out.push(contradiction(
                "namespaces",
                format!("{} {}", ns.kind, ns.inode),
                "the container shares the host's namespace",
            ));
        }
    }
    if policy.userns.mode == UsernsMode::Private {
        let root_is_host_root = evidence
            .uid_map
            .iter()
            .any(|r| r.inside == 0 && r.count > 0 && r.outside == 0);
        if evidence.uid_map.is_empty() || root_is_host_root {
            out.push(contradiction(
                "userns",
                format!("uid_map {:?}", evidence.uid_map),
                "userns.mode is private, but root in the container is the host's",
            ));
        }
        let block_base = evidence
            .uid_map
            .iter()
            .find(|r| r.inside == 0)
            .map(|r| r.outside);
        if block_base.is_none() || block_base != evidence.userns_owner.map(u64::from) {
            let owner = evidence
                .userns_owner
                .map_or_else(|| "unknown".to_string(), |u| u.to_string());
            out.push(contradiction(
                "userns",
                format!("owner uid {owner}"),
                "the user namespace is not owned by the container's block: its per-user \
                 budgets (inotify, processes) would be that account's",
            ));
        }
    }
    judge_cgroup(&evidence.cgroup, policy, &mut out);
    for (name, ceiling) in &policy.resources.rlimits {
        let seen = evidence.rlimits.iter().find(|r| r.name == name.as_str());
        let over = |v: Option<u64>| v.is_none_or(|v| v > *ceiling);
        match seen {
            Some(r) if !over(r.soft) && !over(r.hard) => {}
            Some(r) => out.push(contradiction(
                "rlimits",
                format!("{name} soft {} hard {}", shown(r.soft), shown(r.hard)),
                format!("above the ceiling {ceiling} of resources.rlimits"),
            )),
            None => out.push(contradiction(
                "rlimits",
                name.clone(),
                "not in /proc/<pid>/limits",
            )),
        }
    }
    out
}

fn judge_mounts(
    evidence: &Evidence,
    policy: &Policy,
    judged: Option<&Value>,
    host: &[Mount],
    out: &mut Vec<Contradiction>,
) {
    // The process's root: what is stacked over it is out of sight.
    let root = evidence
        .mounts
        .iter()
        .find(|m| m.point == "/" && !m.covered);
    if policy.filesystem.readonly_root {
        match root {
            Some(m) if !m.writable => {}
            Some(m) => out.push(contradiction(
                "readonly_root",
                format!("/ {} {}", m.fstype, m.source),
                "the root is writable",
            )),
            None => out.push(contradiction("readonly_root", "mountinfo", "no mount at /")),
        }
    }
    let Some(spec) = judged else {
        out.push(contradiction(
            "mounts",
            "no judged spec",
            "vibe-shim did not create this container",
        ));
        return;
    };
    let explained = judged_writable(spec);
    for m in evidence.mounts.iter().filter(|m| m.writable && !m.covered) {
        if m.point == "/" {
            continue;
        }
        let fits = explained
            .get(clean_path(&m.point).as_ref())
            .is_some_and(|fstype| fstype.is_none_or(|t| t == m.fstype));
        if !fits {
            out.push(contradiction(
                "mounts",
                format!("{} ({} {} {})", m.point, m.fstype, m.source, m.root),
                "a writable mount the judged spec does not make",
            ));
        }
    }
    judge_host_paths(evidence, spec, host, out);
}

/// Every mount of a filesystem the host has mounted shows a host path:
/// it must be the bind the judged spec makes at that point (whose source
/// the binds rule allowed), of the same superblock and path, or a device
/// node runc binds.
fn judge_host_paths(
    evidence: &Evidence,
    spec: &Value,
    host: &[Mount],
    out: &mut Vec<Contradiction>,
) {
    let host_devices: std::collections::BTreeSet<&str> =
        host.iter().map(|h| h.majmin.as_str()).collect();
    let binds: BTreeMap<String, &str> = spec
        .get("mounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| {
            str_field(m, "type") == "bind"
                || str_items(m.get("options")).any(|o| o == "bind" || o == "rbind")
        })
        .map(|m| {
            (
                clean_path(str_field(m, "destination")).into_owned(),
                str_field(m, "source"),
            )
        })
        .collect();
    let device_points = judged_writable(spec);
    for m in &evidence.mounts {
        if m.point == "/"
            || SHARED_FS.contains(&m.fstype.as_str())
            || !host_devices.contains(m.majmin.as_str())
        {
            continue;
        }
        let point = clean_path(&m.point);
        let judged = binds
            .get(point.as_ref())
            .and_then(|source| resolve(host, source));
        let is_judged = judged.is_some_and(|(majmin, root)| majmin == m.majmin && root == m.root);
        let is_device = m.fstype == "devtmpfs"
            && DEVICE_ROOTS.contains(&m.root.as_str())
            && device_points.contains_key(point.as_ref());
        if !is_judged && !is_device {
            out.push(contradiction(
                "mounts",
                format!(
                    "{} from {} ({} {})",
                    m.point,
                    m.host_path.as_deref().unwrap_or(&m.root),
                    m.fstype,
                    m.majmin
                ),
                "a host path the judged spec does not bind there",
            ));
        }
    }
}

/// A limit as the kernel writes it: a number, or `max` for none.
fn shown(limit: Option<u64>) -> String {
    limit.map_or("max".to_string(), |v| v.to_string())
}

fn judge_cgroup(c: &CgroupLimits, policy: &Policy, out: &mut Vec<Contradiction>) {
    let pids = policy.process.pids_limit;
    if pids > 0 && c.pids_max.is_none_or(|v| v > pids as u64) {
        out.push(contradiction(
            "pids",
            format!("pids.max {} in {}", shown(c.pids_max), c.path),
            format!("above process.pids_limit {pids}"),
        ));
    }
    let memory = policy.resources.memory_max.0;
    if memory > 0 && c.memory_max.is_none_or(|v| v > memory) {
        out.push(contradiction(
            "resources",
            format!("memory limit {} in {}", shown(c.memory_max), c.path),
            format!("above resources.memory_max {memory}"),
        ));
    }
    let ceiling = policy.resources.cpu_quota(c.cpu_period.max(1)) as u64;
    if c.cpu_quota.is_none_or(|q| q > ceiling) {
        out.push(contradiction(
            "resources",
            format!("cpu quota {} per {} us", shown(c.cpu_quota), c.cpu_period),
            format!("above resources.cpus {}", policy.resources.cpus),
        ));
    }
}

#[cfg(test)]
mod tests;
