//! The test environment `tests/env/up.sh` (or sid-up.sh) wrote to
//! `$STATE/env`: which dockerd, containerd and vibe-shim the suites drive,
//! and how the stack under test names its tools and paths.
//!
//! Every helper panics with a clear message instead of skipping: the suites
//! run only under `tests/run.sh`, and a test that cannot fail is worthless.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::policy::TestPolicy;

/// `$STATE/env`, as written by `tests/env/up.sh`.
#[derive(Debug, Clone)]
pub struct Env {
    pub vars: BTreeMap<String, String>,
    pub state: PathBuf,
    pub docker_host: String,
    pub containerd_address: String,
    pub shim_bin: PathBuf,
    pub repo: PathBuf,
}

impl Env {
    /// A key from `$STATE/env`; panics when up.sh did not write it.
    pub fn var(&self, key: &str) -> &str {
        self.vars
            .get(key)
            .unwrap_or_else(|| panic!("{key} missing from {}/env", self.state.display()))
    }

    /// `tests/policies/<stem>.toml` in the repo the env was started from.
    pub fn policy_path(&self, stem: &str) -> PathBuf {
        self.repo
            .join("tests/policies")
            .join(format!("{stem}.toml"))
    }

    /// The parsed test policy `tests/policies/<stem>.toml`.
    pub fn policy(&self, stem: &str) -> TestPolicy {
        TestPolicy::load(&self.policy_path(stem))
    }
}

impl Env {
    /// The command that runs `tool` (ctr, runc, podman) of the stack under
    /// test: `VIBE_TEST_<TOOL>` from the env file (the sid stack's run
    /// inside its tree), else the host's own.
    pub fn tool(&self, tool: &str) -> String {
        let key = format!("VIBE_TEST_{}", tool.to_ascii_uppercase());
        self.vars
            .get(&key)
            .cloned()
            .unwrap_or_else(|| tool.to_string())
    }

    /// `argv` as the engine's processes would run it: in the sid tree's
    /// mount namespace (`VIBE_TEST_IN_TREE`) for the sid stack, else as is.
    pub fn in_engine_ns<'a>(&'a self, argv: &[&'a str]) -> Vec<&'a str> {
        let mut full: Vec<&str> = self
            .vars
            .get("VIBE_TEST_IN_TREE")
            .map(|w| vec![w.as_str()])
            .unwrap_or_default();
        full.extend_from_slice(argv);
        full
    }

    /// A mount's root (a path on its filesystem) as the engine names it.
    /// The sid engine's `/` is a directory of the host's filesystem
    /// (`VIBE_TEST_MOUNT_ROOT`), so its files show that prefix in
    /// mountinfo; host directories bound into the tree do not.
    pub fn engine_path(&self, root: &str) -> String {
        match self.vars.get("VIBE_TEST_MOUNT_ROOT") {
            Some(prefix) if prefix != "/" && under(root, prefix) => {
                let rest = &root[prefix.trim_end_matches('/').len()..];
                if rest.is_empty() {
                    "/".to_string()
                } else {
                    rest.to_string()
                }
            }
            _ => root.to_string(),
        }
    }

    /// The stack under test: "sid" for tests/env/sid-up.sh's, else "host".
    pub fn stack(&self) -> &str {
        self.vars
            .get("VIBE_TEST_STACK")
            .map(String::as_str)
            .unwrap_or("host")
    }
}

/// The test env, loaded once. Panics (fails the test) when it is missing.
pub fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let state = PathBuf::from(
            std::env::var("VIBE_TEST_STATE").unwrap_or_else(|_| "/run/vibe-test".to_string()),
        );
        let file = state.join("env");
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "test env missing ({}: {e}): start it with tests/env/up.sh, or run tests/run.sh",
                file.display()
            )
        });
        let vars: BTreeMap<String, String> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        // REPO and VIBE_SHIM_BIN may be overridden from the environment, to
        // run a work tree's suites against an env started from another.
        let get = |k: &str| {
            let overridable = matches!(k, "REPO" | "VIBE_SHIM_BIN");
            overridable
                .then(|| std::env::var(k).ok())
                .flatten()
                .or_else(|| vars.get(k).cloned())
                .unwrap_or_else(|| panic!("{k} missing from {}", file.display()))
        };
        let env = Env {
            state: PathBuf::from(get("STATE")),
            docker_host: get("DOCKER_HOST"),
            containerd_address: get("CONTAINERD_ADDRESS"),
            shim_bin: PathBuf::from(get("VIBE_SHIM_BIN")),
            repo: PathBuf::from(get("REPO")),
            vars,
        };
        assert!(
            env.shim_bin.is_file(),
            "vibe-shim binary {} missing: build it (cargo build --release)",
            env.shim_bin.display()
        );
        env
    })
}

/// Whether `path` is `root` or below it.
pub(crate) fn under(path: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    path == root || path.starts_with(&format!("{root}/"))
}
