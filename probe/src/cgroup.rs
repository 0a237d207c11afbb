//! The pids and memory limits of this process's cgroup, cgroup v1 or v2,
//! read from the cgroup files visible in the container.

use crate::mounts::{parse, Mount};
use crate::report::Check;

/// v1 reports "no memory limit" as the page counter's maximum (about 2^63,
/// page-rounded); anything this large is no limit.
const V1_UNLIMITED: u64 = 1 << 62;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Max,
    Value(u64),
}

/// A limit file's text: "max" (v2, and v1's pids.max) or a number;
/// v1's page-counter maximum is "max" too.
pub fn parse_limit(text: &str) -> Option<Limit> {
    match text.trim() {
        "max" => Some(Limit::Max),
        n => match n.parse::<u64>().ok()? {
            v if v >= V1_UNLIMITED => Some(Limit::Max),
            v => Some(Limit::Value(v)),
        },
    }
}

/// The directories, innermost first, where the cgroup files of the
/// hierarchy with `controller` (v1) or the unified one (`None`) are
/// visible: this process's cgroup and each parent up to the mount.
fn dirs(mounts: &[Mount], cgroup: &str, controller: Option<&str>) -> Vec<String> {
    let path = cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        let hit = match controller {
            Some(c) => ctrls.split(',').any(|x| x == c),
            None => ctrls.is_empty(),
        };
        hit.then_some(path)
    });
    let Some(path) = path else { return Vec::new() };
    let mount = mounts.iter().rev().find(|m| match controller {
        Some(c) => m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == c),
        None => m.fstype == "cgroup2",
    });
    let Some(mount) = mount else {
        return Vec::new();
    };
    let rel = match path.strip_prefix(mount.root.trim_end_matches('/')) {
        Some(rel) if rel.is_empty() || rel.starts_with('/') => rel,
        // Another namespace's path: only the mount itself is known.
        _ => "",
    };
    let mut out = Vec::new();
    let mut rel = rel.trim_end_matches('/').to_string();
    loop {
        out.push(format!("{}{}", mount.point.trim_end_matches('/'), rel));
        match rel.rfind('/') {
            Some(i) => rel.truncate(i),
            None => break,
        }
    }
    out
}

/// The tightest limit among the visible levels, and where it was read.
fn limit(
    mounts: &[Mount],
    cgroup: &str,
    files: &[(Option<&str>, &str)],
    read: &dyn Fn(&str) -> Option<String>,
) -> Option<(Limit, String)> {
    let mut best: Option<(Limit, String)> = None;
    for (controller, file) in files {
        for dir in dirs(mounts, cgroup, *controller) {
            let path = format!("{dir}/{file}");
            let Some(l) = read(&path).as_deref().and_then(parse_limit) else {
                continue;
            };
            best = match (&best, l) {
                (None, _) => Some((l, path)),
                (Some((Limit::Max, _)), Limit::Value(_)) => Some((l, path)),
                (Some((Limit::Value(b), _)), Limit::Value(v)) if v < *b => Some((l, path)),
                _ => best,
            };
        }
    }
    best
}

/// cgroup.pids: a pids.max that is a number. cgroup.memory: a memory.max
/// (v2) or memory.limit_in_bytes (v1) that is a number.
pub fn checks(
    mountinfo: Option<&str>,
    cgroup: Option<&str>,
    read: &dyn Fn(&str) -> Option<String>,
) -> Vec<Check> {
    let (Some(mountinfo), Some(cgroup)) = (mountinfo, cgroup) else {
        let why = "cannot read mountinfo or /proc/self/cgroup";
        return vec![
            Check::new("cgroup.pids", false, why),
            Check::new("cgroup.memory", false, why),
        ];
    };
    let mounts = parse(mountinfo);
    let pids = limit(
        &mounts,
        cgroup,
        &[(None, "pids.max"), (Some("pids"), "pids.max")],
        read,
    );
    let memory = limit(
        &mounts,
        cgroup,
        &[
            (None, "memory.max"),
            (Some("memory"), "memory.limit_in_bytes"),
        ],
        read,
    );
    vec![
        verdict("cgroup.pids", "pids", pids),
        verdict("cgroup.memory", "memory", memory),
    ]
}

fn verdict(rule: &'static str, what: &str, seen: Option<(Limit, String)>) -> Check {
    match seen {
        None => Check::new(rule, false, format!("no {what} limit file visible")),
        Some((Limit::Max, path)) => Check::new(rule, false, format!("{path}: max")),
        Some((Limit::Value(v), path)) => Check::new(rule, true, format!("{path}: {v}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Verdict;
    use std::collections::BTreeMap;

    const V1_MOUNTS: &str = "\
618 617 0:29 /docker/abc /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids
619 617 0:30 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory
";
    const V1_CGROUP: &str =
        "12:pids:/docker/abc\n9:memory:/docker/abc\n1:name=systemd:/docker/abc\n";
    const V2_MOUNTS: &str =
        "30 25 0:26 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";

    fn files(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn run(mounts: &str, cgroup: &str, fs: &BTreeMap<String, String>) -> Vec<Check> {
        checks(Some(mounts), Some(cgroup), &|p| fs.get(p).cloned())
    }

    #[test]
    fn limits_parse_and_v1s_counter_maximum_is_no_limit() {
        assert_eq!(parse_limit("max\n"), Some(Limit::Max));
        assert_eq!(parse_limit("256\n"), Some(Limit::Value(256)));
        assert_eq!(parse_limit("9223372036854771712\n"), Some(Limit::Max));
        assert_eq!(parse_limit("lots"), None);
    }

    #[test]
    fn v1_without_limits_fails_both() {
        let fs = files(&[
            ("/sys/fs/cgroup/pids/pids.max", "max\n"),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ]);
        let c = run(V1_MOUNTS, V1_CGROUP, &fs);
        assert_eq!(c[0].verdict, Verdict::Fail);
        assert_eq!(c[0].observed, "/sys/fs/cgroup/pids/pids.max: max");
        assert_eq!(c[1].verdict, Verdict::Fail);
    }

    #[test]
    fn v1_limits_hold() {
        let fs = files(&[
            ("/sys/fs/cgroup/pids/pids.max", "512\n"),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "1073741824\n",
            ),
        ]);
        let c = run(V1_MOUNTS, V1_CGROUP, &fs);
        assert_eq!(c[0].observed, "/sys/fs/cgroup/pids/pids.max: 512");
        assert_eq!(
            c[1].observed,
            "/sys/fs/cgroup/memory/memory.limit_in_bytes: 1073741824"
        );
        assert!(c.iter().all(|c| c.verdict == Verdict::Pass));
    }

    #[test]
    fn v2_reads_the_own_cgroup_and_its_visible_parents() {
        let cgroup = "0::/system.slice/box\n";
        let fs = files(&[
            ("/sys/fs/cgroup/system.slice/box/pids.max", "max\n"),
            ("/sys/fs/cgroup/system.slice/pids.max", "100\n"),
            ("/sys/fs/cgroup/system.slice/box/memory.max", "max\n"),
        ]);
        let c = run(V2_MOUNTS, cgroup, &fs);
        assert_eq!(c[0].observed, "/sys/fs/cgroup/system.slice/pids.max: 100");
        assert_eq!(c[0].verdict, Verdict::Pass);
        assert_eq!(
            c[1].observed,
            "/sys/fs/cgroup/system.slice/box/memory.max: max"
        );
        assert_eq!(c[1].verdict, Verdict::Fail);
    }

    #[test]
    fn a_private_cgroup_namespace_reads_the_mount_itself() {
        let fs = files(&[
            ("/sys/fs/cgroup/pids.max", "64"),
            ("/sys/fs/cgroup/memory.max", "1048576"),
        ]);
        let c = run(V2_MOUNTS, "0::/\n", &fs);
        assert!(c.iter().all(|c| c.verdict == Verdict::Pass), "{c:?}");
    }

    #[test]
    fn nothing_visible_fails_closed() {
        let c = run("", V1_CGROUP, &files(&[]));
        assert_eq!(c[0].observed, "no pids limit file visible");
        assert!(c.iter().all(|c| c.verdict == Verdict::Fail));
        assert!(checks(None, None, &|_| None)
            .iter()
            .all(|c| c.verdict == Verdict::Fail));
    }
}
