//! The engine's central property: for any spec, however hostile, the result
//! is either a refusal or a rewritten spec that satisfies every invariant in
//! `vibe_policy::engine::invariants`. Specs start from Docker 20.10's real default
//! `config.json` and are mutated with the things a client can ask for.

use std::cell::Cell;
use std::path::PathBuf;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};
use vibe_policy::config::{BindAllow, BindMode, HomeMode};
use vibe_policy::engine::invariants::violations;
use vibe_policy::lang::gojson::{go_view, spec_from_slice, SPEC_KIND};
use vibe_policy::{enforce_create, CreateContext, FakeHost, HostView, Policy};

const DEFAULT_SPEC: &str = include_str!("fixtures/docker-20.10/config-default.json");
const CONTAINER_ID: &str = "156d3c431c92338ef3167b2311f0ab6060b9e10b5c6814ed4cb9c17205570050";

/// The policies the property runs under.
fn policy(variant: u8) -> Policy {
    let mut policy = Policy::default();
    policy.filesystem.bind = vec![
        BindAllow {
            source: PathBuf::from("/srv/wt"),
            mode: BindMode::Rw,
        },
        BindAllow {
            source: PathBuf::from("/usr/bin/docker-init"),
            mode: BindMode::Ro,
        },
    ];
    match variant {
        1 => {
            policy.process.capabilities = vec!["CAP_CHOWN".into(), "CAP_NET_BIND_SERVICE".into()];
            policy.process.user = Some("1000:1000".into());
            policy.process.pids_limit = 64;
        }
        2 => {
            policy.filesystem.home = HomeMode::Image;
            policy.filesystem.readonly_root = false;
            policy.filesystem.tmpfs = vec![vibe_policy::config::TmpfsEntry::new("/tmp")];
            policy.filesystem.bind[0].mode = BindMode::Ro;
        }
        _ => {}
    }
    policy
}

/// A host with a symlink out of the worktree, a symlink inside it, a
/// separate mount inside it, and namespaces of another process.
fn host() -> FakeHost {
    let mut host = FakeHost::new();
    host.canonical
        .insert(PathBuf::from("/srv/wt/escape"), PathBuf::from("/etc"));
    host.canonical.insert(
        PathBuf::from("/srv/wt/alias"),
        PathBuf::from("/srv/wt/real"),
    );
    host.canonical
        .insert(PathBuf::from("/srv/link-to-wt"), PathBuf::from("/srv/wt"));
    host.mount_points.insert(PathBuf::from("/srv/wt/vol"));
    for (i, name) in ["pid", "ipc", "mnt", "net", "uts", "cgroup"]
        .iter()
        .enumerate()
    {
        host.namespaces.insert(
            PathBuf::from(format!("/proc/4242/ns/{name}")),
            (2, 100 + i as u64),
        );
    }
    host.namespaces
        .insert(PathBuf::from("/var/run/netns/agent"), (3, 1));
    host
}

#[derive(Debug, Clone)]
enum Mutation {
    Caps(&'static str, Vec<&'static str>),
    RemoveCaps,
    NoNewPrivileges(bool),
    Env(&'static str, &'static str),
    User(u32, u32, Vec<u32>),
    Cwd(&'static str),
    Arg0(&'static str),
    Mount(Value),
    MountOptions(usize, Vec<&'static str>),
    RemoveNamespace(&'static str),
    NamespacePath(&'static str, &'static str),
    Device(Value),
    CgroupDevice(Value),
    Sysctl(&'static str),
    Seccomp(Option<&'static str>),
    Pids(Option<i64>),
    Readonly(bool),
    ClearPaths,
    RootfsPropagation(&'static str),
}

fn pick<T: Clone + std::fmt::Debug + 'static>(items: &[T]) -> impl Strategy<Value = T> {
    prop::sample::select(items.to_vec())
}

const CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_SYS_ADMIN",
    "CAP_NET_ADMIN",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_PTRACE",
    "CAP_NET_RAW",
    "CAP_KILL",
    "CAP_MKNOD",
];
const MOUNT_OPTIONS: &[&str] = &[
    "bind",
    "rbind",
    "ro",
    "rw",
    "exec",
    "suid",
    "dev",
    "nosuid",
    "nodev",
    "shared",
    "rshared",
    "slave",
    "rslave",
    "private",
    "rprivate",
    "mode=1777",
];
const PROPAGATION: &[&str] = &[
    "shared", "rshared", "slave", "rslave", "private", "rprivate",
];

fn mount() -> impl Strategy<Value = Value> {
    let engine_hosts = format!("/var/lib/vs-dev/containers/{CONTAINER_ID}/hosts");
    let sources: Vec<String> = [
        "/srv/wt",
        "/srv/wt/a",
        "/srv/wt2",
        "/",
        "/etc",
        "/srv/wt/escape/shadow",
        "/srv/wt/alias/x",
        "/srv/wt/vol/y",
        "/srv/link-to-wt/b",
        "/usr/bin/docker-init",
        "/run/vs-dev/docker.sock",
        "tmpfs",
        "relative",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([engine_hosts])
    .collect();
    (
        pick(&[
            "/x", "/tmp", "/tmp/wt", "/run", "/run/x", "/root", "/home/user", "/srv/wt",
            "/etc/hosts", "/dev/shm", "/sys", "/sbin/docker-init",
        ]),
        pick(&["bind", "tmpfs", "none", "proc", "sysfs", "cgroup", "mqueue", "ext4"]),
        pick(&sources),
        prop::sample::subsequence(MOUNT_OPTIONS.to_vec(), 0..5),
    )
        .prop_map(|(destination, kind, source, options)| {
            json!({"destination": destination, "type": kind, "source": source, "options": options})
        })
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (
            pick(&[
                "bounding",
                "effective",
                "inheritable",
                "permitted",
                "ambient"
            ]),
            prop::sample::subsequence(CAPS.to_vec(), 0..4)
        )
            .prop_map(|(set, caps)| Mutation::Caps(set, caps)),
        Just(Mutation::RemoveCaps),
        any::<bool>().prop_map(Mutation::NoNewPrivileges),
        (
            pick(&[
                "GITHUB_TOKEN",
                "AWS_SECRET_ACCESS_KEY",
                "LC_ALL",
                "TERM",
                "HOME",
                "PATHX",
                "ANTHROPIC_API_KEY",
            ]),
            pick(&[
                "x",
                "/tmp/h",
                "/",
                "relative",
                "/home/agent",
                "/proc/self/fd/3"
            ])
        )
            .prop_map(|(name, value)| Mutation::Env(name, value)),
        (
            pick(&[0u32, 1000, 65534]),
            pick(&[0u32, 1000]),
            prop::collection::vec(pick(&[0u32, 4, 27]), 0..3)
        )
            .prop_map(|(uid, gid, extra)| Mutation::User(uid, gid, extra)),
        pick(&[
            "/",
            "/work",
            "/proc/self/fd/3",
            "/proc/1/task/1/fd/../fd/5",
            "/proc/self"
        ])
        .prop_map(Mutation::Cwd),
        pick(&[
            "sh",
            "/bin/sh",
            "/proc/self/fd/3",
            "/proc/1/task/1/fd/../fd/5",
            "../proc/self/fd/4",
        ])
        .prop_map(Mutation::Arg0),
        mount().prop_map(Mutation::Mount),
        mount().prop_map(Mutation::Mount),
        (
            0usize..20,
            prop::sample::subsequence(MOUNT_OPTIONS.to_vec(), 0..5)
        )
            .prop_map(|(i, options)| Mutation::MountOptions(i, options)),
        pick(&["pid", "ipc", "uts", "mount", "network", "cgroup"])
            .prop_map(Mutation::RemoveNamespace),
        (
            pick(&["pid", "ipc", "uts", "mount", "network", "cgroup"]),
            pick(&[
                "/proc/1/ns/pid",
                "/proc/1/ns/net",
                "/proc/1/ns/mnt",
                "/proc/4242/ns/pid",
                "/proc/4242/ns/ipc",
                "/proc/4242/ns/net",
                "/var/run/netns/agent",
                "/nonexistent",
            ])
        )
            .prop_map(|(kind, path)| Mutation::NamespacePath(kind, path)),
        (
            pick(&["c", "b"]),
            pick(&[1i64, 5, 10, 136, 254]),
            pick(&[0i64, 1, 2, 3, 5, 9, 229])
        )
            .prop_map(|(kind, major, minor)| Mutation::Device(
                json!({"path": "/dev/hostile", "type": kind, "major": major, "minor": minor})
            )),
        (
            any::<bool>(),
            pick(&["a", "c", "b"]),
            pick(&[1i64, 136, 254])
        )
            .prop_map(|(allow, kind, major)| Mutation::CgroupDevice(
                json!({"allow": allow, "type": kind, "major": major, "access": "rwm"})
            )),
        pick(&[
            "kernel.core_pattern",
            "net.ipv4.ip_forward",
            "kernel.shm_rmid_forced",
            "net.ipv4.tcp_syncookies",
            "kernel.msgmax",
        ])
        .prop_map(Mutation::Sysctl),
        pick(&[
            None,
            Some("SCMP_ACT_ALLOW"),
            Some("SCMP_ACT_LOG"),
            Some("SCMP_ACT_ERRNO")
        ])
        .prop_map(Mutation::Seccomp),
        pick(&[
            None,
            Some(-1i64),
            Some(0),
            Some(1),
            Some(64),
            Some(512),
            Some(100_000),
            Some(i64::MAX)
        ])
        .prop_map(Mutation::Pids),
        any::<bool>().prop_map(Mutation::Readonly),
        Just(Mutation::ClearPaths),
        pick(PROPAGATION).prop_map(Mutation::RootfsPropagation),
    ]
}

fn apply(spec: &mut Value, mutation: &Mutation) {
    match mutation {
        Mutation::Caps(set, caps) => spec["process"]["capabilities"][*set] = json!(caps),
        Mutation::RemoveCaps => {
            if let Some(p) = spec["process"].as_object_mut() {
                p.remove("capabilities");
            }
        }
        Mutation::NoNewPrivileges(on) => spec["process"]["noNewPrivileges"] = json!(on),
        Mutation::Env(name, value) => {
            if let Some(env) = spec["process"]["env"].as_array_mut() {
                env.push(json!(format!("{name}={value}")));
            }
        }
        Mutation::User(uid, gid, extra) => {
            spec["process"]["user"] = json!({"uid": uid, "gid": gid, "additionalGids": extra})
        }
        Mutation::Cwd(cwd) => spec["process"]["cwd"] = json!(cwd),
        Mutation::Arg0(arg) => spec["process"]["args"][0] = json!(arg),
        Mutation::Mount(mount) => {
            if let Some(mounts) = spec["mounts"].as_array_mut() {
                mounts.push(mount.clone());
            }
        }
        Mutation::MountOptions(i, options) => {
            if let Some(mounts) = spec["mounts"].as_array_mut() {
                let n = mounts.len();
                if n > 0 {
                    mounts[i % n]["options"] = json!(options);
                }
            }
        }
        Mutation::RemoveNamespace(kind) => {
            if let Some(ns) = spec["linux"]["namespaces"].as_array_mut() {
                ns.retain(|n| n["type"] != *kind);
            }
        }
        Mutation::NamespacePath(kind, path) => {
            if let Some(ns) = spec["linux"]["namespaces"].as_array_mut() {
                ns.retain(|n| n["type"] != *kind);
                ns.push(json!({"type": kind, "path": path}));
            }
        }
        Mutation::Device(device) => {
            if !spec["linux"]["devices"].is_array() {
                spec["linux"]["devices"] = json!([]);
            }
            if let Some(devices) = spec["linux"]["devices"].as_array_mut() {
                devices.push(device.clone());
            }
        }
        Mutation::CgroupDevice(rule) => {
            if let Some(rules) = spec["linux"]["resources"]["devices"].as_array_mut() {
                rules.insert(0, rule.clone());
            }
        }
        Mutation::Sysctl(name) => spec["linux"]["sysctl"][*name] = json!("1"),
        Mutation::Seccomp(None) => {
            if let Some(l) = spec["linux"].as_object_mut() {
                l.remove("seccomp");
            }
        }
        Mutation::Seccomp(Some(action)) => {
            spec["linux"]["seccomp"] = json!({"defaultAction": action, "syscalls": [
                {"names": ["reboot"], "action": "SCMP_ACT_ALLOW"}
            ]})
        }
        Mutation::Pids(None) => {
            if let Some(r) = spec["linux"]["resources"].as_object_mut() {
                r.remove("pids");
            }
        }
        Mutation::Pids(Some(limit)) => spec["linux"]["resources"]["pids"] = json!({"limit": limit}),
        Mutation::Readonly(on) => spec["root"]["readonly"] = json!(on),
        Mutation::ClearPaths => {
            spec["linux"]["maskedPaths"] = json!([]);
            spec["linux"]["readonlyPaths"] = json!([]);
        }
        Mutation::RootfsPropagation(p) => spec["linux"]["rootfsPropagation"] = json!(p),
    }
}

/// How a smuggled key is spelled, relative to the field it targets.
#[derive(Debug, Clone, Copy)]
enum Spelling {
    /// `Process`.
    UpperFirst,
    /// `PROCESS`.
    AllCaps,
    /// The first `s` as U+017F and the first `k` as U+212A (or upper-first
    /// when there is neither): Go folds both to ASCII.
    Fold,
    /// The exact name again, so the key repeats.
    Duplicate,
    /// The exact name again, written with a `\u` escape.
    EscapedDuplicate,
    /// Upper-first, written with a `\u` escape.
    EscapedVariant,
    /// A key that folds to nothing runc knows: must be kept, and runc
    /// ignores it.
    Unknown,
}

/// A key added next to (after) a field the rules judge, carrying a hostile
/// value, written into the raw bytes (a repeated key cannot live in a `Value`).
#[derive(Debug, Clone)]
struct Smuggle {
    /// The object that gets the key, as segments from the root (an array
    /// index is a number).
    at: &'static [&'static str],
    field: &'static str,
    spelling: Spelling,
    payload: Value,
}

fn all_caps_list() -> Value {
    json!(CAPS)
}

fn hostile_process() -> Value {
    json!({
        "user": {"uid": 0, "gid": 0, "additionalGids": [0]},
        "args": ["/proc/self/fd/3"],
        "cwd": "/proc/self/fd/4",
        "env": ["PATH=/bin", "GITHUB_TOKEN=x"],
        "noNewPrivileges": false,
        "capabilities": {"bounding": all_caps_list(), "effective": all_caps_list(),
                         "permitted": all_caps_list(), "ambient": all_caps_list()}
    })
}

/// The targets: (object path, field, hostile value).
fn smuggle_targets() -> Vec<(&'static [&'static str], &'static str, Value)> {
    vec![
        (&[], "process", hostile_process()),
        (
            &[],
            "mounts",
            json!([{"destination": "/host", "type": "bind", "source": "/",
                                 "options": ["rbind", "rw"]}]),
        ),
        (&[], "root", json!({"path": "/", "readonly": false})),
        (
            &[],
            "linux",
            json!({"resources": {"pids": {"limit": -1}}, "maskedPaths": [],
                              "readonlyPaths": [], "sysctl": {"kernel.core_pattern": "|/x"},
                              "namespaces": [{"type": "mount"}]}),
        ),
        (
            &[],
            "hooks",
            json!({"prestart": [{"path": "/bin/sh", "args": ["sh", "-c", "id"]}]}),
        ),
        (&["process"], "user", json!({"uid": 0, "gid": 0})),
        (
            &["process"],
            "capabilities",
            json!({"bounding": all_caps_list(),
                                              "effective": all_caps_list(),
                                              "permitted": all_caps_list()}),
        ),
        (&["process"], "noNewPrivileges", json!(false)),
        (&["process"], "env", json!(["GITHUB_TOKEN=x"])),
        (&["process"], "args", json!(["/proc/self/fd/3"])),
        (
            &["process", "capabilities"],
            "bounding",
            json!(["CAP_SYS_ADMIN"]),
        ),
        (
            &["process", "capabilities"],
            "effective",
            json!(["CAP_SYS_ADMIN"]),
        ),
        (&["process", "user"], "uid", json!(0)),
        (&["root"], "readonly", json!(false)),
        (&["root"], "path", json!("/")),
        (&["mounts", "0"], "source", json!("/")),
        (
            &["mounts", "0"],
            "options",
            json!(["rw", "suid", "dev", "exec", "rshared"]),
        ),
        (
            &["linux"],
            "seccomp",
            json!({"defaultAction": "SCMP_ACT_ALLOW"}),
        ),
        (&["linux"], "maskedPaths", json!([])),
        (&["linux"], "namespaces", json!([{"type": "mount"}])),
        (&["linux"], "sysctl", json!({"kernel.core_pattern": "|/x"})),
        (&["linux"], "resources", json!({"pids": {"limit": -1}})),
        (&["linux", "resources"], "pids", json!({"limit": -1})),
        (&["linux", "resources", "pids"], "limit", json!(100_000)),
        (
            &["linux", "seccomp"],
            "defaultAction",
            json!("SCMP_ACT_ALLOW"),
        ),
        (&["linux", "sysctl"], "kernel.shm_rmid_forced", json!("0")),
        (
            &["process"],
            "scheduler",
            json!({"policy": "SCHED_FIFO", "priority": 99}),
        ),
        (
            &["process"],
            "ioPriority",
            json!({"class": "IOPRIO_CLASS_RT", "priority": 0}),
        ),
        (&["linux"], "netDevices", json!({"eth0": {}})),
        (&["linux"], "intelRdt", json!({"closID": "host-critical"})),
        (
            &[],
            "annotations",
            json!({"org.systemd.property.TasksMax": "infinity", "bundle": "/x"}),
        ),
    ]
}

fn smuggle() -> impl Strategy<Value = Smuggle> {
    (
        prop::sample::select(smuggle_targets()),
        pick(&[
            Spelling::UpperFirst,
            Spelling::AllCaps,
            Spelling::Fold,
            Spelling::Duplicate,
            Spelling::EscapedDuplicate,
            Spelling::EscapedVariant,
            Spelling::Unknown,
        ]),
    )
        .prop_map(|((at, field, payload), spelling)| Smuggle {
            at,
            field,
            spelling,
            payload,
        })
}

/// `field` spelled as `spelling`, as the text of a JSON string.
fn spelled(field: &str, spelling: Spelling) -> String {
    let upper_first = || {
        let mut c = field.chars();
        c.next()
            .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
            .unwrap_or_default()
    };
    let escape_first = |key: &str| {
        let mut c = key.chars();
        c.next()
            .map(|f| format!("\\u{:04x}{}", f as u32, c.as_str()))
            .unwrap_or_default()
    };
    let text = match spelling {
        Spelling::UpperFirst => upper_first(),
        Spelling::AllCaps => field.to_ascii_uppercase(),
        Spelling::Fold => {
            let folded = field
                .replacen('s', "\u{17F}", 1)
                .replacen('k', "\u{212A}", 1);
            if folded == field {
                upper_first()
            } else {
                folded
            }
        }
        Spelling::Duplicate => field.to_string(),
        Spelling::EscapedDuplicate => escape_first(field),
        Spelling::EscapedVariant => escape_first(&upper_first()),
        Spelling::Unknown => format!("{field}\u{131}"),
    };
    // The key goes into JSON text: escape what serde_json would (only `"`
    // and `\` can appear here, and none of the field names has them).
    text
}

/// The placeholder key the i-th smuggle writes, replaced in the text.
fn marker(i: usize) -> String {
    format!("vibe-smuggle-marker-{i}")
}

/// Puts a placeholder member at the end of the object at `at`, if there is one.
fn place_marker(spec: &mut Value, at: &[&str], i: usize) -> bool {
    let mut node = spec;
    for segment in at {
        node = match (node, segment.parse::<usize>()) {
            (Value::Array(items), Ok(index)) => match items.get_mut(index) {
                Some(item) => item,
                None => return false,
            },
            (Value::Object(map), _) => match map.get_mut(*segment) {
                Some(child) => child,
                None => return false,
            },
            _ => return false,
        };
    }
    match node.as_object_mut() {
        Some(map) => {
            map.insert(marker(i), Value::Null);
            true
        }
        None => false,
    }
}

/// The spec's bytes with every smuggled key written in after its target.
fn smuggled_bytes(spec: &Value, smuggles: &[Smuggle]) -> Vec<u8> {
    let mut spec = spec.clone();
    let placed: Vec<bool> = smuggles
        .iter()
        .enumerate()
        .map(|(i, s)| place_marker(&mut spec, s.at, i))
        .collect();
    let mut text = spec.to_string();
    for (i, s) in smuggles.iter().enumerate() {
        if placed[i] {
            let member = format!("\"{}\":{}", spelled(s.field, s.spelling), s.payload);
            text = text.replace(&format!("\"{}\":null", marker(i)), &member);
        }
    }
    text.into_bytes()
}

fn base_spec() -> Value {
    serde_json::from_str(DEFAULT_SPEC).unwrap()
}

fn ctx() -> CreateContext {
    CreateContext {
        container_id: CONTAINER_ID.to_string(),
        ..CreateContext::default()
    }
}

/// The property for one case; `Ok(true)` when the spec was accepted.
fn check(spec: &Value, variant: u8) -> Result<bool, TestCaseError> {
    check_bytes(&serde_json::to_vec(spec).unwrap(), variant)
}

/// The property over the raw bytes the shim reads: refused, or what runc
/// would read from the rewrite (decoded as Go does: keys folded, the last
/// repeat winning) complies.
fn check_bytes(bytes: &[u8], variant: u8) -> Result<bool, TestCaseError> {
    let policy = policy(variant);
    let Ok(spec) = spec_from_slice(bytes) else {
        return Ok(false);
    };
    match enforce_create(spec, &policy, &host(), &ctx()) {
        Err(_) => Ok(false),
        Ok(rewrite) => {
            let written = serde_json::to_vec(&rewrite.document).unwrap();
            // A document Go cannot decode is one runc refuses.
            let Ok(runc_reads) = go_view(&written, &SPEC_KIND) else {
                return Ok(false);
            };
            let broken = violations(&runc_reads, &policy);
            prop_assert!(
                broken.is_empty(),
                "policy variant {variant}: accepted spec breaks invariants as runc reads it: \
                 {broken:#?}"
            );
            // The one invariant that needs the host: no namespace path
            // resolves to the host's own namespace.
            let host = host();
            let namespaces = runc_reads["linux"]["namespaces"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for ns in namespaces {
                let (Some(kind), Some(path)) = (ns["type"].as_str(), ns["path"].as_str()) else {
                    continue;
                };
                let id = host.namespace_id(std::path::Path::new(path));
                prop_assert!(
                    id.is_some() && id != host.host_namespace_id(kind),
                    "accepted a {kind} namespace path {path} that is the host's or unknown"
                );
            }
            let parsed = serde_json::from_value::<oci_spec::runtime::Spec>(rewrite.document);
            prop_assert!(
                parsed.is_ok(),
                "rewrite is not a valid OCI spec: {parsed:?}"
            );
            Ok(true)
        }
    }
}

#[test]
fn hostile_specs_are_refused_or_rewritten_to_comply() {
    let accepted = Cell::new(0u32);
    let refused = Cell::new(0u32);
    // PROPTEST_CASES=5000 for a longer hunt.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(400);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        0u8..3,
        prop::collection::vec(mutation(), 0..6),
        prop::collection::vec(smuggle(), 0..2),
    );
    let result = runner.run(&strategy, |(variant, mutations, smuggles)| {
        let mut spec = base_spec();
        for m in &mutations {
            apply(&mut spec, m);
        }
        let bytes = smuggled_bytes(&spec, &smuggles);
        let counter = if check_bytes(&bytes, variant)? {
            &accepted
        } else {
            &refused
        };
        counter.set(counter.get() + 1);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    eprintln!("accepted {}, refused {}", accepted.get(), refused.get());
    // Both outcomes must really happen, or the property proves nothing.
    assert!(accepted.get() >= 20, "only {} accepted", accepted.get());
    assert!(refused.get() >= 20, "only {} refused", refused.get());
}

#[test]
fn docker_default_is_accepted_and_complies_under_every_policy() {
    for variant in 0..3 {
        assert!(check(&base_spec(), variant).unwrap(), "variant {variant}");
    }
}

#[test]
fn plainly_hostile_binds_are_refused() {
    for source in [
        "/",
        "/etc",
        "/srv/wt/escape/shadow",
        "/srv/wt/vol/y",
        "/srv/wt2",
    ] {
        let mut spec = base_spec();
        apply(
            &mut spec,
            &Mutation::Mount(
                json!({"destination": "/x", "type": "bind", "source": source,
                                    "options": ["rbind"]}),
            ),
        );
        assert!(!check(&spec, 0).unwrap(), "{source} was accepted");
    }
}

#[test]
fn every_docker_fixture_is_refused_or_complies() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/docker-20.10");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with("config-") {
            continue;
        }
        let spec: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let id = spec["linux"]["cgroupsPath"]
            .as_str()
            .unwrap()
            .trim_start_matches("/docker/")
            .to_string();
        let ctx = CreateContext {
            container_id: id,
            ..CreateContext::default()
        };
        for variant in 0..3 {
            let policy = policy(variant);
            if let Ok(rewrite) = enforce_create(spec.clone(), &policy, &host(), &ctx) {
                let broken = violations(&rewrite.document, &policy);
                assert!(broken.is_empty(), "{name} variant {variant}: {broken:#?}");
            }
        }
        seen += 1;
    }
    assert!(seen >= 20);
}

/// Every smuggle target and spelling on the Docker default: a key runc
/// would read differently is refused, an unknown one is kept, and either
/// way the property holds.
#[test]
fn every_smuggled_key_is_refused_and_unknown_keys_are_kept() {
    let spellings = [
        Spelling::UpperFirst,
        Spelling::AllCaps,
        Spelling::Fold,
        Spelling::Duplicate,
        Spelling::EscapedDuplicate,
        Spelling::EscapedVariant,
        Spelling::Unknown,
    ];
    for (at, field, payload) in smuggle_targets() {
        for spelling in spellings {
            let smuggle = Smuggle {
                at,
                field,
                spelling,
                payload: payload.clone(),
            };
            let mut base = base_spec();
            base["linux"]["resources"]["pids"] = json!({"limit": 64});
            let parent: String = at.iter().map(|s| format!("/{s}")).collect();
            assert!(
                base.pointer(&parent).is_some_and(Value::is_object),
                "{parent}"
            );
            let bytes = smuggled_bytes(&base, std::slice::from_ref(&smuggle));
            let refused = spec_from_slice(&bytes).is_err();
            // A repeat needs the field there already; a sysctl is a Go map,
            // where only an exact repeat is a smuggle.
            let exists = base.pointer(&format!("{parent}/{field}")).is_some();
            let in_map = at == ["linux", "sysctl"];
            let smuggles = match spelling {
                Spelling::Unknown => false,
                Spelling::Duplicate | Spelling::EscapedDuplicate => exists,
                _ => !in_map,
            };
            assert_eq!(refused, smuggles, "{smuggle:?}");
            for variant in 0..3 {
                check_bytes(&bytes, variant).unwrap();
            }
        }
    }
}
