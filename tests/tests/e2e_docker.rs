//! End-to-end: `docker run --runtime vibe-shim` on the private test dockerd.
//!
//! Every case judges the container from inside with busybox tools (see
//! `vibe_shim_tests::posture::posture_script`). Each hostile case pins the
//! outcome the README's rules table documents for it: the rules that rewrite
//! the spec make the container run confined, and the rules that refuse
//! (binds outside the allowlist, host namespaces) must refuse with a reason
//! naming vibe-shim that reaches the docker client, leaving nothing behind.
//! Run with `tests/run.sh` (needs tests/env/up.sh).

use std::path::PathBuf;
use std::time::Duration;

use vibe_shim_tests::docker::{
    assert_nothing_left, assert_refused_by_shim, docker, docker_with, runc_list, runc_roots,
    runtime, Container, Volume, IMAGE,
};
use vibe_shim_tests::env::env;
use vibe_shim_tests::harness::Output;
use vibe_shim_tests::policy::TestPolicy;
use vibe_shim_tests::posture::{assert_confined, posture_script, run_posture, Posture};

fn policy() -> TestPolicy {
    env().policy("default")
}

/// `docker run --name <c> --runtime vibe-shim <flags> IMAGE <cmd...>`.
fn run(c: &Container, flags: &[&str], cmd: &[&str]) -> Output {
    let rt = runtime();
    let mut args: Vec<&str> = vec!["run", "--name", &c.name, "--runtime", &rt];
    args.extend_from_slice(flags);
    args.push(IMAGE);
    args.extend_from_slice(cmd);
    docker_with(&args, None, Duration::from_secs(120))
}

/// A detached compliant container that stays up until stopped, exiting 0 on
/// SIGTERM so `docker stop` is quick.
fn start_sleeper(c: &Container, flags: &[&str]) -> Output {
    let mut f = vec!["-d"];
    f.extend_from_slice(flags);
    run(
        c,
        &f,
        &[
            "sh",
            "-c",
            "echo started; trap 'exit 0' TERM; while :; do sleep 1; done",
        ],
    )
    .ok()
}

/// A hostile `docker run` whose flags the policy rewrites: it must run, and
/// be confined from inside. Returns the posture for the case's own checks.
fn confined(tag: &str, flags: &[&str], extra: &str) -> Posture {
    let policy = policy();
    let c = Container::new(tag);
    let p = run_posture(&c, &runtime(), flags, &policy, extra).ran();
    assert_confined(&p, &policy);
    p
}

/// A hostile `docker run` that must be refused outright (a bind outside the
/// allowlist): the reason names vibe-shim and the offending source.
fn refused(tag: &str, flags: &[&str], source: &str) {
    let policy = policy();
    let c = Container::new(tag);
    let out = run_posture(&c, &runtime(), flags, &policy, "").refused();
    assert_refused_by_shim(&out);
    assert!(
        out.stderr.contains(source),
        "refusal does not name the source {source}: {out}"
    );
    assert_nothing_left(&c);
}

/// A fresh worktree directory under the policy's bind root, owned by the
/// regular host user the containers that write it run as; removed on drop.
struct Worktree(PathBuf);

/// The regular id the worktree tests run as (`-u`): a writable worktree
/// refuses root and system ids.
const WORKTREE_USER: &str = "1000:1000";

impl Worktree {
    fn new(tag: &str) -> Worktree {
        let root = policy().worktree_root();
        let dir = root.join(vibe_shim_tests::harness::unique_name(tag));
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(1000), Some(1000)).unwrap();
        Worktree(dir)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------------------
// 1. Everyday use works unchanged

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn everyday_run_attached_exact_stdout_and_confined() {
    let c = Container::new("attached");
    let out = run(&c, &["--rm"], &["echo", "hello from vibe"]).ok();
    assert_eq!(out.stdout, "hello from vibe\n", "{out}");

    // The default posture: root ro, /tmp, /run and HOME writable tmpfs.
    let policy = policy();
    let c = Container::new("posture");
    let p = run_posture(&c, &runtime(), &["--rm"], &policy, "").ran();
    assert_confined(&p, &policy);
    assert_eq!(p.uid, "0", "Docker's default user is root (without caps)");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn everyday_run_tty_and_init() {
    let policy = policy();
    // -t without -i works non-interactively; the tty turns \n into \r\n.
    let c = Container::new("tty");
    let out = run(&c, &["--rm", "-t"], &["echo", "tty-ok"]).ok();
    assert_eq!(out.stdout, "tty-ok\r\n", "{out}");
    let c = Container::new("tty-posture");
    let p = run_posture(
        &c,
        &runtime(),
        &["--rm", "-t"],
        &policy,
        "[ -t 1 ] && echo 'X tty=yes' || echo 'X tty=no'",
    )
    .ran();
    assert_confined(&p, &policy);
    assert_eq!(p.extra_value("tty"), Some("yes"), "{}", p.raw);

    // --init: the engine's own init binary (filesystem.init_binaries) is
    // pid 1's program, bound read-only, nosuid, nodev; the command runs
    // confined under it.
    let c = Container::new("init");
    let extra = "echo \"X initwrite=$( (echo x >> /sbin/docker-init) 2>/dev/null && echo ok || echo fail)\"\n";
    let p = run_posture(&c, &runtime(), &["--rm", "--init"], &policy, extra).ran();
    assert_confined(&p, &policy);
    assert!(
        p.pid1_cmdline.starts_with("/sbin/docker-init "),
        "pid 1 is not /sbin/docker-init: {:?}",
        p.pid1_cmdline
    );
    let init = p
        .mounts
        .iter()
        .find(|m| m.point == "/sbin/docker-init")
        .unwrap_or_else(|| panic!("no /sbin/docker-init mount:\n{}", p.raw));
    for opt in ["ro", "nosuid", "nodev"] {
        assert!(init.has(opt), "/sbin/docker-init is not {opt}: {init:?}");
    }
    assert_eq!(p.extra_value("initwrite"), Some("fail"), "{}", p.raw);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn everyday_exit_code_and_wait() {
    let c = Container::new("exit3");
    let out = run(&c, &["--rm"], &["sh", "-c", "exit 3"]);
    assert_eq!(out.code, Some(3), "exit code did not propagate: {out}");

    let c = Container::new("wait");
    run(&c, &["-d"], &["sh", "-c", "sleep 1; exit 3"]).ok();
    let out = docker(&["wait", &c.name]).ok();
    assert_eq!(out.stdout.trim(), "3", "{out}");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn everyday_detached_lifecycle() {
    let policy = policy();
    let c = Container::new("life");
    start_sleeper(&c, &[]);

    // logs
    let mut logs = docker(&["logs", &c.name]).ok();
    for _ in 0..50 {
        if logs.stdout.contains("started") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        logs = docker(&["logs", &c.name]).ok();
    }
    assert_eq!(logs.stdout, "started\n", "logs: {logs}");

    // exec and exec -t
    let p = c.exec_posture(&[], &policy, "").ran();
    assert_confined(&p, &policy);
    let out = docker(&["exec", &c.name, "echo", "exec-ok"]).ok();
    assert_eq!(out.stdout, "exec-ok\n", "{out}");
    let out = docker(&["exec", "-t", &c.name, "echo", "exec-tty"]).ok();
    assert_eq!(out.stdout, "exec-tty\r\n", "{out}");

    // top
    let out = docker(&["top", &c.name]).ok();
    assert!(out.stdout.contains("sleep"), "top: {out}");

    // pause / unpause
    docker(&["pause", &c.name]).ok();
    assert_eq!(c.inspect("{{.State.Paused}}"), "true");
    docker(&["unpause", &c.name]).ok();
    assert_eq!(c.inspect("{{.State.Paused}}"), "false");
    docker(&["exec", &c.name, "true"]).ok();

    // update --memory reaches the cgroup, seen from inside.
    docker(&[
        "update",
        "--memory",
        "64m",
        "--memory-swap",
        "128m",
        &c.name,
    ])
    .ok();
    let out = docker(&[
        "exec",
        &c.name,
        "cat",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ])
    .ok();
    assert_eq!(out.stdout.trim(), "67108864", "{out}");

    // stop (SIGTERM, exit 0), restart (a fresh create: confined again)
    docker(&["stop", "-t", "10", &c.name]).ok();
    assert_eq!(c.inspect("{{.State.Running}}"), "false");
    assert_eq!(c.inspect("{{.State.ExitCode}}"), "0");
    docker(&["restart", "-t", "10", &c.name]).ok();
    assert_eq!(c.inspect("{{.State.Running}}"), "true");
    let p = c.exec_posture(&[], &policy, "").ran();
    assert_confined(&p, &policy);

    // kill
    docker(&["kill", &c.name]).ok();
    let out = docker(&["wait", &c.name]).ok();
    assert_eq!(out.stdout.trim(), "137", "{out}");

    // rm -f
    docker(&["rm", "-f", &c.name]).ok();
    assert!(c.id().is_none(), "container still known after rm -f");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn everyday_worktree_bind_read_write() {
    let policy = policy();
    let wt = Worktree::new("wt");
    let d = wt.path();
    let c = Container::new("worktree");
    let bind = format!("{d}:{d}");
    let extra = format!(
        "echo data-from-inside > '{d}/out' && echo 'X wrote=ok' || echo 'X wrote=fail'\n\
         echo \"X pwd=$(pwd)\""
    );
    let p = run_posture(
        &c,
        &runtime(),
        &["--rm", "-u", WORKTREE_USER, "-v", &bind, "-w", d],
        &policy,
        &extra,
    )
    .ran();
    assert_confined(&p, &policy);
    assert_eq!(p.extra_value("wrote"), Some("ok"), "{}", p.raw);
    assert_eq!(p.extra_value("pwd"), Some(d), "{}", p.raw);
    let m = p
        .mount_at(d)
        .unwrap_or_else(|| panic!("worktree not mounted at {d}:\n{}", p.raw));
    assert!(m.has("rw"), "worktree mount not rw: {m:?}");
    let host = std::fs::read_to_string(wt.0.join("out")).unwrap();
    assert_eq!(host, "data-from-inside\n");
}

/// A set-id file planted through a writable worktree must not be owned by a
/// privileged host id. As root (Docker's default), the run is refused before
/// anything runs; as a regular id it runs, and what it leaves on the host is
/// that id's. The same holds for `docker exec -u 0` into a running container.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn worktree_setuid_root_plant_is_refused() {
    let wt = Worktree::new("suid");
    // Writable by every id, so only the policy stands between root and it.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wt.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let d = wt.path();
    let bind = format!("{d}:/w");
    let plant = "cp /bin/busybox /w/x && chmod 6755 /w/x && mkdir /w/dir && chmod 2775 /w/dir";
    for user in [
        &["-u", "0"][..],
        &["-u", "1000:0"],
        &["-u", "1000:1000", "--group-add", "6"],
        &[],
    ] {
        let c = Container::new("suid");
        let rt = runtime();
        let mut args = vec![
            "run",
            "--rm",
            "--name",
            &c.name,
            "--runtime",
            &rt,
            "-v",
            &bind,
        ];
        args.extend_from_slice(user);
        args.extend([IMAGE, "sh", "-c", plant]);
        let out = docker(&args);
        assert_refused_by_shim(&out);
        assert!(out.stderr.contains("host_ids"), "{user:?}: {out}");
        assert!(!wt.0.join("x").exists(), "{user:?}: the plant ran: {out}");
        assert_nothing_left(&c);
    }
    // A regular id runs; the plant is the worktree owner's, never root's.
    let c = Container::new("suid-user");
    let rt = runtime();
    let args = [
        "run",
        "-d",
        "--name",
        &c.name,
        "--runtime",
        &rt,
        "-u",
        WORKTREE_USER,
        "-v",
        &bind,
        IMAGE,
        "sh",
        "-c",
        &format!("{plant} && sleep 60"),
    ];
    docker(&args).ok();
    let file = wt.0.join("x");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !file.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let meta = std::fs::metadata(&file).expect("the regular user's plant did not run");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (meta.uid(), meta.gid()),
        (1000, 1000),
        "mode {:o}",
        meta.mode()
    );
    // exec as root into it is refused; the container keeps running.
    // The docker CLI prints an exec's runtime error on stdout.
    let out = docker(&["exec", "-u", "0", &c.name, "sh", "-c", "touch /w/root-file"]);
    assert!(out.code != Some(0), "{out}");
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(said.contains("vibe-shim: host_ids"), "{out}");
    assert!(!wt.0.join("root-file").exists(), "{out}");
    let out = docker(&["exec", &c.name, "sh", "-c", "touch /w/user-file && echo ok"]).ok();
    assert_eq!(out.stdout.trim(), "ok", "{out}");
}

/// `--cgroup-parent <victim's cgroup>`: what the attacker forks would count
/// against the victim's pids and memory ceilings. Refused; the victim runs on.
#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn cgroup_parent_under_another_container_is_refused() {
    let victim = Container::new("cgvictim");
    let rt = runtime();
    docker(&[
        "run",
        "-d",
        "--name",
        &victim.name,
        "--runtime",
        &rt,
        IMAGE,
        "sleep",
        "60",
    ])
    .ok();
    let pid = victim.inspect("{{.State.Pid}}");
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    // The victim's own cgroup, as the host's hierarchy names it.
    let path = cgroups
        .lines()
        .filter_map(|l| l.split_once(':').and_then(|(_, rest)| rest.split_once(':')))
        .find(|(controllers, _)| *controllers == "pids" || controllers.is_empty())
        .map(|(_, path)| path.to_string())
        .unwrap_or_else(|| panic!("no pids cgroup for {pid}: {cgroups}"));
    let c = Container::new("cgnest");
    let out = docker(&[
        "run",
        "--rm",
        "--name",
        &c.name,
        "--runtime",
        &rt,
        "--cgroup-parent",
        &path,
        IMAGE,
        "cat",
        "/proc/self/cgroup",
    ]);
    assert_refused_by_shim(&out);
    assert!(
        out.stderr.contains("cgroups") && out.stderr.contains("holds processes"),
        "{out}"
    );
    assert_nothing_left(&c);
    assert_eq!(victim.inspect("{{.State.Running}}"), "true");
}

// ---------------------------------------------------------------------------
// 2. Hostile clients get nothing extra

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_privileged() {
    // Rewritten, not refused: capabilities, seccomp, devices and the kernel
    // filesystems are each forced back to the policy's (README, "Rules").
    confined("privileged", &["--rm", "--privileged"], "");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_cap_add_all() {
    confined("capall", &["--rm", "--cap-add", "ALL"], "");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_cap_add_sys_admin() {
    confined("capsysadmin", &["--rm", "--cap-add", "SYS_ADMIN"], "");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_seccomp_unconfined() {
    // assert_confined requires Seccomp: 2 in the process and its children.
    confined(
        "seccomp",
        &["--rm", "--security-opt", "seccomp=unconfined"],
        "",
    );
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_systempaths_unconfined() {
    // Masked paths must read as nothing; /proc/sys stays read-only (both are
    // also checked from mountinfo by assert_confined).
    let extra = "echo \"X timer_list=$(head -c 64 /proc/timer_list 2>/dev/null | wc -c)\"\n\
                 echo \"X kcore=$(head -c 64 /proc/kcore 2>/dev/null | wc -c)\"";
    let p = confined(
        "systempaths",
        &["--rm", "--security-opt", "systempaths=unconfined"],
        extra,
    );
    assert_eq!(p.extra_value("timer_list"), Some("0"), "{}", p.raw);
    assert_eq!(p.extra_value("kcore"), Some("0"), "{}", p.raw);
    let sys = p.mount_at("/proc/sys").expect("/proc/sys mount");
    assert!(sys.has("ro"), "/proc/sys writable: {sys:?}");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_read_only_false() {
    confined("rofalse", &["--rm", "--read-only=false"], "");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_pids_limit_zero_unlimited_huge() {
    // Clamped to process.pids_limit; assert_confined reads pids.max.
    for limit in ["0", "-1", "100000"] {
        confined(
            &format!("pids{}", limit.trim_start_matches('-')),
            &["--rm", "--pids-limit", limit],
            "",
        );
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_user0_and_secret_env() {
    let extra = "echo \"X LANG=$LANG\"";
    let p = confined(
        "user0",
        &[
            "--rm",
            "-u",
            "0",
            "-e",
            "GITHUB_TOKEN=ghp_vibe_secret_1",
            "-e",
            "AWS_SECRET_ACCESS_KEY=aws_vibe_secret_2",
            "-e",
            "LANG=C.UTF-8",
        ],
        extra,
    );
    for needle in [
        "GITHUB_TOKEN",
        "ghp_vibe_secret_1",
        "AWS_SECRET_ACCESS_KEY",
        "aws_vibe_secret_2",
    ] {
        assert!(!p.env_mentions(needle), "{needle} reached the container");
    }
    assert_eq!(p.environ_var("LANG"), Some("C.UTF-8"), "allowed LANG lost");
    assert_eq!(p.extra_value("LANG"), Some("C.UTF-8"));
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_env_file_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secrets.env");
    std::fs::write(
        &file,
        "GITHUB_TOKEN=ghp_envfile_secret\nNPM_TOKEN=npm_envfile_secret\nLC_ALL=C\nANTHROPIC_API_KEY=sk-ant-allowed\n",
    )
    .unwrap();
    let p = confined(
        "envfile",
        &["--rm", "--env-file", file.to_str().unwrap()],
        "",
    );
    for needle in [
        "GITHUB_TOKEN",
        "ghp_envfile_secret",
        "NPM_TOKEN",
        "npm_envfile_secret",
    ] {
        assert!(!p.env_mentions(needle), "{needle} reached the container");
    }
    assert_eq!(p.environ_var("LC_ALL"), Some("C"));
    assert_eq!(p.environ_var("ANTHROPIC_API_KEY"), Some("sk-ant-allowed"));
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_bind_host_root_refused() {
    refused("bindroot", &["--rm", "-v", "/:/host"], "/");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_bind_docker_sock_refused() {
    let sock = env().state.join("docker.sock");
    let bind = format!("{}:/var/run/docker.sock", sock.display());
    refused("dockersock", &["--rm", "-v", &bind], "docker.sock");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_bind_etc_ro_refused() {
    refused("etcro", &["--rm", "-v", "/etc:/x:ro"], "/etc");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_mount_bind_outside_allowlist_refused() {
    refused(
        "mountbind",
        &["--rm", "--mount", "type=bind,source=/etc,target=/x"],
        "/etc",
    );
    // A symlink inside the allowed root that points outside it.
    let wt = Worktree::new("symlink");
    let link = wt.0.join("escape");
    std::os::unix::fs::symlink("/etc", &link).unwrap();
    let m = format!("type=bind,source={},target=/x", link.display());
    let policy = policy();
    let c = Container::new("symlinkbind");
    let out = run_posture(&c, &runtime(), &["--rm", "--mount", &m], &policy, "").refused();
    assert_refused_by_shim(&out);
    assert_nothing_left(&c);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_volume_bound_to_etc_refused() {
    let vol = Volume {
        name: vibe_shim_tests::harness::unique_name("voletc"),
    };
    docker(&[
        "volume",
        "create",
        "--driver",
        "local",
        "--opt",
        "type=none",
        "--opt",
        "o=bind",
        "--opt",
        "device=/etc",
        &vol.name,
    ])
    .ok();
    let mount = format!("{}:/x", vol.name);
    let policy = policy();
    let c = Container::new("voletc");
    let out = run_posture(&c, &runtime(), &["--rm", "-v", &mount], &policy, "").refused();
    assert_refused_by_shim(&out);
    assert_nothing_left(&c);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_host_namespaces() {
    // Refused, never rewritten: the namespaces rule judges each namespace by
    // inode, and a missing entry (how Docker asks for the host's) is the host's.
    let policy = policy();
    for ns in ["pid", "net", "ipc", "uts"] {
        let flag = format!("--{ns}=host");
        let c = Container::new(&format!("{ns}host"));
        let out = run_posture(&c, &runtime(), &["--rm", &flag], &policy, "").refused();
        assert_refused_by_shim(&out);
        assert!(
            out.stderr.contains("namespaces"),
            "--{ns}=host refused by another rule than namespaces: {out}"
        );
        assert_nothing_left(&c);
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_device_block() {
    let dev = host_block_device();
    let flag = format!("{dev}:/dev/xblk");
    let extra =
        "if head -c 1 /dev/xblk >/dev/null 2>&1; then echo 'X read=yes'; else echo 'X read=no'; fi";
    // The devices rule drops the node and replaces the cgroup rules: the
    // container runs, without the disk.
    let p = confined("device", &["--rm", "--device", &flag], extra);
    assert_eq!(p.extra_value("read"), Some("no"), "{dev} readable inside");
}

/// A real block device of this machine (from /sys/block), e.g. /dev/vda.
fn host_block_device() -> String {
    let mut names: Vec<String> = std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| !n.starts_with("loop") && !n.starts_with("ram"))
        .filter(|n| std::path::Path::new(&format!("/dev/{n}")).exists())
        .collect();
    names.sort();
    let name = names
        .iter()
        .find(|n| n.starts_with("vd") || n.starts_with("sd") || n.starts_with("nvme"))
        .or_else(|| names.first())
        .expect("no block device in /sys/block");
    format!("/dev/{name}")
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_tmpfs_exec_suid() {
    // The tmpfs rule keeps the client's tmpfs, forced nosuid,nodev.
    let p = confined("tmpfsx", &["--rm", "--tmpfs", "/x:exec,suid"], "");
    let m = p
        .mount_at("/x")
        .unwrap_or_else(|| panic!("/x not mounted:\n{}", p.raw));
    assert!(m.has("nosuid") && m.has("nodev"), "/x options {:?}", m.opts);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_exec_privileged_root_secret() {
    let policy = policy();
    let c = Container::new("execpriv");
    start_sleeper(&c, &[]);
    let outcome = c.exec_posture(
        &[
            "--privileged",
            "-u",
            "0",
            "-e",
            "SECRET=exec_vibe_secret",
            "-e",
            "GITHUB_TOKEN=ghp_exec_secret",
        ],
        &policy,
        "",
    );
    // The process rules rewrite the exec's process as they do the
    // container's: it runs, without the privileges it asked for.
    let p = outcome.ran();
    assert_confined(&p, &policy);
    for needle in [
        "SECRET",
        "exec_vibe_secret",
        "GITHUB_TOKEN",
        "ghp_exec_secret",
    ] {
        assert!(!p.env_mentions(needle), "{needle} reached the exec");
    }
    assert_eq!(
        p.status.get("CapEff").map(String::as_str),
        Some("0000000000000000")
    );
    assert_eq!(p.status.get("NoNewPrivs").map(String::as_str), Some("1"));
    // The container itself is still running and confined.
    assert_eq!(c.inspect("{{.State.Running}}"), "true");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn hostile_update_pids_limit_unlimited() {
    let policy = policy();
    let c = Container::new("updpids");
    start_sleeper(&c, &[]);
    for limit in ["-1", "100000"] {
        let out = docker(&["update", "--pids-limit", limit, &c.name]);
        if !out.success() {
            assert_refused_by_shim(&out);
        }
        let p = c.exec_posture(&[], &policy, "").ran();
        assert_confined(&p, &policy);
    }
}

// ---------------------------------------------------------------------------
// 3. Failures are visible and leave nothing behind

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn failure_refusal_leaves_nothing_running() {
    // A running compliant container proves we look at the right runc root.
    let good = Container::new("listed");
    start_sleeper(&good, &[]);
    let good_id = good.id().expect("running container has an id");
    let roots = runc_roots();
    let listed = runc_list(&roots);
    assert!(
        listed.lines().any(|l| l.trim() == good_id),
        "runc roots {roots:?} do not list the running container {good_id}: {listed}"
    );

    let c = Container::new("refused");
    let out = run(&c, &["-v", "/:/host"], &["true"]);
    assert_refused_by_shim(&out);
    assert_nothing_left(&c);
    if let Some(id) = c.id() {
        assert!(!runc_list(&roots).contains(&id));
        assert_ne!(c.inspect("{{.State.Running}}"), "true");
    }
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn failure_missing_runc() {
    let norunc = env().policy("norunc");
    let missing = norunc
        .runtime_path
        .clone()
        .expect("norunc.toml sets [runtime] path");
    let c = Container::new("norunc");
    let mut args: Vec<&str> = vec!["run", "--name", &c.name, "--runtime", "vibe-shim-norunc"];
    args.extend([IMAGE, "true"]);
    let out = docker(&args);
    assert_refused_by_shim(&out);
    assert!(
        out.stderr.contains(&missing),
        "message does not name the missing runtime {missing}: {out}"
    );
    assert_nothing_left(&c);
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn failure_invalid_config() {
    let c = Container::new("badsyntax");
    let mut args: Vec<&str> = vec![
        "run",
        "--name",
        &c.name,
        "--runtime",
        "vibe-shim-bad-syntax",
    ];
    args.extend([IMAGE, "true"]);
    let out = docker(&args);
    assert_refused_by_shim(&out);
    assert!(
        out.stderr.contains("bad-syntax.toml"),
        "message does not name the config file: {out}"
    );
    assert!(
        out.stderr.contains("line 6"),
        "message does not give the line (6): {out}"
    );
    assert_nothing_left(&c);
}

// ---------------------------------------------------------------------------
// 4. Concurrency

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn concurrency_32_runs_all_confined() {
    let policy = policy();
    let script = posture_script(&policy, "");
    let rt = runtime();
    let handles: Vec<_> = (0..32)
        .map(|i| {
            let script = script.clone();
            let rt = rt.clone();
            std::thread::spawn(move || {
                let c = Container::new(&format!("par{i}"));
                let out = docker_with(
                    &[
                        "run",
                        "--rm",
                        "--name",
                        &c.name,
                        "--runtime",
                        &rt,
                        IMAGE,
                        "sh",
                        "-c",
                        &script,
                    ],
                    None,
                    Duration::from_secs(240),
                );
                (i, out)
            })
        })
        .collect();
    let policy = &policy;
    let mut failures = Vec::new();
    for h in handles {
        let (i, out) = h.join().expect("thread panicked");
        if !out.success() {
            failures.push(format!("run {i}: {out}"));
            continue;
        }
        let p = Posture::parse(&out.stdout);
        if let Err(e) = std::panic::catch_unwind(|| assert_confined(&p, policy)) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "panic".into());
            failures.push(format!("run {i}: {msg}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 32 concurrent runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
