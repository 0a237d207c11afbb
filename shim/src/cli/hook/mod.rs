//! `vibe-shim [--config P] hook network`: the createRuntime hook entry
//! point (with `--kernel-tcp <bytes>` it also bounds TCP socket memory,
//! [`kernel_tcp`]); `vibe-shim hook tmpfs-modes ...`: the createContainer
//! one ([`tmpfs_modes`]); `vibe-shim hook kernel-tcp ...`: the TCP bound as
//! a createRuntime hook of its own. runc runs them with the OCI state on
//! stdin and puts the hook's stderr into its own error, so the reason
//! reaches the user.

pub mod kernel_tcp;
pub mod tmpfs_modes;

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;

use vibe_policy::rules::resources::KERNEL_TCP_HOOK;
use vibe_policy::rules::tmpfs_modes as tmpfs_modes_rule;

use crate::policy_file;

/// Exit codes, for `--help`: runc fails the container's create (or, for
/// `release`, never) on a non-zero one.
const EXIT_CODES: &str = "Exit codes:\n  0  done\n  1  the hook failed (runc then fails the create), or a usage error\n\nrunc runs these with the OCI state on stdin; their arguments are the ones create wrote into the spec.";

/// `vibe-shim hook <name> <args>`: which hook; its arguments are passed
/// on untouched (the judged spec wrote them), so no hook takes `--help`.
#[derive(Debug, clap::Parser)]
#[command(
    name = "hook",
    bin_name = "vibe-shim hook",
    about = "The OCI hooks create adds to a container's spec (runc runs them)",
    after_help = EXIT_CODES,
    // `help` is no hook: exiting 0 on it would skip the hook's work.
    disable_help_subcommand = true
)]
pub struct HookArgs {
    #[command(subcommand)]
    hook: Hook,
}

#[derive(Debug, clap::Subcommand)]
enum Hook {
    /// createRuntime: the network confinement (and the egress proxy's
    /// registration) in the container's network namespace
    #[command(name = "network", disable_help_flag = true)]
    Network(HookRest),
    /// createContainer: the judged mode and owner of each policy tmpfs
    #[command(name = tmpfs_modes_rule::HOOK_NAME, disable_help_flag = true)]
    TmpfsModes(HookRest),
    /// createRuntime: the bound on TCP socket memory (cgroup v1)
    #[command(name = KERNEL_TCP_HOOK, disable_help_flag = true)]
    KernelTcp(HookRest),
    /// poststop: releases the container's staging (never fails)
    #[command(name = RELEASE_HOOK, disable_help_flag = true)]
    Release(HookRest),
}

/// A hook's own arguments, byte for byte.
#[derive(Debug, clap::Args)]
struct HookRest {
    #[arg(
        num_args = 0..,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_parser = clap::value_parser!(OsString)
    )]
    args: Vec<OsString>,
}

#[derive(Debug, thiserror::Error)]
pub enum HookVerbError {
    #[error("cannot read the OCI state from stdin: {0}")]
    Stdin(std::io::Error),
    #[error("config: {0}")]
    Config(#[from] policy_file::PolicyFileError),
    /// Boxed: the hooks' error is large and this is the cold path.
    #[error("network: {0}")]
    Network(Box<vibe_hooks::HookError>),
    #[error("tmpfs-modes: {0}")]
    TmpfsModes(#[from] tmpfs_modes::TmpfsHookError),
    /// The container's credential files in its state directory.
    #[error("credentials: {0}")]
    Credentials(#[from] crate::sys::credentials::CredentialError),
    #[error("credentials: {0}")]
    StateDir(#[from] crate::sys::state_dir::StateDirError),
    /// Named by its rule: the bound is `[resources]`'s.
    #[error("resources: {0}")]
    KernelTcp(#[from] kernel_tcp::KernelTcpHookError),
}

/// `vibe-shim hook ...`: reads the OCI state from stdin (after the
/// arguments parse, as before), runs the hook, returns the exit code.
pub fn run(config: &Path, args: &[OsString]) -> i32 {
    let args = match super::parse::<HookArgs>("hook", args, 1) {
        Ok(args) => args,
        Err(code) => return code,
    };
    match run_hook(config, args.hook, &mut std::io::stdin().lock()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("vibe-shim: {e}");
            1
        }
    }
}

fn run_hook(config: &Path, hook: Hook, stdin: &mut dyn Read) -> Result<(), HookVerbError> {
    let mut state = Vec::new();
    stdin
        .read_to_end(&mut state)
        .map_err(HookVerbError::Stdin)?;
    let lossy = |args: &[OsString]| -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    };
    match hook {
        Hook::Release(HookRest { args }) => {
            // Best effort, never an error: runc's delete fails on a failed
            // poststop hook, and an engine's delete must go on.
            if let [flag, root, id] = &args[..] {
                if let (true, Some(id)) = (flag == vibe_hooks::HOOK_RUNC_ROOT_FLAG, id.to_str()) {
                    let root = crate::sys::state_dir::runc_root(Some(root));
                    // vibe-shim's delete ran before runc's: nothing to do.
                    if !crate::enforce::delete::anything_left(&root, id) {
                        return Ok(());
                    }
                    let socket = policy_file::egress_socket_only(config);
                    crate::enforce::delete::release(&socket, &root, id);
                }
            }
            Ok(())
        }
        // Everything they need is in their (judged) arguments: no config.
        Hook::KernelTcp(HookRest { args }) => Ok(kernel_tcp::run(&lossy(&args), &state)?),
        Hook::TmpfsModes(HookRest { args }) => Ok(tmpfs_modes::run(&lossy(&args))?),
        Hook::Network(HookRest { args }) => {
            // The TCP bound first: it needs no policy and is cheap.
            kernel_tcp::run_carried(&lossy(&args), &state)?;
            let policy = policy_file::load(config)?;
            let network = |e| HookVerbError::Network(Box::new(e));
            vibe_hooks::run_network_hook(&state, &policy.network).map_err(network)?;
            // Mode "proxy": the wall is up; now the proxy's listeners.
            let runc_root = crate::sys::state_dir::runc_root(runc_root_arg(&args));
            // Only a policy with credentials has a create that wrote any
            // (config validation allows them in mode "proxy" only).
            let dir = match policy.network.credentials.is_empty() {
                true => None,
                false => {
                    let id = vibe_hooks::state::ContainerState::parse(&state)
                        .map_err(|e| network(e.into()))?
                        .id;
                    Some(crate::sys::state_dir::container_dir(&runc_root, &id)?)
                }
            };
            // What create wrote in the container's root-only directory.
            let bindings = match &dir {
                Some(dir) => crate::sys::credentials::read_bindings(dir)?,
                None => Vec::new(),
            };
            let ca = vibe_hooks::register_egress(&state, &policy.network, &runc_root, &bindings)
                .map_err(network)?;
            if let (Some(dir), Some(pem)) = (&dir, ca) {
                crate::sys::credentials::append_ca(dir, &pem)?;
            }
            Ok(())
        }
    }
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

    fn parsed(args: &[&str]) -> Result<Hook, clap::Error> {
        use clap::Parser;
        HookArgs::try_parse_from(std::iter::once("hook").chain(args.iter().copied()))
            .map(|a| a.hook)
    }

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(Into::into).collect()
    }

    #[test]
    fn each_hook_gets_its_arguments_byte_for_byte() {
        let network = ["network", "--runc-root", "/run/x", "vibe-shim-network-hook"];
        match parsed(&network).unwrap() {
            Hook::Network(HookRest { args }) => assert_eq!(args, os(&network[1..])),
            other => panic!("{other:?}"),
        }
        // Hyphens, `--`, `-h` and `--help` among a hook's arguments are its own.
        let release = ["release", "--runc-root", "/r", "--", "-h", "--help"];
        match parsed(&release).unwrap() {
            Hook::Release(HookRest { args }) => assert_eq!(args, os(&release[1..])),
            other => panic!("{other:?}"),
        }
        let tmpfs = ["tmpfs-modes", "m", "/root", "0777:1000:1000:/run"];
        assert!(matches!(parsed(&tmpfs).unwrap(), Hook::TmpfsModes(_)));
        assert!(matches!(
            parsed(&["kernel-tcp", "m", "1"]).unwrap(),
            Hook::KernelTcp(_)
        ));
        assert!(matches!(parsed(&["release"]).unwrap(), Hook::Release(_)));
        assert!(parsed(&["other"]).is_err());
        assert!(parsed(&[]).is_err());
        // `help` is no hook: a usage error (exit 1), never a quiet 0.
        assert!(parsed(&["help"]).is_err());
        assert_eq!(
            run(Path::new("/nonexistent.toml"), &os(&["help", "network"])),
            1
        );
    }

    #[test]
    fn runc_root_comes_from_the_hook_args() {
        let args = os(&["--runc-root", "/run/docker/runtime-runc/moby", "marker"]);
        assert_eq!(
            runc_root_arg(&args),
            Some(std::ffi::OsStr::new("/run/docker/runtime-runc/moby"))
        );
        assert_eq!(runc_root_arg(&args[2..]), None);
    }

    #[test]
    fn release_hook_never_fails_runcs_delete() {
        // Nothing to release, malformed arguments, a bad id: all fine.
        for args in [
            &["release", "--runc-root", "/run/vibe-test-none", "gone"][..],
            &["release"],
            &["release", "--runc-root", "/r", "../escape"],
        ] {
            let hook = parsed(args).unwrap();
            assert!(run_hook(Path::new("/nonexistent.toml"), hook, &mut "{}".as_bytes()).is_ok());
        }
    }

    #[test]
    fn a_bad_config_is_an_error() {
        let hook = parsed(&["network"]).unwrap();
        let err = run_hook(Path::new("/nonexistent.toml"), hook, &mut "{}".as_bytes()).unwrap_err();
        assert!(err.to_string().contains("/nonexistent.toml"), "{err}");
    }
}
