//! `create`, `run` and `restore`: rewrite the bundle's `config.json` in
//! place (atomically), then runc gets its arguments untouched.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;
use vibe_policy::runc::bundle::anchor_relative_paths;
use vibe_policy::{enforce_create, CreateContext, Denial};

use super::{host_paths, lossy, refusal, Ctx, Outcome};
use crate::runc_argv::{CreateArgs, Edits, Item};
use crate::sys::state_dir::{self, STATE};

#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not JSON: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    StateDir {
        path: String,
        source: state_dir::StateDirError,
    },
    #[error("cannot write {path}: a container with this id exists under this runc root")]
    Exists { path: String },
    #[error("cannot find vibe-shim's own binary for the network hook: {0}")]
    OwnExe(std::io::Error),
    /// A key runc's Go decoder would read differently (vibe_policy::gojson).
    #[error("{0}")]
    Key(Denial),
}

impl CreateError {
    fn denial(&self, field: &str, value: &Path) -> Denial {
        if let CreateError::Key(denial) = self {
            return denial.clone();
        }
        Denial::new(
            "bundle",
            field,
            value.display().to_string(),
            self.to_string(),
        )
    }
}

pub fn prepare(ctx: &Ctx, args: &[OsString], parsed: &CreateArgs) -> Outcome {
    let items = &parsed.items;
    let container_id = lossy(&parsed.id);
    let bundle = parsed.bundle.clone();
    let spec_path = bundle.join("config.json");
    let mut spec = match read_spec(&spec_path) {
        Ok(spec) => spec,
        Err(e) => return Outcome::refused(container_id, e.denial("config.json", &spec_path)),
    };
    anchor_relative_paths(&mut spec, &bundle);
    crate::timing::mark("read-spec");
    // Read inside the rootfs only; judged by the home rule like any HOME.
    let image_homes = crate::sys::rootfs::image_homes(&spec);
    crate::timing::mark("image-passwd");
    let runc_root = state_dir::runc_root(ctx.root.as_deref());
    let hook = match network_hook(&ctx.config_path, &runc_root) {
        Ok(hook) => hook,
        Err(e) => {
            return Outcome::refused(container_id, e.denial("hooks", Path::new("/proc/self/exe")))
        }
    };
    // The placeholders are made before the judge: the rule writes them.
    let credentials = match crate::sys::credentials::bindings(&ctx.policy) {
        Ok(found) => found,
        Err(e) => return Outcome::refused(container_id, credentials_denial(&e)),
    };
    crate::timing::mark("hook-and-credentials");
    // Named whenever the policy has credentials, so the rule knows this
    // container's own mount in an engine's spec fed back.
    let trust_bundle = match ctx.policy.network.credentials.is_empty() {
        true => None,
        false => state_dir::container_dir(&runc_root, &container_id)
            .ok()
            .map(|dir| dir.join(crate::sys::credentials::BUNDLE_FILE)),
    };
    let notice = state_dir::container_dir(&runc_root, &container_id)
        .ok()
        .map(|dir| dir.join(state_dir::NOTICE_FILE));
    let userns = match private_block(ctx, &runc_root, &container_id) {
        Ok(block) => block,
        Err(denial) => return Outcome::refused(container_id, denial),
    };
    crate::timing::mark("userns-block");
    let userns_pin = userns.and_then(|_| {
        state_dir::container_dir(&runc_root, &container_id)
            .ok()
            .map(|dir| dir.join(state_dir::USERNS_PIN_FILE))
    });
    let create = CreateContext {
        container_id: container_id.clone(),
        network_hook: Some(hook),
        runtime_path: ctx.runtime.clone(),
        bundle,
        runc_root,
        systemd_cgroup: ctx.systemd_cgroup,
        credentials,
        trust_bundle,
        image_homes,
        notice,
        userns,
        userns_pin,
    };
    let mut notice = None;
    let result = enforce_create(spec, &ctx.policy, &ctx.host, &create).and_then(|mut rewrite| {
        crate::timing::mark("rules");
        let pid_file = judge_runtime_flags(ctx, parsed, &create.bundle)?;
        let release = release_hook(&ctx.config_path, &create.runc_root, &create.container_id)
            .map_err(|e| refusal(e.denial("hooks", Path::new("/proc/self/exe"))))?;
        let private =
            private_dir(&create).map_err(|e| refusal(e.denial("bundle", &create.bundle)))?;
        crate::timing::mark("runtime-flags-and-state-dir");
        // Stage bind sources, then write what refers to them; undo both on
        // a failure, since runc never runs then.
        let written = crate::sys::stage::binds(&ctx.policy, &ctx.host, &create, &mut rewrite)
            .and_then(|()| {
                crate::timing::mark("stage-binds");
                pin_user_namespace(&create).map_err(refusal)?;
                crate::timing::mark("userns-pin");
                // Only runc's copy: the engine's, fed back, must not carry it.
                let mut judged = rewrite.document.clone();
                add_poststop(&mut judged, release);
                write_private_spec(&private, &judged)
                    .and_then(|()| record_engine_bundle(&private, &create.bundle))
                    .map_err(|e| refusal(e.denial("bundle", &create.bundle)))?;
                crate::sys::credentials::write_state(&private, &create.credentials)
                    .map_err(|e| refusal(credentials_denial(&e)))?;
                crate::timing::mark("write-private");
                let facts = vibe_policy::notice::facts(
                    &rewrite.document,
                    &rewrite.changes,
                    &ctx.policy,
                    &create,
                    &crate::policy_file::files(&ctx.config_path),
                );
                write_notice(&private, &facts)
                    .map_err(|e| refusal(e.denial("bundle", &create.bundle)))?;
                notice = Some(facts);
                crate::timing::mark("notice");
                // The engine's copy is informational only (runc reads the
                // private one): engines that read config.json back see what runs.
                write_atomically(&spec_path, &rewrite.document)
                    .map_err(|e| refusal(e.denial("config.json", &spec_path)))
            });
        if let Err(refused) = written {
            crate::sys::stage::release_quietly(&create.runc_root, &create.container_id);
            let _ = state_dir::remove(&private);
            return Err(refused);
        }
        Ok((
            with_bundle(args, items, &private, pid_file.as_deref()),
            rewrite.changes,
        ))
    });
    if result.is_err() && create.userns.is_some() {
        // runc never runs: the block is free again.
        let freed =
            crate::sys::userns_blocks::Blocks::default().free(&create.runc_root, &container_id);
        if let Err(e) = freed {
            eprintln!("vibe-shim: create: userns: {e}");
        }
    }
    Outcome {
        container_id,
        result,
        notice,
        assurance: None,
    }
}

/// The user namespace runc joins, made for the container's block.
fn pin_user_namespace(create: &CreateContext) -> Result<(), Denial> {
    let (Some(block), Some(point)) = (create.userns, create.userns_pin.as_deref()) else {
        return Ok(());
    };
    crate::sys::userns_pin::pin(point, block).map_err(|e| {
        Denial::new(
            vibe_policy::rules::userns::RULE,
            "[userns] mode",
            "private",
            format!("cannot make the container's user namespace: {e}"),
        )
    })
}

/// `[userns] mode = "private"` on a host that can: this container's block,
/// allocated (and recorded) before the rules write its mappings.
fn private_block(
    ctx: &Ctx,
    runc_root: &Path,
    id: &str,
) -> Result<Option<vibe_policy::engine::IdBlock>, Denial> {
    use vibe_policy::rules::userns;
    if !userns::wants_block(&ctx.policy.userns, &ctx.host, &ctx.runtime) {
        return Ok(None);
    }
    let denial = |reason: String| Denial::new(userns::RULE, "[userns] mode", "private", reason);
    if userns::missing_support(&ctx.host, &ctx.runtime).is_some() {
        // The rule names what is missing.
        return Ok(None);
    }
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let (uids, gids) = userns::ranges(
        &ctx.policy.userns,
        read("/etc/subuid").as_deref(),
        read("/etc/subgid").as_deref(),
    )
    .map_err(|e| denial(format!("no range to allocate from: {e}")))?;
    crate::sys::userns_blocks::Blocks::default()
        .allocate(runc_root, id, uids, gids)
        .map(Some)
        .map_err(|e| denial(e.to_string()))
}

/// Writes the container's notice into its state directory, readable by
/// anyone (runc binds it read-only at [`vibe_policy::config::NOTICE_PATH`]),
/// and the empty file beside it that start fills with the assurance record
/// (bound at [`vibe_policy::config::ASSURANCE_PATH`]).
fn write_notice(dir: &Path, notice: &vibe_policy::notice::Notice) -> Result<(), CreateError> {
    let notice_path = dir.join(state_dir::NOTICE_FILE);
    let record = vibe_policy::rules::notice::assurance_file(&notice_path);
    for (path, bytes) in [
        (&notice_path, notice.render().into_bytes()),
        (&record, Vec::new()),
    ] {
        vibe_hooks::fsio::write_new(path, &bytes, 0o644, STATE).map_err(|source| {
            CreateError::Write {
                path: path.display().to_string(),
                source,
            }
        })?;
    }
    Ok(())
}

/// Reads the engine's config.json once, through a descriptor that is a
/// regular file and not a symlink (a FIFO would block us, a symlink could
/// name anything). These bytes are what gets judged.
pub fn read_spec(path: &Path) -> Result<Value, CreateError> {
    let fail = |source| CreateError::Read {
        path: path.display().to_string(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(fail)?;
    let meta = file.metadata().map_err(fail)?;
    if !meta.file_type().is_file() {
        return Err(fail(std::io::Error::other("not a regular file")));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes).map_err(fail)?;
    vibe_policy::lang::gojson::spec_from_slice(&bytes).map_err(|e| match e {
        vibe_policy::lang::gojson::Error::Key(denial) => CreateError::Key(denial),
        vibe_policy::lang::gojson::Error::Syntax(source) => CreateError::Parse {
            path: path.display().to_string(),
            source,
        },
    })
}

/// Makes vibe-shim's root-only directory for this container, empty, and
/// returns it: it becomes the bundle runc gets, so nothing done to the
/// engine's bundle after the check reaches runc.
fn private_dir(create: &CreateContext) -> Result<PathBuf, CreateError> {
    let fail = |path: &Path| {
        let path = path.display().to_string();
        move |source| CreateError::StateDir { path, source }
    };
    let dir = state_dir::container_dir(&create.runc_root, &create.container_id)
        .map_err(fail(Path::new(state_dir::BASE)))?;
    if state_dir::container_exists(&create.runc_root, &create.container_id) {
        // runc would refuse too; our directory belongs to that container.
        return Err(CreateError::Exists {
            path: dir.display().to_string(),
        });
    }
    // Left by a container that was never deleted through vibe-shim.
    crate::sys::stage::release_quietly(&create.runc_root, &create.container_id);
    state_dir::remove(&dir).map_err(fail(&dir))?;
    state_dir::ensure_private(&dir).map_err(fail(&dir))?;
    Ok(dir)
}

/// A create refused over the policy's credentials (never their secrets:
/// the error names the credential and its file).
fn credentials_denial(e: &crate::sys::credentials::CredentialError) -> Denial {
    Denial::new("credentials", "/network/credentials", "", e.to_string())
}

/// Writes the judged spec as `config.json` in the private directory.
fn write_private_spec(dir: &Path, spec: &Value) -> Result<(), CreateError> {
    let path = dir.join("config.json");
    let fail = |source| CreateError::Write {
        path: path.display().to_string(),
        source,
    };
    // runc resolves a relative root against its bundle, which is now ours.
    let root = spec.pointer("/root/path").and_then(Value::as_str);
    if !root.is_some_and(|r| r.starts_with('/')) {
        let reason = format!("root.path {root:?} is not absolute after the rewrite");
        return Err(fail(std::io::Error::other(reason)));
    }
    let bytes = serde_json::to_vec(spec).map_err(|e| fail(std::io::Error::other(e)))?;
    vibe_hooks::fsio::write_new(&path, &bytes, 0o600, STATE).map_err(fail)
}

/// runc's own flags that weaken the jail or write host paths as root:
/// `--no-pivot` only with `[runtime] allow_no_pivot`; `--pid-file` judged
/// by [`host_paths::pid_file`], whose resolved path runc then gets.
fn judge_runtime_flags(
    ctx: &Ctx,
    parsed: &CreateArgs,
    bundle: &Path,
) -> Result<Option<PathBuf>, vibe_policy::Refusal> {
    if parsed.no_pivot && !ctx.policy.runtime.allow_no_pivot {
        return Err(refusal(Denial::new(
            "no_pivot",
            "[runtime] allow_no_pivot",
            "false",
            "--no-pivot makes runc chroot instead of pivot_root: the host's mounts stay beneath the container's root",
        )));
    }
    match &parsed.pid_file {
        None => Ok(None),
        Some(value) => host_paths::pid_file(value, Some(bundle), &ctx.policy.runtime.pid_file_dirs)
            .map(Some)
            .map_err(refusal),
    }
}

/// The poststop hook entry that releases this container's staging and
/// state directory when runc destroys it: after a foreground `run`, runc
/// deletes the container itself and vibe-shim's `delete` never runs.
fn release_hook(config: &Path, runc_root: &Path, id: &str) -> Result<Value, CreateError> {
    let exe = std::fs::canonicalize("/proc/self/exe").map_err(CreateError::OwnExe)?;
    let config = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
    Ok(serde_json::json!({
        "path": exe.to_string_lossy(),
        "args": [
            "vibe-shim",
            "--config",
            config.to_string_lossy(),
            "hook",
            crate::cli::hook::RELEASE_HOOK,
            vibe_hooks::HOOK_RUNC_ROOT_FLAG,
            runc_root.to_string_lossy(),
            id,
        ],
        "env": [format!("PATH={}", vibe_hooks::DEFAULT_HOOK_PATH)],
        "timeout": 30,
    }))
}

/// Appends `hook` to `hooks.poststop` (runc runs them in order, after the
/// client's that the policy kept).
fn add_poststop(spec: &mut Value, hook: Value) {
    let Some(object) = spec.as_object_mut() else {
        return;
    };
    let hooks = object
        .entry("hooks")
        .or_insert_with(|| Value::Object(Default::default()));
    if !hooks.is_object() {
        *hooks = Value::Object(Default::default());
    }
    if let Some(hooks) = hooks.as_object_mut() {
        let poststop = hooks
            .entry("poststop")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !poststop.is_array() {
            *poststop = Value::Array(Vec::new());
        }
        if let Some(list) = poststop.as_array_mut() {
            list.push(hook);
        }
    }
}

/// Where the engine's bundle directory resolved at create, in vibe-shim's
/// private directory: an exec's `--pid-file` may go directly there too
/// (containerd's `<bundle>/<exec-id>.pid`, whatever its state directory).
pub const ENGINE_BUNDLE_FILE: &str = "engine-bundle";

fn record_engine_bundle(dir: &Path, bundle: &Path) -> Result<(), CreateError> {
    let path = dir.join(ENGINE_BUNDLE_FILE);
    let fail = |source| CreateError::Write {
        path: path.display().to_string(),
        source,
    };
    let resolved = std::fs::canonicalize(bundle).map_err(fail)?;
    vibe_hooks::fsio::write_new(&path, resolved.as_os_str().as_encoded_bytes(), 0o600, STATE)
        .map_err(fail)
}

/// The engine's bundle directory recorded at create, if any.
pub fn recorded_engine_bundle(dir: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let bytes = std::fs::read(dir.join(ENGINE_BUNDLE_FILE)).ok()?;
    Some(PathBuf::from(OsString::from_vec(bytes)))
}

/// The verb's arguments with every `--bundle` replaced by one naming `dir`,
/// and the last `--pid-file` (earlier ones dropped) naming `pid_file`.
fn with_bundle(
    args: &[OsString],
    items: &[Item],
    dir: &Path,
    pid_file: Option<&Path>,
) -> Vec<OsString> {
    let mut edits = Edits::default();
    for item in items {
        if matches!(item, Item::Flag { name, .. } if name == "bundle") {
            edits.remove_flag(item);
        }
    }
    if let Some(path) = pid_file {
        if let Some((item, _)) = edits.keep_last_flag(items, "pid-file") {
            edits.set_flag_value(item, path.as_os_str());
        }
    }
    edits.prepend([OsString::from("--bundle"), dir.as_os_str().to_os_string()]);
    edits.apply(args)
}

/// The createRuntime hook entry: vibe-shim itself, with the same policy file
/// and runc's root (the egress daemon's key, with the id).
fn network_hook(config: &Path, runc_root: &Path) -> Result<Value, CreateError> {
    let exe = std::fs::canonicalize("/proc/self/exe").map_err(CreateError::OwnExe)?;
    // The hook runs with runc's cwd (the bundle): give it an absolute path.
    let config = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
    Ok(vibe_hooks::hook_entry(&exe, &config, runc_root))
}

/// Replaces `path` with `doc`, keeping its mode and owner. runc never sees
/// a half-written spec, and a failure leaves the original in place. No
/// fsync: a bundle never outlives a crash (the engine recreates it), so
/// durability would only cost create time.
pub fn write_atomically(path: &Path, doc: &Value) -> Result<(), CreateError> {
    let fail = |source| CreateError::Write {
        path: path.display().to_string(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(fail)?;
    let bytes = serde_json::to_vec(doc).map_err(|e| fail(std::io::Error::other(e)))?;
    vibe_hooks::fsio::replace(
        path,
        &bytes,
        meta.permissions().mode(),
        Some((meta.uid(), meta.gid())),
        vibe_hooks::fsio::Durability::Volatile,
    )
    .map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runc_argv::{scan_verb, CREATE_FLAGS};
    use serde_json::json;

    #[test]
    fn atomic_write_keeps_mode_and_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{}").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let doc = json!({"z": 1, "a": {"unknownField": true}});
        write_atomically(&path, &doc).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            r#"{"z":1,"a":{"unknownField":true}}"#
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1);
    }

    #[test]
    fn atomic_write_fails_without_original() {
        let dir = tempfile::tempdir().unwrap();
        assert!(write_atomically(&dir.path().join("config.json"), &json!({})).is_err());
    }

    #[test]
    fn poststop_is_appended_after_the_clients() {
        let mut spec = json!({"hooks": {"poststop": [{"path": "/kept"}]}});
        add_poststop(&mut spec, json!({"path": "/ours"}));
        assert_eq!(spec["hooks"]["poststop"][1]["path"], "/ours");
        let mut spec = json!({});
        add_poststop(&mut spec, json!({"path": "/ours"}));
        assert_eq!(spec["hooks"]["poststop"][0]["path"], "/ours");
    }

    #[test]
    fn pid_file_and_bundle_are_rewritten_in_place() {
        let args: Vec<OsString> = ["--pid-file", "/a", "--bundle=/b", "--pid-file=/c", "id"]
            .iter()
            .map(OsString::from)
            .collect();
        let items = scan_verb(&args, CREATE_FLAGS, false);
        let out = with_bundle(&args, &items, Path::new("/p"), Some(Path::new("/judged")));
        let out: Vec<_> = out
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(out, ["--bundle", "/p", "--pid-file=/judged", "id"]);
    }

    #[test]
    fn read_spec_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{not json").unwrap();
        let err = read_spec(&path).unwrap_err().to_string();
        assert!(err.contains("config.json"), "{err}");
    }
}
