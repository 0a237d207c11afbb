//! Through the real runc: spec fields that open a door
//! around the policy (user namespaces, `root.path`, `cgroupsPath`, a second
//! proc, joining a network namespace). Each test hands vibe-shim the
//! hostile bundle; if the create goes through, it looks from inside (or at
//! the host) for the door and fails naming what it found. Needs root.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};
use vibe_shim_tests::bundle::{describe, Bundle};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The create must be refused by vibe-shim, naming `rule`, with nothing
/// left in runc. If it was not, `evidence` (run after a start) says what
/// the container got, and the test fails with it.
fn assert_refused(bundle: &Bundle, rule: &str, evidence: impl FnOnce(&Bundle) -> String) {
    assert_refused_with(bundle, &[], rule, evidence)
}

/// [`assert_refused`] with extra `create` flags.
fn assert_refused_with(
    bundle: &Bundle,
    flags: &[&str],
    rule: &str,
    evidence: impl FnOnce(&Bundle) -> String,
) {
    let out = create_with(bundle, flags);
    if out.status.success() {
        let started = bundle.shim(&["start", &bundle.id], b"");
        let seen = evidence(bundle);
        panic!(
            "create was allowed (start: {}); the door is open: {seen}",
            describe(&started)
        );
    }
    let msg = bundle
        .last_log_line()
        .and_then(|l| l["msg"].as_str().map(str::to_string))
        .unwrap_or_default();
    assert!(
        msg.contains("vibe-shim") && msg.contains(rule),
        "refused, but not by the {rule} rule: {msg}\n{}",
        describe(&out)
    );
    assert!(bundle.runc_list().is_empty());
}

/// `create [flags] --bundle B id`, stdio to files as `Bundle::create` does.
fn create_with(bundle: &Bundle, flags: &[&str]) -> Output {
    let file = |name: &str| std::fs::File::create(bundle.dir.path().join(name)).unwrap();
    let status = bundle
        .shim_command(["create"])
        .args(flags)
        .arg("--bundle")
        .arg(bundle.bundle_dir())
        .arg(&bundle.id)
        .stdin(Stdio::null())
        .stdout(file("init.out"))
        .stderr(file("init.err"))
        .status()
        .expect("run vibe-shim create");
    let read = |name: &str| std::fs::read(bundle.dir.path().join(name)).unwrap_or_default();
    Output {
        status,
        stdout: read("init.out"),
        stderr: read("init.err"),
    }
}

fn exec_text(bundle: &Bundle, script: &str) -> String {
    let out = bundle.exec(&["sh", "-c", script]);
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

fn init_pid(bundle: &Bundle) -> Option<i64> {
    let out = bundle.shim(&["state", &bundle.id], b"");
    serde_json::from_slice::<Value>(&out.stdout).ok()?["pid"].as_i64()
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn user_namespace_mapping_to_host_root_is_refused() {
    let bundle = Bundle::busybox(
        "userns",
        &["sleep", "300"],
        "[process]\nuser = \"1000:1000\"\n",
    );
    let mut spec = bundle.spec();
    spec["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "user"}));
    // Container uid 1000 (the policy's forced user) is host uid 0.
    let map = json!([
        {"containerID": 0, "hostID": 200000, "size": 1000},
        {"containerID": 1000, "hostID": 0, "size": 1}
    ]);
    spec["linux"]["uidMappings"] = map.clone();
    spec["linux"]["gidMappings"] = map;
    bundle.write_spec(&spec);
    assert_refused(&bundle, "namespaces", |b| {
        exec_text(b, "id; cat /proc/self/uid_map")
    });
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn host_root_as_rootfs_is_refused() {
    let bundle = Bundle::busybox("rootslash", &["sleep", "300"], "");
    let mut spec = bundle.spec();
    spec["root"]["path"] = json!("/");
    spec["process"]["args"] = json!(["/bin/sleep", "300"]);
    bundle.write_spec(&spec);
    // runc 1.1.5 itself then fails (bind of / onto itself: ELOOP, with or
    // without --no-pivot); vibe-shim refuses before it gets there.
    assert_refused_with(&bundle, &["--no-pivot"], "root_path", |b| {
        let out = b.shim(&["exec", &b.id, "/bin/ls", "/work"], b"");
        format!("the host's /work from inside: {}", describe(&out))
    });
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn host_directory_and_other_containers_rootfs_are_refused() {
    // A host directory outside the bundle, not an overlay mount.
    let other = Bundle::busybox("rootother", &["sleep", "300"], "");
    let bundle = Bundle::busybox("roothostdir", &["sleep", "300"], "");
    let mut spec = bundle.spec();
    spec["root"]["path"] = json!(other.bundle_dir().join("rootfs"));
    bundle.write_spec(&spec);
    assert_refused(&bundle, "root_path", |b| {
        exec_text(b, "echo runs in the other bundle rootfs")
    });

    // Another container's rootfs: a second container from the same bundle
    // (the argv names the bundle), under the same runc root.
    assert!(other.create().status.success());
    let id2 = format!("{}-2", other.id);
    let status = other
        .shim_command(["create", "--bundle"])
        .arg(other.bundle_dir())
        .arg(&id2)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let _ = Command::new(vibe_shim_tests::bundle::runc_bin())
        .arg("--root")
        .arg(other.root_dir())
        .args(["delete", "-f", &id2])
        .status();
    assert!(!status.success(), "another container's rootfs was allowed");
    let msg = other.last_log_line().unwrap()["msg"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("root_path") && msg.contains("another container"),
        "{msg}"
    );
}

/// A cgroup that exists before the container: the pids hierarchy (v1) or
/// the unified one.
struct ExistingCgroup {
    name: String,
    dirs: Vec<PathBuf>,
}

impl ExistingCgroup {
    fn new() -> Self {
        let name = format!("vibe-doors-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/pids");
        let base = if v1.is_dir() {
            v1.to_path_buf()
        } else {
            PathBuf::from("/sys/fs/cgroup")
        };
        let dir = base.join(&name);
        std::fs::create_dir_all(&dir).expect("create a test cgroup");
        ExistingCgroup {
            dirs: vec![dir],
            name,
        }
    }
}

impl Drop for ExistingCgroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
        // runc creates the others on join; remove what it left.
        if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
            for entry in entries.flatten() {
                let _ = std::fs::remove_dir(entry.path().join(&self.name));
            }
        }
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn existing_cgroup_is_not_joined() {
    let cgroup = ExistingCgroup::new();
    let bundle = Bundle::busybox("cgjoin", &["sleep", "300"], "");
    let mut spec = bundle.spec();
    spec["linux"]["cgroupsPath"] = json!(format!("/{}", cgroup.name));
    bundle.write_spec(&spec);
    assert_refused(&bundle, "cgroups", |b| {
        let procs = std::fs::read_to_string(cgroup.dirs[0].join("cgroup.procs"));
        format!(
            "init pid {:?} in the existing cgroup's cgroup.procs: {procs:?}",
            init_pid(b)
        )
    });
    // A fresh path is fine.
    let bundle = Bundle::busybox("cgnew", &["sleep", "300"], "");
    let mut spec = bundle.spec();
    spec["linux"]["cgroupsPath"] = json!(format!("/{}-new", cgroup.name));
    bundle.write_spec(&spec);
    let out = bundle.create();
    assert!(out.status.success(), "{}", describe(&out));
    drop(bundle);
    if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
        for entry in entries.flatten() {
            let _ = std::fs::remove_dir(entry.path().join(format!("{}-new", cgroup.name)));
        }
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn second_proc_mount_is_refused() {
    let bundle = Bundle::busybox("proc2", &["sleep", "300"], "");
    let mut spec = bundle.spec();
    spec["mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"destination": "/x", "type": "proc", "source": "proc"}));
    bundle.write_spec(&spec);
    assert_refused(&bundle, "kernel_mounts", |b| {
        exec_text(
            b,
            "[ -c /proc/keys ] && [ -f /x/keys ] && echo /proc/keys masked, /x/keys not; \
             grep -c . /x/keys; grep -c . /x/timer_list",
        )
    });
}

/// A mask over the root: runc stacks a read-only tmpfs on `/` where no
/// path walk sees it, and a start-time check that took the last mount at
/// `/` for the root would have judged that tmpfs instead.
#[test]
#[ignore = "needs root and runc"]
fn a_mask_over_the_root_is_refused() {
    let bundle = Bundle::busybox("maskroot", &["sleep", "300"], "");
    let mut spec = bundle.spec();
    spec["linux"]["maskedPaths"] = json!(["/proc/kcore", "/"]);
    bundle.write_spec(&spec);
    assert_refused(&bundle, "masked_paths", |b| {
        exec_text(b, "grep ' / / ' /proc/self/mountinfo")
    });
}

/// A network namespace made with `ip netns add`, removed on drop.
struct Netns(String);

impl Netns {
    fn new(name: &str) -> Self {
        let name = format!("vibe-doors-{}-{name}", std::process::id());
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .unwrap();
        assert!(out.status.success(), "ip netns add: {}", describe(&out));
        Netns(name)
    }
    fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.0])
            .status();
    }
}

fn set_netns_path(bundle: &Bundle, path: &str) {
    let mut spec = bundle.spec();
    for ns in spec["linux"]["namespaces"].as_array_mut().unwrap() {
        if ns["type"] == "network" {
            ns["path"] = json!(path);
        }
    }
    bundle.write_spec(&spec);
}

/// A process living in a namespace, killed (by its own pid) on drop.
struct Occupant(std::process::Child);

impl Drop for Occupant {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn netns_without_our_table_is_not_joined() {
    // Another workload's namespace: a process is in it, no table of ours.
    // `ip netns exec` gives it a mount namespace of its own, as a
    // container's process has.
    let netns = Netns::new("busy");
    let _occupant = Occupant(
        Command::new("ip")
            .args(["netns", "exec", &netns.0, "sleep", "300"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let bundle = Bundle::busybox("netjoin", &["sleep", "300"], "");
    set_netns_path(&bundle, &netns.path());
    assert_refused(&bundle, "namespaces", |_| {
        let out = Command::new("ip")
            .args(["netns", "exec", &netns.0, "nft", "list", "tables"])
            .output()
            .unwrap();
        format!(
            "joined a namespace without our table (re-walled by the hook: {})",
            text(&out.stdout).trim()
        )
    });
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn empty_netns_made_by_the_engine_is_joined() {
    // podman and CNI make the container's namespace before runc create.
    let netns = Netns::new("fresh");
    let bundle = Bundle::busybox("netfresh", &["sleep", "300"], "");
    set_netns_path(&bundle, &netns.path());
    let out = bundle.create();
    assert!(out.status.success(), "{}", describe(&out));
    assert!(bundle.shim(&["start", &bundle.id], b"").status.success());
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn netns_the_engine_itself_is_in_is_joined() {
    // podman's main thread can stay in the namespace it made for the
    // container; a process of the host's mount namespace is no container.
    let netns = Netns::new("engine");
    let _engine = Occupant(
        Command::new("nsenter")
            .arg(format!("--net={}", netns.path()))
            .args(["sleep", "300"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let bundle = Bundle::busybox("netengine", &["sleep", "300"], "");
    set_netns_path(&bundle, &netns.path());
    let out = bundle.create();
    assert!(out.status.success(), "{}", describe(&out));
    assert!(bundle.shim(&["start", &bundle.id], b"").status.success());
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn netns_of_a_container_under_this_policy_is_joined() {
    let first = Bundle::busybox("netfirst", &["sleep", "300"], "");
    let out = first.create();
    assert!(out.status.success(), "{}", describe(&out));
    let pid = init_pid(&first).expect("init pid");
    let second = Bundle::busybox("netsecond", &["sleep", "300"], "");
    set_netns_path(&second, &format!("/proc/{pid}/ns/net"));
    let out = second.create();
    assert!(out.status.success(), "{}", describe(&out));
    let out = second.shim(&["start", &second.id], b"");
    assert!(out.status.success(), "{}", describe(&out));
    // A different policy's table is not this policy's.
    let third = Bundle::busybox("netthird", &["sleep", "300"], "[network]\ndns = true\n");
    set_netns_path(&third, &format!("/proc/{pid}/ns/net"));
    assert_refused(&third, "namespaces", |_| {
        "joined a namespace walled by another policy".into()
    });
}

/// Annotations runc acts on itself (its `features` call them potentially
/// unsafe) never reach it; the rest do. Evidence: runc's own `state`.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn annotations_runc_acts_on_never_reach_it() {
    let bundle = Bundle::busybox("annot", &["sleep", "300"], "");
    let mut spec = bundle.spec();
    spec["annotations"] = json!({
        "org.systemd.property.TasksMax": "infinity",
        "org.criu.config": "/var/tmp/criu.conf",
        "bundle": "/var/tmp/elsewhere",
        "bundle=/var/tmp/elsewhere": "",
        "vibe.test.kept": "yes",
    });
    bundle.write_spec(&spec);
    let out = bundle.create();
    assert!(out.status.success(), "{}", describe(&out));
    let state = Command::new(vibe_shim_tests::bundle::runc_bin())
        .arg("--root")
        .arg(bundle.root_dir())
        .args(["state", &bundle.id])
        .output()
        .unwrap();
    assert!(state.status.success(), "{}", describe(&state));
    let state: Value = serde_json::from_slice(&state.stdout).unwrap();
    // Beside the client's harmless one, only vibe-shim's own record of the
    // container's writable binds (none here).
    assert_eq!(
        state["annotations"],
        json!({"vibe.test.kept": "yes", "org.vibe-shim.writable-binds": "[]"}),
        "runc got: {state}"
    );
}

/// An overlay mounted by the test at `<dir>/overlay2/x/merged` over a copy of
/// a busybox rootfs, as an engine with its own state layout would mount a
/// container's root; unmounted on drop.
struct OwnOverlay {
    _dir: tempfile::TempDir,
    merged: PathBuf,
}

impl OwnOverlay {
    fn over(lower: &Path) -> OwnOverlay {
        let dir = tempfile::Builder::new()
            .prefix("vibe-overlay-")
            .tempdir()
            .unwrap();
        let base = dir.path().join("overlay2/x");
        for d in ["upper", "work", "merged"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        let merged = base.join("merged");
        let data = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            base.join("upper").display(),
            base.join("work").display()
        );
        let out = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &data])
            .arg(&merged)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount overlay: {}", describe(&out));
        OwnOverlay { _dir: dir, merged }
    }
}

impl Drop for OwnOverlay {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.merged).status();
    }
}

/// The root of a live container is refused as another container's root
/// even when no runc state vibe-shim knows names it (an engine with its own
/// `--exec-root`, here: another runc root): judged on the object, by the
/// live process rooted there.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn a_live_containers_root_is_refused_under_any_runc_root() {
    let victim = Bundle::busybox("rootvictim", &["sleep", "300"], "");
    let overlay = OwnOverlay::over(&victim.bundle_dir().join("rootfs"));
    let mut spec = victim.spec();
    spec["root"]["path"] = json!(overlay.merged);
    victim.write_spec(&spec);
    std::fs::write(victim.bundle_dir().join("rootfs/victim-secret"), "VICTIM\n").unwrap();
    let out = victim.create();
    assert!(out.status.success(), "victim: {}", describe(&out));
    let attacker = Bundle::busybox("rootthief", &["sleep", "300"], "");
    let mut spec = attacker.spec();
    spec["root"]["path"] = json!(overlay.merged);
    attacker.write_spec(&spec);
    assert_refused(&attacker, "root_path", |b| {
        exec_text(b, "cat /victim-secret; ls /")
    });
    let msg = attacker.last_log_line().unwrap()["msg"].to_string();
    assert!(msg.contains("live process"), "{msg}");
}

/// A cgroup below another container's: everything forked there would count
/// against the victim's ceilings (`--cgroup-parent /docker/<victim>`).
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn nesting_under_another_containers_cgroup_is_refused() {
    let victim_path = format!("/vibe-test/victim-{}", std::process::id());
    let victim = Bundle::busybox("cgvictim", &["sleep", "300"], "");
    let mut spec = victim.spec();
    spec["linux"]["cgroupsPath"] = json!(victim_path);
    victim.write_spec(&spec);
    let out = victim.create();
    assert!(out.status.success(), "victim: {}", describe(&out));
    let attacker = Bundle::busybox("cgnest", &["sleep", "300"], "");
    let mut spec = attacker.spec();
    spec["linux"]["cgroupsPath"] = json!(format!("{victim_path}/nested"));
    attacker.write_spec(&spec);
    assert_refused(&attacker, "cgroups", |b| {
        format!(
            "init pid {:?} under the victim's cgroup {victim_path}",
            init_pid(b)
        )
    });
}

/// With `[resources] cgroup_parents`, a path outside every parent is refused;
/// one below a parent runs.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn cgroup_outside_the_admins_parents_is_refused() {
    let policy = "[resources]\ncgroup_parents = [\"/vibe-test\"]\n";
    let name = format!("vibe-anything-{}", std::process::id());
    let bundle = Bundle::busybox("cganywhere", &["sleep", "300"], policy);
    let mut spec = bundle.spec();
    spec["linux"]["cgroupsPath"] = json!(format!("/{name}/new"));
    bundle.write_spec(&spec);
    assert_refused(&bundle, "cgroups", |b| {
        format!("init pid {:?} in /{name}/new", init_pid(b))
    });
    let inside = Bundle::busybox("cgparent", &["sleep", "300"], policy);
    let mut spec = inside.spec();
    spec["linux"]["cgroupsPath"] = json!(format!("/vibe-test/{name}"));
    inside.write_spec(&spec);
    let out = inside.create();
    assert!(out.status.success(), "below a parent: {}", describe(&out));
}
