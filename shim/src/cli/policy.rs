//! `vibe-shim policy check|explain`: inspect the policy without running
//! anything.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use vibe_policy::config::merge::Origin;
use vibe_policy::{enforce_create, CreateContext, Policy, Rewrite};

use crate::enforce::create::read_spec;
use crate::sys::host::RealHost;
use crate::{policy_file, runtime};
use vibe_policy::runc::bundle::anchor_relative_paths;

/// Exit codes, for `--help` and the scripts that check a policy.
const EXIT_CODES: &str = "Exit codes:\n  0  the policy is valid (check) or the bundle would be allowed (explain)\n  1  it is not, the policy or the bundle cannot be read, or a usage error";

/// `vibe-shim policy`: which policy, and what to do with it.
#[derive(Debug, clap::Parser)]
#[command(
    name = "policy",
    bin_name = "vibe-shim policy",
    about = "Check the policy, or explain what it does to a bundle, without running anything",
    args_override_self = true,
    after_help = EXIT_CODES
)]
pub struct PolicyArgs {
    /// The policy [default: the global --config, else /etc/vibe-shim/config.toml]
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: PolicyCommand,
}

#[derive(Debug, clap::Subcommand)]
enum PolicyCommand {
    /// Validate the policy and its drop-ins; print the effective policy,
    /// what each drop-in set, and any warning
    Check,
    /// Judge a bundle's config.json as create would; print each change and
    /// the verdict (the bundle is not changed)
    Explain {
        /// The OCI bundle
        #[arg(short = 'b', long, value_name = "DIR")]
        bundle: PathBuf,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyCmdError {
    #[error("config: {0}")]
    Config(#[from] policy_file::PolicyFileError),
    #[error("bundle: {0}")]
    Bundle(#[from] crate::enforce::create::CreateError),
    #[error("cannot print the policy: {0}")]
    Print(#[from] serde_json::Error),
}

/// Runs `policy <args>`: prints the report; the exit code says whether it
/// passed. `global_config` is the global `--config` (or the default).
pub fn run(global_config: &Path, args: &[OsString]) -> i32 {
    let args = match super::parse::<PolicyArgs>("policy", args, 1) {
        Ok(args) => args,
        Err(code) => return code,
    };
    match report(global_config, args) {
        Ok((text, ok)) => {
            print!("{text}");
            match ok {
                true => 0,
                false => 1,
            }
        }
        Err(e) => {
            eprintln!("vibe-shim: {e}");
            1
        }
    }
}

/// The text to print and whether it passed.
fn report(global_config: &Path, args: PolicyArgs) -> Result<(String, bool), PolicyCmdError> {
    let config = args.config.unwrap_or_else(|| global_config.to_path_buf());
    let (policy, origins) = policy_file::load_explained(&config)?;
    match args.command {
        PolicyCommand::Check => check(&config, &policy, &origins),
        PolicyCommand::Explain { bundle } => explain(&config, &policy, &bundle),
    }
}

fn check(
    config: &Path,
    policy: &Policy,
    origins: &[Origin],
) -> Result<(String, bool), PolicyCmdError> {
    let mut out = format!(
        "# {} is valid; effective policy:\n{}\n",
        config.display(),
        serde_json::to_string_pretty(policy)?
    );
    // What the drop-ins set or appended (the last file wins for a value).
    if !origins.is_empty() {
        let _ = writeln!(out, "# set by drop-ins:");
    }
    for origin in origins {
        let _ = writeln!(out, "{origin}");
    }
    let mut warnings = policy.warnings();
    warnings.extend(shared_uid_warning(policy, |uid| {
        nix::unistd::User::from_uid(uid.into())
            .ok()
            .flatten()
            .map(|u| u.name)
    }));
    if policy.process.forced_user().is_none() {
        warnings.push(
            "process.user is not set: containers run as whatever uid the client picks, root \
             included, sharing that host account's per-uid kernel limits (and root cannot \
             write a [filesystem] bind: such a create is refused)"
                .into(),
        );
    }
    for warning in warnings {
        let _ = writeln!(out, "# warning: {warning}");
    }
    let error = system_user_error(
        policy,
        vibe_policy::HostView::regular_id_min(&RealHost::new()),
    );
    if let Some(error) = &error {
        let _ = writeln!(out, "# error: {error}");
    }
    Ok((out, error.is_none()))
}

/// A forced user that is a host system id is refused at every create: say so
/// here first.
fn system_user_error(policy: &Policy, (uid_min, gid_min): (u32, u32)) -> Option<String> {
    let (uid, gid) = policy.process.forced_user()?;
    (uid < uid_min || gid < gid_min).then(|| {
        format!(
            "process.user {uid}:{gid} is a host system id (regular ids start at uid {uid_min}, \
             gid {gid_min}): every create is refused, since the containers would share a host \
             daemon's per-uid kernel limits"
        )
    })
}

/// A forced `process.user` whose uid a host account uses (looked up through
/// NSS: /etc/passwd and any directory service) shares that account's
/// per-uid kernel limits and lets it read the containers' /proc entries.
fn shared_uid_warning(policy: &Policy, account: impl Fn(u32) -> Option<String>) -> Option<String> {
    let (uid, _) = policy.process.forced_user()?;
    let name = account(uid)?;
    Some(format!(
        "process.user uid {uid} is the host account {name:?}: every container and that \
         account share its per-uid limits (inotify instances, RLIMIT_NPROC), and the account \
         can read the containers' /proc/<pid>/environ; use a uid no host account has (see README)"
    ))
}

fn explain(
    config: &Path,
    policy: &Policy,
    bundle: &Path,
) -> Result<(String, bool), PolicyCmdError> {
    let mut spec = read_spec(&bundle.join("config.json"))?;
    let bundle_abs = std::path::absolute(bundle).unwrap_or_else(|_| bundle.to_path_buf());
    anchor_relative_paths(&mut spec, &bundle_abs);
    let runtime_path = runtime::find(
        policy.runtime.path.as_deref(),
        std::env::var_os("PATH").as_deref(),
        runtime::own_exe().as_ref(),
    )
    .unwrap_or_else(|_| {
        policy
            .runtime
            .path
            .clone()
            .unwrap_or_else(|| PathBuf::from("runc"))
    });
    let id = bundle
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ctx = CreateContext {
        container_id: id,
        network_hook: None,
        runtime_path,
        bundle: bundle_abs,
        runc_root: crate::sys::state_dir::runc_root(None),
        systemd_cgroup: false,
    };
    let mut out = format!(
        "policy: {}\nbundle: {}\n",
        config.display(),
        bundle.display()
    );
    let (changes, verdict, ok) = match enforce_create(spec, policy, &RealHost::new(), &ctx) {
        Ok(Rewrite { changes, .. }) => (changes, "allowed".to_string(), true),
        Err(refusal) => (
            refusal.changes,
            format!("refused: {}", refusal.denial),
            false,
        ),
    };
    for change in &changes {
        let _ = writeln!(
            out,
            "{}: {}: {} → {}",
            change.rule, change.field, change.before, change.after
        );
    }
    let _ = writeln!(out, "{} change(s); {verdict}", changes.len());
    Ok((out, ok))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(args: &[&str]) -> Result<PolicyArgs, clap::Error> {
        use clap::Parser;
        PolicyArgs::try_parse_from(std::iter::once("policy").chain(args.iter().copied()))
    }

    #[test]
    fn options_as_scripts_and_the_man_page_spell_them() {
        let a = parsed(&["check", "--config", "/c.toml"]).unwrap();
        assert_eq!(a.config, Some(PathBuf::from("/c.toml")));
        assert!(matches!(a.command, PolicyCommand::Check));
        let a = parsed(&["--config=/c.toml", "check"]).unwrap();
        assert_eq!(a.config, Some(PathBuf::from("/c.toml")));
        let a = parsed(&["explain", "--bundle", "/b", "--config", "/c.toml"]).unwrap();
        assert!(
            matches!(a.command, PolicyCommand::Explain { ref bundle } if bundle == Path::new("/b"))
        );
        assert!(matches!(
            parsed(&["explain", "-b", "/b"]).unwrap().command,
            PolicyCommand::Explain { .. }
        ));
        assert!(parsed(&["explain"]).is_err());
        assert!(parsed(&[]).is_err());
        assert!(parsed(&["bogus"]).is_err());
        // The global --config is the fallback.
        let err = report(Path::new("/nonexistent.toml"), parsed(&["check"]).unwrap()).unwrap_err();
        assert!(err.to_string().contains("/nonexistent.toml"), "{err}");
    }

    #[test]
    fn shared_uid_is_warned_about() {
        let mut policy = Policy::default();
        assert_eq!(shared_uid_warning(&policy, |_| Some("x".into())), None);
        policy.process.user = Some("1000:1000".into());
        let lookup = |uid| (uid == 1000).then(|| "cloudsdk".to_string());
        let warning = shared_uid_warning(&policy, lookup).unwrap();
        assert!(
            warning.contains("\"cloudsdk\"") && warning.contains("environ"),
            "{warning}"
        );
        policy.process.user = Some("61000:61000".into());
        assert_eq!(shared_uid_warning(&policy, lookup), None);
    }

    #[test]
    fn a_forced_system_user_fails_the_check() {
        let mut policy = Policy::default();
        assert_eq!(system_user_error(&policy, (1000, 1000)), None);
        for user in ["0:0", "999:1000", "1000:27"] {
            policy.process.user = Some(user.into());
            let error = system_user_error(&policy, (1000, 1000)).unwrap();
            assert!(error.contains("system id"), "{user}: {error}");
        }
        policy.process.user = Some("1000:1000".into());
        assert_eq!(system_user_error(&policy, (1000, 1000)), None);
        assert!(system_user_error(&policy, (2000, 2000)).is_some());
    }

    #[test]
    fn check_lists_what_each_drop_in_set() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        std::fs::write(&config, "[network]\nmode = \"none\"\n").unwrap();
        let dropins = dir.path().join("config.d");
        std::fs::create_dir(&dropins).unwrap();
        std::fs::set_permissions(&dropins, std::fs::Permissions::from_mode(0o755)).unwrap();
        for (name, text) in [
            ("10-net.toml", "[network]\nmode = \"open\"\n"),
            ("20-cache.toml", "[filesystem]\ntmpfs = [\"/cache\"]\n"),
            (".hidden.toml", "bogus = 1\n"),
            ("README", "bogus = 1\n"),
            ("30-x.toml.bak", "bogus = 1\n"),
        ] {
            std::fs::write(dropins.join(name), text).unwrap();
            std::fs::set_permissions(dropins.join(name), std::fs::Permissions::from_mode(0o644))
                .unwrap();
        }
        let owner = nix::unistd::geteuid().as_raw();
        let (policy, origins) = crate::policy_file::load_with_owner(&config, owner).unwrap();
        let (out, ok) = check(&config, &policy, &origins).unwrap();
        assert!(ok, "{out}");
        let tail: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.starts_with("# set by"))
            .filter(|l| !l.starts_with("# warning"))
            .collect();
        assert_eq!(
            tail,
            [
                "# set by drop-ins:",
                "network.mode = \"open\"  (config.d/10-net.toml)",
                "filesystem.tmpfs += [\"/cache\"]  (config.d/20-cache.toml)",
            ],
            "{out}"
        );
        // The JSON above is still the whole effective policy.
        assert!(out.contains("\"mode\": \"open\""), "{out}");
    }

    #[test]
    fn check_prints_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("c.toml");
        std::fs::write(
            &config,
            "[process]\nuser = \"0:0\"\nenv_allow = [\"LC_*\"]\n",
        )
        .unwrap();
        let policy = crate::policy_file::load(&config).unwrap();
        let (out, ok) = check(&config, &policy, &[]).unwrap();
        assert!(
            out.contains("# warning: process.env_allow: \"LC_*\""),
            "{out}"
        );
        assert!(
            out.contains("# warning: process.user uid 0 is the host account \"root\""),
            "{out}"
        );
        assert!(
            !ok && out.contains("# error: process.user 0:0 is a host system id"),
            "{out}"
        );
    }
}
