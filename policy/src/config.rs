//! The administrator's policy file (`/etc/vibe-shim/config.toml`).
//!
//! Parsing is strict: an unknown key, a wrong type or an invalid value is an
//! error that names the file and, where the TOML parser knows it, the line.
//! Reading the file is the caller's job; this module only parses text.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// Where the shim looks for its policy when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/vibe-shim/config.toml";
/// Where audit lines go unless `[audit] path` says otherwise.
pub const DEFAULT_AUDIT_PATH: &str = "/var/log/vibe-shim/audit.jsonl";
/// The egress daemon's control socket unless `[network] egress_socket` says
/// otherwise (issue 12).
pub const DEFAULT_EGRESS_SOCKET: &str = "/run/vibe-shim/egress.sock";

/// Capabilities that would let a container undo the policy (network rules,
/// mounts, kernel modules). They cannot be granted by any config.
pub const NEVER_GRANTED_CAPABILITIES: &[&str] = &[
    "CAP_NET_ADMIN",
    "CAP_SYS_ADMIN",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_BPF",
    "CAP_SYS_PTRACE",
];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {key}: {message}")]
    Invalid {
        path: String,
        key: String,
        message: String,
    },
}

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
    /// `[[profiles]]`: other policy files, selected by where the engine
    /// made the bundle (see crate::profiles).
    pub profiles: Vec<crate::profiles::ProfileSection>,
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
}

impl Default for FilesystemSection {
    fn default() -> Self {
        Self {
            readonly_root: true,
            tmpfs: vec![TmpfsEntry::new("/tmp"), TmpfsEntry::new("/run")],
            home: HomeMode::Tmpfs,
            bind: Vec::new(),
            init_binaries: DEFAULT_INIT_BINARIES.iter().map(PathBuf::from).collect(),
        }
    }
}

/// One `filesystem.tmpfs` entry: a private tmpfs at `path`, root-owned,
/// with exactly `mode` (runc would copy the image directory's mode onto it;
/// vibe-shim's createContainer hook sets this one after runc's mounts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TmpfsEntry {
    pub path: PathBuf,
    pub mode: TmpfsMode,
}

impl TmpfsEntry {
    /// An entry written as a plain path: mode 1777.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            mode: TmpfsMode::DEFAULT,
        }
    }
}

impl<'de> Deserialize<'de> for TmpfsEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            path: PathBuf,
            mode: TmpfsMode,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Path(PathBuf),
            Table(Table),
        }
        match Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "a tmpfs entry is \"/path\" or { path = \"/path\", mode = \"0755\" } \
                 (both keys, no others)",
            )
        })? {
            Raw::Path(path) => Ok(TmpfsEntry::new(path)),
            Raw::Table(t) => Ok(TmpfsEntry {
                path: t.path,
                mode: t.mode,
            }),
        }
    }
}

/// A tmpfs directory's permission bits: 3 or 4 octal digits, at most
/// `1777` (set-id bits are refused), written as a string (`"0700"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmpfsMode(pub u32);

impl TmpfsMode {
    /// Sticky and world-writable, like `/tmp` on every distribution.
    pub const DEFAULT: TmpfsMode = TmpfsMode(0o1777);
}

impl fmt::Display for TmpfsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

impl FromStr for TmpfsMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad =
            || format!("invalid tmpfs mode {text:?}: expected 3 or 4 octal digits, at most 1777");
        if !(3..=4).contains(&text.len()) || !text.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return Err(bad());
        }
        let mode = u32::from_str_radix(text, 8).map_err(|_| bad())?;
        if mode > 0o1777 {
            return Err(bad());
        }
        Ok(TmpfsMode(mode))
    }
}

impl Serialize for TmpfsMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TmpfsMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
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

/// Docker's and podman's own default profiles.
pub const DEFAULT_APPARMOR_PROFILES: &[&str] = &["docker-default", "containers-default-*"];

impl Default for ProcessSection {
    fn default() -> Self {
        Self {
            capabilities: Vec::new(),
            no_new_privileges: true,
            pids_limit: 512,
            user: None,
            apparmor_profiles: DEFAULT_APPARMOR_PROFILES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            env_allow: ["PATH", "HOME", "TERM", "TZ", "HOSTNAME"]
                .iter()
                .chain(LOCALE_ENV_NAMES)
                .chain(&[
                    "ANTHROPIC_API_KEY",
                    "ANTHROPIC_BASE_URL",
                    "OPENAI_API_KEY",
                    "OPENAI_BASE_URL",
                ])
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

fn parse_uid_gid(text: &str) -> Option<(u32, u32)> {
    let (uid, gid) = text.split_once(':')?;
    Some((uid.parse().ok()?, gid.parse().ok()?))
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
    /// tunnelling only to `hosts` (issue 12).
    Proxy,
}

impl NetworkMode {
    /// The wall lets nothing past loopback: `none`, and `proxy` (whose way
    /// out is a listener on the container's own loopback).
    pub fn loopback_only(self) -> bool {
        matches!(self, NetworkMode::None | NetworkMode::Proxy)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
}

/// One `[network] allow` entry: `IP|CIDR[:PORT[-PORT]][/tcp|/udp]`; IPv6
/// addresses with a port are written `[2001:db8::1]:443`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllowRule {
    pub net: IpNet,
    /// Inclusive port range; `None` means every port.
    pub ports: Option<(u16, u16)>,
    pub protocol: Protocol,
}

impl fmt::Display for AllowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = match (self.net, self.ports) {
            (IpNet::V6(n), Some(_)) => format!("[{n}]"),
            (n, _) => n.to_string(),
        };
        write!(f, "{host}")?;
        match self.ports {
            Some((lo, hi)) if lo == hi => write!(f, ":{lo}")?,
            Some((lo, hi)) => write!(f, ":{lo}-{hi}")?,
            None => {}
        }
        match self.protocol {
            Protocol::Tcp => Ok(()),
            Protocol::Udp => write!(f, "/udp"),
        }
    }
}

impl FromStr for AllowRule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("invalid allow entry {text:?}: {why}");
        // A trailing /tcp or /udp names the protocol; /NN is a prefix length.
        let (rest, protocol) = if let Some(r) = text.strip_suffix("/udp") {
            (r, Protocol::Udp)
        } else if let Some(r) = text.strip_suffix("/tcp") {
            (r, Protocol::Tcp)
        } else {
            (text, Protocol::Tcp)
        };
        let (host, port) = if let Some(inner) = rest.strip_prefix('[') {
            let (addr, after) = inner.split_once(']').ok_or_else(|| bad("missing ']'"))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad("expected ':' after ']'"))?,
                ),
            };
            (addr, port)
        } else if rest.matches(':').count() == 1 {
            let (h, p) = rest.split_once(':').ok_or_else(|| bad("bad port"))?;
            (h, Some(p))
        } else {
            (rest, None)
        };
        let net = if host.contains('/') {
            IpNet::from_str(host).map_err(|e| bad(&e.to_string()))?
        } else {
            IpNet::from(IpAddr::from_str(host).map_err(|e| bad(&e.to_string()))?)
        };
        let ports = match port {
            None => None,
            Some(p) => {
                let (lo, hi) = match p.split_once('-') {
                    Some((lo, hi)) => (lo, hi),
                    None => (p, p),
                };
                let lo: u16 = lo.parse().map_err(|_| bad("bad port"))?;
                let hi: u16 = hi.parse().map_err(|_| bad("bad port"))?;
                if lo == 0 || lo > hi {
                    return Err(bad("port range must be 1-65535 and low-high"));
                }
                Some((lo, hi))
            }
        };
        Ok(AllowRule {
            net: net.trunc(),
            ports,
            protocol,
        })
    }
}

impl Serialize for AllowRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AllowRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
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
}

impl Default for NetworkSection {
    fn default() -> Self {
        Self {
            mode: NetworkMode::None,
            allow: Vec::new(),
            dns: false,
            nft: None,
            inbound: false,
            resolvers: Vec::new(),
            hosts: Vec::new(),
            ports: vec![80, 443],
            enforce: true,
            egress_socket: PathBuf::from(DEFAULT_EGRESS_SOCKET),
        }
    }
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

/// A byte count: an integer, or a string with a binary suffix (`"64m"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bytes(n) => Ok(ByteSize(n)),
            Raw::Text(text) => parse_size(&text).map(ByteSize).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "invalid size {text:?}: expected bytes or a number with k, m, g or t"
                ))
            }),
        }
    }
}

/// `123`, `64k`, `64m`, `4g`, `1t` (binary multiples, either case, an
/// optional `b`/`ib`), as the kernel's `memparse` and Docker read them.
/// Only decimal digits: `None` for anything else, or on overflow.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    let (number, suffix) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let suffix = suffix.to_ascii_lowercase();
    let unit = suffix
        .strip_suffix("ib")
        .or_else(|| suffix.strip_suffix('b').filter(|s| !s.is_empty()))
        .unwrap_or(&suffix);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

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

fn default_rlimits() -> BTreeMap<String, u64> {
    DEFAULT_RLIMITS
        .iter()
        .map(|(name, max)| (name.to_string(), *max))
        .collect()
}

/// `nofile`, `NOFILE` and `RLIMIT_NOFILE` all name one limit.
pub fn normalise_rlimit(name: &str) -> Option<&'static str> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("RLIMIT_") {
        upper
    } else {
        format!("RLIMIT_{upper}")
    };
    RLIMIT_NAMES.iter().copied().find(|n| *n == full)
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

impl Policy {
    /// Parses and validates policy text. `origin` names the file in errors.
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Policy, ConfigError> {
        let path = origin.display().to_string();
        let mut policy: Policy = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.clone(),
            message: one_line(&e.to_string()),
        })?;
        policy.validate(&path)?;
        Ok(policy)
    }

    fn validate(&mut self, path: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: path.to_string(),
            key: key.to_string(),
            message,
        };
        let mut normalised = Vec::new();
        for cap in &self.process.capabilities {
            let name = normalise_capability(cap).ok_or_else(|| {
                invalid(
                    "process.capabilities",
                    format!("unknown capability {cap:?}"),
                )
            })?;
            if NEVER_GRANTED_CAPABILITIES.contains(&name.as_str()) {
                return Err(invalid(
                    "process.capabilities",
                    format!("{name} can undo the isolation and is never granted"),
                ));
            }
            if !normalised.contains(&name) {
                normalised.push(name);
            }
        }
        self.process.capabilities = normalised;
        if self.process.pids_limit <= 0 {
            return Err(invalid(
                "process.pids_limit",
                format!("must be a positive number, not {}", self.process.pids_limit),
            ));
        }
        if let Some(user) = &self.process.user {
            if parse_uid_gid(user).is_none() {
                return Err(invalid(
                    "process.user",
                    format!("expected numeric \"uid:gid\", got {user:?}"),
                ));
            }
        }
        for pattern in &self.process.env_allow {
            let name = pattern.strip_suffix('*').unwrap_or(pattern);
            if name.contains('*') || name.contains('=') || pattern.is_empty() {
                return Err(invalid(
                    "process.env_allow",
                    format!("{pattern:?} must be a name or PREFIX*"),
                ));
            }
        }
        for (index, entry) in self.filesystem.tmpfs.iter().enumerate() {
            let dir = &entry.path;
            let clean = |p: &Path| crate::lang::json::clean_path(&p.to_string_lossy()).into_owned();
            // Cleaned: "/tmp/.." would be a tmpfs over the whole root.
            if !dir.is_absolute() || clean(dir) == "/" {
                return Err(invalid(
                    "filesystem.tmpfs",
                    format!("{} must be an absolute path other than /", dir.display()),
                ));
            }
            if self.filesystem.tmpfs[..index]
                .iter()
                .any(|e| clean(&e.path) == clean(dir))
            {
                return Err(invalid(
                    "filesystem.tmpfs",
                    format!("{} is listed twice", dir.display()),
                ));
            }
        }
        for bind in &self.filesystem.bind {
            if !bind.source.is_absolute() || bind.source == Path::new("/") {
                return Err(invalid(
                    "filesystem.bind.source",
                    format!(
                        "{} must be an absolute path other than /",
                        bind.source.display()
                    ),
                ));
            }
        }
        for init in &self.filesystem.init_binaries {
            if !init.is_absolute() || init == Path::new("/") {
                return Err(invalid(
                    "filesystem.init_binaries",
                    format!("{} must be an absolute file path", init.display()),
                ));
            }
        }
        for (key, dirs) in [
            ("runtime.checkpoint_dirs", &self.runtime.checkpoint_dirs),
            ("runtime.pid_file_dirs", &self.runtime.pid_file_dirs),
        ] {
            if let Some(d) = dirs
                .iter()
                .find(|d| !d.is_absolute() || *d == Path::new("/"))
            {
                return Err(invalid(
                    key,
                    format!("{} must be an absolute directory, not /", d.display()),
                ));
            }
        }
        if let Some(p) = &self.runtime.path {
            if !p.is_absolute() {
                return Err(invalid(
                    "runtime.path",
                    format!("{} must be absolute", p.display()),
                ));
            }
        }
        if let Some(p) = &self.network.nft {
            if !p.is_absolute() {
                return Err(invalid(
                    "network.nft",
                    format!("{} must be absolute", p.display()),
                ));
            }
        }
        if self.network.mode == NetworkMode::Allowlist && self.network.allow.is_empty() {
            return Err(invalid(
                "network.allow",
                "mode \"allowlist\" needs at least one entry (use mode \"none\" for no egress)"
                    .into(),
            ));
        }
        if self.network.mode != NetworkMode::Allowlist && !self.network.allow.is_empty() {
            return Err(invalid(
                "network.allow",
                "entries only apply with mode \"allowlist\"".into(),
            ));
        }
        if self.network.mode.loopback_only() && self.network.inbound {
            return Err(invalid(
                "network.inbound",
                "mode \"none\" allows no traffic but loopback; inbound needs \"allowlist\" or \"open\""
                    .into(),
            ));
        }
        if !self.network.dns && !self.network.resolvers.is_empty() {
            return Err(invalid(
                "network.resolvers",
                "resolvers only apply with dns = true".into(),
            ));
        }
        validate_network(&self.network).map_err(|(key, message)| invalid(key, message))?;
        self.hooks
            .validate()
            .map_err(|(key, message)| invalid(key, message))?;
        self.validate_resources(path)?;
        crate::profiles::validate(&self.profiles).map_err(|e| ConfigError::Invalid {
            path: path.to_string(),
            key: "profiles".into(),
            message: e.to_string(),
        })?;
        Ok(())
    }
}

impl HooksSection {
    /// Checks paths and patterns; the error names the key.
    pub(crate) fn validate(&self) -> Result<(), (&'static str, String)> {
        use crate::lang::pattern::{check_env_pattern, check_pattern};
        for dir in &self.oci_hooks_dirs {
            if !dir.is_absolute() {
                return Err((
                    "hooks.oci_hooks_dirs",
                    format!("{} must be absolute", dir.display()),
                ));
            }
        }
        for allow in &self.allow {
            let path = allow.path.to_string_lossy();
            if crate::lang::json::clean_path(&path) != path || !allow.path.is_absolute() {
                return Err((
                    "hooks.allow.path",
                    format!("{path} must be an absolute, clean path"),
                ));
            }
            if allow.stages.contains(&HookStage::StartContainer) {
                return Err((
                    "hooks.allow.stages",
                    format!(
                        "{path}: startContainer hooks run inside the container (after \
                         pivot_root), where a host binary cannot be judged; only an OCI \
                         hooks.d definition can allow one"
                    ),
                ));
            }
            if allow.stages.is_empty() {
                return Err((
                    "hooks.allow.stages",
                    format!("{path}: name at least one stage"),
                ));
            }
            if allow.args.is_empty() {
                return Err((
                    "hooks.allow.args",
                    format!("{path}: args[0] at least is required"),
                ));
            }
            let patterns = allow.args.iter().chain(allow.options.iter().flatten());
            for pattern in patterns {
                check_pattern(pattern).map_err(|e| ("hooks.allow.args", format!("{path}: {e}")))?;
            }
            if allow.options.iter().any(Vec::is_empty) {
                return Err(("hooks.allow.options", format!("{path}: an empty group")));
            }
            for pattern in &allow.env {
                check_env_pattern(pattern)
                    .map_err(|e| ("hooks.allow.env", format!("{path}: {e}")))?;
            }
        }
        Ok(())
    }
}

impl Policy {
    fn validate_resources(&mut self, path: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: path.to_string(),
            key: format!("resources.{key}"),
            message,
        };
        let r = &mut self.resources;
        // Below a few MiB runc cannot even start the container's init.
        if r.memory_max.0 < 8 << 20 {
            return Err(invalid(
                "memory_max",
                format!("must be at least 8m, not {} bytes", r.memory_max.0),
            ));
        }
        // Below a page per socket TCP cannot move a byte.
        if let Some(tcp) = r.kernel_tcp_max.filter(|t| t.0 < 1 << 20) {
            return Err(invalid(
                "kernel_tcp_max",
                format!("must be at least 1m, not {} bytes", tcp.0),
            ));
        }
        if !(r.cpus.is_finite() && r.cpus >= 0.01 && r.cpus <= 4096.0) {
            return Err(invalid(
                "cpus",
                format!("must be a number of CPUs from 0.01 to 4096, not {}", r.cpus),
            ));
        }
        if !(2..=262_144).contains(&r.cpu_shares_max) {
            return Err(invalid(
                "cpu_shares_max",
                format!("must be 2 to 262144, not {}", r.cpu_shares_max),
            ));
        }
        if r.tmpfs_max.0 < 1 << 20 {
            return Err(invalid(
                "tmpfs_max",
                format!("must be at least 1m, not {} bytes", r.tmpfs_max.0),
            ));
        }
        let mut merged = default_rlimits();
        for (name, max) in &r.rlimits {
            let full = normalise_rlimit(name)
                .ok_or_else(|| invalid("rlimits", format!("unknown rlimit {name:?}")))?;
            merged.insert(full.to_string(), *max);
        }
        r.rlimits = merged;
        Ok(())
    }
}

/// `net_admin`, `NET_ADMIN` and `CAP_NET_ADMIN` all name one capability.
pub fn normalise_capability(name: &str) -> Option<String> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("CAP_") {
        upper
    } else {
        format!("CAP_{upper}")
    };
    caps::Capability::from_str(&full).ok().map(|_| full)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Checks `hosts`, `ports` and `enforce` of `[network]`; the error names
/// the key.
pub(crate) fn validate_network(net: &NetworkSection) -> Result<(), (&'static str, String)> {
    let defaults = NetworkSection::default();
    if net.mode != NetworkMode::Proxy {
        if !net.hosts.is_empty() {
            return Err(("network.hosts", "only applies with mode \"proxy\"".into()));
        }
        if net.ports != defaults.ports {
            return Err(("network.ports", "only applies with mode \"proxy\"".into()));
        }
        if net.enforce != defaults.enforce {
            return Err(("network.enforce", "only applies with mode \"proxy\"".into()));
        }
        return Ok(());
    }
    for entry in &net.hosts {
        entry
            .parse::<crate::lang::hosts::HostPattern>()
            .map_err(|e| ("network.hosts", e))?;
    }
    if net.enforce && net.hosts.is_empty() {
        return Err((
            "network.hosts",
            "mode \"proxy\" needs at least one entry (use mode \"none\" for no egress, or enforce = false to learn what is needed)".into(),
        ));
    }
    for (i, port) in net.ports.iter().enumerate() {
        if *port == 0 {
            return Err(("network.ports", "ports are 1-65535".into()));
        }
        if net.ports[..i].contains(port) {
            return Err(("network.ports", format!("port {port} listed twice")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Policy, ConfigError> {
        Policy::from_toml_str(text, Path::new("/etc/vibe-shim/config.toml"))
    }

    #[test]
    fn empty_file_is_the_default_policy() {
        let p = parse("").expect("empty config parses");
        assert_eq!(p, Policy::default());
        assert!(p.filesystem.readonly_root);
        assert_eq!(p.process.pids_limit, 512);
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
        let p = parse("[network]\ndns = true\nresolvers = [\"192.0.2.53\", \"2001:db8::53\"]\n")
            .unwrap();
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
        let p =
            parse("[resources]\nmemory_max = \"64m\"\ntmpfs_max = 16777216\ncpus = 0.5\n").unwrap();
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
}
