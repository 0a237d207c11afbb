use std::path::{Path, PathBuf};

use super::*;

fn parse(text: &str) -> Result<Policy, ConfigError> {
    Policy::from_toml_str(text, Path::new("/etc/vibe-shim/config.toml"))
}

#[test]
fn empty_file_is_the_default_policy() {
    let p = parse("").expect("empty config parses");
    assert_eq!(p, Policy::default());
    assert!(p.filesystem.readonly_root);
    assert_eq!(p.process.pids_limit, 4096);
    assert_eq!(p.network.mode, NetworkMode::None);
}

#[test]
fn runtime_argv_keys_default_closed_and_need_absolute_dirs() {
    let p = parse("").unwrap();
    assert!(!p.runtime.allow_checkpoint && !p.runtime.allow_no_pivot);
    assert!(p.runtime.checkpoint_dirs.is_empty());
    assert!(p
        .runtime
        .pid_file_dirs
        .contains(&PathBuf::from("/run/containerd")));
    let p = parse("[runtime]\nallow_checkpoint = true\ncheckpoint_dirs = [\"/var/lib/ckpt\"]\npid_file_dirs = []\n").unwrap();
    assert!(p.runtime.allow_checkpoint);
    assert!(p.runtime.pid_file_dirs.is_empty());
    for bad in ["checkpoint_dirs = [\"ckpt\"]", "pid_file_dirs = [\"/\"]"] {
        let err = parse(&format!("[runtime]\n{bad}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("runtime."), "{err}");
    }
}

#[test]
fn unknown_key_names_file_and_line() {
    let err = parse("[process]\npids_limit = 5\nbogus = 1\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("/etc/vibe-shim/config.toml"), "{err}");
    assert!(err.contains("bogus"), "{err}");
    assert!(err.contains("line 3"), "{err}");
}

#[test]
fn wrong_type_is_an_error() {
    let err = parse("[process]\npids_limit = \"many\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn capabilities_are_normalised_and_dangerous_ones_refused() {
    let p = parse("[process]\ncapabilities = [\"net_bind_service\", \"CAP_CHOWN\"]\n").unwrap();
    assert_eq!(
        p.process.capabilities,
        ["CAP_NET_BIND_SERVICE", "CAP_CHOWN"]
    );
    assert!(parse("[process]\ncapabilities = [\"NET_ADMIN\"]\n").is_err());
    assert!(parse("[process]\ncapabilities = [\"CAP_NOPE\"]\n").is_err());
}

#[test]
fn pids_limit_must_be_positive() {
    assert!(parse("[process]\npids_limit = 0\n").is_err());
    assert!(parse("[process]\npids_limit = -1\n").is_err());
}

#[test]
fn user_must_be_numeric() {
    assert_eq!(
        parse("[process]\nuser = \"1000:1000\"\n")
            .unwrap()
            .process
            .forced_user(),
        Some((1000, 1000))
    );
    assert!(parse("[process]\nuser = \"agent\"\n").is_err());
}

#[test]
fn env_patterns() {
    let p = Policy::default();
    assert!(p.process.env_allowed("LC_ALL"));
    assert!(p.process.env_allowed("PATH"));
    assert!(!p.process.env_allowed("GITHUB_TOKEN"));
    assert!(!p.process.env_allowed("LC_GITHUB_TOKEN"));
    assert!(!p.process.env_allowed("PATHX"));
}

#[test]
fn allow_entries_parse() {
    let r: AllowRule = "192.0.2.10".parse().unwrap();
    assert_eq!((r.ports, r.protocol), (None, Protocol::Tcp));
    let r: AllowRule = "198.51.100.0/24:443".parse().unwrap();
    assert_eq!(r.ports, Some((443, 443)));
    assert_eq!(r.net.to_string(), "198.51.100.0/24");
    let r: AllowRule = "203.0.113.5:8000-8100/udp".parse().unwrap();
    assert_eq!((r.ports, r.protocol), (Some((8000, 8100)), Protocol::Udp));
    let r: AllowRule = "[2001:db8::1]:443".parse().unwrap();
    assert_eq!(r.to_string(), "[2001:db8::1/128]:443");
    let r: AllowRule = "2001:db8::/32".parse().unwrap();
    assert_eq!(r.ports, None);
    assert!("300.1.1.1".parse::<AllowRule>().is_err());
    assert!("1.2.3.4:0".parse::<AllowRule>().is_err());
    assert!("1.2.3.4:9-3".parse::<AllowRule>().is_err());
}

#[test]
fn preview_ports_only_in_proxy_mode_and_strictly_parsed() {
    let proxy = "[network]\nmode = \"proxy\"\nhosts = [\"api.example\"]\n";
    let p = parse(&format!("{proxy}preview_ports = [8000, \"3000-3999\"]\n")).unwrap();
    let got: Vec<(u16, u16)> = p
        .network
        .preview_ports
        .iter()
        .map(|r| (r.lo, r.hi))
        .collect();
    assert_eq!(got, [(8000, 8000), (3000, 3999)]);
    assert!(parse(proxy).unwrap().network.preview_ports.is_empty());
    for bad in [
        "0",
        "65536",
        "-1",
        "\"9-3\"",
        "\"0-10\"",
        "\"80-\"",
        "\" 80\"",
        "\"80/udp\"",
        "\"x\"",
        "8.5",
        "true",
        // Overlaps, in either order, and a repeat.
        "8000, \"7000-8000\"",
        "\"3000-3999\", 3500",
        "8000, 8000",
    ] {
        let text = format!("{proxy}preview_ports = [{bad}]\n");
        let err = parse(&text).expect_err(&text).to_string();
        assert!(
            err.contains("preview_ports") || err.contains("port"),
            "{text}: {err}"
        );
    }
    for mode in ["none", "allowlist", "open"] {
        let allow = if mode == "allowlist" {
            "allow = [\"192.0.2.1\"]\n"
        } else {
            ""
        };
        let text = format!("[network]\nmode = \"{mode}\"\n{allow}preview_ports = [8000]\n");
        let err = parse(&text).expect_err(&text).to_string();
        assert!(err.contains("network.preview_ports"), "{text}: {err}");
    }
    // A different list is a different tag, and no list keeps the old tag.
    let a = parse(&format!("{proxy}preview_ports = [8000]\n")).unwrap();
    let b = parse(&format!("{proxy}preview_ports = [8001]\n")).unwrap();
    let c = parse(proxy).unwrap();
    assert_ne!(policy_tag(&a.network), policy_tag(&b.network));
    assert_ne!(policy_tag(&a.network), policy_tag(&c.network));
    let mut d = c.network.clone();
    d.hosts.clear();
    assert_eq!(policy_tag(&c.network), policy_tag(&d));
}

#[test]
fn allowlist_mode_needs_entries() {
    assert!(parse("[network]\nmode = \"allowlist\"\n").is_err());
    assert!(parse("[network]\nmode = \"none\"\nallow = [\"1.2.3.4\"]\n").is_err());
    let p = parse("[network]\nmode = \"allowlist\"\nallow = [\"1.2.3.4:80\"]\n").unwrap();
    assert_eq!(p.network.allow.len(), 1);
    assert!(!p.network.inbound, "inbound is off by default");
    assert!(parse("[network]\ninbound = true\n").is_err());
    let p = parse("[network]\nmode = \"open\"\ninbound = true\n").unwrap();
    assert!(p.network.inbound);
    assert!(parse("[network]\nresolvers = [\"192.0.2.53\"]\n").is_err());
    assert!(parse("[network]\ndns = true\nresolvers = [\"bogus\"]\n").is_err());
    let p =
        parse("[network]\ndns = true\nresolvers = [\"192.0.2.53\", \"2001:db8::53\"]\n").unwrap();
    assert_eq!(p.network.resolvers.len(), 2);
}

#[test]
fn resources_defaults_and_sizes() {
    let r = parse("").unwrap().resources;
    assert_eq!(r.memory_max, ByteSize(4 << 30));
    assert_eq!(r.tmpfs_max, ByteSize(1 << 30));
    assert_eq!(r.cpu_quota(100_000), 200_000);
    assert_eq!(r.cpu_weight_max(), 100);
    assert_eq!(r.rlimits["RLIMIT_RTPRIO"], 0);
    let p = parse("[resources]\nmemory_max = \"64m\"\ntmpfs_max = 16777216\ncpus = 0.5\n").unwrap();
    assert_eq!(p.resources.memory_max, ByteSize(64 << 20));
    assert_eq!(p.resources.tmpfs_max, ByteSize(16 << 20));
    assert_eq!(p.resources.cpu_quota(100_000), 50_000);
    assert_eq!(p.resources.cpu_quota(1000), 1000);
    assert_eq!(p.resources.kernel_tcp(), 64 << 20);
    let p = parse("[resources]\nkernel_tcp_max = \"16m\"\n").unwrap();
    assert_eq!(p.resources.kernel_tcp(), 16 << 20);
    for (text, bytes) in [
        ("1", Some(1)),
        ("64k", Some(64 << 10)),
        ("64M", Some(64 << 20)),
        ("4GiB", Some(4 << 30)),
        ("2gb", Some(2 << 30)),
        ("1t", Some(1 << 40)),
        ("", None),
        ("m", None),
        ("-1", None),
        ("0x10", None),
        ("1.5g", None),
        ("9999999999999999999g", None),
        ("1q", None),
    ] {
        assert_eq!(parse_size(text), bytes, "{text}");
    }
}

#[test]
fn resources_are_checked() {
    for bad in [
        "memory_max = \"1k\"",
        "memory_max = \"lots\"",
        "memory_max = -1",
        "cpus = 0.0",
        "cpus = -1.0",
        "cpus = nan",
        "cpu_shares_max = 1",
        "tmpfs_max = 0",
        "kernel_tcp_max = \"4k\"",
        "kernel_tcp_max = -1",
        "bogus = 1",
        "rlimits = { RLIMIT_BOGUS = 1 }",
        "rlimits = { nofile = -1 }",
    ] {
        assert!(parse(&format!("[resources]\n{bad}\n")).is_err(), "{bad}");
    }
}

#[test]
fn rlimit_table_is_merged_over_the_defaults() {
    let p = parse("[resources.rlimits]\nnofile = 4096\nRLIMIT_CORE = 0\n").unwrap();
    let r = &p.resources.rlimits;
    assert_eq!(r["RLIMIT_NOFILE"], 4096);
    assert_eq!(r["RLIMIT_CORE"], 0);
    assert_eq!(r["RLIMIT_RTPRIO"], 0);
    assert_eq!(r["RLIMIT_MEMLOCK"], 64 << 20);
    assert_eq!(r.len(), 5);
}

#[test]
fn locale_names_are_exact_and_prefixes_warn() {
    let p = Policy::default();
    assert!(p.process.env_allowed("LC_ALL"));
    assert!(p.process.env_allowed("LANGUAGE"));
    assert!(!p.process.env_allowed("LC_GITHUB_TOKEN"));
    assert!(p.warnings().is_empty());
    let p = parse("[process]\nenv_allow = [\"PATH\", \"LC_*\", \"MY_TOKEN_*\"]\n").unwrap();
    let warnings = p.warnings();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("LC_GITHUB_TOKEN"), "{warnings:?}");
    assert!(warnings[1].contains("MY_TOKEN_X"), "{warnings:?}");
}

#[test]
fn tmpfs_entries_are_paths_or_tables_with_a_mode() {
    let p = parse(
        "[filesystem]\ntmpfs = [\"/tmp\", { path = \"/cache\", mode = \"0700\" }, \
         { path = \"/w\", mode = \"755\" }]\n",
    )
    .unwrap();
    let t = &p.filesystem.tmpfs;
    assert_eq!(t[0], TmpfsEntry::new("/tmp"));
    assert_eq!(t[0].mode, TmpfsMode(0o1777));
    assert_eq!(
        (t[1].path.to_str(), t[1].mode),
        (Some("/cache"), TmpfsMode(0o700))
    );
    assert_eq!(t[2].mode, TmpfsMode(0o755));
    for bad in [
        "{ path = \"/c\" }",
        "{ path = \"/c\", mode = \"0700\", owner = \"x\" }",
        "{ path = \"/c\", mode = 448 }",
        "{ path = \"/c\", mode = \"4755\" }",
        "{ path = \"/c\", mode = \"2777\" }",
        "{ path = \"/c\", mode = \"0o700\" }",
        "{ path = \"/c\", mode = \"77\" }",
        "{ path = \"/c\", mode = \"01777\" }",
        "\"relative\"",
        "\"/tmp/..\"",
        "\"/tmp\", \"/tmp/\"",
        "7",
    ] {
        let err = parse(&format!("[filesystem]\ntmpfs = [{bad}]\n"));
        assert!(err.is_err(), "{bad}");
    }
    // The effective policy shows every mode explicitly.
    let text = toml::to_string(&Policy::default()).unwrap();
    assert!(text.contains("mode = \"1777\""), "{text}");
    assert_eq!(parse(&text).unwrap(), Policy::default());
}

#[test]
fn tool_paths_must_be_absolute() {
    for (section, key) in [("runtime", "path"), ("network", "nft")] {
        let err = parse(&format!("[{section}]\n{key} = \"nft\"\n")).unwrap_err();
        assert!(err.to_string().contains("must be absolute"), "{err}");
        assert!(parse(&format!("[{section}]\n{key} = \"/usr/sbin/x\"\n")).is_ok());
    }
}

const CREDENTIAL_BASE: &str = r#"
[process]
env_allow = ["PATH", "HOME"]
[network]
mode = "proxy"
hosts = ["api.anthropic.com", "*.github.com", "github.com:443", "plain.example:80"]
"#;

fn credential(entry: &str) -> Result<Policy, ConfigError> {
    parse(&format!(
        "{CREDENTIAL_BASE}[[network.credentials]]\n{entry}\n"
    ))
}

const ANTHROPIC: &str = r#"name = "anthropic"
hosts = ["api.anthropic.com"]
env = "ANTHROPIC_API_KEY"
header = "x-api-key"
source = "/etc/vibe-shim/credentials/anthropic""#;

#[test]
fn credentials_parse_with_their_defaults() {
    let p = credential(ANTHROPIC).unwrap();
    let c = &p.network.credentials[0];
    assert_eq!(c.header.as_deref(), Some("x-api-key"));
    assert!(!c.optional && c.scheme.is_none() && c.basic_user.is_none());
    let p = credential(
        "name = \"git\"\nhosts = [\"github.com\", \"API.GitHub.com\"]\nenv = \"GH_TOKEN\"\n\
         basic_user = \"x-access-token\"\nsource = \"/etc/vibe-shim/credentials/gh\"\noptional = true",
    )
    .unwrap();
    assert!(p.network.credentials[0].optional);
    let p = credential(
        "name = \"o\"\nhosts = [\"api.github.com\"]\nenv = \"T\"\nheader = \"Authorization\"\n\
         scheme = \"Bearer\"\nsource = \"/s\"",
    )
    .unwrap();
    assert_eq!(p.network.credentials[0].scheme.as_deref(), Some("Bearer"));
}

#[test]
fn credentials_are_checked() {
    let with = |from: &str, to: &str| {
        assert!(ANTHROPIC.contains(from), "{from}");
        credential(&ANTHROPIC.replace(from, to))
            .unwrap_err()
            .to_string()
    };
    for (from, to, needle) in [
        ("\"anthropic\"", "\"a b\"", "network.credentials.name"),
        ("\"anthropic\"", "\"\"", "network.credentials.name"),
        ("[\"api.anthropic.com\"]", "[]", "at least one host"),
        (
            "api.anthropic.com\"]",
            "*.github.com\"]",
            "exact names only",
        ),
        (
            "api.anthropic.com\"]",
            "other.example\"]",
            "not allowed by [network] hosts",
        ),
        // Allowed, but not on 443: the terminated port.
        (
            "api.anthropic.com\"]",
            "plain.example\"]",
            "not allowed by [network] hosts",
        ),
        ("\"ANTHROPIC_API_KEY\"", "\"1BAD\"", "not a variable name"),
        ("\"ANTHROPIC_API_KEY\"", "\"A=B\"", "not a variable name"),
        ("\"ANTHROPIC_API_KEY\"", "\"https_proxy\"", "sets itself"),
        ("\"ANTHROPIC_API_KEY\"", "\"SSL_CERT_FILE\"", "sets itself"),
        (
            "header = \"x-api-key\"",
            "",
            "exactly one of header and basic_user",
        ),
        (
            "header = \"x-api-key\"",
            "header = \"x\"\nbasic_user = \"u\"",
            "exactly one",
        ),
        (
            "header = \"x-api-key\"",
            "header = \"Host\"",
            "network.credentials.header",
        ),
        (
            "header = \"x-api-key\"",
            "header = \"x api\"",
            "network.credentials.header",
        ),
        (
            "header = \"x-api-key\"",
            "basic_user = \"u\"\nscheme = \"Bearer\"",
            "scheme only applies",
        ),
        (
            "header = \"x-api-key\"",
            "basic_user = \"a:b\"",
            "network.credentials.basic_user",
        ),
        (
            "header = \"x-api-key\"",
            "header = \"authorization\"\nscheme = \"Basic\"",
            "basic_user, not a scheme",
        ),
        (
            "header = \"x-api-key\"",
            "header = \"authorization\"\nscheme = \"a b\"",
            "one word",
        ),
        (
            "\"/etc/vibe-shim/credentials/anthropic\"",
            "\"credentials/a\"",
            "must be absolute",
        ),
    ] {
        let err = with(from, to);
        assert!(err.contains(needle), "{from} -> {to}: {err}");
    }
    // A second entry may not reuse a name, a host or a variable.
    for (second, needle) in [
        (ANTHROPIC.to_string(), "listed twice"),
        (ANTHROPIC.replace("\"anthropic\"", "\"b\""), "already bound"),
        (
            ANTHROPIC
                .replace("\"anthropic\"", "\"b\"")
                .replace("api.anthropic.com", "github.com")
                .replace("ANTHROPIC_API_KEY", "anthropic_api_key"),
            "already \"anthropic\"'s",
        ),
    ] {
        let err = credential(&format!("{ANTHROPIC}\n[[network.credentials]]\n{second}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{err}");
    }
}

#[test]
fn credentials_need_mode_proxy_and_a_forced_variable() {
    let other = format!("[[network.credentials]]\n{ANTHROPIC}\n");
    let err = parse(&other).unwrap_err().to_string();
    assert!(err.contains("only applies with mode \"proxy\""), "{err}");
    let err = parse("[network]\nupstream_ca = \"/etc/ca.pem\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("network.upstream_ca"), "{err}");
    let err = parse(&format!("{CREDENTIAL_BASE}upstream_ca = \"ca.pem\"\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("must be absolute"), "{err}");
    // The exact name in env_allow would read as "the client may set it".
    let listed = CREDENTIAL_BASE.replace("\"HOME\"]", "\"HOME\", \"ANTHROPIC_API_KEY\"]");
    let err = parse(&format!("{listed}[[network.credentials]]\n{ANTHROPIC}\n"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("process.env_allow") && err.contains("remove it"),
        "{err}"
    );
    // A prefix only warns: the placeholder wins anyway.
    let prefixed = CREDENTIAL_BASE.replace("\"HOME\"]", "\"HOME\", \"ANTHROPIC_*\"]");
    let p = parse(&format!("{prefixed}[[network.credentials]]\n{ANTHROPIC}\n")).unwrap();
    assert!(
        p.warnings()
            .iter()
            .any(|w| w.contains("forces its placeholder")),
        "{:?}",
        p.warnings()
    );
}

#[test]
fn the_default_policy_passes_no_api_key() {
    let p = Policy::default();
    assert!(!p.process.env_allowed("ANTHROPIC_API_KEY"));
    assert!(!p.process.env_allowed("OPENAI_API_KEY"));
    assert!(p.process.env_allowed("ANTHROPIC_BASE_URL"));
}

#[test]
fn transparent_needs_mode_proxy_and_is_off_by_default() {
    let err = parse("[network]\ntransparent = true\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("network.transparent"), "{err}");
    assert!(err.contains("only applies with mode \"proxy\""), "{err}");
    let on = parse("[network]\nmode = \"proxy\"\nhosts = [\"a.example\"]\ntransparent = true\n")
        .unwrap();
    assert!(on.network.transparent);
    let off = parse("[network]\nmode = \"proxy\"\nhosts = [\"a.example\"]\n").unwrap();
    assert!(!off.network.transparent);
    assert!(
        parse("[network]\nmode = \"proxy\"\nhosts = [\"a.example\"]\ntransparent = 1\n").is_err()
    );
    let err = parse(
        "[network]\nmode = \"proxy\"\nhosts = [\"a.example\"]\ntransparent = true\ndns = true\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("network.transparent") && err.contains("dns = true"),
        "{err}"
    );
    // The tag names it (the table differs), and only then.
    assert_ne!(
        crate::config::policy_tag(&on.network),
        crate::config::policy_tag(&off.network)
    );
}

#[test]
fn userns_is_off_by_default_and_its_range_is_checked() {
    let policy = parse("").unwrap();
    assert_eq!(policy.userns.mode, UsernsMode::Off);
    assert_eq!(policy.userns.unsupported, UsernsUnsupported::Refuse);
    let ok = parse(
        "[userns]\nmode = \"private\"\nunsupported = \"run-without\"\n\
         range_start = 1879048192\nrange_size = 65536000\n",
    )
    .unwrap();
    assert_eq!(ok.userns.range_size, Some(65_536_000));
    for (bad, needle) in [
        ("range_start = 1879048192\n", "go together"),
        (
            "range_start = 1879048192\nrange_size = 1000\n",
            "multiples of 65536",
        ),
        ("range_start = 0\nrange_size = 65536\n", "host accounts"),
        (
            "range_start = 524288\nrange_size = 65536\n",
            "systemd-nspawn",
        ),
        ("range_start = 2147418112\nrange_size = 131072\n", "2^31"),
        ("mode = \"shared\"\n", "unknown variant"),
    ] {
        let err = parse(&format!("[userns]\n{bad}")).unwrap_err().to_string();
        assert!(err.contains(needle), "{bad}: {err}");
    }
}
