//! The policy file's tables and their defaults.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::profiles::ProfileSection;
use super::scalars::*;
use super::{DEFAULT_AUDIT_PATH, DEFAULT_EGRESS_SOCKET};

/// The whole policy. Every section and key has a default, so an empty file is
/// the built-in default policy.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    pub runtime: RuntimeSection,
    pub filesystem: FilesystemSection,
    pub process: ProcessSection,
    pub network: NetworkSection,
    pub seccomp: SeccompSection,
    pub audit: AuditSection,
    pub resources: ResourcesSection,
    pub hooks: HooksSection,
    pub userns: UsernsSection,
    /// `[[profiles]]`: other policy files, selected by where the engine
    /// made the bundle (see [`super::profiles`]).
    pub profiles: Vec<ProfileSection>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeSection {
    /// The real runc. When absent, `runc` is searched in `PATH`.
    pub path: Option<PathBuf>,
    /// Whether `runc restore` may run. A restored process takes its
    /// credentials, capabilities and seccomp from the checkpoint image,
    /// which vibe-shim cannot judge; off unless the admin trusts the images.
    pub allow_restore: bool,
    /// Whether `runc checkpoint` may run: runc and CRIU, as root, write the
    /// container's memory to the image and work paths argv names.
    pub allow_checkpoint: bool,
    /// Where checkpoint `--image-path`, `--work-path` and `--parent-path`
    /// may point (each below one of these, through root-only directories).
    pub checkpoint_dirs: Vec<PathBuf>,
    /// Whether runc's `--no-pivot` (chroot instead of pivot_root, which a
    /// process with CAP_SYS_CHROOT can leave) may be given.
    pub allow_no_pivot: bool,
    /// Where `--pid-file` may point besides the bundle directory itself:
    /// the engines' state directories (runc writes the file as root).
    pub pid_file_dirs: Vec<PathBuf>,
}

/// The engines' own state directories, where they ask runc for pid files:
/// containerd's shim (`<bundle>/init.pid`, `<bundle>/<exec-id>.pid`, also
/// for Docker, whose own containerd lives under /run/docker), and podman's
/// conmon (`<run dir>/pidfile`, `exec_pid` files under its storage).
pub const DEFAULT_PID_FILE_DIRS: &[&str] = &[
    "/run/containerd",
    "/run/docker",
    "/run/containers",
    "/var/lib/containers",
];

impl Default for RuntimeSection {
    fn default() -> Self {
        Self {
            path: None,
            allow_restore: false,
            allow_checkpoint: false,
            checkpoint_dirs: Vec::new(),
            allow_no_pivot: false,
            pid_file_dirs: DEFAULT_PID_FILE_DIRS.iter().map(PathBuf::from).collect(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HomeMode {
    /// HOME gets a private tmpfs owned by the process user.
    Tmpfs,
    /// HOME is left as the image has it.
    Image,
}

/// Whether a container may use a volume the engine made (`docker run -v
/// name:/x`, `-v /x`, an image's `VOLUME`): see [`crate::rules::volumes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumesMode {
    /// Every volume is refused (unless `filesystem.bind` allows its path).
    None,
    /// A volume is allowed to the first container that uses it, and only to it.
    Private,
}

/// Where Docker (its default data-root) and podman (root's storage) keep
/// their local volumes: `<dir>/<name>/_data`.
pub const DEFAULT_VOLUME_DIRS: &[&str] = &[
    "/var/lib/docker/volumes",
    "/var/lib/containers/storage/volumes",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BindMode {
    Rw,
    Ro,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindAllow {
    /// Host subtree (or single file) that bind mounts may come from.
    pub source: PathBuf,
    /// `ro` forces every bind from this subtree read-only.
    #[serde(default = "default_bind_mode")]
    pub mode: BindMode,
}

fn default_bind_mode() -> BindMode {
    BindMode::Rw
}

/// Where Debian's docker.io (`docker-init`, a symlink to tini-static),
/// docker-ce and podman/catatonit install the init binary the engine binds.
pub const DEFAULT_INIT_BINARIES: &[&str] = &[
    "/usr/bin/docker-init",
    "/usr/libexec/docker/docker-init",
    "/usr/bin/catatonit",
    "/usr/libexec/podman/catatonit",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesystemSection {
    pub readonly_root: bool,
    /// `"/path"` (mode 1777) or `{ path = "/path", mode = "0755" }`.
    pub tmpfs: Vec<TmpfsEntry>,
    pub home: HomeMode,
    pub bind: Vec<BindAllow>,
    /// The engines' own init binaries (`docker run --init`, `podman run
    /// --init`): a bind whose canonical source is one of these is allowed,
    /// read-only, if the file is root-owned and writable by nobody else.
    pub init_binaries: Vec<PathBuf>,
    /// `"none"` refuses every engine volume; `"private"` gives each volume
    /// to the first container that uses it.
    pub volumes: VolumesMode,
    /// The engines' volume directories: a bind whose canonical source is
    /// exactly `<dir>/<name>/_data` is a volume.
    pub volume_dirs: Vec<PathBuf>,
    /// The static probe (`vibe-shim-probe`), bound read-only at
    /// [`PROBE_PATH`] in every container; judged like an init binary.
    pub probe: Option<PathBuf>,
}

/// Where a container finds the probe of `filesystem.probe`: directly under
/// `/`, so that no client bind can be above its mount point.
pub const PROBE_PATH: &str = "/vibe-shim-probe";

impl Default for FilesystemSection {
    fn default() -> Self {
        Self {
            readonly_root: true,
            tmpfs: vec![TmpfsEntry::new("/tmp"), TmpfsEntry::new("/run")],
            home: HomeMode::Tmpfs,
            bind: Vec::new(),
            init_binaries: DEFAULT_INIT_BINARIES.iter().map(PathBuf::from).collect(),
            volumes: VolumesMode::None,
            volume_dirs: DEFAULT_VOLUME_DIRS.iter().map(PathBuf::from).collect(),
            probe: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessSection {
    /// Kept in all five capability sets; normalised to `CAP_*` on load.
    pub capabilities: Vec<String>,
    pub no_new_privileges: bool,
    /// The container gets min(requested, this); unlimited is never granted.
    pub pids_limit: i64,
    /// `uid:gid` every process runs as, with no extra groups.
    pub user: Option<String>,
    /// Exact names, or `PREFIX*`.
    pub env_allow: Vec<String>,
    /// AppArmor profiles a container may run under, exact or `PREFIX*`; on
    /// a host with AppArmor, an unconfined request gets the first exact one
    /// that is loaded in enforce mode.
    pub apparmor_profiles: Vec<String>,
}

/// Threads count against the pids cgroup: 4096 lets `make -j32`, a JVM
/// and a threaded test runner (2,000 Python threads) work side by side.
pub const DEFAULT_PIDS_LIMIT: i64 = 4096;

/// Docker's and podman's own default profiles.
pub const DEFAULT_APPARMOR_PROFILES: &[&str] = &["docker-default", "containers-default-*"];

impl Default for ProcessSection {
    fn default() -> Self {
        Self {
            capabilities: Vec::new(),
            no_new_privileges: true,
            pids_limit: DEFAULT_PIDS_LIMIT,
            user: None,
            apparmor_profiles: DEFAULT_APPARMOR_PROFILES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            env_allow: ["PATH", "HOME", "TERM", "TZ", "HOSTNAME"]
                .iter()
                .chain(LOCALE_ENV_NAMES)
                // The API keys themselves arrive as [[network.credentials]].
                .chain(&["ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"])
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

impl ProcessSection {
    /// The forced `(uid, gid)`, if the policy sets one. Validated on load.
    pub fn forced_user(&self) -> Option<(u32, u32)> {
        self.user.as_deref().and_then(parse_uid_gid)
    }

    /// Whether an environment variable name passes the allowlist.
    pub fn env_allowed(&self, name: &str) -> bool {
        self.env_allow
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == pattern,
            })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// No egress at all; loopback only.
    None,
    /// Only the listed destinations.
    Allowlist,
    /// The internet, but nothing private, link-local, multicast or on the host.
    Open,
    /// Loopback only, like `None`; the one way out is the egress proxy that
    /// `vibe-shim egress` listens with on the container's 127.0.0.1:3128,
    /// tunnelling only to `hosts`.
    Proxy,
}

impl NetworkMode {
    /// The mode as the policy file spells it.
    pub fn name(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::Allowlist => "allowlist",
            NetworkMode::Open => "open",
            NetworkMode::Proxy => "proxy",
        }
    }

    /// The wall lets nothing past loopback: `none`, and `proxy` (whose way
    /// out is a listener on the container's own loopback).
    pub fn loopback_only(self) -> bool {
        matches!(self, NetworkMode::None | NetworkMode::Proxy)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkSection {
    pub mode: NetworkMode,
    pub allow: Vec<AllowRule>,
    /// Allow DNS (port 53) to `resolvers` and to the engine's embedded
    /// resolver 127.0.0.11; never to what the container's resolv.conf names.
    pub dns: bool,
    /// An `nft` binary for the hook to run instead of programming nf_tables
    /// over netlink itself (the default, when absent). Absolute: runc runs
    /// the hook from a directory the admin does not control.
    pub nft: Option<PathBuf>,
    /// New inbound connections (published ports): dropped unless true, and
    /// never possible in mode "none".
    pub inbound: bool,
    /// mode "proxy": container TCP ports that new connections may reach
    /// from the engine's host side only (the host's own address on the
    /// container's bridge: docker-proxy, or dockerd's masquerade of
    /// loopback traffic), for a dev server published on 127.0.0.1.
    pub preview_ports: Vec<PortRange>,
    /// The resolvers `dns = true` allows (the admin's list, IPv4 or IPv6).
    pub resolvers: Vec<IpAddr>,
    /// mode "proxy": the names the proxy tunnels to (`name`, `*.name`,
    /// optionally `:PORT`).
    pub hosts: Vec<String>,
    /// mode "proxy": the ports a `hosts` entry without its own port allows.
    pub ports: Vec<u16>,
    /// mode "proxy": false is report mode (allow, but log what would be
    /// denied).
    pub enforce: bool,
    /// mode "proxy": the control socket of `vibe-shim egress` that the hook
    /// registers containers with. A relative path is relative to the policy
    /// file's directory (the shim resolves it on load).
    pub egress_socket: PathBuf,
    /// mode "proxy": secrets the proxy swaps in for a per-container
    /// placeholder, on requests to their own hosts only.
    pub credentials: Vec<CredentialSection>,
    /// mode "proxy": extra roots (PEM) for verifying the upstreams of
    /// terminated (credential) hosts, beside the host's system trust store.
    pub upstream_ca: Option<PathBuf>,
    /// mode "proxy": connections and DNS of clients that ignore the proxy
    /// variables are caught inside the container's netns.
    pub transparent: bool,
}

/// One `[[network.credentials]]` entry, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialSection {
    pub name: String,
    /// Exact host names; each must also be allowed by `[network] hosts`.
    pub hosts: Vec<String>,
    /// The variable that holds the placeholder inside the container.
    pub env: String,
    /// The header the placeholder travels in (`x-api-key`, `authorization`).
    #[serde(default)]
    pub header: Option<String>,
    /// With `header`: a scheme before the value (`Bearer`).
    #[serde(default)]
    pub scheme: Option<String>,
    /// HTTP Basic with this user name (git over HTTPS); excludes `header`.
    #[serde(default)]
    pub basic_user: Option<String>,
    /// The root-owned, mode 0600 file that holds the secret.
    pub source: PathBuf,
    /// true: a missing `source` skips the credential at create (the
    /// container gets no variable for it) instead of failing the create. A
    /// source that exists is judged in full either way.
    #[serde(default)]
    pub optional: bool,
}

/// Where a container with credentials finds its trust bundle (the host's
/// system roots plus the CA the egress daemon terminates its credential
/// hosts with): bound read-only from vibe-shim's state directory.
pub const TRUST_BUNDLE_PATH: &str = "/etc/vibe-shim/ca-bundle.pem";

/// Where every container reads vibe-shim's notice of what it changed
/// (the file create wrote in the container's state directory, bound
/// read-only): next to [`TRUST_BUNDLE_PATH`].
pub const NOTICE_PATH: &str = "/etc/vibe-shim/notice";

/// Where every container reads the assurance record of its start (what the
/// kernel showed of it, judged): a file beside the notice that create binds
/// read-only and start fills in before the container's process runs.
pub const ASSURANCE_PATH: &str = "/etc/vibe-shim/assurance.json";

/// The variables forced to [`TRUST_BUNDLE_PATH`] (OpenSSL and Go, Python's
/// requests, curl, git, Node.js).
pub const TRUST_BUNDLE_ENV: [&str; 5] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "NODE_EXTRA_CA_CERTS",
];

impl Default for NetworkSection {
    fn default() -> Self {
        Self {
            mode: NetworkMode::None,
            allow: Vec::new(),
            dns: false,
            nft: None,
            inbound: false,
            preview_ports: Vec::new(),
            resolvers: Vec::new(),
            hosts: Vec::new(),
            ports: vec![80, 443],
            enforce: true,
            egress_socket: PathBuf::from(DEFAULT_EGRESS_SOCKET),
            credentials: Vec::new(),
            upstream_ca: None,
            transparent: false,
        }
    }
}

/// A short fingerprint of the network policy, stored as a rule comment so
/// the start-time check can tell our table from a look-alike.
pub fn policy_tag(net: &NetworkSection) -> String {
    let mode = net.mode.name();
    let allow: Vec<String> = net.allow.iter().map(|r| r.to_string()).collect();
    let resolvers: Vec<String> = net.resolvers.iter().map(|r| r.to_string()).collect();
    let mut canonical = format!(
        "mode={mode};dns={};allow={};inbound={};resolvers={}",
        net.dns,
        allow.join(","),
        net.inbound,
        resolvers.join(",")
    );
    // Only when set: the tags of every other policy stay as they were.
    if !net.preview_ports.is_empty() {
        let ports: Vec<String> = net.preview_ports.iter().map(|p| p.to_string()).collect();
        canonical.push_str(&format!(";preview={}", ports.join(",")));
    }
    // Only where it changes the table, so every other tag stays as it was.
    if net.transparent && net.mode == NetworkMode::Proxy {
        canonical.push_str(";transparent");
    }
    // FNV-1a: stable across builds and platforms, no dependency needed.
    let hash = canonical.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("vibe-shim policy {hash:016x}")
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SeccompSection {
    /// A seccomp profile (OCI `linux.seccomp` JSON) used instead of the
    /// built-in default. The shim reads it; see [`Policy::seccomp_profile`].
    pub profile: Option<PathBuf>,
    /// The loaded profile; filled by the caller, never by TOML.
    #[serde(skip)]
    pub loaded_profile: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditSection {
    /// One JSON line per enforced verb goes here.
    pub path: PathBuf,
}

impl Default for AuditSection {
    fn default() -> Self {
        Self {
            path: PathBuf::from(DEFAULT_AUDIT_PATH),
        }
    }
}

/// Whether containers get a user namespace of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsernsMode {
    /// No user namespace: the container's ids are the host's.
    #[default]
    Off,
    /// Each container gets its own 65,536-id block of the reserved range.
    Private,
}

/// What `mode = "private"` does on a host whose runc or kernel cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UsernsUnsupported {
    /// Refuse the create, naming what is missing.
    #[default]
    Refuse,
    /// Run the container without a user namespace (as with mode "off").
    RunWithout,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsernsSection {
    pub mode: UsernsMode,
    pub unsupported: UsernsUnsupported,
    /// The first host id of the reserved range (uids and gids alike); when
    /// absent, the `vibe-shim:` lines of /etc/subuid and /etc/subgid.
    pub range_start: Option<u32>,
    /// How many ids the range holds, a multiple of 65,536.
    pub range_size: Option<u32>,
}

/// The OCI hook stages runc runs, named as in `config.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HookStage {
    Prestart,
    CreateRuntime,
    CreateContainer,
    StartContainer,
    Poststart,
    Poststop,
}

impl HookStage {
    pub const ALL: [HookStage; 6] = [
        HookStage::Prestart,
        HookStage::CreateRuntime,
        HookStage::CreateContainer,
        HookStage::StartContainer,
        HookStage::Poststart,
        HookStage::Poststop,
    ];

    /// The key under `hooks` in `config.json`.
    pub fn key(self) -> &'static str {
        match self {
            HookStage::Prestart => "prestart",
            HookStage::CreateRuntime => "createRuntime",
            HookStage::CreateContainer => "createContainer",
            HookStage::StartContainer => "startContainer",
            HookStage::Poststart => "poststart",
            HookStage::Poststop => "poststop",
        }
    }

    pub fn from_key(key: &str) -> Option<HookStage> {
        HookStage::ALL.into_iter().find(|s| s.key() == key)
    }
}

/// One `[[hooks.allow]]` entry: a binary, the stages it may run in, and the
/// exact shape of its arguments (see `rules::client_hooks` for the pattern
/// language).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookAllow {
    pub stages: Vec<HookStage>,
    /// The executable, absolute and clean. A hook naming the same file (by
    /// device and inode: a symlink, a hard link, `/proc/<pid>/exe`) matches
    /// and is rewritten to this path.
    pub path: PathBuf,
    /// One pattern per leading argument, `args[0]` included.
    pub args: Vec<String>,
    /// Groups of patterns; the arguments after `args` must be a sequence of
    /// these groups (any order, any number of times).
    #[serde(default)]
    pub options: Vec<Vec<String>>,
    /// Patterns (`NAME=...`) every entry of the hook's `env` must match.
    #[serde(default)]
    pub env: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HooksSection {
    /// Directories of OCI hook definitions (podman's hooks.d); a client hook
    /// equal to one defined there is allowed. A later directory's file
    /// replaces an earlier one of the same name.
    pub oci_hooks_dirs: Vec<PathBuf>,
    pub allow: Vec<HookAllow>,
}

impl Default for HooksSection {
    fn default() -> Self {
        Self {
            oci_hooks_dirs: vec![
                PathBuf::from("/usr/share/containers/oci/hooks.d"),
                PathBuf::from("/etc/containers/oci/hooks.d"),
            ],
            allow: default_hook_allows(),
        }
    }
}

/// Docker 20.10's libnetwork-setkey and the NVIDIA container toolkit's hooks.
fn default_hook_allows() -> Vec<HookAllow> {
    let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut allows = Vec::new();
    for dockerd in ["/usr/bin/dockerd", "/usr/sbin/dockerd"] {
        allows.push(HookAllow {
            stages: vec![HookStage::Prestart],
            path: PathBuf::from(dockerd),
            args: strings(&[
                "libnetwork-setkey",
                "-exec-root={path}",
                "{id}",
                "{shortid}",
            ]),
            options: Vec::new(),
            env: Vec::new(),
        });
    }
    allows.push(HookAllow {
        stages: vec![HookStage::Prestart],
        path: PathBuf::from("/usr/bin/nvidia-container-runtime-hook"),
        args: strings(&["nvidia-container-runtime-hook", "prestart"]),
        options: Vec::new(),
        env: Vec::new(),
    });
    let ldconfig: &[&[&str]] = &[
        &["--folder", "{path}"],
        &["--ldconfig-path", "/sbin/ldconfig"],
        &["--ldconfig-path", "/sbin/ldconfig.real"],
        &["--ldconfig-path", "/usr/sbin/ldconfig"],
    ];
    let subcommands: &[(&str, &[&[&str]])] = &[
        ("update-ldcache", ldconfig),
        ("create-soname-symlinks", ldconfig),
        ("create-symlinks", &[&["--link", "{target}::{path}"]]),
        ("chmod", &[&["--mode", "{word}"], &["--path", "{path}"]]),
        ("enable-cuda-compat", &[&["--host-driver-version={word}"]]),
        ("disable-device-node-modification", &[]),
    ];
    for (path, prefix) in [
        ("/usr/bin/nvidia-ctk", &["nvidia-ctk", "hook"][..]),
        ("/usr/bin/nvidia-cdi-hook", &["nvidia-cdi-hook"][..]),
    ] {
        for (subcommand, options) in subcommands {
            let mut args = strings(prefix);
            args.push(subcommand.to_string());
            allows.push(HookAllow {
                stages: vec![HookStage::CreateContainer],
                path: PathBuf::from(path),
                args,
                options: options.iter().map(|g| strings(g)).collect(),
                env: strings(&["NVIDIA_CTK_DEBUG=false", "NVIDIA_CTK_DEBUG=true"]),
            });
        }
    }
    allows
}

/// The exact locale variables of the default `env_allow` (POSIX and glibc).
/// Exact names, not `LC_*`: a prefix would also pass `LC_GITHUB_TOKEN`.
pub const LOCALE_ENV_NAMES: &[&str] = &[
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_NUMERIC",
    "LC_TIME",
    "LC_COLLATE",
    "LC_MONETARY",
    "LC_MESSAGES",
    "LC_PAPER",
    "LC_NAME",
    "LC_ADDRESS",
    "LC_TELEPHONE",
    "LC_MEASUREMENT",
    "LC_IDENTIFICATION",
];

/// Words that mark an environment name as a likely secret (`policy check`).
pub const SECRET_ENV_WORDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "KEY",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
];

/// Every resource limit an OCI `process.rlimits` entry may name (Linux).
pub const RLIMIT_NAMES: &[&str] = &[
    "RLIMIT_AS",
    "RLIMIT_CORE",
    "RLIMIT_CPU",
    "RLIMIT_DATA",
    "RLIMIT_FSIZE",
    "RLIMIT_LOCKS",
    "RLIMIT_MEMLOCK",
    "RLIMIT_MSGQUEUE",
    "RLIMIT_NICE",
    "RLIMIT_NOFILE",
    "RLIMIT_NPROC",
    "RLIMIT_RSS",
    "RLIMIT_RTPRIO",
    "RLIMIT_RTTIME",
    "RLIMIT_SIGPENDING",
    "RLIMIT_STACK",
];

/// The built-in rlimit ceilings; an admin's `[resources.rlimits]` table is
/// merged over them, so naming one limit never lifts the others.
pub const DEFAULT_RLIMITS: &[(&str, u64)] = &[
    ("RLIMIT_NOFILE", 65_536),
    ("RLIMIT_MEMLOCK", 64 << 20),
    ("RLIMIT_RTPRIO", 0),
    ("RLIMIT_NICE", 0),
];

/// Resource ceilings. Every limit works like `process.pids_limit`: the
/// container gets min(requested, this), and "unlimited" is never granted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourcesSection {
    /// Memory plus swap (cgroup v1 memsw; v2 memory.max + memory.swap.max).
    pub memory_max: ByteSize,
    /// CPU time as a number of CPUs: a CFS quota of `cpus * period`.
    pub cpus: f64,
    /// Ceiling on cgroup v1 `cpu.shares` (v2 `cpu.weight`: shares * 100 / 1024).
    pub cpu_shares_max: u64,
    /// Size of every tmpfs (the policy's, HOME, the client's, /dev/shm).
    pub tmpfs_max: ByteSize,
    /// cgroup v1: TCP socket buffers (`memory.kmem.tcp.limit_in_bytes`),
    /// which v1 does not charge to the memory limit. Absent: `memory_max`.
    /// cgroup v2 charges them to `memory.max`, and this is not used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_tcp_max: Option<ByteSize>,
    /// Hard ceiling per rlimit, by name (`RLIMIT_NOFILE` or `nofile`),
    /// merged over [`DEFAULT_RLIMITS`]; normalised to `RLIMIT_*` on load.
    pub rlimits: BTreeMap<String, u64>,
    /// The cgroups a container's `linux.cgroupsPath` may lie below (cgroupfs
    /// paths, absolute or relative to runc's own cgroup, and systemd
    /// slices); unset: anywhere that nests under no other container.
    pub cgroup_parents: Option<Vec<String>>,
}

impl Default for ResourcesSection {
    fn default() -> Self {
        Self {
            memory_max: ByteSize(4 << 30),
            cpus: 2.0,
            cpu_shares_max: 1024,
            tmpfs_max: ByteSize(1 << 30),
            kernel_tcp_max: None,
            rlimits: default_rlimits(),
            cgroup_parents: None,
        }
    }
}

pub(crate) fn default_rlimits() -> BTreeMap<String, u64> {
    DEFAULT_RLIMITS
        .iter()
        .map(|(name, max)| (name.to_string(), *max))
        .collect()
}

impl ResourcesSection {
    /// The CFS quota for `period` microseconds: `cpus * period`, at least
    /// the kernel's 1 ms minimum.
    pub fn cpu_quota(&self, period: u64) -> i64 {
        let quota = (self.cpus * period as f64).floor();
        (quota as i64).max(1000)
    }

    /// The cgroup v1 TCP socket memory bound: `kernel_tcp_max`, else
    /// `memory_max`.
    pub fn kernel_tcp(&self) -> u64 {
        self.kernel_tcp_max.unwrap_or(self.memory_max).0
    }

    /// The cgroup v2 `cpu.weight` ceiling matching `cpu_shares_max`
    /// (1024 shares, the v1 default, is weight 100, the v2 default).
    pub fn cpu_weight_max(&self) -> u64 {
        (self.cpu_shares_max.saturating_mul(100) / 1024).clamp(1, 10_000)
    }
}

impl Policy {
    /// Things that are valid but probably not what the admin wants, one line
    /// each, for `policy check`. Host facts (a uid's account) are the shim's.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for cred in &self.network.credentials {
            if let Some(pattern) = self.process.env_allow.iter().find(|p| {
                p.strip_suffix('*')
                    .is_some_and(|prefix| cred.env.starts_with(prefix))
            }) {
                out.push(format!(
                    "process.env_allow: {pattern:?} passes {}, but credential {:?} forces its \
                     placeholder there: the client's value never reaches the container",
                    cred.env, cred.name
                ));
            }
        }
        for pattern in &self.process.env_allow {
            if let Some(prefix) = pattern.strip_suffix('*') {
                let example = SECRET_ENV_WORDS
                    .iter()
                    .find(|w| prefix.contains(*w))
                    .map(|_| format!("{prefix}X"))
                    .unwrap_or_else(|| format!("{prefix}GITHUB_TOKEN"));
                out.push(format!(
                    "process.env_allow: {pattern:?} also passes secret-looking names such as \
                     {example:?}; list exact names instead"
                ));
            }
        }
        out
    }
}
