//! Time to rewrite a Docker-sized `config.json` (issue target: < 100 µs).
//! Run: `cargo bench -p vibe-policy --bench rewrite`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use serde_json::{json, Value};
use vibe_policy::host::HostView;
use vibe_policy::{enforce_create, CreateContext, FakeHost, Policy, NETWORK_HOOK_MARKER};

const SPEC: &str = include_str!("../tests/fixtures/docker-20.10/config-default.json");

/// A policy like the packaged default, with a worktree bind, a forced user
/// and an egress allowlist.
const POLICY: &str = r#"
[filesystem]
readonly_root = true
tmpfs = ["/tmp", "/run"]
home = "tmpfs"

[[filesystem.bind]]
source = "/srv/worktrees"
mode = "rw"

[process]
capabilities = []
no_new_privileges = true
pids_limit = 512
user = "1000:1000"

[network]
mode = "allowlist"
allow = ["192.0.2.10:443", "198.51.100.0/24:443"]
dns = true
"#;

fn rewrite(c: &mut Criterion) {
    let spec: Value = match serde_json::from_str(SPEC) {
        Ok(spec) => spec,
        Err(e) => panic!("fixture: {e}"),
    };
    let policy = match Policy::from_toml_str(POLICY, Path::new("bench.toml")) {
        Ok(policy) => policy,
        Err(e) => panic!("policy: {e}"),
    };
    let host = FakeHost::new();
    assert!(host.host_namespace_id("network").is_some());
    let ctx = CreateContext {
        container_id: "156d3c431c92338ef3167b2311f0ab6060b9e10b5c6814ed4cb9c17205570050".into(),
        network_hook: Some(json!({
            "path": "/usr/local/bin/vibe-shim",
            "args": ["vibe-shim", "hook", "network", NETWORK_HOOK_MARKER],
            "timeout": 10
        })),
        runtime_path: PathBuf::from("/usr/sbin/runc"),
        ..CreateContext::default()
    };
    // Fail loudly if the bench would measure a refusal instead of a rewrite.
    if let Err(refusal) = enforce_create(spec.clone(), &policy, &host, &ctx) {
        panic!("bench spec refused: {refusal}");
    }
    c.bench_function("enforce_create docker-20.10 default", |b| {
        // The shim owns the spec it read, so the copy is set-up, not timed.
        b.iter_batched(
            || spec.clone(),
            |spec| enforce_create(black_box(spec), &policy, &host, &ctx),
            BatchSize::SmallInput,
        )
    });
    // Reading the bytes: plain serde, and the Go-key check the shim uses.
    c.bench_function("serde_json::from_slice docker-20.10 default", |b| {
        b.iter(|| serde_json::from_slice::<Value>(black_box(SPEC.as_bytes())))
    });
    c.bench_function("gojson::spec_from_slice docker-20.10 default", |b| {
        b.iter(|| vibe_policy::lang::gojson::spec_from_slice(black_box(SPEC.as_bytes())))
    });
    c.bench_function(
        "spec_from_slice + enforce_create docker-20.10 default",
        |b| {
            b.iter(|| {
                let spec = vibe_policy::lang::gojson::spec_from_slice(black_box(SPEC.as_bytes()));
                spec.map(|spec| enforce_create(spec, &policy, &host, &ctx))
            })
        },
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = rewrite
}
criterion_main!(benches);
