//! The root, the writable mounts, tmpfs sizes and host paths, from
//! /proc/self/mountinfo (the kernel's view of this process's mounts).

use crate::report::Check;

/// One mountinfo line's fields the checks use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The path inside its filesystem that is mounted (a bind's source).
    pub root: String,
    pub point: String,
    /// Per-mount options (`rw`/`ro`, ...).
    pub options: String,
    pub fstype: String,
    pub source: String,
    /// The superblock's options (`size=` for a tmpfs).
    pub super_options: String,
}

impl Mount {
    pub fn writable(&self) -> bool {
        !has_opt(&self.options, "ro") && !has_opt(&self.super_options, "ro")
    }
}

fn has_opt(options: &str, opt: &str) -> bool {
    options.split(',').any(|o| o == opt)
}

/// mountinfo's octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|o| o.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(o)) => {
                out.push(
                    o.iter()
                        .fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')),
                );
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every well-formed line of `text`; a malformed one is skipped.
pub fn parse(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mount> {
    let (head, tail) = line.split_once(" - ")?;
    let head: Vec<&str> = head.split(' ').collect();
    let tail: Vec<&str> = tail.split(' ').collect();
    if head.len() < 6 || tail.len() < 3 {
        return None;
    }
    Some(Mount {
        root: unescape(head[3]),
        point: unescape(head[4]),
        options: head[5].to_string(),
        fstype: tail[0].to_string(),
        source: unescape(tail[1]),
        super_options: tail[2].to_string(),
    })
}

/// Filesystems whose writable mounts hold no host data: memory-backed
/// (their size is judged on its own) or the kernel's own per-container views.
const SCRATCH_FS: &[&str] = &["tmpfs", "devpts", "mqueue", "proc"];

/// Filesystems that are the kernel's or the runtime's, not a host directory.
const PSEUDO_FS: &[&str] = &[
    "overlay",
    "tmpfs",
    "proc",
    "sysfs",
    "devpts",
    "mqueue",
    "cgroup",
    "cgroup2",
    "securityfs",
    "debugfs",
    "tracefs",
    "fusectl",
    "pstore",
    "bpf",
    "configfs",
    "hugetlbfs",
    "nsfs",
    "binfmt_misc",
    "autofs",
    "selinuxfs",
    "efivarfs",
];

/// The engine's per-container files: judged as writable mounts, never as
/// host paths (they are this container's copies).
const ENGINE_FILES: &[&str] = &["/etc/hosts", "/etc/hostname", "/etc/resolv.conf"];

/// Host directories whose appearance in a container, or of anything
/// under them, is a door.
const HOST_DIRS: &[&str] = &[
    "/etc",
    "/root",
    "/home",
    "/boot",
    "/proc",
    "/sys",
    "/dev",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/containers",
    "/var/lib/kubelet",
];

/// Host directories that are a door whole (their sockets are caught by
/// name); files under them are runtimes' per-container state.
const HOST_DIRS_WHOLE: &[&str] = &["/run", "/var/run", "/var", "/usr", "/var/lib"];

/// A named volume's data: the container's own, not a host path.
fn volume_data(root: &str) -> bool {
    let Some(rest) = root.strip_prefix("/var/lib/docker/volumes/") else {
        return false;
    };
    let Some((name, tail)) = rest.split_once('/') else {
        return false;
    };
    !name.is_empty() && under(tail, "_data")
}

/// Engine sockets and state directories looked for by path.
pub const HOST_PATHS: &[&str] = &[
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/var/run/crio/crio.sock",
    "/run/crio/crio.sock",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/kubelet",
];

fn under(path: &str, dir: &str) -> bool {
    path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

/// What the checks ask of the file system (fixtures in tests).
pub struct Fs<'a> {
    /// Whether a path exists.
    pub exists: &'a dyn Fn(&str) -> bool,
    /// Whether this process may write there (access(2), effective ids).
    pub writable: &'a dyn Fn(&str) -> bool,
}

/// root.readonly: "/" mounted ro. mounts.writable: no mount this process
/// can write to (mounted rw and access(2) grants W_OK) but tmpfs, devpts,
/// mqueue and proc, or one in `allow`. mounts.tmpfs_size: every tmpfs it
/// can write to has an explicit size=. host.paths: no engine socket or
/// state directory by path, and no mount of a real filesystem's root or of
/// a host system directory (the engine's own files, named volumes and this
/// binary's bind aside).
pub fn checks(
    mountinfo: Option<&str>,
    allow: &[String],
    own_exe: Option<&str>,
    fs: &Fs<'_>,
) -> Vec<Check> {
    let exists = fs.exists;
    let Some(text) = mountinfo else {
        let why = "cannot read /proc/self/mountinfo";
        let mut out: Vec<Check> = ["root.readonly", "mounts.writable", "mounts.tmpfs_size"]
            .into_iter()
            .map(|r| Check::new(r, false, why))
            .collect();
        out.push(host_paths(&[], own_exe, exists));
        return out;
    };
    let mounts = parse(text);
    vec![
        root_readonly(&mounts),
        writable(&mounts, allow, fs.writable),
        tmpfs_size(&mounts, fs.writable),
        host_paths(&mounts, own_exe, exists),
    ]
}

/// The mounts as the process sees them: for a point mounted over, the last.
fn visible(mounts: &[Mount]) -> Vec<&Mount> {
    let mut out: Vec<&Mount> = Vec::new();
    for m in mounts {
        out.retain(|o| o.point != m.point);
        out.push(m);
    }
    out
}

fn root_readonly(mounts: &[Mount]) -> Check {
    match visible(mounts).into_iter().find(|m| m.point == "/") {
        None => Check::new("root.readonly", false, "no mount at / in mountinfo"),
        Some(m) => Check::new(
            "root.readonly",
            !m.writable(),
            format!(
                "/ ({}) {}",
                m.fstype,
                if m.writable() { "rw" } else { "ro" }
            ),
        ),
    }
}

fn writable(mounts: &[Mount], allow: &[String], may_write: &dyn Fn(&str) -> bool) -> Check {
    let rw: Vec<String> = visible(mounts)
        .into_iter()
        .filter(|m| m.writable() && !SCRATCH_FS.contains(&m.fstype.as_str()))
        .filter(|m| may_write(&m.point))
        .filter(|m| !allow.iter().any(|a| a == &m.point))
        .map(|m| format!("{} ({})", m.point, m.fstype))
        .collect();
    match rw.is_empty() {
        true => Check::new(
            "mounts.writable",
            true,
            "none this process can write but tmpfs, devpts, mqueue, proc",
        ),
        false => Check::new("mounts.writable", false, format!("rw: {}", rw.join(", "))),
    }
}

fn tmpfs_size(mounts: &[Mount], may_write: &dyn Fn(&str) -> bool) -> Check {
    let mut sized = Vec::new();
    let mut unsized_ = Vec::new();
    for m in visible(mounts) {
        if m.fstype != "tmpfs" || !m.writable() || !may_write(&m.point) {
            continue;
        }
        match m
            .super_options
            .split(',')
            .find_map(|o| o.strip_prefix("size="))
        {
            Some(size) => sized.push(format!("{} {size}", m.point)),
            None => unsized_.push(m.point.clone()),
        }
    }
    match unsized_.is_empty() {
        true if sized.is_empty() => Check::new("mounts.tmpfs_size", true, "no writable tmpfs"),
        true => Check::new("mounts.tmpfs_size", true, sized.join(", ")),
        false => Check::new(
            "mounts.tmpfs_size",
            false,
            format!("no size= (half the host's memory): {}", unsized_.join(", ")),
        ),
    }
}

fn host_paths(mounts: &[Mount], own_exe: Option<&str>, exists: &dyn Fn(&str) -> bool) -> Check {
    let mut seen: Vec<String> = HOST_PATHS
        .iter()
        .filter(|p| exists(p))
        .map(|p| p.to_string())
        .collect();
    for m in visible(mounts) {
        if ENGINE_FILES.contains(&m.point.as_str()) || Some(m.point.as_str()) == own_exe {
            continue;
        }
        let socket = m.root.ends_with(".sock") || m.point.ends_with(".sock");
        let real_fs = !PSEUDO_FS.contains(&m.fstype.as_str());
        let host_dir = real_fs
            && !volume_data(&m.root)
            && (m.root == "/" && m.point != "/"
                || HOST_DIRS.iter().any(|d| under(&m.root, d))
                || HOST_DIRS_WHOLE.contains(&m.root.as_str()));
        let devices = m.fstype == "devtmpfs";
        if socket || host_dir || devices {
            let entry = format!("{} ({} {})", m.point, m.fstype, m.root);
            if !seen.contains(&entry) {
                seen.push(entry);
            }
        }
    }
    match seen.is_empty() {
        true => Check::new(
            "host.paths",
            true,
            "no engine socket, state dir or host system dir",
        ),
        false => Check::new("host.paths", false, format!("visible: {}", seen.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Verdict;

    /// A container under runc with Docker's defaults (cgroup v1 host).
    const RUNC: &str = "\
612 499 0:52 / / rw,relatime master:245 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A,upperdir=/var/lib/docker/overlay2/x/diff,workdir=/var/lib/docker/overlay2/x/work
613 612 0:55 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
614 612 0:56 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
615 614 0:57 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw,gid=5,mode=620,ptmxmode=666
616 612 0:58 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
617 616 0:59 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
618 617 0:29 /docker/abc /sys/fs/cgroup/pids ro,nosuid,nodev,noexec,relatime master:13 - cgroup cgroup rw,pids
619 614 0:54 / /dev/mqueue rw,nosuid,nodev,noexec,relatime - mqueue mqueue rw
620 614 0:60 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k
621 612 8:1 /var/lib/docker/containers/abc/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/sda1 rw
622 612 8:1 /var/lib/docker/containers/abc/hostname /etc/hostname rw,relatime - ext4 /dev/sda1 rw
623 612 8:1 /var/lib/docker/containers/abc/hosts /etc/hosts rw,relatime - ext4 /dev/sda1 rw
624 612 8:1 /work/target/vibe-shim-probe /probe ro,relatime - ext4 /dev/sda1 rw
500 613 0:55 /bus /proc/bus ro,nosuid,nodev,noexec,relatime - proc proc rw
501 613 0:61 / /proc/acpi ro,relatime - tmpfs tmpfs ro
";

    fn run(text: &str, allow: &[&str], exists: &[&str]) -> Vec<Check> {
        run_as(text, allow, exists, &[])
    }

    /// As root would see it, but for the `denied` points (access W_OK).
    fn run_as(text: &str, allow: &[&str], exists: &[&str], denied: &[&str]) -> Vec<Check> {
        let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
        let fs = Fs {
            exists: &|p| exists.contains(&p),
            writable: &|p| !denied.contains(&p),
        };
        checks(Some(text), &allow, Some("/probe"), &fs)
    }

    #[test]
    fn lines_parse_with_escapes_and_optional_fields() {
        let m = parse("36 35 98:0 /mnt\\040dir /a\\040b rw,noatime master:1 shared:2 - ext3 /dev/root rw,errors=continue");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].root, "/mnt dir");
        assert_eq!(m[0].point, "/a b");
        assert_eq!(m[0].fstype, "ext3");
        assert_eq!(m[0].super_options, "rw,errors=continue");
        assert!(parse("garbage\n1 2 3\n").is_empty());
    }

    #[test]
    fn runcs_default_root_and_engine_files_are_writable() {
        let c = run(RUNC, &[], &[]);
        assert_eq!(c[0].verdict, Verdict::Fail);
        assert_eq!(c[0].observed, "/ (overlay) rw");
        assert_eq!(c[1].verdict, Verdict::Fail);
        assert_eq!(
            c[1].observed,
            "rw: / (overlay), /etc/resolv.conf (ext4), /etc/hostname (ext4), /etc/hosts (ext4)"
        );
        // Docker sizes /dev and /dev/shm; /sys/fs/cgroup's tmpfs is not.
        assert_eq!(c[2].verdict, Verdict::Fail);
        assert!(
            c[2].observed.ends_with(": /sys/fs/cgroup"),
            "{}",
            c[2].observed
        );
        assert_eq!(c[3].verdict, Verdict::Pass, "{}", c[3].observed);
    }

    #[test]
    fn a_readonly_root_with_sized_tmpfs_holds() {
        let text = RUNC
            .replace("/ / rw,relatime", "/ / ro,relatime")
            .replace(" rw,relatime - ext4", " ro,relatime - ext4")
            .replace(
                "tmpfs tmpfs rw,mode=755",
                "tmpfs tmpfs rw,size=1024k,mode=755",
            );
        let c = run(&text, &[], &[]);
        assert_eq!(c[0].verdict, Verdict::Pass);
        assert_eq!(c[1].verdict, Verdict::Pass, "{}", c[1].observed);
        assert_eq!(c[2].verdict, Verdict::Pass);
        assert_eq!(
            c[2].observed,
            "/dev 65536k, /sys/fs/cgroup 1024k, /dev/shm 65536k"
        );
    }

    #[test]
    fn an_allowed_writable_mount_is_the_operators_choice() {
        let text = format!("{RUNC}700 612 8:1 /work/tree /work rw,relatime - ext4 /dev/sda1 rw\n");
        let c = run(
            &text,
            &["/", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"],
            &[],
        );
        assert_eq!(c[1].observed, "rw: /work (ext4)");
        let c = run(
            &text,
            &[
                "/",
                "/etc/hosts",
                "/etc/hostname",
                "/etc/resolv.conf",
                "/work",
            ],
            &[],
        );
        assert_eq!(c[1].verdict, Verdict::Pass);
    }

    #[test]
    fn sockets_host_roots_and_system_dirs_are_host_paths() {
        let text = format!(
            "{RUNC}\
701 612 0:25 /docker.sock /run/docker.sock rw,nosuid - tmpfs tmpfs rw,size=400k
702 612 8:1 / /host ro,relatime - ext4 /dev/sda1 rw
703 612 8:1 /etc /host-etc ro,relatime - ext4 /dev/sda1 rw
704 612 0:5 / /dev/devices rw - devtmpfs udev rw
705 612 8:1 /srv/data /data ro - ext4 /dev/sda1 rw
"
        );
        let c = run(&text, &[], &["/var/lib/docker"]);
        assert_eq!(c[3].verdict, Verdict::Fail);
        assert_eq!(
            c[3].observed,
            "visible: /var/lib/docker, /run/docker.sock (tmpfs /docker.sock), /host (ext4 /), \
             /host-etc (ext4 /etc), /dev/devices (devtmpfs /)"
        );
    }

    #[test]
    fn a_mount_this_process_cannot_write_is_not_counted() {
        let files = [
            "/etc/hosts",
            "/etc/hostname",
            "/etc/resolv.conf",
            "/sys/fs/cgroup",
        ];
        let text = RUNC.replace("/ / rw,relatime", "/ / ro,relatime");
        let c = run_as(&text, &[], &[], &files);
        assert_eq!(c[1].verdict, Verdict::Pass, "{}", c[1].observed);
        assert_eq!(c[2].verdict, Verdict::Pass, "{}", c[2].observed);
        let c = run_as(&text, &[], &[], &files[1..]);
        assert_eq!(c[1].observed, "rw: /etc/hosts (ext4)");
    }

    #[test]
    fn runtime_state_files_and_named_volumes_are_not_host_paths() {
        let text = format!(
            "{RUNC}\
711 612 8:1 /run/vibe-shim/containers/x/notice /etc/vibe-shim/notice ro - ext4 /dev/sda1 rw
712 612 8:1 /var/lib/docker/volumes/cache/_data /cache rw - ext4 /dev/sda1 rw
713 612 8:1 /var/lib/docker/volumes /vols rw - ext4 /dev/sda1 rw
714 612 8:1 /run /hostrun rw - ext4 /dev/sda1 rw
"
        );
        let c = run(&text, &[], &[]);
        assert_eq!(
            c[3].observed,
            "visible: /vols (ext4 /var/lib/docker/volumes), /hostrun (ext4 /run)"
        );
    }

    #[test]
    fn a_mount_over_another_hides_it() {
        let text = format!("{RUNC}710 612 0:70 / / ro - overlay overlay ro\n");
        assert_eq!(run(&text, &[], &[])[0].verdict, Verdict::Pass);
    }

    #[test]
    fn no_mountinfo_fails_closed() {
        let fs = Fs {
            exists: &|_| false,
            writable: &|_| false,
        };
        let c = checks(None, &[], None, &fs);
        assert_eq!(c.len(), 4);
        assert!(c[..3].iter().all(|c| c.verdict == Verdict::Fail));
    }
}
