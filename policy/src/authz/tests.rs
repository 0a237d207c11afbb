use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::config::{BindAllow, BindMode};
use crate::host::FakeHost;

fn policy() -> Policy {
    let mut p = Policy::default();
    p.filesystem.bind = vec![BindAllow {
        source: PathBuf::from("/srv/wt"),
        mode: BindMode::Rw,
    }];
    p
}

fn gate() -> Gate {
    Gate {
        runtimes: vec!["vibe-shim".into(), "runc".into()],
        default_runtime: "runc".into(),
        allow_bind_create: true,
        allow_cgroup_parent: false,
    }
}

/// The host of most tests: no lockdown.
fn no_lockdown() -> Result<(), String> {
    Err("no lockdown record".into())
}

fn locked_down() -> Result<(), String> {
    Ok(())
}

fn decide_with(method: &str, uri: &str, body: &[u8], host: &FakeHost, gate: &Gate) -> Decision {
    let policy = policy();
    let cx = Cx {
        policy: &policy,
        gate,
        host,
        lockdown: &no_lockdown,
    };
    let req = Request {
        method,
        uri,
        headers: &[],
        body,
    };
    decide(&req, &cx)
}

fn create(body: &str) -> Decision {
    post("/v1.41/containers/create", body.as_bytes())
}

fn post(uri: &str, body: &[u8]) -> Decision {
    decide_with("POST", uri, body, &FakeHost::new(), &gate())
}

fn denied(d: &Decision) -> &Denial {
    d.denial.as_ref().expect("refused")
}

/// `d` refused by `rule` at `field` (`what` names the case).
fn refused_at(d: &Decision, rule: &str, field: &str, what: &dyn std::fmt::Display) {
    assert_eq!(denied(d).rule, rule, "{what}");
    assert_eq!(denied(d).field, field, "{what}");
}

#[test]
fn binds_outside_the_allowlist_are_refused() {
    let d = create(r#"{"Image":"x","HostConfig":{"Binds":["/etc:/x"]}}"#);
    let denial = denied(&d);
    assert_eq!(denial.rule, RULE_BINDS);
    assert_eq!(denial.field, "/HostConfig/Binds/0");
    assert_eq!(denial.value, "/etc");
    assert!(
        d.message().starts_with("vibe-shim: authz-binds: "),
        "{}",
        d.message()
    );
    assert!(create(r#"{"HostConfig":{"Binds":["/srv/wt/a:/x:ro"]}}"#).allowed());
    // Named and anonymous volumes are not host paths.
    assert!(create(r#"{"HostConfig":{"Binds":["vol:/x","/anon"]}}"#).allowed());
    assert!(!create(r#"{"HostConfig":{"Binds":["/srv/wt/../../etc:/x"]}}"#).allowed());
    assert!(!create(r#"{"HostConfig":{"Binds":["/srv/wt2:/x"]}}"#).allowed());
}

#[test]
fn deprecated_top_level_host_config_fields_are_judged() {
    // moby 20.10 reads HostConfig fields at the top level too.
    let d = create(r#"{"Image":"x","Binds":["/etc:/x"]}"#);
    assert_eq!(denied(&d).field, "/Binds/0");
    let d = create(r#"{"Mounts":[{"Type":"bind","Source":"/","Target":"/h"}],"HostConfig":{}}"#);
    assert_eq!(denied(&d).field, "/Mounts/0/Source");
}

#[test]
fn mounts_are_judged_by_type() {
    let d = create(r#"{"HostConfig":{"Mounts":[{"Type":"bind","Source":"/etc","Target":"/x"}]}}"#);
    assert_eq!(denied(&d).field, "/HostConfig/Mounts/0/Source");
    assert!(create(
        r#"{"HostConfig":{"Mounts":[{"Type":"bind","Source":"/srv/wt","Target":"/x"},
            {"Type":"tmpfs","Target":"/t"},{"Type":"volume","Source":"v","Target":"/v"}]}}"#
    )
    .allowed());
    let volume_bind = r#"{"HostConfig":{"Mounts":[{"Type":"volume","Source":"v","Target":"/v",
        "VolumeOptions":{"DriverConfig":{"Name":"local","Options":
        {"type":"none","o":"bind","device":"/etc"}}}}]}}"#;
    let d = create(volume_bind);
    assert_eq!(denied(&d).rule, RULE_VOLUME);
    assert_eq!(
        denied(&d).field,
        "/HostConfig/Mounts/0/VolumeOptions/DriverConfig/Options/device"
    );
    assert!(
        !create(r#"{"HostConfig":{"Mounts":[{"Type":"npipe","Source":"x","Target":"/x"}]}}"#)
            .allowed()
    );
}

#[test]
fn go_folded_and_duplicate_keys_are_refused() {
    for body in [
        r#"{"hostconfig":{"Binds":["/etc:/x"]}}"#,
        r#"{"HostConfig":{"binds":["/etc:/x"]}}"#,
        "{\"HostConfig\":{\"Bind\u{017F}\":[\"/etc:/x\"]}}",
        r#"{"HostConfig":{"Binds":[]},"HostConfig":{"Binds":["/etc:/x"]}}"#,
        r#"{"HostConfig":{"Binds":[],"Binds":["/etc:/x"]}}"#,
        r#"{"HostConfig":{"Mounts":[{"Type":"tmpfs","type":"bind","Source":"/etc","Target":"/x"}]}}"#,
        r#"{"HostConfig":{"Runtime":"vibe-shim","runtime":"evil"}}"#,
    ] {
        let d = create(body);
        assert_eq!(denied(&d).rule, gojson::RULE, "{body}");
    }
    // A duplicate the gate does not judge is left to dockerd.
    assert!(create(r#"{"Image":"a","Image":"b"}"#).allowed());
}

#[test]
fn runtime_must_be_one_of_ours() {
    let only_ours = Gate {
        runtimes: vec!["vibe-shim".into()],
        default_runtime: "runc".into(),
        ..Gate::default()
    };
    let host = FakeHost::new();
    let run = |body: &str, gate: &Gate| {
        decide_with("POST", "/containers/create", body.as_bytes(), &host, gate)
    };
    let d = run(r#"{"HostConfig":{"Runtime":"runc"}}"#, &only_ours);
    assert_eq!(denied(&d).rule, RULE_RUNTIME);
    assert_eq!(denied(&d).field, "/HostConfig/Runtime");
    assert!(run(r#"{"HostConfig":{"Runtime":"vibe-shim"}}"#, &only_ours).allowed());
    // No runtime: the daemon default, runc here.
    let d = run(r#"{"HostConfig":{}}"#, &only_ours);
    assert!(denied(&d).value.contains("daemon default: runc"), "{d:?}");
    assert!(!run("null", &only_ours).allowed());
    let ours_default = Gate {
        default_runtime: "vibe-shim".into(),
        ..only_ours.clone()
    };
    assert!(run(r#"{"HostConfig":{}}"#, &ours_default).allowed());
    assert!(run(r#"{"Image":"x"}"#, &ours_default).allowed());
    // The top-level (deprecated) Runtime is judged as well.
    assert!(!run(
        r#"{"Runtime":"io.containerd.runc.v2","HostConfig":{}}"#,
        &ours_default
    )
    .allowed());
    assert!(!run(r#"{"Runtime":"x.runc.v2"}"#, &ours_default).allowed());
}

#[test]
fn missing_source_is_judged_by_its_nearest_ancestor() {
    let mut host = FakeHost::new();
    host.all_paths_exist = false;
    for p in ["/", "/srv", "/srv/wt", "/etc"] {
        host.canonical.insert(PathBuf::from(p), PathBuf::from(p));
    }
    // /srv/link -> /etc
    host.canonical
        .insert(PathBuf::from("/srv/wt/link"), PathBuf::from("/etc"));
    let run = |bind: &str| {
        let body = json!({"HostConfig": {"Binds": [bind]}}).to_string();
        decide_with(
            "POST",
            "/containers/create",
            body.as_bytes(),
            &host,
            &gate(),
        )
    };
    assert!(run("/srv/wt/new/dir:/x").allowed());
    assert!(!run("/var/vibe-new:/x").allowed());
    let d = run("/srv/wt/link/new:/x");
    assert!(denied(&d).value.contains("resolves to /etc/new"), "{d:?}");
}

#[test]
fn unreadable_or_unseen_bodies_are_refused() {
    for body in [
        "",
        "{",
        "[1]",
        "{\"HostConfig\":3}",
        "{} {}",
        "{\"Binds\":\"/etc:/x\"}",
    ] {
        assert!(!create(body).allowed(), "{body}");
    }
    let big = vec![b' '; MAX_BODY];
    let d = decide_with(
        "POST",
        "/containers/create",
        &big,
        &FakeHost::new(),
        &gate(),
    );
    assert!(denied(&d).reason.contains("1 MiB"));
}

#[test]
fn volume_create_with_bind_options() {
    let host = FakeHost::new();
    let run = |body: Value| {
        decide_with(
            "POST",
            "/v1.41/volumes/create",
            body.to_string().as_bytes(),
            &host,
            &gate(),
        )
    };
    let d =
        run(json!({"Name": "v", "DriverOpts": {"type": "none", "o": "bind", "device": "/etc"}}));
    assert_eq!(denied(&d).rule, RULE_VOLUME);
    // An allowed directory too: the driver resolves it again at each use.
    let d = run(json!({"Name": "v", "Driver": "local",
        "DriverOpts": {"type": "none", "o": "bind", "device": "/srv/wt/v"}}));
    assert!(denied(&d).reason.contains("--mount type=bind"), "{d:?}");
    assert!(run(json!({"Name": "v"})).allowed());
    assert!(run(json!({"Name": "v", "Driver": "plugin", "DriverOpts": {"x": "y"}})).allowed());
    let d = decide_with(
        "POST",
        "/volumes/create",
        br#"{"DriverOpts":{"type":"none"},"driveropts":{"device":"/etc"}}"#,
        &host,
        &gate(),
    );
    assert_eq!(denied(&d).rule, gojson::RULE);
}

#[test]
fn doors_refused_and_allowed() {
    let host = FakeHost::new();
    let run = |m: &str, uri: &str| decide_with(m, uri, b"", &host, &gate());
    for (m, uri, rule) in [
        ("GET", "/v1.41/containers/abc/archive?path=/x", RULE_ARCHIVE),
        ("HEAD", "/containers/abc/archive?path=/x", RULE_ARCHIVE),
        ("PUT", "/containers/abc/archive?path=/x", RULE_ARCHIVE),
        ("POST", "/v1.20/containers/abc/copy", RULE_ARCHIVE),
        ("POST", "/plugins/pull?remote=evil", RULE_PLUGINS),
        ("POST", "/plugins/evil/enable", RULE_PLUGINS),
        ("POST", "/services/create", RULE_SWARM),
        ("POST", "/swarm/join", RULE_SWARM),
        ("GET", "/x%zz", RULE_REQUEST),
    ] {
        let d = run(m, uri);
        assert_eq!(denied(&d).rule, rule, "{m} {uri}");
        assert!(d.message().starts_with("vibe-shim: "));
    }
    for (m, uri) in [
        ("GET", "/containers/abc/export"),
        ("POST", "/containers/abc/update"),
        ("POST", "/containers/abc/exec"),
        ("POST", "/build/prune"),
        ("GET", "/_ping"),
        ("POST", "/containers/abc/start"),
    ] {
        assert!(run(m, uri).allowed(), "{m} {uri}");
    }
}

#[test]
fn old_api_start_host_config_is_judged() {
    let host = FakeHost::new();
    let d = decide_with(
        "POST",
        "/v1.23/containers/abc/start",
        br#"{"Binds":["/etc:/x"]}"#,
        &host,
        &gate(),
    );
    assert_eq!(denied(&d).rule, RULE_BINDS);
    // Unseen body of unknown length: refused; an empty one is fine.
    let policy = policy();
    let cx = Cx {
        policy: &policy,
        gate: &gate(),
        host: &host,
        lockdown: &no_lockdown,
    };
    let empty = [("Content-Length".to_string(), "0".to_string())];
    let req = |headers| Request {
        method: "POST",
        uri: "/v1.23/containers/abc/start",
        headers,
        body: b"",
    };
    assert!(decide(&req(&empty), &cx).allowed());
    assert!(!decide(&req(&[]), &cx).allowed());
}

#[test]
fn message_is_one_line() {
    let d = create("{\"HostConfig\":{\"Binds\":[\"/etc/\\nx:/x\"]}}");
    let msg = d.message();
    assert!(!msg.contains('\n'), "{msg}");
    assert!(msg.contains("\\n"), "{msg}");
}

// ---- no input makes it panic ------------------------------------------------

const KEYS: &[&str] = &[
    "HostConfig",
    "hostconfig",
    "Binds",
    "bind\u{017F}",
    "Mounts",
    "Type",
    "Source",
    "Runtime",
    "VolumeOptions",
    "DriverConfig",
    "Name",
    "Options",
    "DriverOpts",
    "Driver",
    "type",
    "o",
    "device",
    "VolumesFrom",
    "\u{212A}",
];
const STRINGS: &[&str] = &[
    "/etc:/x",
    "/srv/wt:/w",
    "/srv/wt/../x:/y",
    "bind",
    "volume",
    "tmpfs",
    "none",
    "local",
    "/etc",
    "",
    "runc",
    "vibe-shim",
    "a:b:c:d",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(STRINGS).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

fn uri() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/containers/create".to_string()),
        Just("/v1.41/volumes/create".to_string()),
        Just("/v1.23/containers/x/start".to_string()),
        "(/v[0-9.]{0,5})?(/[a-z%0-9.]{0,10}){0,5}(\\?.{0,8})?",
        ".{0,40}",
    ]
}

proptest! {
    #[test]
    fn no_json_body_or_uri_panics(v in json_value(), uri in uri(), method in "(POST|GET|HEAD|PUT|post|[A-Z]{0,5})") {
        let body = v.to_string();
        let d = decide_with(&method, &uri, body.as_bytes(), &FakeHost::new(), &gate());
        prop_assert!(!d.message().contains('\n'));
    }

    #[test]
    fn no_byte_body_panics(body in prop::collection::vec(any::<u8>(), 0..256), uri in uri()) {
        let d = decide_with("POST", &uri, &body, &FakeHost::new(), &gate());
        prop_assert!(!d.message().contains('\n'));
    }
}

// ---- Docker 28 (API 1.51) ---------------------------------------------------

fn only_ours() -> Gate {
    Gate {
        runtimes: vec!["vibe-shim".into()],
        default_runtime: "runc".into(),
        ..Gate::default()
    }
}

#[test]
fn docker28_ignores_top_level_host_config_fields_so_runtime_is_the_default() {
    // Docker >= 23 decodes `container.CreateRequest`, which no longer embeds
    // a HostConfig: without `HostConfig`, a top-level `Runtime` is ignored
    // and the daemon default (runc here) runs. 20.10 would read it.
    let host = FakeHost::new();
    for body in [
        r#"{"Image":"x","Runtime":"vibe-shim"}"#,
        r#"{"Image":"x","Runtime":"vibe-shim","HostConfig":null}"#,
    ] {
        let d = decide_with(
            "POST",
            "/containers/create",
            body.as_bytes(),
            &host,
            &only_ours(),
        );
        assert_eq!(denied(&d).rule, RULE_RUNTIME, "{body}");
        assert!(denied(&d).value.contains("daemon default: runc"), "{d:?}");
    }
    let ours_default = Gate {
        default_runtime: "vibe-shim".into(),
        ..only_ours()
    };
    let body = br#"{"Image":"x","Runtime":"vibe-shim"}"#;
    assert!(decide_with("POST", "/containers/create", body, &host, &ours_default).allowed());
}

#[test]
fn docker28_mount_fields_the_gate_cannot_judge_are_refused() {
    for (mount, field) in [
        // type=image mounts an image's filesystem (dockerd does it).
        (
            json!({"Type":"image","Source":"busybox","Target":"/x","ImageOptions":{"Subpath":"etc"}}),
            "/HostConfig/Mounts/0/Type",
        ),
        (
            json!({"Type":"cluster","Source":"v","Target":"/x","ClusterOptions":{}}),
            "/HostConfig/Mounts/0/Type",
        ),
        // A subpath is resolved by dockerd inside volume content the
        // container writes.
        (
            json!({"Type":"volume","Source":"v","Target":"/x","VolumeOptions":{"Subpath":"a/b"}}),
            "/HostConfig/Mounts/0/VolumeOptions/Subpath",
        ),
        // Options for another type, and fields no API version has.
        (
            json!({"Type":"tmpfs","Target":"/x","ImageOptions":{"Subpath":"x"}}),
            "/HostConfig/Mounts/0/ImageOptions",
        ),
        (
            json!({"Type":"tmpfs","Target":"/x","FutureOptions":{"Source":"/etc"}}),
            "/HostConfig/Mounts/0/FutureOptions",
        ),
        (
            json!({"Type":"bind","Source":"/srv/wt","Target":"/x","BindOptions":{"FollowHost":true}}),
            "/HostConfig/Mounts/0/BindOptions/FollowHost",
        ),
        (
            json!({"Type":"volume","Source":"v","Target":"/x","VolumeOptions":{"Device":"/etc"}}),
            "/HostConfig/Mounts/0/VolumeOptions/Device",
        ),
        (
            json!({"Type":"volume","Source":"v","Target":"/x","VolumeOptions":{"DriverConfig":{"Name":"local","Device":"/etc"}}}),
            "/HostConfig/Mounts/0/VolumeOptions/DriverConfig/Device",
        ),
        (
            json!({"Type":"tmpfs","Target":"/x","TmpfsOptions":{"Source":"/etc"}}),
            "/HostConfig/Mounts/0/TmpfsOptions/Source",
        ),
    ] {
        let body = json!({"Image": "x", "HostConfig": {"Mounts": [mount]}}).to_string();
        let d = create(&body);
        assert_eq!(denied(&d).field, field, "{body}");
    }
    // What Docker 28's CLI sends for allowed mounts still passes.
    for mount in [
        json!({"Type":"bind","Source":"/srv/wt/a","Target":"/x","ReadOnly":true,
            "BindOptions":{"Propagation":"rprivate","NonRecursive":true,"CreateMountpoint":true,
            "ReadOnlyNonRecursive":true,"ReadOnlyForceRecursive":false},"Consistency":"default"}),
        json!({"Type":"volume","Source":"v","Target":"/x","VolumeOptions":{"NoCopy":true,
            "Labels":{"a":"b"},"Subpath":"","DriverConfig":{"Name":"local","Options":{}}}}),
        json!({"Type":"tmpfs","Target":"/x","TmpfsOptions":{"SizeBytes":1024,"Mode":448,
            "Options":[["exec"]]},"ImageOptions":null,"ClusterOptions":null}),
    ] {
        let body = json!({"Image": "x", "HostConfig": {"Mounts": [mount]}}).to_string();
        assert!(create(&body).allowed(), "{body}");
    }
    // CreateMountpoint makes dockerd create the source: judged like `-v`.
    let d = create(
        r#"{"HostConfig":{"Mounts":[{"Type":"bind","Source":"/etc/new","Target":"/x",
            "BindOptions":{"CreateMountpoint":true}}]}}"#,
    );
    assert_eq!(denied(&d).rule, RULE_BINDS);
}

#[test]
fn binds_dockerd_may_create_are_refused_unless_allowed() {
    // gate() allows them (most tests here judge the allowlist through -v).
    let strict = Gate {
        allow_bind_create: false,
        ..gate()
    };
    assert_eq!(
        strict,
        Gate {
            runtimes: strict.runtimes.clone(),
            ..Gate::default()
        }
    );
    let host = FakeHost::new();
    let run = |body: &str, gate: &Gate| {
        decide_with("POST", "/containers/create", body.as_bytes(), &host, gate)
    };
    let created = [
        // `-v`, existing or not: a container that writes the parent can
        // swap a component for a symlink before dockerd's MkdirAll at start.
        (
            r#"{"HostConfig":{"Binds":["/srv/wt/a:/x"]}}"#,
            "/HostConfig/Binds/0",
        ),
        (
            r#"{"Binds":["/srv/wt/a:/x:ro"],"HostConfig":null}"#,
            "/Binds/0",
        ),
        (
            r#"{"HostConfig":{"Mounts":[{"Type":"bind","Source":"/srv/wt/a","Target":"/x",
                "BindOptions":{"CreateMountpoint":true}}]}}"#,
            "/HostConfig/Mounts/0/Source",
        ),
    ];
    for (body, field) in created {
        assert!(run(body, &gate()).allowed(), "{body}");
        let d = run(body, &strict);
        refused_at(&d, RULE_BINDS, field, &body);
        assert!(denied(&d).reason.contains("--mount type=bind"), "{d:?}");
    }
    // A source outside the allowlist keeps the allowlist's reason.
    let d = run(r#"{"HostConfig":{"Binds":["/etc:/x"]}}"#, &strict);
    assert!(denied(&d).reason.contains("filesystem.bind"), "{d:?}");
    // What dockerd never creates still passes: `--mount type=bind`, and
    // named volumes given with `-v`.
    for body in [
        r#"{"HostConfig":{"Mounts":[{"Type":"bind","Source":"/srv/wt/a","Target":"/x"}]}}"#,
        r#"{"HostConfig":{"Mounts":[{"Type":"bind","Source":"/srv/wt/a","Target":"/x",
            "BindOptions":{"CreateMountpoint":false}}]}}"#,
        r#"{"HostConfig":{"Binds":["named:/x"]}}"#,
    ] {
        assert!(run(body, &strict).allowed(), "{body}");
    }
}

#[test]
fn docker28_device_requests_and_annotations_are_refused() {
    for (body, rule, field) in [
        // CDI (`--device vendor.com/gpu=0`, Docker 28) and `--gpus`: the
        // devices, mounts and hooks they add come from host spec files.
        (
            r#"{"HostConfig":{"DeviceRequests":[{"Driver":"cdi","DeviceIDs":["vendor.com/gpu=0"]}]}}"#,
            RULE_DEVICES,
            "/HostConfig/DeviceRequests",
        ),
        (
            r#"{"HostConfig":{"DeviceRequests":[{"Count":-1,"Capabilities":[["gpu"]]}]}}"#,
            RULE_DEVICES,
            "/HostConfig/DeviceRequests",
        ),
        // 20.10 reads the top-level copy when HostConfig is absent.
        (
            r#"{"DeviceRequests":[{"Driver":"nvidia","Count":1}]}"#,
            RULE_DEVICES,
            "/DeviceRequests",
        ),
        // API 1.43: runc reads `org.systemd.property.*` (TasksMax=infinity
        // under the systemd cgroup driver), containerd reads its own.
        (
            r#"{"HostConfig":{"Annotations":{"org.systemd.property.TasksMax":"uint64 18446744073709551615"}}}"#,
            RULE_ANNOTATIONS,
            "/HostConfig/Annotations",
        ),
        // A HostConfig field no API version up to 1.51 has.
        (
            r#"{"HostConfig":{"HostMounts":["/etc"]}}"#,
            RULE_BODY,
            "/HostConfig/HostMounts",
        ),
        // Go would fold this into Privileged; the gate wants exact keys.
        (
            r#"{"HostConfig":{"privileged":true}}"#,
            RULE_BODY,
            "/HostConfig/privileged",
        ),
    ] {
        let d = create(body);
        assert_eq!(denied(&d).rule, rule, "{body}");
        assert_eq!(denied(&d).field, field, "{body}");
    }
    for body in [
        r#"{"HostConfig":{"DeviceRequests":[],"Annotations":{}}}"#,
        r#"{"HostConfig":{"DeviceRequests":null,"Annotations":null}}"#,
        // What the 28 CLI sends for a plain `docker run`.
        r#"{"Hostname":"","Image":"x","HostConfig":{"Binds":null,"ContainerIDFile":"",
            "LogConfig":{"Type":"","Config":{}},"NetworkMode":"none","PortBindings":{},
            "RestartPolicy":{"Name":"no","MaximumRetryCount":0},"AutoRemove":true,
            "VolumeDriver":"","VolumesFrom":null,"ConsoleSize":[0,0],"CapAdd":null,
            "CapDrop":null,"CgroupnsMode":"","Dns":[],"DnsOptions":[],"DnsSearch":[],
            "ExtraHosts":null,"GroupAdd":null,"IpcMode":"","Cgroup":"","Links":null,
            "OomScoreAdj":0,"PidMode":"","Privileged":false,"PublishAllPorts":false,
            "ReadonlyRootfs":false,"SecurityOpt":null,"UTSMode":"","UsernsMode":"",
            "ShmSize":0,"Isolation":"","CpuShares":0,"Memory":0,"NanoCpus":0,
            "CgroupParent":"","BlkioWeight":0,"BlkioWeightDevice":[],
            "BlkioDeviceReadBps":[],"BlkioDeviceWriteBps":[],"BlkioDeviceReadIOps":[],
            "BlkioDeviceWriteIOps":[],"CpuPeriod":0,"CpuQuota":0,"CpuRealtimePeriod":0,
            "CpuRealtimeRuntime":0,"CpusetCpus":"","CpusetMems":"","Devices":[],
            "DeviceCgroupRules":null,"DeviceRequests":null,"MemoryReservation":0,
            "MemorySwap":0,"MemorySwappiness":null,"OomKillDisable":null,"PidsLimit":null,
            "Ulimits":[],"CpuCount":0,"CpuPercent":0,"IOMaximumIOps":0,
            "IOMaximumBandwidth":0,"MaskedPaths":null,"ReadonlyPaths":null,"Init":null,
            "Runtime":"vibe-shim"},"NetworkingConfig":{"EndpointsConfig":{}}}"#,
    ] {
        assert!(create(body).allowed(), "{body}");
    }
}

#[test]
fn local_volume_bind_flag_is_read_as_moby_reads_it() {
    // moby/sys/mount matches `o` flags exactly: " bind" is fs data, not
    // MS_BIND, so the device is mounted as `type`, not bound.
    let host = FakeHost::new();
    let run = |body: Value| {
        decide_with(
            "POST",
            "/volumes/create",
            body.to_string().as_bytes(),
            &host,
            &gate(),
        )
    };
    let d = run(
        json!({"Name": "v", "DriverOpts": {"type": "ext4", "o": " bind", "device": "/srv/wt/disk.img"}}),
    );
    assert_eq!(denied(&d).rule, RULE_VOLUME);
    let d = run(
        json!({"Name": "v", "DriverOpts": {"type": "none", "o": "ro,rbind ", "device": "/srv/wt/a"}}),
    );
    assert_eq!(denied(&d).rule, RULE_VOLUME);
    // A bind read as moby reads it is refused as a bind.
    let d = run(
        json!({"Name": "v", "DriverOpts": {"type": "none", "o": "ro,rbind", "device": "/srv/wt/a"}}),
    );
    assert!(denied(&d).reason.contains("--mount type=bind"), "{d:?}");
}

#[test]
fn docker28_routes() {
    let host = FakeHost::new();
    let run = |m: &str, uri: &str| decide_with(m, uri, b"", &host, &gate());
    for (m, uri, rule) in [
        ("HEAD", "/v1.51/containers/abc/archive?path=/", RULE_ARCHIVE),
        ("GET", "/v1.51/containers/abc/archive?path=/", RULE_ARCHIVE),
        ("PUT", "/v1.51/containers/abc/archive?path=/", RULE_ARCHIVE),
        (
            "PUT",
            "/v1.51/containers/abc/%61rchive?path=/",
            RULE_ARCHIVE,
        ),
        ("PUT", "/v1.51/containers/abc/archive/?path=/", RULE_ARCHIVE),
        ("POST", "/v1.51/plugins/create?name=x", RULE_PLUGINS),
        ("POST", "/v1.51/plugins/x/upgrade?remote=y", RULE_PLUGINS),
        ("POST", "/v1.51/services/create", RULE_SWARM),
        ("POST", "/v1.51/swarm/init", RULE_SWARM),
    ] {
        assert_eq!(denied(&run(m, uri)).rule, rule, "{m} {uri}");
    }
    for (m, uri) in [
        ("GET", "/v1.51/containers/abc/export"),
        ("POST", "/v1.51/commit?container=abc"),
        ("POST", "/v1.51/containers/abc/exec"),
        ("POST", "/v1.51/secrets/create"),
        ("POST", "/v1.51/configs/create"),
    ] {
        assert!(run(m, uri).allowed(), "{m} {uri}");
    }
}

#[test]
fn per_interface_sysctls_dockerd_sets_itself_are_refused() {
    let opt = r#"{"com.docker.network.endpoint.sysctls":"net.ipv4.conf.IFNAME.route_localnet=1"}"#;
    for body in [
        format!(
            r#"{{"Image":"x","NetworkingConfig":{{"EndpointsConfig":{{"bridge":{{"DriverOpts":{opt}}}}}}}}}"#
        ),
        format!(
            r#"{{"Image":"x","networkingconfig":{{"EndpointsConfig":{{"bridge":{{"DriverOpts":{opt}}}}}}}}}"#
        ),
        format!(
            r#"{{"Image":"x","NetworkingConfig":{{"EndpointsConfig":{{"n":{{"driveropts":{opt}}}}}}}}}"#
        ),
        r#"{"Image":"x","HostConfig":{"Sysctls":{"net.ipv4.conf.eth0.route_localnet":"1"}}}"#
            .into(),
        r#"{"Image":"x","HostConfig":{"Sysctls":{"net.ipv6.conf.all.forwarding":"1"}}}"#.into(),
        r#"{"Image":"x","Sysctls":{"net.ipv4.conf.eth0.proxy_arp":"1"}}"#.into(),
    ] {
        let d = create(&body);
        assert!(d.denial.is_some(), "allowed: {body}");
        let rule = denied(&d).rule;
        assert!(
            [RULE_SYSCTLS, RULE_BODY, "json-keys"].contains(&rule),
            "{rule}: {body}"
        );
    }
    // Namespaced sysctls the runtime judges, other driver options: allowed.
    for body in [
        r#"{"Image":"x","HostConfig":{"Sysctls":{"net.ipv4.ip_unprivileged_port_start":"0"}}}"#,
        r#"{"Image":"x","NetworkingConfig":{"EndpointsConfig":{"bridge":{"DriverOpts":{"com.docker.network.endpoint.ifname":"eth1"}}}}}"#,
        r#"{"Image":"x","NetworkingConfig":{"EndpointsConfig":{"bridge":null}}}"#,
        r#"{"Image":"x","NetworkingConfig":null}"#,
    ] {
        assert!(create(body).denial.is_none(), "refused: {body}");
    }
    let connect = |body: &str| {
        decide_with(
            "POST",
            "/v1.51/networks/n1/connect",
            body.as_bytes(),
            &FakeHost::new(),
            &gate(),
        )
    };
    let d = connect(&format!(
        r#"{{"Container":"c","EndpointConfig":{{"DriverOpts":{opt}}}}}"#
    ));
    assert_eq!(denied(&d).rule, RULE_SYSCTLS);
    assert!(
        connect(r#"{"Container":"c","EndpointConfig":{"Aliases":["a"]}}"#)
            .denial
            .is_none()
    );
    assert!(connect(r#"{"Container":"c"}"#).denial.is_none());
}

#[test]
fn volumes_from_is_refused() {
    for (body, field) in [
        (
            r#"{"HostConfig":{"VolumesFrom":["other:ro"]}}"#,
            "/HostConfig/VolumesFrom",
        ),
        (
            r#"{"VolumesFrom":["other"],"HostConfig":null}"#,
            "/VolumesFrom",
        ),
    ] {
        let d = create(body);
        refused_at(&d, RULE_VOLUMES_FROM, field, &body);
    }
    for body in [
        r#"{"HostConfig":{"VolumesFrom":null}}"#,
        r#"{"HostConfig":{"VolumesFrom":[]}}"#,
    ] {
        assert!(create(body).allowed());
    }
}

#[test]
fn log_drivers_that_send_elsewhere_are_refused() {
    let run = |log: Value| {
        let body = json!({"Image": "x", "HostConfig": {"LogConfig": log}}).to_string();
        create(&body)
    };
    // What the CLI sends by default, and local drivers with their options.
    for log in [
        json!({"Type": "", "Config": {}}),
        json!({"Type": "", "Config": {"max-size": "10m", "tag": "{{.Name}}"}}),
        json!({"Type": "json-file", "Config": {"max-size": "10m", "max-file": "3"}}),
        json!({"Type": "local", "Config": {"compress": "true"}}),
        json!({"Type": "journald", "Config": {"tag": "x"}}),
        json!({"Type": "none"}),
        json!(null),
    ] {
        assert!(run(log.clone()).allowed(), "{log}");
    }
    for (log, field) in [
        (
            json!({"Type": "syslog", "Config": {"syslog-address": "tcp://127.0.0.1:1"}}),
            "/HostConfig/LogConfig/Type",
        ),
        (json!({"Type": "splunk"}), "/HostConfig/LogConfig/Type"),
        (json!({"Type": "gelf"}), "/HostConfig/LogConfig/Type"),
        (json!({"Type": "fluentd"}), "/HostConfig/LogConfig/Type"),
        (json!({"Type": "awslogs"}), "/HostConfig/LogConfig/Type"),
        // The daemon's default driver could be syslog: no address for it.
        (
            json!({"Type": "", "Config": {"syslog-address": "udp://1.2.3.4:514"}}),
            "/HostConfig/LogConfig/Config/syslog-address",
        ),
        (
            json!({"Type": "json-file", "Config": {"max-buffer-size": "4g"}}),
            "/HostConfig/LogConfig/Config/max-buffer-size",
        ),
        (
            json!({"Type": "none", "Config": {"tag": "x"}}),
            "/HostConfig/LogConfig/Config/tag",
        ),
    ] {
        let d = run(log.clone());
        refused_at(&d, RULE_LOG, field, &log);
    }
    // Go reads `logconfig` / `type` as LogConfig / Type: refused unread.
    let d = create(r#"{"HostConfig":{"LogConfig":{"type":"syslog"}}}"#);
    assert!(!d.allowed(), "{d:?}");
    // The 20.10 top-level HostConfig copy is judged too.
    let d = create(r#"{"LogConfig":{"Type":"syslog"}}"#);
    assert_eq!(denied(&d).field, "/LogConfig/Type");
}

#[test]
fn network_create_may_not_touch_the_hosts_networking() {
    let host = FakeHost::new();
    let run = |body: Value| {
        decide_with(
            "POST",
            "/v1.41/networks/create",
            body.to_string().as_bytes(),
            &host,
            &gate(),
        )
    };
    // What the 20.10 CLI sends for `docker network create n`.
    let cli = json!({"Name": "n", "CheckDuplicate": true, "Driver": "bridge", "Scope": "",
        "EnableIPv6": false, "IPAM": {"Driver": "default", "Options": {}, "Config": []},
        "Internal": false, "Attachable": false, "Ingress": false, "ConfigOnly": false,
        "ConfigFrom": null, "Options": {}, "Labels": {"com.docker.compose.network": "n"}});
    assert!(run(cli.clone()).allowed());
    assert!(run(json!({"Name": "n"})).allowed());
    assert!(run(json!({"Name": "n", "Internal": true,
        "Options": {"com.docker.network.driver.mtu": "1400"}}))
    .allowed());
    for (change, field) in [
        (
            json!({"Driver": "macvlan", "Options": {"parent": "eth0"}}),
            "/Driver",
        ),
        (json!({"Driver": "ipvlan"}), "/Driver"),
        (json!({"Driver": "host"}), "/Driver"),
        (
            json!({"Options": {"com.docker.network.bridge.name": "docker0"}}),
            "/Options/com.docker.network.bridge.name",
        ),
        (
            json!({"Options": {"com.docker.network.bridge.gateway_mode_ipv4": "nat-unprotected"}}),
            "/Options/com.docker.network.bridge.gateway_mode_ipv4",
        ),
        (
            json!({"IPAM": {"Driver": "default", "Config": [{"Subnet": "198.51.100.0/24"}]}}),
            "/IPAM/Config",
        ),
        (json!({"IPAM": {"Driver": "other"}}), "/IPAM/Driver"),
        (json!({"ConfigFrom": {"Network": "cfg"}}), "/ConfigFrom"),
        (json!({"ConfigOnly": true}), "/ConfigOnly"),
        (json!({"Ingress": true}), "/Ingress"),
        (json!({"Scope": "swarm"}), "/Scope"),
    ] {
        let mut body = cli.clone();
        for (k, v) in change.as_object().unwrap() {
            body[k] = v.clone();
        }
        let d = run(body.clone());
        refused_at(&d, RULE_NETWORK, field, &body);
    }
    // Folded keys are read as Go reads them: refused unread.
    let d = post("/networks/create", br#"{"Name":"n","driver":"macvlan"}"#);
    assert!(!d.allowed(), "{d:?}");
    // A field of no Docker version.
    assert_eq!(
        denied(&run(json!({"Name": "n", "Bogus": 1}))).rule,
        RULE_NETWORK
    );
}

// ---- builds, BuildKit and cgroup parents --------------------------------------

/// A request judged with these headers and this lockdown answer.
fn judge_full(
    method: &str,
    uri: &str,
    headers: &[(String, String)],
    gate: &Gate,
    lockdown: LockdownCheck,
) -> Decision {
    let policy = policy();
    let host = FakeHost::new();
    let cx = Cx {
        policy: &policy,
        gate,
        host: &host,
        lockdown,
    };
    let req = Request {
        method,
        uri,
        headers,
        body: b"",
    };
    decide(&req, &cx)
}

fn build(uri: &str, lockdown: LockdownCheck) -> Decision {
    judge_full("POST", uri, &[], &gate(), lockdown)
}

#[test]
fn builds_and_buildkit_are_refused_without_lockdown() {
    for uri in [
        "/v1.41/build",
        "/build?t=x&version=1",
        "/v1.51/build?version=2&remote=client-session&session=abc",
        "/%62uild",
    ] {
        let d = build(uri, &no_lockdown);
        refused_at(&d, RULE_BUILD, "lockdown", &uri);
        assert!(denied(&d).value.contains("no lockdown record"), "{d:?}");
        assert!(build(uri, &locked_down).allowed(), "{uri}");
    }
    for uri in ["/session", "/v1.41/grpc", "/v1.51/session/"] {
        refused_at(&build(uri, &no_lockdown), RULE_BUILD, "lockdown", &uri);
        assert!(build(uri, &locked_down).allowed(), "{uri}");
    }
    // The legacy builder's steps run under the daemon's default runtime:
    // under lockdown too, it must be one the gate accepts.
    let other_default = Gate {
        default_runtime: "crun".into(),
        ..gate()
    };
    let d = judge_full("POST", "/build", &[], &other_default, &locked_down);
    refused_at(&d, RULE_BUILD, "lockdown", &"crun default");
    assert!(denied(&d).value.contains("crun"), "{d:?}");
    // Other build routes run nothing.
    assert!(build("/build/prune", &no_lockdown).allowed());
    assert!(build("/build/cancel?id=x", &no_lockdown).allowed());
}

#[test]
fn build_parameters_are_judged_before_lockdown() {
    for (uri, field) in [
        ("/build?networkmode=host", "?networkmode"),
        ("/build?networkmode=container:victim", "?networkmode"),
        ("/build?networkmode=mynet", "?networkmode"),
        ("/build?net%77orkmode=host", "?networkmode"),
        ("/build?remote=http://169.254.169.254/ctx.tar", "?remote"),
        ("/build?remote=git://127.0.0.1/x.git", "?remote"),
        ("/build?remote=https://github.com/a/b.git%23main", "?remote"),
        ("/build?isolation=hyperv", "?isolation"),
        ("/build?securityopt=", "?securityopt"),
        ("/build?version=3", "?version"),
        ("/build?shmsize=1g", "?shmsize"),
        ("/build?buildargs=%7B", "?buildargs"),
        ("/build?buildargs=%7B%22A%22:1%7D", "?buildargs"),
        ("/build?labels=[]", "?labels"),
        ("/build?cachefrom=%7B%7D", "?cachefrom"),
        ("/build?ulimits=%7B%7D", "?ulimits"),
        ("/build?outputs=[%7B%22Type%22:%22exec%22%7D]", "?outputs"),
        // Unknown to the route: refused, as unknown create fields are.
        ("/build?privileged=1", "?privileged"),
        ("/build?NetworkMode=host", "?NetworkMode"),
        ("/build?=x", "?"),
        // FormValue reads the first only: a repeat is refused.
        ("/build?networkmode=none&networkmode=host", "?networkmode"),
        ("/build?remote=&remote=http://x/", "?remote"),
        // Go < 1.17 splits on `;`, later ones drop the pair.
        ("/build?t=a;networkmode=host", "RequestURI"),
        ("/build?t=%zz", "RequestURI"),
        ("/build?t=%ff", "RequestURI"),
    ] {
        for lockdown in [&no_lockdown as LockdownCheck, &locked_down] {
            refused_at(&build(uri, lockdown), RULE_BUILD, field, &uri);
        }
    }
    // What the steps get under lockdown (the runtime judges the rest).
    let uri = "/v1.41/build?t=a&t=b&extrahosts=h:192.0.2.1&extrahosts=g:192.0.2.2\
               &networkmode=none&remote=&dockerfile=Dockerfile&q=1&nocache=1&rm=1&forcerm=0\
               &pull=1&memory=1&memswap=-1&cpushares=2&cpusetcpus=0&cpusetmems=0\
               &cpuperiod=100000&cpuquota=50000&shmsize=67108864&squash=0&platform=linux/amd64\
               &target=t&version=1&cgroupparent=&isolation=default&session=s&buildid=b\
               &buildargs=%7B%22A%22:%22x%22,%22B%22:null%7D&labels=%7B%22l%22:%22v%22%7D\
               &cachefrom=[%22img%22]&ulimits=[%7B%22Name%22:%22nofile%22,%22Hard%22:9,%22Soft%22:9%7D]\
               &outputs=[%7B%22Type%22:%22moby%22,%22Attrs%22:%7B%7D%7D]";
    assert!(
        build(uri, &locked_down).allowed(),
        "{:?}",
        build(uri, &locked_down)
    );
    for mode in ["default", "bridge", "none", ""] {
        let uri = format!("/build?networkmode={mode}");
        assert!(build(&uri, &locked_down).allowed(), "{uri}");
    }
    assert!(build("/build?remote=client-session&version=2", &locked_down).allowed());
    // Go folds `type` to Type: judged as dockerd reads it.
    let uri = "/build?outputs=[%7B%22type%22:%22moby%22%7D]";
    assert!(!build(uri, &locked_down).allowed());
}

#[test]
fn build_form_bodies_are_refused() {
    // Go's ParseForm reads an urlencoded body into r.Form ahead of the
    // query; the plugin is not shown that body.
    for ct in [
        "application/x-www-form-urlencoded",
        "Application/X-WWW-Form-Urlencoded; charset=utf-8",
        "multipart/form-data; boundary=x",
    ] {
        let headers = [("Content-Type".to_string(), ct.to_string())];
        for lockdown in [&no_lockdown as LockdownCheck, &locked_down] {
            let d = judge_full("POST", "/build", &headers, &gate(), lockdown);
            refused_at(&d, RULE_BUILD, "Content-Type", &ct);
        }
    }
    let tar = [("Content-Type".to_string(), "application/x-tar".to_string())];
    assert!(judge_full("POST", "/build", &tar, &gate(), &locked_down).allowed());
}

#[test]
fn cgroup_parents_are_refused_unless_allowed() {
    let allowing = Gate {
        allow_cgroup_parent: true,
        ..gate()
    };
    let host = FakeHost::new();
    for (body, field) in [
        (
            r#"{"HostConfig":{"CgroupParent":"/docker/victim"}}"#,
            "/HostConfig/CgroupParent",
        ),
        (
            r#"{"HostConfig":{"CgroupParent":"/"}}"#,
            "/HostConfig/CgroupParent",
        ),
        (
            r#"{"HostConfig":{"CgroupParent":"system.slice"}}"#,
            "/HostConfig/CgroupParent",
        ),
        // 20.10 reads the top level when HostConfig is absent.
        (
            r#"{"Image":"x","CgroupParent":"/docker/victim"}"#,
            "/CgroupParent",
        ),
    ] {
        let d = decide_with(
            "POST",
            "/containers/create",
            body.as_bytes(),
            &host,
            &gate(),
        );
        refused_at(&d, RULE_CGROUP_PARENT, field, &body);
        let d = decide_with(
            "POST",
            "/containers/create",
            body.as_bytes(),
            &host,
            &allowing,
        );
        assert!(d.allowed(), "{body}: {d:?}");
    }
    // Spelled so Go reads CgroupParent while serde would not.
    for body in [
        r#"{"HostConfig":{"cgroupparent":"/docker/victim"}}"#,
        r#"{"HostConfig":{"CgroupParent":"","CgroupParent":"/docker/victim"}}"#,
    ] {
        let d = decide_with(
            "POST",
            "/containers/create",
            body.as_bytes(),
            &host,
            &gate(),
        );
        assert_eq!(denied(&d).rule, gojson::RULE, "{body}");
    }
    let d = decide_with(
        "POST",
        "/containers/create",
        br#"{"HostConfig":{"CgroupParent":7}}"#,
        &host,
        &allowing,
    );
    assert_eq!(denied(&d).rule, RULE_BODY);
    assert!(create(r#"{"HostConfig":{"CgroupParent":""}}"#).allowed());
    assert!(create(r#"{"HostConfig":{"CgroupParent":null}}"#).allowed());
    // The pre-1.24 start's HostConfig too.
    let d = decide_with(
        "POST",
        "/v1.23/containers/abc/start",
        br#"{"CgroupParent":"/docker/victim"}"#,
        &host,
        &gate(),
    );
    refused_at(&d, RULE_CGROUP_PARENT, "/CgroupParent", &"old start");
    // A build's, judged before lockdown.
    for lockdown in [&no_lockdown as LockdownCheck, &locked_down] {
        let d = build("/build?cgroupparent=/docker/victim", lockdown);
        refused_at(&d, RULE_CGROUP_PARENT, "?cgroupparent", &"build");
    }
    let d = judge_full(
        "POST",
        "/build?cgroupparent=/docker/victim",
        &[],
        &allowing,
        &locked_down,
    );
    assert!(d.allowed(), "{d:?}");
}

proptest! {
    /// Whatever the query, a build is judged without panicking, and never
    /// allowed without lockdown.
    #[test]
    fn any_build_query_is_refused_without_lockdown(query in "[a-z%+;=&:/.0-9A-F\\[\\]{}\"]{0,80}") {
        let uri = format!("/build?{query}");
        prop_assert!(!build(&uri, &no_lockdown).allowed());
        let _ = build(&uri, &locked_down);
    }
}
