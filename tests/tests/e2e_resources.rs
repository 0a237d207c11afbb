//! End-to-end: `[resources]` ceilings seen from inside containers on the
//! private test dockerd, under `tests/policies/resources.toml` (memory_max
//! 64m, cpus 0.5, cpu_shares_max 512, tmpfs_max 16m, user 1000:1000).
//!
//! dockerd on the test VM lacks CAP_SYS_RESOURCE, so a `--ulimit` above the
//! daemon's own hard limit fails even under plain runc; the rlimit cases use
//! limits whose clamped value is within what the daemon holds.

use std::time::Duration;

use vibe_shim_tests::docker::{docker, docker_with, runtime_for, Container, IMAGE};
use vibe_shim_tests::harness::Output;

const MEMORY_MAX: &str = "67108864";
const TMPFS_KB: &str = "16384";

fn run(c: &Container, flags: &[&str], script: &str) -> Output {
    let rt = runtime_for("resources");
    let mut args: Vec<&str> = vec!["run", "--name", &c.name, "--runtime", &rt];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[IMAGE, "sh", "-c", script]);
    docker_with(&args, None, Duration::from_secs(120))
}

fn lines(out: &Output) -> Vec<&str> {
    out.stdout.lines().map(str::trim).collect()
}

#[test]
#[ignore]
fn memory_limit_counts_swap_whatever_the_client_asks() {
    for flags in [&["--memory", "0"][..], &["-m", "64g"], &[]] {
        let c = Container::new("mem");
        let out = run(
            &c,
            flags,
            "cat /sys/fs/cgroup/memory/memory.limit_in_bytes \
                 /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes",
        )
        .ok();
        assert_eq!(lines(&out), [MEMORY_MAX, MEMORY_MAX], "{flags:?}: {out}");
    }
}

#[test]
#[ignore]
fn allocating_past_the_limit_is_oom_killed_inside() {
    let c = Container::new("oom");
    // `tail` of an endless line keeps it all in memory.
    let out = run(
        &c,
        &["-m", "64g"],
        "tail /dev/zero; echo rc=$?; grep oom_kill /sys/fs/cgroup/memory/memory.oom_control",
    )
    .ok();
    assert!(out.stdout.contains("rc=137"), "{out}");
    assert!(!out.stdout.contains("oom_kill 0"), "{out}");
    // The host, and its daemon, are fine.
    docker(&["info", "--format", "{{.ID}}"]).ok();
}

#[test]
#[ignore]
fn every_tmpfs_is_clamped_and_fills_up() {
    let c = Container::new("tmpfs");
    let out = run(
        &c,
        &["--tmpfs", "/big:size=64g", "--shm-size=64g"],
        "for d in /tmp /run $HOME /big /dev/shm; do df -k $d | tail -1; done; \
         dd if=/dev/zero of=/tmp/fill bs=1M count=32 2>&1; echo dd=$?",
    )
    .ok();
    let sizes: Vec<(&str, &str)> = out
        .stdout
        .lines()
        .filter(|l| l.contains('%'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((*f.last()?, *f.get(1)?))
        })
        .collect();
    for dir in ["/tmp", "/run", "/home/user", "/big", "/dev/shm"] {
        assert!(sizes.contains(&(dir, TMPFS_KB)), "{dir}: {out}");
    }
    assert!(out.stdout.contains("No space left on device"), "{out}");
    assert!(out.stdout.contains("dd=1"), "{out}");
}

#[test]
#[ignore]
fn cpu_quota_is_set_and_shares_clamped() {
    let c = Container::new("cpu");
    let out = run(
        &c,
        &["--cpu-shares", "262144"],
        "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us \
             /sys/fs/cgroup/cpu/cpu.shares",
    )
    .ok();
    assert_eq!(lines(&out), ["50000", "100000", "512"], "{out}");
}

#[test]
#[ignore]
fn rlimits_and_oom_score_are_clamped() {
    // Without flags the container may not inherit more than the table.
    let c = Container::new("ulimit");
    let out = run(&c, &[], "ulimit -Hn; ulimit -Hl; ulimit -Hr; ulimit -He").ok();
    let v = lines(&out);
    assert!(v[0].parse::<u64>().unwrap() <= 65536, "{out}");
    assert!(v[1].parse::<u64>().unwrap() <= 65536, "{out}");
    assert_eq!(&v[2..], ["0", "0"], "{out}");
    // rtprio=99 and nice=40 would fail under plain runc here (no
    // CAP_SYS_RESOURCE); clamped to 0 they start.
    let c = Container::new("ulimit-hostile");
    let out = run(
        &c,
        &[
            "--ulimit",
            "rtprio=99:99",
            "--ulimit",
            "nice=40:40",
            "--ulimit",
            "nofile=4096:8192",
            "--oom-score-adj",
            "-1000",
        ],
        "ulimit -n; ulimit -Hn; ulimit -r; ulimit -e; cat /proc/self/oom_score_adj",
    )
    .ok();
    assert_eq!(lines(&out), ["4096", "8192", "0", "0", "0"], "{out}");
}

#[test]
#[ignore]
fn docker_update_stays_within_the_policy() {
    let c = Container::new("update");
    let rt = runtime_for("resources");
    docker(&[
        "run",
        "-d",
        "--name",
        &c.name,
        "--runtime",
        &rt,
        IMAGE,
        "sleep",
        "300",
    ])
    .ok();
    // dockerd itself refuses --cpus above the host's CPU count (2 here).
    docker(&[
        "update",
        "--memory",
        "64g",
        "--memory-swap",
        "-1",
        "--cpus",
        "2",
        &c.name,
    ])
    .ok();
    let out = docker(&[
        "exec",
        &c.name,
        "cat",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes",
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us",
    ])
    .ok();
    assert_eq!(lines(&out), [MEMORY_MAX, MEMORY_MAX, "50000"], "{out}");
}

#[test]
#[ignore]
fn tmp_is_writable_by_the_policy_user_even_from_a_0755_image() {
    // An image whose /tmp is 0755 root: runc copies that mode onto the tmpfs.
    let base = Container::new("tmp755-base");
    let image = format!("{}-img", base.name);
    docker(&[
        "run",
        "--name",
        &base.name,
        "--runtime",
        "runc",
        IMAGE,
        "chmod",
        "755",
        "/tmp",
    ])
    .ok();
    docker(&["commit", &base.name, &image]).ok();
    for img in [IMAGE, image.as_str()] {
        let c = Container::new("tmp755");
        let rt = runtime_for("resources");
        let out = docker_with(
            &[
                "run",
                "--name",
                &c.name,
                "--runtime",
                &rt,
                img,
                "sh",
                "-c",
                "id -u; touch /tmp/x && echo ok; stat -c '%a %u' $HOME",
            ],
            None,
            Duration::from_secs(120),
        );
        if img != IMAGE {
            let _ = docker(&["rmi", "-f", &image]);
        }
        let out = out.ok();
        assert_eq!(lines(&out), ["1000", "ok", "700 1000"], "{img}: {out}");
    }
}

/// cgroup v1 does not charge TCP socket buffers to the memory limit, and
/// runc ignores `kernelTCP`: vibe-shim's hook writes the bound (here
/// memory_max) to `memory.kmem.tcp.limit_in_bytes`. 24 loopback pairs whose
/// receivers never read queued ~97 MB in a 32m container without it.
#[test]
#[ignore]
fn tcp_socket_memory_is_bounded_on_cgroup_v1() {
    let c = Container::new("ktcp");
    let ports: Vec<String> = (9100..9124).map(|p: u32| p.to_string()).collect();
    let ports = ports.join(" ");
    let script = format!(
        "cg=/sys/fs/cgroup/memory; cat $cg/memory.kmem.tcp.limit_in_bytes; \
         for p in {ports}; do nc -l -p $p -e /bin/sleep 600 </dev/null >/dev/null 2>&1 & done; \
         sleep 1; \
         for p in {ports}; do (cat /dev/zero | nc 127.0.0.1 $p) </dev/null >/dev/null 2>&1 & done; \
         sleep 5; cat $cg/memory.kmem.tcp.max_usage_in_bytes"
    );
    let out = run(&c, &["-m", "64g"], &script).ok();
    let got = lines(&out);
    assert_eq!(got.first().copied(), Some(MEMORY_MAX), "{out}");
    let max_usage: u64 = got
        .get(1)
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no max usage: {out}"));
    // The attack did run (many MiB were charged), and stayed at the bound.
    assert!(
        max_usage > 8 << 20,
        "the loopback pairs queued little: {out}"
    );
    assert!(max_usage <= (64 << 20) + (1 << 20), "{out}");
}
