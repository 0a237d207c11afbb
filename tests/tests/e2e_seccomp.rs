//! End-to-end: the client's seccomp profile can only narrow the policy's, and
//! no container gets a socket family the network wall cannot see.
//!
//! A tiny static probe (tests/probe/seccomp_probe.c, built with
//! `gcc -static` at test time) is copied into a created busybox container
//! with `docker cp` before it starts; it makes one syscall per run and prints
//! `OK` or `DENIED <errno>`. Everything is judged from inside the container.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use vibe_shim_tests::docker::{docker, docker_with, runtime, Container, IMAGE};
use vibe_shim_tests::harness::{static_c_probe, Output};

/// Where the probe lands inside the container.
const PROBE: &str = "/seccomp_probe";

/// A scratch directory for the probe binary and the client profile.
fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
}

/// The probe, compiled once per test process.
fn probe() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = scratch().join("seccomp_probe");
        static_c_probe("seccomp_probe.c", &bin);
        bin
    })
}

/// A client profile that denies by default but then allows every syscall by
/// name: the built-in profile's names and everything Docker denies.
fn permissive_profile() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let builtin: serde_json::Value =
            serde_json::from_str(include_str!("../../policy/src/rules/seccomp_default.json"))
                .expect("the built-in profile parses");
        let mut names: BTreeSet<String> = builtin["syscalls"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["names"].as_array().into_iter().flatten())
            .filter_map(|n| n.as_str().map(String::from))
            .collect();
        names.extend(DOCKER_DENIED.iter().map(|n| n.to_string()));
        let profile = serde_json::json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
            "syscalls": [{"names": names, "action": "SCMP_ACT_ALLOW"}]
        });
        let file = scratch().join("permissive.json");
        std::fs::write(&file, profile.to_string()).expect("writing the client profile");
        file
    })
}

/// Syscalls Docker's default profile leaves out (or allows only under
/// conditions), plus the socket surface vibe-shim's profile narrows.
const DOCKER_DENIED: &[&str] = &[
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "clone",
    "clone3",
    "create_module",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "get_mempolicy",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mbind",
    "mount",
    "mount_setattr",
    "move_mount",
    "move_pages",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "personality",
    "pivot_root",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
    "query_module",
    "quotactl",
    "reboot",
    "request_key",
    "set_mempolicy",
    "setns",
    "settimeofday",
    "socket",
    "socketcall",
    "socketpair",
    "stime",
    "swapoff",
    "swapon",
    "sysfs",
    "_sysctl",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vm86",
    "vm86old",
];

/// Creates a container running `script`, copies the probe in, starts it and
/// returns its output. Fails the test when it does not run to the end.
fn run_with_probe(tag: &str, flags: &[&str], script: &str) -> Output {
    let c = Container::new(tag);
    let rt = runtime();
    let mut args: Vec<&str> = vec!["create", "--name", &c.name, "--runtime", &rt];
    args.extend_from_slice(flags);
    let body = format!("{script}\necho X done=1");
    args.extend_from_slice(&[IMAGE, "sh", "-c", &body]);
    docker(&args).ok();
    let probe = probe().to_str().expect("utf-8 temp path").to_string();
    docker(&["cp", &probe, &format!("{}:{PROBE}", c.name)]).ok();
    let out = docker_with(&["start", "-a", &c.name], None, Duration::from_secs(120));
    assert!(
        out.stdout.contains("X done=1"),
        "the container did not run to the end: {out}"
    );
    out
}

/// The `X key=value` lines the script printed.
fn value<'a>(out: &'a Output, key: &str) -> &'a str {
    let prefix = format!("X {key}=");
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {key} in the output: {out}"))
        .trim()
}

/// A script line: `X <key>=<first word the probe printed>` (empty when the
/// probe was killed, e.g. by SIGSYS).
fn check(key: &str, probe_args: &str) -> String {
    format!("echo \"X {key}=$({PROBE} {probe_args} 2>/dev/null | cut -d' ' -f1)\"")
}

fn client_profile_flag() -> String {
    format!("seccomp={}", permissive_profile().display())
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn permissive_client_profile_cannot_unshare_mount_or_keyctl() {
    let seccomp = client_profile_flag();
    // A non-root user can map itself in a new user namespace (root needs
    // CAP_SETFCAP for that), and then holds every capability there.
    let script = [
        "unshare -U true 2>/dev/null && echo 'X userns=ok' || echo 'X userns=denied'".to_string(),
        "unshare -Urm sh -c 'mount -t tmpfs none /tmp' 2>/dev/null && echo 'X usermount=ok' || echo 'X usermount=denied'".to_string(),
        "unshare -Urn sh -c 'ip link set lo up' 2>/dev/null && echo 'X usernet=ok' || echo 'X usernet=denied'".to_string(),
        "mount -t tmpfs none /tmp 2>/dev/null && echo 'X mount=ok' || echo 'X mount=denied'".to_string(),
        check("keyctl", "keyctl"),
    ]
    .join("\n");
    let out = run_with_probe(
        "seccomp-permissive",
        &["--user", "1000:1000", "--security-opt", &seccomp],
        &script,
    );
    for key in ["userns", "usermount", "usernet", "mount"] {
        assert_eq!(value(&out, key), "denied", "{key}: {out}");
    }
    assert_eq!(value(&out, "keyctl"), "DENIED", "{out}");
}

#[test]
#[ignore = "needs root, runc and the test env: run tests/run.sh"]
fn vsock_is_refused_whatever_the_client_profile() {
    let permissive = client_profile_flag();
    let cases: [(&str, Vec<&str>); 3] = [
        ("default", vec![]),
        ("unconfined", vec!["--security-opt", "seccomp=unconfined"]),
        ("permissive", vec!["--security-opt", &permissive]),
    ];
    let script = [
        // AF_VSOCK (40), every way a socket can be made.
        check("vsock", "socket 40 1"),
        check("vsock_dgram", "socket 40 2"),
        check("vsock_uring", "uring-socket 40 1"),
        check("vsock_i386", "socket32 40 1"),
        check("vsock_socketcall", "socketcall32 40 1"),
        check("vsock_pair", "socketpair 40"),
        // What the wall polices still works.
        check("inet", "socket 2 1"),
        check("inet6", "socket 10 2"),
        check("unix", "socket 1 1"),
        check("unix_pair", "socketpair 1"),
        check("netlink", "socket 16 3"),
        "nc -l -p 8080 >/dev/null & sleep 0.3; echo hi | nc 127.0.0.1 8080 && echo 'X loopback=ok' || echo 'X loopback=failed'".to_string(),
    ]
    .join("\n");
    for (tag, flags) in &cases {
        let out = run_with_probe(&format!("seccomp-vsock-{tag}"), flags, &script);
        for key in [
            "vsock",
            "vsock_dgram",
            "vsock_uring",
            "vsock_i386",
            "vsock_socketcall",
            "vsock_pair",
        ] {
            assert_ne!(value(&out, key), "OK", "{tag}: {key}: {out}");
        }
        for key in ["inet", "inet6", "unix", "unix_pair", "netlink"] {
            assert_eq!(value(&out, key), "OK", "{tag}: {key}: {out}");
        }
        assert_eq!(value(&out, "loopback"), "ok", "{tag}: {out}");
    }
}
