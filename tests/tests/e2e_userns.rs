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
