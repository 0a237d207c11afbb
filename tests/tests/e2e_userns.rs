//! End-to-end: `[userns] mode = "private"` (tests/policies/userns.toml)
//! with the stack's own runc, which must id-map bind mounts (runc >= 1.2:
//! the sid stack; tests/env/filter.sh leaves these out elsewhere, and
//! runc_userns pins the host runc's refusal). Judged from inside the
//! container (/proc/self/uid_map) and by host evidence: the owner of what
//! it wrote, seen from the host, the process's host uid, the block records.
//!
//! The bundles are made by hand, in the stack's mount namespace, with a
//! busybox root whose mount points exist: the engines' own roots sit on
//! overlays the container's private range does not own (see
//! docs/admin/policy.md#userns), so no engine runs here yet.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::unique_name;

/// The policy under test, from this repo (the env may come from another).
const POLICY: &str = include_str!("../policies/userns.toml");
/// Where bundles live: a host directory the sid tree sees at the same path.
const BASE: &str = "/var/tmp/vibe-test/userns-e2e";
const WORKTREES: &str = "/var/tmp/vibe-test/worktrees";
/// The worktree's host owner: a regular id that is not the forced user.
const OWNER: u32 = 1234;
const FORCED: u32 = 1000;
const BLOCK: u64 = 65_536;
const RECORDS: &str = "/run/vibe-shim/userns";
/// Create/delete cycles of one container id.
const CYCLES: usize = 50;

fn shim() -> String {
    std::env::var("VIBE_SHIM_BIN").unwrap_or_else(|_| env().shim_bin.display().to_string())
}

fn describe(out: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// One container: its bundle, worktree, runc root and policy under BASE.
struct Case {
    id: String,
    dir: PathBuf,
    worktree: PathBuf,
}

impl Case {
    fn new(tag: &str, script: &str) -> Case {
        let id = unique_name(tag);
        let dir = Path::new(BASE).join(&id);
        let worktree = Path::new(WORKTREES).join(&id);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("root")).unwrap();
        fs::create_dir_all(&worktree).unwrap();
        std::os::unix::fs::chown(&worktree, Some(OWNER), Some(OWNER)).unwrap();
        let rootfs = dir.join("bundle/rootfs");
        fs::create_dir_all(dir.join("bundle")).unwrap();
        let copied = Command::new("cp")
            .arg("-a")
            .arg(env().var("VIBE_TEST_ROOTFS"))
            .arg(&rootfs)
            .status()
            .unwrap();
        assert!(copied.success(), "copy the busybox rootfs");
        // The mount points runc would have to make as an unmapped root.
        for d in [
            "w",
            "tmp",
            "run",
            "home/user",
            "etc/vibe-shim",
            "proc",
            "sys",
            "dev",
        ] {
            fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        // The files vibe-shim binds read-only: the notice and the
        // assurance record.
        for file in ["notice", "assurance.json"] {
            fs::write(rootfs.join("etc/vibe-shim").join(file), "").unwrap();
        }
        let spec = json!({
            "ociVersion": "1.0.2",
            "process": {
                "terminal": false, "user": {"uid": 0, "gid": 0},
                "args": ["sh", "-c", script], "env": ["PATH=/bin:/usr/bin"], "cwd": "/",
                "noNewPrivileges": true
            },
            "root": {"path": "rootfs", "readonly": true},
            "hostname": "userns",
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
                 "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
                {"destination": "/sys", "type": "sysfs", "source": "sysfs",
                 "options": ["nosuid", "noexec", "nodev", "ro"]},
                {"destination": "/w", "type": "bind", "source": worktree, "options": ["rbind", "rw"]}
            ],
            "linux": {
                "cgroupsPath": format!("/vibe-test/{id}"),
                "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                               {"type": "uts"}, {"type": "mount"}],
                "maskedPaths": ["/proc/kcore"], "readonlyPaths": ["/proc/sys"]
            }
        });
        fs::write(dir.join("bundle/config.json"), spec.to_string()).unwrap();
        fs::write(dir.join("policy.toml"), POLICY).unwrap();
        Case { id, dir, worktree }
    }

    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    /// Edits the bundle's spec before create.
    fn edit_spec(&self, edit: impl FnOnce(&mut Value)) {
        let path = self.dir.join("bundle/config.json");
        let mut spec: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        edit(&mut spec);
        fs::write(&path, spec.to_string()).unwrap();
    }

    /// Puts the static inotify probe into the container's /bin.
    fn with_inotify_probe(&self) {
        let bin = self.dir.join("bundle/rootfs/bin/inotify_hold");
        fs::copy(inotify_probe(), bin).unwrap();
    }

    /// vibe-shim with `args`, in the stack's mount namespace.
    fn shim(&self, args: &[&str]) -> Output {
        let shim = shim();
        let policy = self.dir.join("policy.toml").display().to_string();
        let root = self.root().display().to_string();
        let mut argv = vec![shim.as_str(), "--config", &policy, "--root", &root];
        argv.extend_from_slice(args);
        let full = env().in_engine_ns(&argv);
        let log = fs::File::create(self.dir.join(format!("{}.out", args[0]))).unwrap();
        let status = Command::new("timeout")
            .arg("60")
            .args(&full)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .status()
            .unwrap();
        let text = fs::read(self.dir.join(format!("{}.out", args[0]))).unwrap_or_default();
        Output {
            status,
            stdout: text,
            stderr: Vec::new(),
        }
    }

    fn create_and_start(&self) {
        let bundle = self.dir.join("bundle").display().to_string();
        let out = self.shim(&["create", "--bundle", &bundle, &self.id]);
        assert!(
            out.status.success(),
            "create {}: {}",
            self.id,
            describe(&out)
        );
        let out = self.shim(&["start", &self.id]);
        assert!(
            out.status.success(),
            "start {}: {}",
            self.id,
            describe(&out)
        );
    }

    fn wait_for(&self, file: &str) -> String {
        let path = self.worktree.join(file);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(text) = fs::read_to_string(&path) {
                if !text.is_empty() {
                    return text;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{} never wrote {file}", self.id);
    }

    /// The container's init pid, from runc's state (host pid namespace).
    fn pid(&self) -> u32 {
        let state = fs::read_to_string(self.root().join(&self.id).join("state.json"))
            .expect("runc state.json");
        let state: Value = serde_json::from_str(&state).unwrap();
        state["init_process_pid"].as_u64().expect("init pid") as u32
    }

    fn record(&self) -> PathBuf {
        let escaped = vibe_hooks::egress::records::escape_root(&self.root());
        Path::new(RECORDS).join(escaped).join(&self.id)
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        let _ = self.shim(&["delete", "--force", &self.id]);
        let _ = fs::remove_dir_all(&self.worktree);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// tests/probe/inotify_hold.c, built once per test process.
fn inotify_probe() -> &'static Path {
    static BIN: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = BIN.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        vibe_shim_tests::harness::static_c_probe("inotify_hold.c", &dir.path().join("p"));
        dir
    });
    Box::leak(dir.path().join("p").into_boxed_path())
}

/// The host uid owning a process's user namespace (`NS_GET_OWNER_UID`).
fn userns_owner(pid: u32) -> u32 {
    use std::os::fd::AsRawFd;
    let ns = fs::File::open(format!("/proc/{pid}/ns/user")).unwrap();
    let mut uid: nix::libc::uid_t = u32::MAX;
    // SAFETY: the ioctl writes one uid_t through a pointer to ours.
    let rc = unsafe { nix::libc::ioctl(ns.as_raw_fd(), 0xb704, &mut uid) };
    assert_eq!(
        rc,
        0,
        "NS_GET_OWNER_UID: {}",
        std::io::Error::last_os_error()
    );
    uid
}

/// `prog args` on the host as `uid:uid` with no groups (setpriv).
fn as_host_user(uid: u32, prog: &str, args: &[&str]) -> Output {
    let id = uid.to_string();
    Command::new("setpriv")
        .args(["--reuid", &id, "--regid", &id, "--clear-groups", prog])
        .args(args)
        .output()
        .expect("setpriv")
}

/// `0 HOST 65536` from a uid_map or gid_map: the block's host base.
fn block_base(map: &str) -> u64 {
    let fields: Vec<u64> = map.split_whitespace().map(|f| f.parse().unwrap()).collect();
    assert_eq!(fields.len(), 3, "one line expected: {map:?}");
    assert_eq!((fields[0], fields[2]), (0, BLOCK), "{map:?}");
    let base = fields[1];
    assert!(base >= BLOCK && base.is_multiple_of(BLOCK), "{map:?}");
    assert!(base + BLOCK <= 1 << 31, "{map:?}");
    base
}

const PROBE: &str = "cat /proc/self/uid_map > /w/uid_map; cat /proc/self/gid_map > /w/gid_map; \
    touch /w/agent-file /tmp/scratch; id -u > /w/uid; echo ok > /w/ready; sleep 60";

#[test]
#[ignore = "needs root, the test env and runc >= 1.2 (id-mapped mounts): run tests/run.sh"]
fn a_private_block_from_inside_and_the_worktree_stays_its_owners() {
    let case = Case::new("userns-one", PROBE);
    case.create_and_start();
    case.wait_for("ready");
    let uid_base = block_base(&case.wait_for("uid_map"));
    let gid_base = block_base(&case.wait_for("gid_map"));
    assert_eq!(case.wait_for("uid").trim(), FORCED.to_string());
    // Host evidence: the worktree file is its owner's, /tmp's the block's,
    // and the process runs as a host id of the block.
    let made = fs::metadata(case.worktree.join("agent-file")).unwrap();
    assert_eq!((made.uid(), made.gid()), (OWNER, OWNER));
    let pid = case.pid();
    let scratch = fs::metadata(format!("/proc/{pid}/root/tmp/scratch")).unwrap();
    assert_eq!(
        (u64::from(scratch.uid()), u64::from(scratch.gid())),
        (uid_base + u64::from(FORCED), gid_base + u64::from(FORCED))
    );
    // The namespace is owned by the block's base, not by host root: the
    // kernel charges per-user budgets to the owner too.
    assert_eq!(u64::from(userns_owner(pid)), uid_base);
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid_line.contains(&(uid_base + u64::from(FORCED)).to_string()),
        "{uid_line}"
    );
    assert!(case.record().exists(), "{}", case.record().display());
    let out = case.shim(&["delete", "--force", &case.id]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        !case.record().exists(),
        "delete left {}",
        case.record().display()
    );
}

#[test]
#[ignore = "needs root, the test env and runc >= 1.2 (id-mapped mounts): run tests/run.sh"]
fn two_concurrent_containers_get_disjoint_blocks() {
    let a = Case::new("userns-a", PROBE);
    let b = Case::new("userns-b", PROBE);
    a.create_and_start();
    b.create_and_start();
    let (ua, ub) = (
        block_base(&a.wait_for("uid_map")),
        block_base(&b.wait_for("uid_map")),
    );
    let (ga, gb) = (
        block_base(&a.wait_for("gid_map")),
        block_base(&b.wait_for("gid_map")),
    );
    assert!(ua.abs_diff(ub) >= BLOCK, "{ua} {ub}");
    assert!(ga.abs_diff(gb) >= BLOCK, "{ga} {gb}");
}

#[test]
#[ignore = "needs root, the test env and runc >= 1.2 (id-mapped mounts): run tests/run.sh"]
fn create_delete_cycles_leave_no_allocation_and_no_mount() {
    let case = Case::new("userns-cycle", "cat /proc/self/uid_map > /w/uid_map");
    let bundle = case.dir.join("bundle").display().to_string();
    // vibe-shim writes the judged spec back into the engine's bundle; an
    // engine writes a fresh one for each create, and so does this loop (a
    // spec carrying mappings is a client's, refused).
    let spec = fs::read(case.dir.join("bundle/config.json")).unwrap();
    for _ in 0..CYCLES {
        fs::write(case.dir.join("bundle/config.json"), &spec).unwrap();
        let out = case.shim(&["run", "--bundle", &bundle, &case.id]);
        assert!(out.status.success(), "{}", describe(&out));
        block_base(&fs::read_to_string(case.worktree.join("uid_map")).unwrap());
        assert!(
            !case.record().exists(),
            "run left {}",
            case.record().display()
        );
    }
    assert!(!case.record().exists());
    // Nothing of the container stays mounted, on the host or in the tree.
    let argv = env().in_engine_ns(&["cat", "/proc/self/mountinfo"]);
    let engine = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
    for mountinfo in [
        fs::read_to_string("/proc/self/mountinfo").unwrap(),
        String::from_utf8_lossy(&engine.stdout).into_owned(),
    ] {
        assert!(
            !mountinfo.contains(&case.id),
            "a mount of {} is left",
            case.id
        );
    }
}

/// The kernel charges per-user budgets to the owner of every user namespace
/// above the process too. One container takes every inotify instance its
/// budget allows and holds them; another container, host root (dockerd,
/// systemd) and the host account of the policy's uid still get theirs.
#[test]
#[ignore = "needs root, the test env and runc >= 1.2 (id-mapped mounts): run tests/run.sh"]
fn one_containers_inotify_instances_are_its_own_budget() {
    let hog = Case::new(
        "userns-ino-hog",
        "/bin/inotify_hold 100000 60 > /w/held; sleep 60",
    );
    hog.with_inotify_probe();
    hog.create_and_start();
    let held = hog.wait_for("held");
    assert!(
        held.ends_with("EMFILE\n"),
        "the hog never hit its budget: {held}"
    );
    let other = Case::new("userns-ino-other", "/bin/inotify_hold 1 0 > /w/got");
    other.with_inotify_probe();
    other.create_and_start();
    assert_eq!(other.wait_for("got"), "held 1 ok\n", "another container");
    let probe = inotify_probe().to_str().unwrap();
    for uid in [0, FORCED] {
        let out = as_host_user(uid, probe, &["1", "0"]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "held 1 ok\n",
            "host uid {uid} while {held}: {}",
            describe(&out)
        );
    }
}

/// The host account with the policy's uid is not the container's user:
/// it cannot read the container process's environment (root can, and the
/// secret is there).
#[test]
#[ignore = "needs root, the test env and runc >= 1.2 (id-mapped mounts): run tests/run.sh"]
fn the_host_account_of_the_policys_uid_cannot_read_the_environment() {
    let case = Case::new("userns-environ", "echo ok > /w/ready; sleep 60");
    case.edit_spec(|spec| {
        spec["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!("VIBE_TEST_SECRET=userns-s3cret"));
    });
    case.create_and_start();
    case.wait_for("ready");
    let environ = format!("/proc/{}/environ", case.pid());
    let by_root = fs::read(&environ).unwrap();
    assert!(
        String::from_utf8_lossy(&by_root).contains("userns-s3cret"),
        "the secret is not in the environment this test reads"
    );
    let out = as_host_user(FORCED, "cat", &[&environ]);
    assert!(
        !out.status.success(),
        "uid {FORCED} read it: {}",
        describe(&out)
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("userns-s3cret"),
        "{}",
        describe(&out)
    );
}
