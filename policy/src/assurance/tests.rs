use super::*;
use serde_json::json;

const STATUS: &str = "Name:\tsh\nUid:\t0\t0\t0\t0\nCapInh:\t0000000000000000\n\
CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n\
CapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t0\nSeccomp_filters:\t0\n";

const MOUNTINFO: &str = "\
100 90 0:50 / / ro,relatime master:1 - overlay overlay rw,lowerdir=/l\n\
101 100 0:51 / /proc rw,nosuid,nodev,noexec - proc proc rw\n\
102 100 0:52 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k\n\
103 102 0:53 / /dev/shm rw,nosuid - tmpfs shm rw,size=65536k\n\
104 100 8:1 /home/u/work /work rw,relatime - ext4 /dev/sda1 rw\n\
105 100 8:1 /var/lib/x/hosts /etc/hosts ro,relatime - ext4 /dev/sda1 rw\n\
106 101 0:52 /null /proc/kcore rw,nosuid - tmpfs tmpfs rw\n\
107 100 0:54 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs rw,mode=755\n\
108 107 0:55 /c1 /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids\n";

const LIMITS: &str = "\
Limit                     Soft Limit           Hard Limit           Units     \n\
Max cpu time              unlimited            unlimited            seconds   \n\
Max open files            1024                 65536                files     \n\
Max locked memory         8388608              8388608              bytes     \n\
Max nice priority         0                    0                    \n\
Max realtime priority     0                    0                    \n";

/// The host's mounts: its root disk, and /run.
const HOST: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
23 22 0:23 / /run rw,nosuid shared:5 - tmpfs tmpfs rw\n\
24 23 8:1 /home/u/work /run/vibe-shim/containers/r/c1/binds/3 rw - ext4 /dev/sda1 rw\n";

fn host() -> Vec<Mount> {
    parse_mountinfo(HOST).unwrap()
}

fn spec() -> Value {
    json!({
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm"},
            {"destination": "/work", "type": "bind", "source": "/run/vibe-shim/containers/r/c1/binds/3", "options": ["rbind", "rw"]},
            {"destination": "/etc/hosts", "type": "bind", "source": "/var/lib/x/hosts", "options": ["rbind", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["ro"]}
        ],
        "linux": {
            "maskedPaths": ["/proc/kcore"],
            "seccomp": {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
                {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["exit"], "action": "SCMP_ACT_ALLOW"}
            ]}
        }
    })
}

fn evidence() -> Evidence {
    let mut namespaces: Vec<Namespace> = NAMESPACE_KINDS
        .iter()
        .enumerate()
        .map(|(i, kind)| Namespace {
            kind,
            inode: 100 + i as u64,
            host_inode: 200 + i as u64,
        })
        .collect();
    // Without a private user namespace the container shares the host's.
    namespaces.last_mut().unwrap().inode = 206;
    Evidence {
        status: parse_status(STATUS).unwrap(),
        runc_seccomp: RuncSeccomp {
            syscall_rules: 3,
            configured: true,
        },
        uid_map: parse_id_map("         0          0 4294967295\n", "uid_map").unwrap(),
        gid_map: parse_id_map("         0          0 4294967295\n", "gid_map").unwrap(),
        mounts: parse_mountinfo(MOUNTINFO).unwrap(),
        namespaces,
        userns_owner: Some(0),
        cgroup: CgroupLimits {
            path: "/docker/c1".into(),
            version: 1,
            pids_max: Some(4096),
            memory_max: Some(1 << 30),
            cpu_quota: Some(200_000),
            cpu_period: 100_000,
        },
        rlimits: parse_limits(LIMITS).unwrap(),
        nft: None,
    }
}

fn rules(found: &[Contradiction]) -> Vec<&'static str> {
    found.iter().map(|c| c.rule).collect()
}

#[test]
fn a_confined_container_has_no_contradiction() {
    let found = judge(&evidence(), &Policy::default(), Some(&spec()), &host());
    assert_eq!(found, vec![]);
}

#[test]
fn parsers_read_the_kernels_formats() {
    let s = parse_status(STATUS).unwrap();
    assert_eq!(
        (s.no_new_privs, s.seccomp, s.seccomp_filters),
        (1, 0, Some(0))
    );
    let old_kernel = STATUS.replace("Seccomp_filters:\t0\n", "");
    assert_eq!(parse_status(&old_kernel).unwrap().seccomp_filters, None);
    assert!(matches!(
        parse_status("CapEff:\tzz\n"),
        Err(ParseError::Bad { .. })
    ));
    let mounts = parse_mountinfo(MOUNTINFO).unwrap();
    assert!(!mounts[0].writable && mounts[0].point == "/");
    assert_eq!(mounts[4].root, "/home/u/work");
    assert!(!mounts[5].writable);
    let esc = parse_mountinfo("1 0 8:1 /a\\040b /x\\040y rw - ext4 /dev/x rw\n").unwrap();
    assert_eq!(
        (esc[0].root.as_str(), esc[0].point.as_str()),
        ("/a b", "/x y")
    );
    let limits = parse_limits(LIMITS).unwrap();
    let nofile = limits.iter().find(|l| l.name == "RLIMIT_NOFILE").unwrap();
    assert_eq!((nofile.soft, nofile.hard), (Some(1024), Some(65536)));
    assert_eq!(limits[0].hard, None);
    assert_eq!(parse_cgroup_value("max\n"), None);
    assert_eq!(parse_cgroup_value("9223372036854771712"), None);
    assert_eq!(parse_cgroup_value("-1"), None);
    assert_eq!(parse_cpu_max("200000 100000\n"), (Some(200_000), 100_000));
    assert_eq!(
        parse_id_map("0 100000 65536\n", "uid_map").unwrap(),
        vec![IdRange {
            inside: 0,
            outside: 100_000,
            count: 65536
        }]
    );
}

#[test]
fn a_capability_the_policy_does_not_grant_is_a_contradiction() {
    let mut ev = evidence();
    ev.status.cap_bnd = 1 << 13; // CAP_NET_RAW
    let found = judge(&ev, &Policy::default(), Some(&spec()), &host());
    assert_eq!(rules(&found), vec!["capabilities"]);
    assert!(found[0].reason.contains("CAP_NET_RAW"), "{found:?}");
    let mut policy = Policy::default();
    policy.process.capabilities = vec!["NET_RAW".into()];
    assert_eq!(judge(&ev, &policy, Some(&spec()), &host()), vec![]);
    // Never granted, whatever the list says.
    ev.status.cap_eff = 1 << 21; // CAP_SYS_ADMIN
    policy.process.capabilities.push("CAP_SYS_ADMIN".into());
    assert_eq!(
        rules(&judge(&ev, &policy, Some(&spec()), &host())),
        vec!["capabilities"]
    );
}

#[test]
fn nnp_and_seccomp_are_required() {
    let mut ev = evidence();
    ev.status.no_new_privs = 0;
    // Without NNP runc would have loaded the filter already.
    assert_eq!(
        rules(&judge(&ev, &Policy::default(), Some(&spec()), &host())),
        vec!["no_new_privileges", "seccomp"]
    );
    let mut ev = evidence();
    ev.runc_seccomp = RuncSeccomp::default();
    assert_eq!(
        rules(&judge(&ev, &Policy::default(), Some(&spec()), &host())),
        vec!["seccomp"]
    );
    ev.status.seccomp = 2;
    ev.status.seccomp_filters = Some(1);
    assert_eq!(
        judge(&ev, &Policy::default(), Some(&spec()), &host()),
        vec![]
    );
}

#[test]
fn writable_root_and_unjudged_writable_mounts_are_contradictions() {
    let mut ev = evidence();
    ev.mounts[0].writable = true;
    ev.mounts.push(Mount {
        majmin: "0:99".into(),
        point: "/host".into(),
        root: "/".into(),
        fstype: "ext4".into(),
        source: "/dev/sdb1".into(),
        writable: true,
        covered: false,
        host_path: None,
    });
    let found = judge(&ev, &Policy::default(), Some(&spec()), &host());
    assert_eq!(rules(&found), vec!["readonly_root", "mounts"]);
    assert!(found[1].evidence.starts_with("/host "), "{found:?}");
    // A read-only mount in the spec that is writable in the kernel.
    let mut ev = evidence();
    ev.mounts[5].writable = true;
    assert_eq!(
        rules(&judge(&ev, &Policy::default(), Some(&spec()), &host())),
        vec!["mounts"]
    );
    assert_eq!(
        rules(&judge(&evidence(), &Policy::default(), None, &host())),
        vec!["seccomp", "mounts"]
    );
    // The tmpfs runc makes for cgroup v1 left writable (runc 1.3 does).
    let mut ev = evidence();
    ev.mounts[7].writable = true;
    assert_eq!(
        rules(&judge(&ev, &Policy::default(), Some(&spec()), &host())),
        vec!["mounts"]
    );
}

/// runc 1.3 under cgroup v1: its tmpfs at /sys/fs/cgroup stays writable,
/// and the `readonlyPaths` entry binds it read-only over itself.
const CGROUP_V1: &str = "\
100 90 0:50 / / ro,relatime - overlay overlay rw\n\
107 100 0:54 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755\n\
108 107 0:55 /c1 /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids\n\
120 107 0:54 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs rw,mode=755\n\
121 120 0:55 /c1 /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids\n";

#[test]
fn a_mount_under_another_at_its_point_is_covered_with_what_hangs_below() {
    let mounts = parse_mountinfo(CGROUP_V1).unwrap();
    let covered: Vec<bool> = mounts.iter().map(|m| m.covered).collect();
    assert_eq!(covered, vec![false, true, true, false, false]);
    let mut ev = evidence();
    ev.mounts = mounts;
    let found = judge(&ev, &Policy::default(), Some(&spec()), &host());
    assert!(!rules(&found).contains(&"mounts"), "{found:?}");
    // Without the read-only bind on top, the tmpfs is writable and seen.
    let uncovered: String = CGROUP_V1
        .lines()
        .take(3)
        .map(|l| format!("{l}\n"))
        .collect();
    ev.mounts = parse_mountinfo(&uncovered).unwrap();
    let found = judge(&ev, &Policy::default(), Some(&spec()), &host());
    assert_eq!(rules(&found), vec!["mounts"], "{found:?}");
    assert!(
        found[0].evidence.starts_with("/sys/fs/cgroup "),
        "{found:?}"
    );
}

/// A client's `maskedPaths: ["/"]`: runc's tmpfs lands over the root,
/// where no path walk sees it; the writable root and its mounts are still
/// what the container sees, and judged.
#[test]
fn a_mask_stacked_over_the_root_hides_nothing_below_it() {
    let text = "\
100 90 0:50 / / rw,relatime - overlay overlay rw\n\
101 100 0:51 / /proc rw,nosuid,nodev,noexec - proc proc rw\n\
102 100 8:1 /srv /x rw,relatime - ext4 /dev/sda1 rw\n\
110 100 0:60 / / ro,relatime - tmpfs tmpfs ro,size=0k\n";
    let mounts = parse_mountinfo(text).unwrap();
    let covered: Vec<bool> = mounts.iter().map(|m| m.covered).collect();
    assert_eq!(covered, vec![false, false, false, true]);
    let mut ev = evidence();
    ev.mounts = mounts;
    let found = judge(&ev, &Policy::default(), Some(&spec()), &host());
    let rules = rules(&found);
    assert!(rules.contains(&"readonly_root"), "{found:?}");
    assert!(
        found
            .iter()
            .any(|c| c.rule == "mounts" && c.evidence.starts_with("/x ")),
        "{found:?}"
    );
}

#[test]
fn host_namespaces_and_user_mapping() {
    let mut ev = evidence();
    ev.namespaces[4].inode = ev.namespaces[4].host_inode;
    let found = judge(&ev, &Policy::default(), Some(&spec()), &host());
    assert_eq!(rules(&found), vec!["namespaces"]);
    assert!(found[0].evidence.starts_with("net "));
    let mut policy = Policy::default();
    policy.userns.mode = UsernsMode::Private;
    assert_eq!(
        rules(&judge(&evidence(), &policy, Some(&spec()), &host())),
        vec!["namespaces", "userns"]
    );
    let mut ev = evidence();
    ev.namespaces.last_mut().unwrap().inode = 1;
    ev.uid_map = parse_id_map("0 100000 65536\n", "uid_map").unwrap();
    ev.userns_owner = Some(100000);
    assert_eq!(judge(&ev, &policy, Some(&spec()), &host()), vec![]);
    // The same mapping in a namespace runc made as root: root's budgets.
    ev.userns_owner = Some(0);
    let found = judge(&ev, &policy, Some(&spec()), &host());
    assert_eq!(rules(&found), vec!["userns"]);
    assert_eq!(found[0].evidence, "owner uid 0");
}

#[test]
fn cgroup_limits_and_rlimits_above_the_ceilings() {
    let mut ev = evidence();
    ev.cgroup.pids_max = None;
    ev.cgroup.memory_max = Some(8 << 30);
    ev.cgroup.cpu_quota = None;
    assert_eq!(
        rules(&judge(&ev, &Policy::default(), Some(&spec()), &host())),
        vec!["pids", "resources", "resources"]
    );
    let mut ev = evidence();
    ev.rlimits.retain(|r| r.name != "RLIMIT_NICE");
    ev.rlimits
        .iter_mut()
        .find(|r| r.name == "RLIMIT_NOFILE")
        .unwrap()
        .hard = None;
    let found = judge(&ev, &Policy::default(), Some(&spec()), &host());
    assert_eq!(rules(&found), vec!["rlimits", "rlimits"]);
}

#[test]
fn capability_names_cover_unknown_bits() {
    assert_eq!(capability_names(1 | 1 << 63), vec!["CAP_CHOWN", "bit 63"]);
}

#[test]
fn seccomp_at_exec_must_be_the_judged_profile() {
    let mut ev = evidence();
    ev.runc_seccomp.syscall_rules = 2;
    let found = judge(&ev, &Policy::default(), Some(&spec()), &host());
    assert_eq!(rules(&found), vec!["seccomp"]);
    assert!(found[0].evidence.contains("judged spec 3"), "{found:?}");
}

#[test]
fn a_host_path_the_judged_spec_does_not_bind_is_a_contradiction() {
    // The host's /etc, read-only: no writable mount, but a host path.
    let mut ev = evidence();
    ev.mounts.push(
        parse_mountinfo("120 100 8:1 /etc /host-etc ro - ext4 /dev/sda1 rw\n").unwrap()[0].clone(),
    );
    locate(&mut ev.mounts, &host());
    let found = judge(&ev, &Policy::default(), Some(&spec()), &host());
    assert_eq!(rules(&found), vec!["mounts"]);
    assert!(
        found[0].evidence.starts_with("/host-etc from /etc "),
        "{found:?}"
    );
    // The judged point, but other files than the judged source.
    let mut ev = evidence();
    ev.mounts[4].root = "/home/u".into();
    assert_eq!(
        rules(&judge(&ev, &Policy::default(), Some(&spec()), &host())),
        vec!["mounts"]
    );
    // A tmpfs of the host's (its /run), at a point the spec makes a tmpfs.
    let mut ev = evidence();
    ev.mounts[3].majmin = "0:23".into();
    assert_eq!(
        rules(&judge(&ev, &Policy::default(), Some(&spec()), &host())),
        vec!["mounts"]
    );
    // runc's device binds in a user namespace are no host path.
    let mut ev = evidence();
    ev.mounts.push(
        parse_mountinfo("121 102 0:5 /null /dev/null rw - devtmpfs udev rw\n").unwrap()[0].clone(),
    );
    let mut host = host();
    host.extend(parse_mountinfo("25 22 0:5 / /dev rw - devtmpfs udev rw\n").unwrap());
    assert_eq!(judge(&ev, &Policy::default(), Some(&spec()), &host), vec![]);
}

#[test]
fn mounts_are_located_on_the_host() {
    let mut mounts = parse_mountinfo(MOUNTINFO).unwrap();
    locate(&mut mounts, &host());
    let at = |p: &str| {
        mounts
            .iter()
            .find(|m| m.point == p)
            .unwrap()
            .host_path
            .clone()
    };
    assert_eq!(at("/work").as_deref(), Some("/home/u/work"));
    assert_eq!(at("/etc/hosts").as_deref(), Some("/var/lib/x/hosts"));
    assert_eq!(at("/proc"), None);
}

#[test]
fn a_mount_runc_placed_through_an_image_symlink_is_judged_there() {
    let mut ev = evidence();
    ev.mounts.push(
        parse_mountinfo("130 102 0:77 / /var/tmp rw,nosuid - tmpfs tmpfs rw\n").unwrap()[0].clone(),
    );
    let mut judged = spec();
    judged["mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"}));
    assert_eq!(
        rules(&judge(&ev, &Policy::default(), Some(&judged), &host())),
        vec!["mounts"]
    );
    // The image's /tmp is a symlink to /var/tmp; nothing else moved.
    add_placed_mounts(&mut judged, |dest| match dest {
        "/tmp" => Some("/var/tmp".into()),
        "/work" => None,
        other => Some(other.to_string()),
    });
    let dests: Vec<&str> = judged["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| str_field(m, "destination"))
        .collect();
    assert_eq!(dests.iter().filter(|d| **d == "/var/tmp").count(), 1);
    assert_eq!(dests.len(), spec()["mounts"].as_array().unwrap().len() + 2);
    assert_eq!(
        judge(&ev, &Policy::default(), Some(&judged), &host()),
        vec![]
    );
}
