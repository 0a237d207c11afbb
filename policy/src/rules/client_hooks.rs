//! Client hooks. runc runs every `hooks` entry as root (prestart,
//! createRuntime, poststart and poststop on the host; createContainer and
//! startContainer in the container's namespaces but with runc's
//! privileges), so only the hooks the policy allows stay:
//!
//! - a `[[hooks.allow]]` entry for the stage whose `path` is the same file
//!   as the hook's (device and inode, so a symlink or `/proc/<pid>/exe`
//!   counts), whose argument patterns match the hook's `args` and whose env
//!   patterns cover its `env`;
//! - or an exact copy of an OCI hook defined in a `hooks.oci_hooks_dirs`
//!   directory (podman's hooks.d), root-owned.
//!
//! An allowed hook's path is rewritten to the admin's canonical path, so
//! what runc runs is the file that was judged: no symlink swap, and no pid
//! reuse behind Docker's `/proc/<dockerd pid>/exe`. The binary and every
//! directory above it must be root-owned and unwritable by group and others.
//! Anything else is refused, naming the stage and the path. Entries carrying
//! vibe-shim's own network-hook marker are dropped here: only the
//! `network_hook` rule adds that hook.
//!
//! startContainer hooks run in the container after pivot_root, so their
//! path is the image's file: only an exact hooks.d definition allows one
//! (the config refuses `[[hooks.allow]]` entries for that stage).
//!
//! The same holds for the tmpfs-modes hook's marker (`tmpfs_modes` rule).
//!
//! Argument patterns are literal text with placeholders:
//! `{id}` this container's id; `{shortid}` 12 lowercase hex digits (moby's
//! truncated id); `{path}` an absolute, lexically clean path; `{target}` a
//! symlink target (a path, relative or absolute, `..` allowed); `{word}`
//! letters, digits and `._+-`, not starting with `-`. Paths use letters,
//! digits and `/._+-@%,:=~` only. Two placeholders need text between them.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::config::{HookAllow, HookStage};
use crate::decision::{Denial, Record};
use crate::engine::context::{RuleContext, NETWORK_HOOK_MARKER, TMPFS_MODES_HOOK_MARKER};
use crate::host::{FileFacts, HostView};
use crate::lang::pattern::pattern_matches;

const RULE: &str = "client_hooks";

/// Longer arguments are refused rather than matched (PATH_MAX).
const MAX_ARG_LEN: usize = 4096;

/// The keys runc reads from a hook object; any other key is refused, so
/// nothing runc might fold onto `path` or `args` slips past.
const HOOK_KEYS: [&str; 4] = ["path", "args", "env", "timeout"];

/// Why a hook is refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum HookError {
    #[error("malformed hook: {0}")]
    Malformed(String),
    #[error("the path is not absolute")]
    NotAbsolute,
    #[error("an argument or env entry is longer than {MAX_ARG_LEN} bytes")]
    TooLong,
    #[error("the executable does not exist")]
    Missing,
    #[error("its arguments do not have the shape [[hooks.allow]] {0} allows")]
    Args(String),
    #[error("its env is not allowed by [[hooks.allow]] {0}")]
    Env(String),
    #[error("{0} is not a root-owned regular file in root-owned directories unwritable by others")]
    Unsafe(String),
    #[error(
        "no [[hooks.allow]] entry for this stage names this executable, \
         and no OCI hooks.d definition equals this hook"
    )]
    NotAllowed,
}

pub fn apply(spec: &mut Value, cx: &RuleContext, rec: &mut Record) -> Result<(), Denial> {
    let hooks = match spec.get_mut("hooks") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(hooks)) => hooks,
        Some(other) => {
            return Err(Denial::new(
                RULE,
                "/hooks",
                other.to_string(),
                "hooks must be an object",
            ))
        }
    };
    let id = cx.create.map_or("", |c| c.container_id.as_str());
    let mut judge = Judge::new(cx, id);
    for (key, list) in hooks.iter_mut() {
        let Some(stage) = HookStage::from_key(key) else {
            if let Some(stage) = folded_stage(key) {
                return Err(Denial::new(
                    RULE,
                    format!("/hooks/{key}"),
                    key.clone(),
                    format!("runc would read this key as {}", stage.key()),
                ));
            }
            continue;
        };
        let items = match list {
            Value::Null => continue,
            Value::Array(items) => items,
            other => {
                return Err(Denial::new(
                    RULE,
                    format!("/hooks/{key}"),
                    other.to_string(),
                    "a hook stage must be a list",
                ))
            }
        };
        let mut kept = Vec::with_capacity(items.len());
        for (index, mut item) in std::mem::take(items).into_iter().enumerate() {
            let field = format!("/hooks/{key}/{index}");
            if carries_marker(&item) {
                rec.change(RULE, field, item, Value::Null);
                continue;
            }
            let refuse = |path: &str, err: HookError| {
                Denial::new(
                    RULE,
                    field.clone(),
                    path,
                    format!("{key} hook {path} refused: {err}"),
                )
            };
            let hook = ClientHook::parse(&item).map_err(|e| {
                let path = item.get("path").and_then(Value::as_str).unwrap_or("");
                refuse(path, e)
            })?;
            let run = judge
                .allowed(&hook, stage)
                .map_err(|e| refuse(&hook.path, e))?;
            if run != hook.path {
                if let Some(slot) = item.get_mut("path") {
                    let before = std::mem::replace(slot, Value::from(run.clone()));
                    rec.change(RULE, format!("{field}/path"), before, Value::from(run));
                }
            }
            kept.push(item);
        }
        *items = kept;
    }
    Ok(())
}

/// A key that Go's case-insensitive decoder (simple folding: `ſ` is `s`,
/// the Kelvin sign is `k`) would take for a stage, without being spelled so.
fn folded_stage(key: &str) -> Option<HookStage> {
    let folded: String = key
        .chars()
        .map(|c| match c {
            'ſ' => 's',
            '\u{212a}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    HookStage::ALL
        .into_iter()
        .find(|s| s.key().to_ascii_lowercase() == folded)
}

/// vibe-shim's own network hook, wherever a client put a copy.
fn carries_marker(hook: &Value) -> bool {
    crate::lang::json::str_items(hook.get("args")).any(|arg| {
        [NETWORK_HOOK_MARKER, TMPFS_MODES_HOOK_MARKER]
            .iter()
            .any(|marker| arg.contains(marker))
    })
}

/// A hook as runc decodes it.
#[derive(Debug)]
struct ClientHook {
    path: String,
    args: Vec<String>,
    env: Vec<String>,
    timeout: Option<i64>,
}

impl ClientHook {
    fn parse(value: &Value) -> Result<ClientHook, HookError> {
        let bad = |why: &str| HookError::Malformed(why.to_string());
        let map = value.as_object().ok_or_else(|| bad("not an object"))?;
        if let Some(key) = map.keys().find(|k| !HOOK_KEYS.contains(&k.as_str())) {
            return Err(HookError::Malformed(format!(
                "unexpected key {key:?} (only path, args, env, timeout)"
            )));
        }
        let path = map
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("path must be a string"))?;
        let list = |key: &str| -> Result<Vec<String>, HookError> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| HookError::Malformed(format!("{key} must be strings"))),
                Some(_) => Err(HookError::Malformed(format!("{key} must be a list"))),
            }
        };
        let timeout = match map.get("timeout") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_i64()
                    .ok_or_else(|| bad("timeout must be an integer"))?,
            ),
        };
        Ok(ClientHook {
            path: path.to_string(),
            args: list("args")?,
            env: list("env")?,
            timeout,
        })
    }
}

/// One definition from an OCI hooks directory (schema 1.0.0).
#[derive(Debug, Deserialize)]
struct OciHookFile {
    version: String,
    hook: OciHook,
    #[serde(default)]
    stages: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct OciHook {
    path: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    timeout: Option<i64>,
}

struct Judge<'a> {
    cx: &'a RuleContext<'a>,
    id: &'a str,
    /// stat results of the admin's paths, asked once per spec.
    facts: Vec<(&'a Path, Option<FileFacts>)>,
    /// hooks.d definitions, read only when a hook needs them.
    oci: Option<Vec<OciHookFile>>,
}

impl<'a> Judge<'a> {
    fn new(cx: &'a RuleContext<'a>, id: &'a str) -> Self {
        Judge {
            cx,
            id,
            facts: Vec::new(),
            oci: None,
        }
    }

    fn host(&self) -> &'a dyn HostView {
        self.cx.host
    }

    fn admin_facts(&mut self, path: &'a Path) -> Option<FileFacts> {
        if let Some((_, facts)) = self.facts.iter().find(|(p, _)| *p == path) {
            return *facts;
        }
        let facts = self.host().file_facts(path);
        self.facts.push((path, facts));
        facts
    }

    /// The path runc should run for an allowed hook, or why it is refused.
    fn allowed(&mut self, hook: &ClientHook, stage: HookStage) -> Result<String, HookError> {
        if !hook.path.starts_with('/') {
            return Err(HookError::NotAbsolute);
        }
        let too_long = |s: &String| s.len() > MAX_ARG_LEN;
        if too_long(&hook.path) || hook.args.iter().chain(&hook.env).any(too_long) {
            return Err(HookError::TooLong);
        }
        let facts = self
            .host()
            .file_facts(Path::new(&hook.path))
            .ok_or(HookError::Missing)?;
        let mut nearest = HookError::NotAllowed;
        let policy = self.cx.policy;
        for allow in policy
            .hooks
            .allow
            .iter()
            .filter(|a| a.stages.contains(&stage))
        {
            match self.admin_facts(&allow.path) {
                Some(admin) if admin.same_file(&facts) => {}
                _ => continue,
            }
            let name = allow.path.display().to_string();
            if !args_match(allow, &hook.args, self.id) {
                nearest = HookError::Args(name);
                continue;
            }
            if !hook
                .env
                .iter()
                .all(|e| allow.env.iter().any(|p| pattern_matches(p, e, self.id)))
            {
                nearest = HookError::Env(name);
                continue;
            }
            return self.safe_binary(&allow.path);
        }
        let defined = self.oci_definitions().iter().any(|def| {
            def.hook.path == hook.path
                && def.hook.args == hook.args
                && def.hook.env == hook.env
                && def.hook.timeout == hook.timeout
                && def.stages.iter().any(|s| s == stage.key())
        });
        if defined {
            // A startContainer path resolves in the container's root: there
            // is no host file to check or pin, and it runs confined.
            if stage == HookStage::StartContainer {
                return Ok(hook.path.clone());
            }
            return self.safe_binary(Path::new(&hook.path));
        }
        Err(nearest)
    }

    /// The canonical path of an admin-named binary, if it and every
    /// directory above it are root-owned and unwritable by others.
    fn safe_binary(&self, path: &Path) -> Result<String, HookError> {
        let unsafe_ = || HookError::Unsafe(path.display().to_string());
        let canonical: PathBuf = self.host().canonicalize(path).ok_or_else(unsafe_)?;
        let facts = self.host().file_facts(&canonical).ok_or_else(unsafe_)?;
        if !facts.is_regular() || !facts.root_only_writable() {
            return Err(unsafe_());
        }
        for dir in canonical.ancestors().skip(1) {
            let ok = self
                .host()
                .file_facts(dir)
                .is_some_and(|f| f.root_only_writable());
            if !ok {
                return Err(unsafe_());
            }
        }
        canonical.to_str().map(str::to_string).ok_or_else(unsafe_)
    }

    /// The definitions in force: a later directory's file replaces an
    /// earlier one of the same name (podman's rule). Files and directories
    /// that are not root-owned and unwritable by others count for nothing.
    fn oci_definitions(&mut self) -> &[OciHookFile] {
        if self.oci.is_none() {
            let host = self.host();
            let mut by_name: Vec<(String, Option<OciHookFile>)> = Vec::new();
            for dir in &self.cx.policy.hooks.oci_hooks_dirs {
                let dir_ok = host.file_facts(dir).is_some_and(|f| f.root_only_writable());
                for file in host.oci_hook_files(dir) {
                    let def =
                        (dir_ok && file.facts.root_only_writable() && file.facts.is_regular())
                            .then(|| serde_json::from_slice::<OciHookFile>(&file.content).ok())
                            .flatten()
                            .filter(|d| d.version == "1.0.0");
                    by_name.retain(|(name, _)| *name != file.name);
                    by_name.push((file.name, def));
                }
            }
            self.oci = Some(by_name.into_iter().filter_map(|(_, d)| d).collect());
        }
        self.oci.as_deref().unwrap_or_default()
    }
}

/// `args` match the entry's leading patterns one to one, and the rest is a
/// sequence of its option groups.
fn args_match(allow: &HookAllow, args: &[String], id: &str) -> bool {
    let lead = allow.args.len();
    if args.len() < lead
        || !allow
            .args
            .iter()
            .zip(args)
            .all(|(p, a)| pattern_matches(p, a, id))
    {
        return false;
    }
    let rest = &args[lead..];
    // reach[i]: rest[..i] splits into whole groups.
    let mut reach = vec![false; rest.len() + 1];
    reach[0] = true;
    for start in 0..rest.len() {
        if !reach[start] {
            continue;
        }
        for group in &allow.options {
            let end = start + group.len();
            if end <= rest.len()
                && group
                    .iter()
                    .zip(&rest[start..end])
                    .all(|(p, a)| pattern_matches(p, a, id))
            {
                reach[end] = true;
            }
        }
    }
    reach[rest.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::engine::CreateContext;
    use crate::host::{FakeHost, HookFile, FAKE_DOCKERD, FAKE_DOCKERD_PID};
    use serde_json::json;

    const ID: &str = "156d3c431c92338ef3167b2311f0ab6060b9e10b5c6814ed4cb9c17205570050";

    fn run_with(spec: &mut Value, policy: &Policy, host: &FakeHost) -> Result<Record, Denial> {
        let create = CreateContext {
            container_id: ID.into(),
            ..CreateContext::default()
        };
        crate::rules::run_rule_with(apply, spec, policy, host, Some(&create))
    }

    fn run(spec: &mut Value, host: &FakeHost) -> Result<Record, Denial> {
        run_with(spec, &Policy::default(), host)
    }

    fn setkey(args: &[&str]) -> Value {
        json!({"hooks": {"prestart": [
            {"path": format!("/proc/{FAKE_DOCKERD_PID}/exe"), "args": args}
        ]}})
    }

    fn docker_args() -> Vec<&'static str> {
        vec![
            "libnetwork-setkey",
            "-exec-root=/run/vs-dev/exec",
            ID,
            "cce299b59beb",
        ]
    }

    #[test]
    fn dockers_setkey_is_kept_and_pinned_to_the_engine_binary() {
        let mut spec = setkey(&docker_args());
        let rec = run(&mut spec, &FakeHost::new()).unwrap();
        assert_eq!(
            spec["hooks"]["prestart"][0],
            json!({"path": FAKE_DOCKERD, "args": docker_args()})
        );
        assert_eq!(rec.changes.len(), 1);
        assert_eq!(rec.changes[0].field, "/hooks/prestart/0/path");
        // Judging the rewritten spec again changes nothing.
        let before = spec.clone();
        assert!(run(&mut spec, &FakeHost::new()).unwrap().changes.is_empty());
        assert_eq!(spec, before);
    }

    #[test]
    fn forged_setkey_shapes_are_refused() {
        let other_id = "0".repeat(64);
        let cases: Vec<Vec<&str>> = vec![
            // A second dockerd as root.
            vec!["dockerd", "--data-root=/tmp/x", "-H", "unix:///tmp/x.sock"],
            vec!["libnetwork-setkey"],
            // Another container's id.
            vec![
                "libnetwork-setkey",
                "-exec-root=/run/docker",
                &other_id,
                "cce299b59beb",
            ],
            // Relative, unclean or odd exec roots.
            vec!["libnetwork-setkey", "-exec-root=run", ID, "cce299b59beb"],
            vec![
                "libnetwork-setkey",
                "-exec-root=/run/../tmp",
                ID,
                "cce299b59beb",
            ],
            vec!["libnetwork-setkey", "-exec-root=/run x", ID, "cce299b59beb"],
            // The controller id is 12 lowercase hex digits.
            vec![
                "libnetwork-setkey",
                "-exec-root=/run/docker",
                ID,
                "CCE299B59BEB",
            ],
            vec![
                "libnetwork-setkey",
                "-exec-root=/run/docker",
                ID,
                "cce299b59be",
            ],
            // An extra flag or argument.
            vec![
                "libnetwork-setkey",
                "-exec-root=/run/docker",
                "-exec-root=/tmp",
                ID,
                "cce299b59beb",
            ],
            vec![
                "libnetwork-setkey",
                "-exec-root=/run/docker",
                ID,
                "cce299b59beb",
                "x",
            ],
        ];
        for args in cases {
            let err = run(&mut setkey(&args), &FakeHost::new()).unwrap_err();
            assert_eq!(err.field, "/hooks/prestart/0", "{args:?}");
            assert!(err.reason.contains("arguments"), "{args:?}: {err}");
            assert!(err.reason.contains("prestart hook /proc/2743/exe"), "{err}");
        }
        // The right shape in the wrong stage.
        let mut spec = json!({"hooks": {"poststop": [
            {"path": FAKE_DOCKERD, "args": docker_args()}
        ]}});
        let err = run(&mut spec, &FakeHost::new()).unwrap_err();
        assert!(err.reason.contains("no [[hooks.allow]]"), "{err}");
    }

    #[test]
    fn a_pid_that_is_not_dockerd_is_refused() {
        let mut host = FakeHost::new();
        host.add_binary("/home/user/dockerd");
        host.add_process(4242, "/home/user/dockerd");
        let mut spec = setkey(&docker_args());
        spec["hooks"]["prestart"][0]["path"] = json!("/proc/4242/exe");
        let err = run(&mut spec, &host).unwrap_err();
        assert_eq!(err.value, "/proc/4242/exe");
        assert!(err.reason.contains("no [[hooks.allow]]"), "{err}");
        // A pid that does not exist.
        let mut spec = setkey(&docker_args());
        spec["hooks"]["prestart"][0]["path"] = json!("/proc/999999/exe");
        let mut host = FakeHost::new();
        host.all_paths_exist = false;
        let err = run(&mut spec, &host).unwrap_err();
        assert!(err.reason.contains("does not exist"), "{err}");
    }

    #[test]
    fn an_engine_binary_others_can_write_is_refused() {
        let mut host = FakeHost::new();
        host.files.get_mut(Path::new(FAKE_DOCKERD)).unwrap().mode |= 0o002;
        let err = run(&mut setkey(&docker_args()), &host).unwrap_err();
        assert!(err.reason.contains("root-owned"), "{err}");
        // Or a directory above it.
        let mut host = FakeHost::new();
        host.files.insert(
            PathBuf::from("/usr/sbin"),
            FileFacts {
                dev: 1,
                ino: 7,
                uid: 1000,
                mode: FileFacts::DIRECTORY | 0o755,
            },
        );
        let err = run(&mut setkey(&docker_args()), &host).unwrap_err();
        assert!(err.reason.contains("root-owned"), "{err}");
    }

    #[test]
    fn a_shell_hook_is_refused_with_stage_and_path() {
        for stage in HookStage::ALL {
            let mut host = FakeHost::new();
            host.add_binary("/bin/sh");
            let mut spec = json!({"hooks": {stage.key(): [
                {"path": "/bin/sh", "args": ["sh", "-c", "touch /tmp/pwned"]}
            ]}});
            let err = run(&mut spec, &host).unwrap_err();
            assert_eq!(err.rule, RULE);
            assert_eq!(err.value, "/bin/sh");
            assert!(
                err.reason
                    .starts_with(&format!("{} hook /bin/sh refused", stage.key())),
                "{err}"
            );
        }
    }

    fn nvidia_host() -> FakeHost {
        let mut host = FakeHost::new();
        host.add_binary("/usr/bin/nvidia-ctk");
        host.add_binary("/usr/bin/nvidia-container-runtime-hook");
        host
    }

    fn ctk(args: &[&str]) -> Value {
        json!({"hooks": {"createContainer": [
            {"path": "/usr/bin/nvidia-ctk", "args": args, "env": ["NVIDIA_CTK_DEBUG=false"]}
        ]}})
    }

    #[test]
    fn nvidia_toolkit_hooks_pass() {
        let good: &[&[&str]] = &[
            &[
                "nvidia-ctk",
                "hook",
                "update-ldcache",
                "--ldconfig-path",
                "/sbin/ldconfig.real",
                "--folder",
                "/usr/lib/x86_64-linux-gnu",
                "--folder",
                "/usr/lib/x86_64-linux-gnu/vdpau",
            ],
            &[
                "nvidia-ctk",
                "hook",
                "create-symlinks",
                "--link",
                "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
                "--link",
                "../card1::/dev/dri/by-path/pci-0000:38:00.0-card",
            ],
            &[
                "nvidia-ctk",
                "hook",
                "chmod",
                "--mode",
                "755",
                "--path",
                "/dev/dri",
            ],
            &[
                "nvidia-ctk",
                "hook",
                "enable-cuda-compat",
                "--host-driver-version=535.104.05",
            ],
            &["nvidia-ctk", "hook", "disable-device-node-modification"],
        ];
        for args in good {
            let mut spec = ctk(args);
            run(&mut spec, &nvidia_host()).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        }
        let mut spec = json!({"hooks": {"prestart": [{
            "path": "/usr/bin/nvidia-container-runtime-hook",
            "args": ["nvidia-container-runtime-hook", "prestart"]
        }]}});
        run(&mut spec, &nvidia_host()).unwrap();
    }

    #[test]
    fn nvidia_ctk_with_a_wrong_argument_is_refused() {
        let bad: &[&[&str]] = &[
            // Runs a host binary of the client's choosing as root.
            &[
                "nvidia-ctk",
                "hook",
                "update-ldcache",
                "--ldconfig-path",
                "/tmp/evil",
            ],
            &[
                "nvidia-ctk",
                "hook",
                "update-ldcache",
                "--ldconfig-path=/tmp/evil",
            ],
            // A spec file of the client's choosing.
            &[
                "nvidia-ctk",
                "hook",
                "chmod",
                "--container-spec",
                "/tmp/x.json",
            ],
            &["nvidia-ctk", "hook", "update-ldcache", "--folder"],
            &["nvidia-ctk", "hook", "update-ldcache", "--folder", "lib"],
            &["nvidia-ctk", "hook", "no-such-hook"],
            &["nvidia-ctk", "cdi", "generate", "--output=/etc/cron.d/x"],
        ];
        for args in bad {
            let err = run(&mut ctk(args), &nvidia_host()).unwrap_err();
            assert!(err.reason.contains("arguments"), "{args:?}: {err}");
            assert!(
                err.reason
                    .contains("createContainer hook /usr/bin/nvidia-ctk"),
                "{err}"
            );
        }
        // An env the entry does not allow (CVE-2025-23266 class).
        let mut spec = ctk(&["nvidia-ctk", "hook", "disable-device-node-modification"]);
        spec["hooks"]["createContainer"][0]["env"] = json!(["LD_PRELOAD=/tmp/x.so"]);
        let err = run(&mut spec, &nvidia_host()).unwrap_err();
        assert!(err.reason.contains("env"), "{err}");
        // Right arguments, wrong stage: prestart runs on the host.
        let mut spec = ctk(&["nvidia-ctk", "hook", "disable-device-node-modification"]);
        spec["hooks"]["prestart"] = spec["hooks"]["createContainer"].take();
        spec["hooks"]["createContainer"] = json!([]);
        assert!(run(&mut spec, &nvidia_host()).is_err());
    }

    #[test]
    fn a_symlink_to_an_allowed_binary_is_rewritten_to_it() {
        let mut host = nvidia_host();
        let facts = host.files[Path::new("/usr/bin/nvidia-ctk")];
        host.files.insert(PathBuf::from("/tmp/link"), facts);
        let mut spec = ctk(&["nvidia-ctk", "hook", "disable-device-node-modification"]);
        spec["hooks"]["createContainer"][0]["path"] = json!("/tmp/link");
        run(&mut spec, &host).unwrap();
        assert_eq!(
            spec["hooks"]["createContainer"][0]["path"],
            "/usr/bin/nvidia-ctk"
        );
    }

    fn hooks_d(host: &mut FakeHost, dir: &str, name: &str, content: Value, uid: u32) {
        host.hook_dirs
            .entry(PathBuf::from(dir))
            .or_default()
            .push(HookFile {
                name: name.into(),
                facts: FileFacts {
                    dev: 1,
                    ino: 9,
                    uid,
                    mode: FileFacts::REGULAR | 0o644,
                },
                content: content.to_string().into_bytes(),
            });
    }

    fn podman_def() -> Value {
        json!({
            "version": "1.0.0",
            "hook": {
                "path": "/usr/libexec/oci/hooks.d/oci-systemd-hook",
                "args": ["oci-systemd-hook", "prestart"],
                "env": ["PATH=/usr/bin"]
            },
            "when": {"always": true},
            "stages": ["prestart", "poststop"]
        })
    }

    #[test]
    fn podman_hooks_d_match_and_mismatch() {
        let mut host = FakeHost::new();
        host.add_binary("/usr/libexec/oci/hooks.d/oci-systemd-hook");
        hooks_d(
            &mut host,
            "/usr/share/containers/oci/hooks.d",
            "systemd.json",
            podman_def(),
            0,
        );
        let hook = podman_def()["hook"].clone();
        let mut spec = json!({"hooks": {"prestart": [hook.clone()], "poststop": [hook.clone()]}});
        run(&mut spec, &host).unwrap();
        assert_eq!(spec["hooks"]["prestart"][0], hook);

        // Any difference is a mismatch: args, env, timeout, stage.
        let mut other_args = hook.clone();
        other_args["args"] = json!(["oci-systemd-hook", "prestart", "--evil"]);
        let mut other_env = hook.clone();
        other_env["env"] = json!(["PATH=/usr/bin", "LD_PRELOAD=/tmp/x.so"]);
        let mut timeout = hook.clone();
        timeout["timeout"] = json!(5);
        for (stage, bad) in [
            ("prestart", other_args),
            ("prestart", other_env),
            ("prestart", timeout),
            ("createRuntime", hook.clone()),
        ] {
            let mut spec = json!({"hooks": {stage: [bad]}});
            let err = run(&mut spec, &host).unwrap_err();
            assert!(err.reason.contains("hooks.d"), "{err}");
        }

        // A definition in a file others may write counts for nothing.
        let mut host = FakeHost::new();
        host.add_binary("/usr/libexec/oci/hooks.d/oci-systemd-hook");
        hooks_d(
            &mut host,
            "/etc/containers/oci/hooks.d",
            "systemd.json",
            podman_def(),
            1000,
        );
        let mut spec = json!({"hooks": {"prestart": [hook.clone()]}});
        assert!(run(&mut spec, &host).is_err());

        // /etc replaces /usr/share's file of the same name.
        let mut host = FakeHost::new();
        host.add_binary("/usr/libexec/oci/hooks.d/oci-systemd-hook");
        hooks_d(
            &mut host,
            "/usr/share/containers/oci/hooks.d",
            "systemd.json",
            podman_def(),
            0,
        );
        hooks_d(
            &mut host,
            "/etc/containers/oci/hooks.d",
            "systemd.json",
            json!({}),
            0,
        );
        let mut spec = json!({"hooks": {"prestart": [hook]}});
        assert!(run(&mut spec, &host).is_err());
    }

    #[test]
    fn a_forged_tmpfs_modes_hook_is_dropped() {
        let forged = |marker: String| {
            json!({"path": "/usr/local/bin/vibe-shim",
                   "args": ["vibe-shim", "hook", "tmpfs-modes", marker, "/", "1777:0:0:/etc"]})
        };
        let mut spec = json!({"hooks": {
            "createContainer": [forged(TMPFS_MODES_HOOK_MARKER.into())],
            "prestart": [forged(format!("x{TMPFS_MODES_HOOK_MARKER}x"))]
        }});
        let rec = run(&mut spec, &FakeHost::new()).unwrap();
        assert_eq!(
            spec["hooks"],
            json!({"createContainer": [], "prestart": []})
        );
        assert_eq!(rec.changes.len(), 2);
    }

    #[test]
    fn a_forged_network_hook_is_dropped() {
        let mut spec = json!({"hooks": {
            "prestart": [{"path": "/bin/sh", "args": ["sh", "-c", "id", NETWORK_HOOK_MARKER]}],
            "createRuntime": [{"path": "/usr/local/bin/vibe-shim", "args": ["vibe-shim", "hook", "network", NETWORK_HOOK_MARKER]}]
        }});
        let rec = run(&mut spec, &FakeHost::new()).unwrap();
        assert_eq!(spec["hooks"], json!({"prestart": [], "createRuntime": []}));
        assert_eq!(rec.changes.len(), 2);
        // vibe-shim's binary without the marker is just another binary.
        let mut spec = json!({"hooks": {"createRuntime": [
            {"path": "/usr/local/bin/vibe-shim", "args": ["vibe-shim", "hook", "network"]}
        ]}});
        assert!(run(&mut spec, &FakeHost::new()).is_err());
    }

    #[test]
    fn malformed_hooks_are_refused() {
        for hooks in [
            json!("x"),
            json!({"prestart": {}}),
            json!({"prestart": ["x"]}),
            json!({"prestart": [{"path": 1}]}),
            json!({"prestart": [{"path": "/proc/2743/exe", "Path": "/bin/sh"}]}),
            json!({"prestart": [{"path": "/proc/2743/exe", "args": "x"}]}),
            json!({"prestart": [{"path": "/proc/2743/exe", "args": [1]}]}),
            json!({"prestart": [{"path": "/proc/2743/exe", "timeout": 1.5}]}),
            json!({"preſtart": []}),
            json!({"PreStart": []}),
            json!({"prestart": [{"path": "proc/2743/exe", "args": docker_args()}]}),
        ] {
            let mut spec = json!({"hooks": hooks});
            assert!(run(&mut spec, &FakeHost::new()).is_err(), "{hooks}");
        }
        // No hooks, null lists and unknown keys are fine.
        for hooks in [json!(null), json!({"prestart": null, "x-vendor": [1]})] {
            let mut spec = json!({"hooks": hooks});
            run(&mut spec, &FakeHost::new()).unwrap();
        }
        run(&mut json!({}), &FakeHost::new()).unwrap();
    }

    #[test]
    fn an_admin_entry_allows_more() {
        let text = r#"
            [[hooks.allow]]
            stages = ["poststop"]
            path = "/usr/local/bin/cleanup"
            args = ["cleanup", "--container={id}"]
            options = [["--verbose"]]
            env = ["LOG={word}"]
        "#;
        let policy = Policy::from_toml_str(text, Path::new("t.toml")).unwrap();
        let mut host = FakeHost::new();
        host.add_binary("/usr/local/bin/cleanup");
        let hook = |args: Value, env: Value| json!({"hooks": {"poststop": [{"path": "/usr/local/bin/cleanup", "args": args, "env": env}]}});
        let id_arg = format!("--container={ID}");
        run_with(
            &mut hook(json!(["cleanup", id_arg]), json!([])),
            &policy,
            &host,
        )
        .unwrap();
        run_with(
            &mut hook(
                json!(["cleanup", id_arg, "--verbose", "--verbose"]),
                json!(["LOG=debug"]),
            ),
            &policy,
            &host,
        )
        .unwrap();
        for (args, env) in [
            (json!(["cleanup", "--container=other"]), json!([])),
            (json!(["cleanup", id_arg, "--quiet"]), json!([])),
            (json!(["cleanup", id_arg]), json!(["LOG=-x"])),
            (json!(["cleanup", id_arg]), json!(["LD_PRELOAD=/x"])),
        ] {
            assert!(run_with(&mut hook(args, env), &policy, &host).is_err());
        }
        // The entry replaces the default list: Docker's hook is not allowed now.
        assert!(run_with(&mut setkey(&docker_args()), &policy, &host).is_err());
    }

    #[test]
    fn start_container_is_only_allowed_through_hooks_d() {
        let text = "[[hooks.allow]]\nstages = [\"startContainer\"]\npath = \"/bin/true\"\nargs = [\"true\"]\n";
        let err = Policy::from_toml_str(text, Path::new("t.toml")).unwrap_err();
        assert!(err.to_string().contains("inside the container"), "{err}");
        let mut host = FakeHost::new();
        let mut def = podman_def();
        def["stages"] = json!(["startContainer"]);
        def["hook"]["path"] = json!("/usr/bin/in-image-tool");
        hooks_d(
            &mut host,
            "/etc/containers/oci/hooks.d",
            "s.json",
            def.clone(),
            0,
        );
        let mut spec = json!({"hooks": {"startContainer": [def["hook"].clone()]}});
        run(&mut spec, &host).unwrap();
        assert_eq!(spec["hooks"]["startContainer"][0], def["hook"]);
    }

    #[test]
    fn the_shipped_config_has_the_built_in_hooks() {
        let text = include_str!("../../../packaging/config.toml");
        let shipped = Policy::from_toml_str(text, Path::new("config.toml")).unwrap();
        assert_eq!(shipped.hooks, Policy::default().hooks);
    }

    #[test]
    fn the_default_policy_patterns_are_valid() {
        let policy = Policy::default();
        assert!(policy.hooks.validate().is_ok());
        assert!(policy
            .hooks
            .allow
            .iter()
            .all(|a| a.path.is_absolute() && !a.args.is_empty()));
    }
}
