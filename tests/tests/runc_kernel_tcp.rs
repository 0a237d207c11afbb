//! TCP socket memory on cgroup v1 through the real runc: v1 does not charge
//! socket buffers to the memory limit, so without a bound a `--memory 32m`
//! container queues as much as the host-wide `tcp_mem` lets it. Loopback
//! pairs whose receiver never reads fill both ends' buffers; what the
//! container's sockets hold (`ss -tm` in its namespace) must stay near the
//! bound. Needs root, runc and cgroup v1 (fails loudly elsewhere).
//!
//! `cargo test --release -p vibe-shim-tests --test runc_kernel_tcp --
//! --ignored --test-threads=1`

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vibe_shim_tests::bundle::{describe, Bundle};

const PAIRS: u16 = 24;
const MIB: u64 = 1 << 20;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn started(policy: &str, name: &str) -> (Bundle, i32) {
    let bundle = Bundle::busybox(name, &["sleep", "300"], policy);
    let out = bundle.create();
    assert!(out.status.success(), "create: {}", describe(&out));
    let out = bundle.shim(&["start", &bundle.id], b"");
    assert!(out.status.success(), "start: {}", describe(&out));
    let state = bundle.runc_state().expect("runc state");
    let pid = state["pid"].as_i64().expect("state pid") as i32;
    (bundle, pid)
}

/// The container's v1 memory cgroup directory, from the host.
fn memory_cgroup(pid: i32) -> PathBuf {
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    let path = cgroup
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctl, path) = (parts.next()?, parts.next()?, parts.next()?);
            ctl.split(',').any(|c| c == "memory").then_some(path)
        })
        .unwrap_or_else(|| panic!("no cgroup v1 memory line: this test needs cgroup v1\n{cgroup}"));
    Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'))
}

fn read_u64(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}: {text:?}", path.display()))
}

/// Starts PAIRS loopback pairs whose receivers never read, and returns what
/// the container's TCP sockets hold once it stops growing (bytes).
fn fill_loopback(bundle: &Bundle, pid: i32) -> u64 {
    let ports: Vec<String> = (0..PAIRS).map(|i| (9100 + i).to_string()).collect();
    let ports = ports.join(" ");
    let script = format!(
        "for p in {ports}; do nc -l -p $p -e /bin/sleep 600 </dev/null >/dev/null 2>&1 & done; \
         sleep 1; \
         for p in {ports}; do (cat /dev/zero | nc 127.0.0.1 $p) </dev/null >/dev/null 2>&1 & done; \
         echo started"
    );
    let out = bundle.exec(&["sh", "-c", &script]);
    assert!(
        text(&out.stdout).contains("started"),
        "attack: {}",
        describe(&out)
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = 0;
    let mut steady = 0;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let now = queued(pid);
        steady = if now == last && now > 0 {
            steady + 1
        } else {
            0
        };
        last = now;
        if steady >= 3 {
            break;
        }
    }
    let established = socket_count(pid);
    assert!(
        established >= 2 * usize::from(PAIRS),
        "only {established} TCP sockets: the attack did not start"
    );
    last
}

fn ss(pid: i32) -> String {
    let out = Command::new("nsenter")
        .args([
            "-t",
            &pid.to_string(),
            "-n",
            "ss",
            "-tmnH",
            "state",
            "established",
        ])
        .output()
        .expect("nsenter ss");
    assert!(out.status.success(), "ss: {}", describe(&out));
    text(&out.stdout)
}

fn socket_count(pid: i32) -> usize {
    ss(pid).lines().filter(|l| l.contains("127.0.0.1")).count()
}

/// Sum over the namespace's TCP sockets of skmem's r (receive queue) and
/// w (send queue), bytes.
fn queued(pid: i32) -> u64 {
    let text = ss(pid);
    let mut sum = 0;
    for skmem in text.split("skmem:(").skip(1) {
        let inner = skmem.split(')').next().unwrap_or_default();
        for field in inner.split(',') {
            let (key, value) =
                field.split_at(field.find(|c: char| c.is_ascii_digit()).unwrap_or(0));
            if key == "r" || key == "w" {
                sum += value.parse::<u64>().unwrap_or(0);
            }
        }
    }
    sum
}

#[test]
#[ignore = "needs root, runc and cgroup v1: run tests/run.sh"]
fn loopback_buffers_stay_within_memory_max() {
    // No kernel_tcp_max: the bound is memory_max.
    let (bundle, pid) = started("[resources]\nmemory_max = \"32m\"\n", "ktcp-mem");
    let cgroup = memory_cgroup(pid);
    let limit = read_u64(&cgroup.join("memory.kmem.tcp.limit_in_bytes"));
    let held = fill_loopback(&bundle, pid);
    let charged = read_u64(&cgroup.join("memory.kmem.tcp.max_usage_in_bytes"));
    eprintln!("tcp limit {limit}, queued {held}, charged at most {charged}");
    // A page or two per socket may be forced past the limit.
    assert!(
        held <= 36 * MIB,
        "{PAIRS} loopback pairs queued {held} bytes in a 32m container"
    );
    assert!(
        limit <= 32 * MIB,
        "memory.kmem.tcp.limit_in_bytes is {limit}, above memory_max"
    );
}

#[test]
#[ignore = "needs root, runc and cgroup v1: run tests/run.sh"]
fn kernel_tcp_max_and_a_smaller_request_bound_it() {
    let (bundle, pid) = started(
        "[resources]\nmemory_max = \"64m\"\nkernel_tcp_max = \"4m\"\n",
        "ktcp-own",
    );
    let cgroup = memory_cgroup(pid);
    assert_eq!(
        read_u64(&cgroup.join("memory.kmem.tcp.limit_in_bytes")),
        4 * MIB
    );
    let held = fill_loopback(&bundle, pid);
    assert!(
        held <= 6 * MIB,
        "{PAIRS} loopback pairs queued {held} bytes under a 4m bound"
    );
    drop(bundle);
    // A client's larger kernelTCP is clamped; a smaller one is kept.
    for (asked, want) in [(1i64 << 40, 4 * MIB), (2 << 20, 2 * MIB)] {
        let bundle = Bundle::busybox(
            "ktcp-ask",
            &["sleep", "300"],
            "[resources]\nkernel_tcp_max = \"4m\"\n",
        );
        let mut spec = bundle.spec();
        spec["linux"]["resources"]["memory"] = serde_json::json!({"kernelTCP": asked});
        bundle.write_spec(&spec);
        let out = bundle.create();
        assert!(out.status.success(), "create: {}", describe(&out));
        let state = bundle.runc_state().expect("runc state");
        let pid = state["pid"].as_i64().expect("pid") as i32;
        let got = read_u64(&memory_cgroup(pid).join("memory.kmem.tcp.limit_in_bytes"));
        assert_eq!(got, want, "kernelTCP {asked}");
        // runc ignores an update's kernelTCP; the bound stays.
        let out = bundle.shim(&["update", "--kernel-memory-tcp", "-1", &bundle.id], b"");
        assert!(out.status.success(), "update: {}", describe(&out));
        let after = read_u64(&memory_cgroup(pid).join("memory.kmem.tcp.limit_in_bytes"));
        assert_eq!(after, want, "after update");
    }
}
