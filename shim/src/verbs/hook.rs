//! `vibe-shim [--config P] hook network`: the createRuntime hook entry
//! point; `vibe-shim hook tmpfs-modes ...`: the createContainer one
//! ([`super::tmpfs_hook`]); `vibe-shim hook kernel-tcp ...`: the
//! createRuntime one that bounds TCP socket memory ([`super::kernel_tcp_hook`]). runc runs them with the OCI state on stdin and
//! puts the hook's stderr into its own error, so the reason reaches the user.

use std::io::Read;
use std::path::Path;

use crate::policy_file;

#[derive(Debug, thiserror::Error)]
pub enum HookVerbError {
    #[error(
        "unknown hook {0:?} (expected \"network\", \"tmpfs-modes\", \"kernel-tcp\" or \"release\")"
    )]
    UnknownHook(String),
    #[error("cannot read the OCI state from stdin: {0}")]
    Stdin(std::io::Error),
    #[error("config: {0}")]
    Config(#[from] policy_file::PolicyFileError),
    /// Boxed: the hooks' error is large and this is the cold path.
    #[error("network: {0}")]
    Network(Box<vibe_hooks::HookError>),
    #[error("tmpfs-modes: {0}")]
    TmpfsModes(#[from] super::tmpfs_hook::TmpfsHookError),
    /// Named by its rule: the bound is `[resources]`'s.
    #[error("resources: {0}")]
    KernelTcp(#[from] super::kernel_tcp_hook::KernelTcpHookError),
}

/// `args` are the tokens after `hook` (the hook's name, then the marker).
pub fn run(
    config: &Path,
    args: &[std::ffi::OsString],
    stdin: &mut dyn Read,
) -> Result<(), HookVerbError> {
    let name = args
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    use vibe_policy::rules::{resources::KERNEL_TCP_HOOK, tmpfs_modes};
    if ![
        "network",
        tmpfs_modes::HOOK_NAME,
        KERNEL_TCP_HOOK,
        RELEASE_HOOK,
    ]
    .contains(&name.as_str())
    {
        return Err(HookVerbError::UnknownHook(name));
    }
    let mut state = Vec::new();
    stdin
        .read_to_end(&mut state)
        .map_err(HookVerbError::Stdin)?;
    if name == RELEASE_HOOK {
        // Best effort, never an error: runc's delete fails on a failed
        // poststop hook, and an engine's delete must go on.
        if let [_, flag, root, id] = args {
            if let (true, Some(id)) = (flag == vibe_hooks::HOOK_RUNC_ROOT_FLAG, id.to_str()) {
                let root = crate::sys::state_dir::runc_root(Some(root));
                crate::enforce::delete::release(config, &root, id);
            }
        }
        return Ok(());
    }
    if name != "network" {
        // Everything it needs is in its (judged) arguments: no config.
        let rest: Vec<String> = args[1..]
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        if name == KERNEL_TCP_HOOK {
            return Ok(super::kernel_tcp_hook::run(&rest, &state)?);
        }
        return Ok(super::tmpfs_hook::run(&rest)?);
    }
    let policy = policy_file::load(config)?;
    let network = |e| HookVerbError::Network(Box::new(e));
    vibe_hooks::run_network_hook(&state, &policy.network).map_err(network)?;
    // Mode "proxy": the wall is up; now the proxy's listeners.
    let runc_root = crate::sys::state_dir::runc_root(runc_root_arg(args));
    vibe_hooks::register_egress(&state, &policy.network, &runc_root).map_err(network)?;
    Ok(())
}

/// The poststop hook (create's own entry: `--runc-root R ID`) that releases
/// a container's staging when runc destroys it.
pub const RELEASE_HOOK: &str = "release";

/// `--runc-root R` among the hook's arguments (our own hook entry puts it
/// there); runc's default root when absent.
fn runc_root_arg(args: &[std::ffi::OsString]) -> Option<&std::ffi::OsStr> {
    args.windows(2)
        .find(|pair| pair[0] == vibe_hooks::HOOK_RUNC_ROOT_FLAG)
        .map(|pair| pair[1].as_os_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runc_root_comes_from_the_hook_args() {
        let args: Vec<std::ffi::OsString> = [
            "network",
            "--runc-root",
            "/run/docker/runtime-runc/moby",
            "marker",
        ]
        .iter()
        .map(Into::into)
        .collect();
        assert_eq!(
            runc_root_arg(&args),
            Some(std::ffi::OsStr::new("/run/docker/runtime-runc/moby"))
        );
        assert_eq!(runc_root_arg(&args[..1]), None);
    }

    #[test]
    fn release_hook_never_fails_runcs_delete() {
        // Nothing to release, malformed arguments, a bad id: all fine.
        for args in [
            &["release", "--runc-root", "/run/vibe-test-none", "gone"][..],
            &["release"],
            &["release", "--runc-root", "/r", "../escape"],
        ] {
            let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
            assert!(run(Path::new("/nonexistent.toml"), &args, &mut "{}".as_bytes()).is_ok());
        }
    }

    #[test]
    fn unknown_hook_and_bad_config_are_errors() {
        let err = run(
            Path::new("/nonexistent"),
            &["other".into()],
            &mut "".as_bytes(),
        )
        .unwrap_err();
        assert!(matches!(err, HookVerbError::UnknownHook(_)));
        let err = run(
            Path::new("/nonexistent.toml"),
            &["network".into()],
            &mut "{}".as_bytes(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent.toml"), "{err}");
    }
}
