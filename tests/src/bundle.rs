//! Busybox OCI bundles driven through the built vibe-shim and the real runc.
//!
//! Each [`Bundle`] owns a temp dir holding the bundle (`rootfs/` plus a
//! `config.json` from `runc spec`), a private runc `--root`, the `--log`
//! file and the policy file, so tests never see each other's containers.
//! Dropping it force-deletes the container with the real runc.

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Upper bound for any single runc/vibe-shim call (coreutils `timeout`).
pub const CALL_TIMEOUT_SECS: &str = "60";

/// The vibe-shim binary under test: `$VIBE_SHIM_BIN`, else the newest of
/// `<target>/{release,debug}/vibe-shim` (`$CARGO_TARGET_DIR` or `<repo>/target`).
pub fn shim_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("VIBE_SHIM_BIN") {
        return PathBuf::from(bin);
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target"));
    ["release", "debug"]
        .iter()
        .map(|profile| target.join(profile).join("vibe-shim"))
        .filter_map(|p| {
            fs::metadata(&p)
                .and_then(|m| m.modified())
                .ok()
                .map(|t| (t, p))
        })
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "no vibe-shim binary under {}: build it or set VIBE_SHIM_BIN",
                target.display()
            )
        })
}

/// The real runc (the tests compare against it and clean up with it).
pub fn runc_bin() -> PathBuf {
    std::env::var_os("VIBE_RUNC_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("runc"))
}

pub struct Bundle {
    pub dir: tempfile::TempDir,
    pub id: String,
}

impl Bundle {
    /// A busybox bundle whose init runs `args`, with `policy` as its policy
    /// file (the audit path is set to a file in the temp dir unless given).
    pub fn busybox(name: &str, args: &[&str], policy: &str) -> Bundle {
        let dir = tempfile::Builder::new()
            .prefix("vibe-it-")
            .tempdir()
            .expect("temp dir");
        let bundle = Bundle {
            id: format!("vibe-it-{}-{name}", std::process::id()),
            dir,
        };
        let rootfs = bundle.bundle_dir().join("rootfs");
        fs::create_dir_all(rootfs.join("bin")).expect("rootfs");
        for d in ["proc", "sys", "dev", "tmp", "root", "etc"] {
            fs::create_dir_all(rootfs.join(d)).expect("rootfs dir");
        }
        let busybox = ["/bin/busybox", "/usr/bin/busybox"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("busybox (busybox-static) is installed");
        fs::copy(busybox, rootfs.join("bin/busybox")).expect("copy busybox");
        let list = Command::new(busybox)
            .arg("--list")
            .output()
            .expect("busybox --list");
        for applet in String::from_utf8_lossy(&list.stdout).lines() {
            if applet != "busybox" && !applet.is_empty() {
                let _ = std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet));
            }
        }
        let out = Command::new(runc_bin())
            .args(["spec", "--bundle"])
            .arg(bundle.bundle_dir())
            .output()
            .expect("runc spec");
        assert!(
            out.status.success(),
            "runc spec: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut spec = bundle.spec();
        spec["process"]["args"] = serde_json::json!(args);
        spec["process"]["terminal"] = Value::Bool(false);
        bundle.write_spec(&spec);
        let mut policy = policy.to_string();
        if !policy.contains("[audit]") {
            policy.push_str(&format!(
                "\n[audit]\npath = \"{}\"\n",
                bundle.audit_path().display()
            ));
        }
        fs::write(bundle.policy_path(), policy).expect("policy file");
        fs::create_dir_all(bundle.root_dir()).expect("runc root");
        bundle
    }

    pub fn bundle_dir(&self) -> PathBuf {
        self.dir.path().join("bundle")
    }
    pub fn root_dir(&self) -> PathBuf {
        self.dir.path().join("runc-root")
    }
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("log.json")
    }
    pub fn policy_path(&self) -> PathBuf {
        self.dir.path().join("policy.toml")
    }
    pub fn audit_path(&self) -> PathBuf {
        self.dir.path().join("audit/audit.jsonl")
    }

    pub fn spec(&self) -> Value {
        let text = fs::read(self.bundle_dir().join("config.json")).expect("config.json");
        serde_json::from_slice(&text).expect("config.json is JSON")
    }

    pub fn write_spec(&self, spec: &Value) {
        let text = serde_json::to_vec_pretty(spec).expect("serialise spec");
        fs::write(self.bundle_dir().join("config.json"), text).expect("write config.json");
    }

    /// `vibe-shim --config P --root R --log L --log-format json <args>`.
    pub fn shim_command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new("timeout");
        cmd.arg(CALL_TIMEOUT_SECS)
            .arg(shim_bin())
            .arg("--config")
            .arg(self.policy_path())
            .arg("--root")
            .arg(self.root_dir())
            .arg("--log")
            .arg(self.log_path())
            .arg("--log-format")
            .arg("json")
            .args(args);
        cmd
    }

    /// Runs vibe-shim with `args`, stdin from `stdin`, and captures the output.
    pub fn shim(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut child = self
            .shim_command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn vibe-shim");
        if let Some(mut input) = child.stdin.take() {
            let _ = input.write_all(stdin);
        }
        child.wait_with_output().expect("wait vibe-shim")
    }

    /// `create`: the container's stdio goes to files, so nothing here waits
    /// for the container to close a pipe.
    pub fn create(&self) -> Output {
        let stdout = fs::File::create(self.dir.path().join("init.out")).expect("init.out");
        let stderr = fs::File::create(self.dir.path().join("init.err")).expect("init.err");
        let status = self
            .shim_command(["create", "--bundle"])
            .arg(self.bundle_dir())
            .arg(&self.id)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .status()
            .expect("run vibe-shim create");
        Output {
            status,
            stdout: fs::read(self.dir.path().join("init.out")).unwrap_or_default(),
            stderr: fs::read(self.dir.path().join("init.err")).unwrap_or_default(),
        }
    }

    /// One create/start/wait/delete cycle of `spec` (written first: create
    /// rewrites config.json), for a script that prints `END` last: its
    /// stdout, or vibe-shim's refusal. A refusal at start can only be the
    /// assurance check's: its evidence names bind sources by path, so a
    /// rename above one between create and start (a race test's) is one.
    pub fn cycle(&self, spec: &Value) -> Result<String, String> {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        self.write_spec(spec);
        let out = self.create();
        if !out.status.success() {
            let err = text(&out.stderr);
            assert!(err.starts_with("vibe-shim: "), "{}", describe(&out));
            return Err(err);
        }
        let start = self.shim(&["start", &self.id], b"");
        let stdout = if start.status.success() {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            loop {
                let s = fs::read_to_string(self.dir.path().join("init.out")).unwrap_or_default();
                if s.contains("END") || std::time::Instant::now() > deadline {
                    break Ok(s);
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        } else {
            let err = text(&start.stderr);
            assert!(
                err.starts_with("vibe-shim: assurance: "),
                "start: {}",
                describe(&start)
            );
            Err(err)
        };
        let del = self.shim(&["delete", "-f", &self.id], b"");
        assert!(del.status.success(), "delete: {}", describe(&del));
        stdout
    }

    /// `exec <id> <argv...>` through vibe-shim; returns the output.
    pub fn exec(&self, argv: &[&str]) -> Output {
        let mut args = vec!["exec", self.id.as_str()];
        args.extend_from_slice(argv);
        self.shim(&args, b"")
    }

    /// Container ids the real runc lists under this bundle's root.
    /// `runc state` of this container, parsed; `None` when runc has none.
    pub fn runc_state(&self) -> Option<Value> {
        let out = Command::new(runc_bin())
            .arg("--root")
            .arg(self.root_dir())
            .args(["state", &self.id])
            .output()
            .expect("runc state");
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    }

    pub fn runc_list(&self) -> Vec<String> {
        let out = Command::new(runc_bin())
            .arg("--root")
            .arg(self.root_dir())
            .args(["list", "-q"])
            .output()
            .expect("runc list");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// The last line of the `--log` file, parsed.
    pub fn last_log_line(&self) -> Option<Value> {
        let text = fs::read_to_string(self.log_path()).ok()?;
        let last = text.lines().rfind(|l| !l.trim().is_empty())?;
        Some(serde_json::from_str(last).expect("log line is JSON"))
    }

    /// Every line of the `--log` file must be JSON (containerd parses it).
    pub fn log_is_all_json(&self) -> bool {
        fs::read_to_string(self.log_path())
            .map(|t| t.lines().all(|l| serde_json::from_str::<Value>(l).is_ok()))
            .unwrap_or(true)
    }

    pub fn audit_lines(&self) -> Vec<Value> {
        fs::read_to_string(self.audit_path())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
            .collect()
    }
}

impl Drop for Bundle {
    fn drop(&mut self) {
        // Through vibe-shim, as an engine deletes (it removes its own
        // per-container directory), then runc directly in case that failed.
        let _ = self
            .shim_command(["delete", "-f", &self.id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = Command::new(runc_bin())
            .arg("--root")
            .arg(self.root_dir())
            .args(["delete", "-f", &self.id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A field of `/proc/self/status` text (`"CapEff"` → `"0000000000000000"`).
pub fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// Output as text, for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
