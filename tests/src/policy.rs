//! The test policy: the numbers the suites judge containers against, read
//! with vibe-shim's own parser from `tests/policies/*.toml`.

use std::path::{Path, PathBuf};

/// The numbers the suite checks, read from a `tests/policies/*.toml` at test
/// time. Keys absent from the file take vibe-shim's documented defaults.
#[derive(Debug, Clone)]
pub struct TestPolicy {
    pub path: PathBuf,
    pub runtime_path: Option<String>,
    pub readonly_root: bool,
    pub tmpfs: Vec<String>,
    pub home_tmpfs: bool,
    /// `(source, read_write)`.
    pub binds: Vec<(String, bool)>,
    pub capabilities: Vec<String>,
    pub no_new_privileges: bool,
    pub pids_limit: i64,
    pub user: Option<(u32, u32)>,
    pub env_allow: Vec<String>,
}

impl TestPolicy {
    pub fn load(path: &Path) -> TestPolicy {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read test policy {}: {e}", path.display()));
        TestPolicy::parse(&text, path)
    }

    /// Parses the flat subset of TOML the test policies use: `[section]`,
    /// `[[filesystem.bind]]`, and `key = string|int|bool|[strings]`.
    /// Reads the policy with vibe-shim's own parser, so the tests judge
    /// containers against exactly what the shim enforces.
    pub fn parse(text: &str, path: &Path) -> TestPolicy {
        let policy = vibe_policy::Policy::from_toml_str(text, path)
            .unwrap_or_else(|e| panic!("test policy does not parse: {e}"));
        let fs = &policy.filesystem;
        TestPolicy {
            path: path.to_path_buf(),
            runtime_path: policy
                .runtime
                .path
                .as_ref()
                .map(|p| p.display().to_string()),
            readonly_root: fs.readonly_root,
            tmpfs: fs
                .tmpfs
                .iter()
                .map(|d| d.path.display().to_string())
                .collect(),
            home_tmpfs: fs.home == vibe_policy::config::HomeMode::Tmpfs,
            binds: fs
                .bind
                .iter()
                .map(|b| {
                    let rw = b.mode == vibe_policy::config::BindMode::Rw;
                    (b.source.display().to_string(), rw)
                })
                .collect(),
            capabilities: policy.process.capabilities.clone(),
            no_new_privileges: policy.process.no_new_privileges,
            pids_limit: policy.process.pids_limit,
            user: policy.process.forced_user(),
            env_allow: policy.process.env_allow.clone(),
        }
    }

    pub fn env_allowed(&self, name: &str) -> bool {
        self.env_allow
            .iter()
            .any(|pat| match pat.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == pat,
            })
    }

    /// The first read-write bind root: where worktrees may live.
    pub fn worktree_root(&self) -> PathBuf {
        self.binds
            .iter()
            .find(|(src, rw)| *rw && !src.is_empty() && !src.starts_with("/usr"))
            .map(|(src, _)| PathBuf::from(src))
            .unwrap_or_else(|| panic!("{}: no rw [[filesystem.bind]] root", self.path.display()))
    }

    /// Bitmask of the capabilities the policy keeps.
    pub fn capability_mask(&self) -> u64 {
        self.capabilities.iter().fold(0, |mask, name| {
            let bit = capability_bit(name)
                .unwrap_or_else(|| panic!("unknown capability {name} in policy"));
            mask | (1u64 << bit)
        })
    }
}

/// Linux capability numbers (include/uapi/linux/capability.h).
pub fn capability_bit(name: &str) -> Option<u32> {
    const NAMES: &[&str] = &[
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ];
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    NAMES.iter().position(|n| *n == bare).map(|i| i as u32)
}
