//! `vibe-shim policy check|explain`: inspect the policy without running
//! anything.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use vibe_policy::config::merge::Origin;
use vibe_policy::host::{FileFacts, HookFile, NamespaceId, NetnsTable};
use vibe_policy::lang::json::clean_path;
use vibe_policy::{enforce_create, CreateContext, HostView, Policy, Rewrite};

use crate::enforce::create::read_spec;
use crate::sys::host::RealHost;
use crate::{policy_file, runtime};
use vibe_policy::runc::bundle::anchor_relative_paths;

/// Exit codes, for `--help` and the scripts that check a policy.
const EXIT_CODES: &str = "Exit codes:\n  0  the policy is valid (check) or the bundle would be allowed (explain)\n  1  it is not, the policy or the bundle cannot be read, a usage error, or (check --strict) a warning";

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
    /// Validate the policy and its drop-ins; print the warnings first, then
    /// a short summary and what each drop-in set
    Check {
        /// Print the whole effective policy as JSON instead of the summary
        #[arg(long)]
        json: bool,
        /// Exit 1 on a warning too
        #[arg(long)]
        strict: bool,
    },
    /// Judge a bundle's config.json as create would; print each change and
    /// the verdict (the bundle is not changed)
    Explain {
        /// The OCI bundle (a copy of a live container's is fine: explain
        /// does not judge the host facts that belong to it)
        #[arg(short = 'b', long, value_name = "DIR")]
        bundle: PathBuf,
        /// The container id create would get [default: the bundle
        /// directory's name, as Docker's and containerd's bundles have it]
        #[arg(long, value_name = "ID")]
        id: Option<String>,
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
        PolicyCommand::Check { json, strict } => {
            check_report(&config, &policy, &origins, json, strict)
        }
        PolicyCommand::Explain { bundle, id } => explain(&config, &policy, &bundle, id),
    }
}

/// `policy check`'s text and whether it passed: an error fails it, and
/// with `strict` a warning too.
fn check_report(
    config: &Path,
    policy: &Policy,
    origins: &[Origin],
    json: bool,
    strict: bool,
) -> Result<(String, bool), PolicyCmdError> {
    let checked = check(policy);
    let ok = checked.error.is_none() && (!strict || checked.warnings.is_empty());
    let text = match json {
        true => checked.json(config, policy, origins)?,
        false => checked.summary(config, policy, origins),
    };
    Ok((text, ok))
}

/// What `policy check` found beyond parsing: the warnings and the one error.
struct Checked {
    warnings: Vec<String>,
    error: Option<String>,
}

fn check(policy: &Policy) -> Checked {
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
    let mut error = system_user_error(
        policy,
        vibe_policy::HostView::regular_id_min(&RealHost::new()),
    );
    let (cred_warnings, cred_error) = credential_files(policy);
    warnings.extend(cred_warnings);
    error = error.or(cred_error);
    Checked { warnings, error }
}

/// Each credential's secret file, judged as create judges it (opened, never
/// printed): a missing optional one is a warning, anything else that would
/// refuse a create is the error.
fn credential_files(policy: &Policy) -> (Vec<String>, Option<String>) {
    use crate::sys::credentials::{read_secret_file, CredentialError};
    let mut warnings = Vec::new();
    let mut error = None;
    for c in &policy.network.credentials {
        match read_secret_file(&c.name, &c.source) {
            Ok(mut bytes) => bytes.fill(0),
            Err(CredentialError::File { source, .. }) if c.optional && source.is_missing() => {
                warnings.push(format!(
                    "credential {}: {} does not exist: containers get no {} until it does",
                    c.name,
                    c.source.display(),
                    c.env
                ))
            }
            Err(e) => {
                error.get_or_insert(e.to_string());
            }
        }
    }
    (warnings, error)
}

impl Checked {
    /// Warnings and the error first (what needs the admin), then what the
    /// policy grants in a few lines, then what each drop-in set.
    fn summary(&self, config: &Path, policy: &Policy, origins: &[Origin]) -> String {
        let mut out = String::new();
        for warning in &self.warnings {
            let _ = writeln!(out, "warning: {warning}");
        }
        if let Some(error) = &self.error {
            let _ = writeln!(out, "error: {error}");
        }
        let verdict = match self.error {
            None => "is valid",
            Some(_) => "parses, but every create would be refused",
        };
        let _ = writeln!(
            out,
            "{} {verdict} ({} warning(s), {} drop-in setting(s))",
            config.display(),
            self.warnings.len(),
            origins.len()
        );
        for line in summary_lines(policy) {
            let _ = writeln!(out, "  {line}");
        }
        if !origins.is_empty() {
            let _ = writeln!(out, "set by drop-ins:");
        }
        for origin in origins {
            let _ = writeln!(out, "  {origin}");
        }
        out.push_str("(--json prints the whole effective policy; --strict exits 1 on a warning)\n");
        out
    }

    /// The full dump: warnings first as `#` lines, then the JSON and the
    /// drop-ins' settings.
    fn json(
        &self,
        config: &Path,
        policy: &Policy,
        origins: &[Origin],
    ) -> Result<String, PolicyCmdError> {
        let mut out = String::new();
        for warning in &self.warnings {
            let _ = writeln!(out, "# warning: {warning}");
        }
        if let Some(error) = &self.error {
            let _ = writeln!(out, "# error: {error}");
        }
        let _ = writeln!(
            out,
            "# {} is valid; effective policy:\n{}",
            config.display(),
            serde_json::to_string_pretty(policy)?
        );
        if !origins.is_empty() {
            let _ = writeln!(out, "# set by drop-ins:");
        }
        for origin in origins {
            let _ = writeln!(out, "{origin}");
        }
        Ok(out)
    }
}

/// What the policy grants, a line per section, read from its JSON form so
/// a new key shows in `--json` without a change here.
fn summary_lines(policy: &Policy) -> Vec<String> {
    let v = serde_json::to_value(policy).unwrap_or_default();
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "unset".into(),
        other => other.to_string(),
    };
    let list = |v: &serde_json::Value, most: usize| {
        let items: Vec<String> = v.as_array().into_iter().flatten().map(text).collect();
        match items.len() {
            0 => "none".to_string(),
            n if n > most => format!("{} (+{} more)", items[..most].join(", "), n - most),
            _ => items.join(", "),
        }
    };
    let binds: Vec<String> = v["filesystem"]["bind"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| format!("{} ({})", text(&b["source"]), text(&b["mode"])))
        .collect();
    let n = &v["network"];
    let p = &v["process"];
    let r = &v["resources"];
    vec![
        format!(
            "network: mode {}, hosts: {}, ports: {}, preview ports: {}{}",
            text(&n["mode"]),
            list(&n["hosts"], 6),
            list(&n["ports"], 6),
            list(&n["preview_ports"], 6),
            if n["transparent"] == true {
                ", transparent (DNS and TCP caught in the container's namespace)"
            } else {
                ""
            }
        ),
        format!(
            "credentials: {}",
            match n["credentials"].as_array().map(Vec::as_slice) {
                None | Some([]) => "none".to_string(),
                Some(all) => all
                    .iter()
                    .map(|c| format!(
                        "{} ({} -> {})",
                        text(&c["name"]),
                        text(&c["env"]),
                        list(&c["hosts"], 3)
                    ))
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        ),
        format!(
            "process: user {}, pids_limit {}, capabilities: {}, env_allow: {}",
            text(&p["user"]),
            text(&p["pids_limit"]),
            list(&p["capabilities"], 6),
            list(&p["env_allow"], 8)
        ),
        format!(
            "resources: memory_max {}, cpus {}, tmpfs_max {}",
            text(&r["memory_max"]),
            text(&r["cpus"]),
            text(&r["tmpfs_max"])
        ),
        format!(
            "filesystem: readonly_root {}, binds: {}, volumes: {}{}",
            text(&v["filesystem"]["readonly_root"]),
            match binds.is_empty() {
                true => "none".to_string(),
                false => binds.join(", "),
            },
            match text(&v["filesystem"]["volumes"]).as_str() {
                "none" => "none".to_string(),
                mode => format!("{mode} in {}", list(&v["filesystem"]["volume_dirs"], 4)),
            },
            match &policy.filesystem.probe {
                Some(probe) => format!(", probe at /vibe-shim-probe: {}", probe.display()),
                None => String::new(),
            }
        ),
        format!(
            "runtime: {}",
            policy
                .runtime
                .path
                .as_ref()
                .map_or("the first runc in PATH that is not vibe-shim".into(), |p| p
                    .display()
                    .to_string())
        ),
        format!("audit: {}", text(&v["audit"]["path"])),
    ]
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

/// The host as `policy explain` sees it: the real one, except for the facts
/// that belong to the live container whose bundle is being explained (its
/// cgroup, its id, its mounted root and the processes rooted there), which a
/// create of that very container would not find. Explain says it skipped
/// them; the runtime judges them at each create.
struct ExplainHost<'a, H: HostView> {
    host: &'a H,
    /// The bundle's `root.path`, as `root_path` will look it up.
    root: Option<PathBuf>,
}

/// What [`ExplainHost`] does not judge, printed with every explanation.
const SKIPPED: &str = "not judged (they belong to the live container, create judges them): \
    whether linux.cgroupsPath already exists, whether the id is in use, \
    whether root.path exists, is an overlay mount of its own and is no other \
    container's or process's root, and which container holds a volume's claim";

impl<H: HostView> ExplainHost<'_, H> {
    fn is_root(&self, path: &Path) -> bool {
        self.root.as_deref() == Some(path)
    }
}

impl<H: HostView> HostView for ExplainHost<'_, H> {
    fn canonicalize(&self, path: &Path) -> Option<PathBuf> {
        match self.host.canonicalize(path) {
            None if self.is_root(path) => Some(path.to_path_buf()),
            found => found,
        }
    }
    fn mount_point_of(&self, path: &Path) -> Option<PathBuf> {
        self.host.mount_point_of(path)
    }
    fn namespace_id(&self, path: &Path) -> Option<NamespaceId> {
        self.host.namespace_id(path)
    }
    fn host_namespace_id(&self, kind: &str) -> Option<NamespaceId> {
        self.host.host_namespace_id(kind)
    }
    fn swap_limit_supported(&self) -> bool {
        self.host.swap_limit_supported()
    }
    fn memory_total(&self) -> Option<u64> {
        self.host.memory_total()
    }
    fn inherited_rlimit(&self, name: &str) -> Option<(u64, u64)> {
        self.host.inherited_rlimit(name)
    }
    fn syscall_known(&self, name: &str) -> bool {
        self.host.syscall_known(name)
    }
    fn apparmor_enforced(&self) -> Option<Vec<String>> {
        self.host.apparmor_enforced()
    }
    fn regular_id_min(&self) -> (u32, u32) {
        self.host.regular_id_min()
    }
    fn file_facts(&self, path: &Path) -> Option<FileFacts> {
        self.host.file_facts(path)
    }
    fn oci_hook_files(&self, dir: &Path) -> Vec<HookFile> {
        self.host.oci_hook_files(dir)
    }
    fn container_id_in_use(&self, _runc_root: &Path, _id: &str) -> bool {
        false
    }
    fn mount_fs_type(&self, path: &Path) -> Option<String> {
        match self.is_root(path) {
            true => Some("overlay".into()),
            false => self.host.mount_fs_type(path),
        }
    }
    fn netns_policy_table(&self, path: &Path, tag: &str) -> Option<NetnsTable> {
        self.host.netns_policy_table(path, tag)
    }
    fn netns_in_use(&self, path: &Path) -> Option<bool> {
        self.host.netns_in_use(path)
    }
    fn cgroup_exists(&self, _path: &Path) -> Option<bool> {
        Some(false)
    }
    fn cgroup_has_processes(&self, _path: &Path) -> Option<bool> {
        Some(false)
    }
    fn live_root_on(&self, _path: &Path) -> Option<(u32, bool)> {
        None
    }
    fn mount_views(&self, _path: &Path) -> usize {
        1
    }
    fn runc_rootfses(&self, _pattern: &Path) -> Vec<(PathBuf, PathBuf)> {
        Vec::new()
    }
}

fn explain(
    config: &Path,
    policy: &Policy,
    bundle: &Path,
    id: Option<String>,
) -> Result<(String, bool), PolicyCmdError> {
    explain_on(config, policy, bundle, id, &RealHost::new())
}

fn explain_on(
    config: &Path,
    policy: &Policy,
    bundle: &Path,
    id: Option<String>,
    real: &impl HostView,
) -> Result<(String, bool), PolicyCmdError> {
    let mut spec = read_spec(&bundle.join("config.json"))?;
    let bundle_abs = std::path::absolute(bundle).unwrap_or_else(|_| bundle.to_path_buf());
    anchor_relative_paths(&mut spec, &bundle_abs);
    let root = spec
        .pointer("/root/path")
        .and_then(serde_json::Value::as_str)
        .map(|p| PathBuf::from(&*clean_path(p)));
    let host = ExplainHost { host: real, root };
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
    let id = id.unwrap_or_else(|| {
        bundle_abs
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let ctx = CreateContext {
        container_id: id,
        network_hook: None,
        runtime_path,
        bundle: bundle_abs,
        runc_root: crate::sys::state_dir::runc_root(None),
        systemd_cgroup: false,
        // Every credential as create would bind it, secrets unread: the
        // changes show, the placeholders do not.
        credentials: policy
            .network
            .credentials
            .iter()
            .map(|c| vibe_policy::egress::credential::Binding::new(c, "(placeholder)".into()))
            .collect(),
        trust_bundle: Some(std::path::PathBuf::from(format!(
            "{}/<container>/{}",
            crate::sys::state_dir::BASE,
            crate::sys::credentials::BUNDLE_FILE
        ))),
        image_homes: crate::sys::rootfs::image_homes(&spec),
        notice: None,
        // The range's first block stands for the one create would allocate.
        userns: explain_block(&policy.userns),
        userns_pin: Some(std::path::PathBuf::from(format!(
            "{}/<container>/{}",
            crate::sys::state_dir::BASE,
            crate::sys::state_dir::USERNS_PIN_FILE
        ))),
    };
    let mut out = format!(
        "policy: {}\nbundle: {}\n",
        config.display(),
        bundle.display()
    );
    let _ = writeln!(out, "{SKIPPED}");
    let (changes, verdict, ok) = match enforce_create(spec, policy, &host, &ctx) {
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

/// The first block of the policy's range (or of /etc/subuid and
/// /etc/subgid), for `policy explain`; `None` when there is none.
fn explain_block(
    section: &vibe_policy::config::UsernsSection,
) -> Option<vibe_policy::engine::IdBlock> {
    use vibe_policy::rules::userns;
    if section.mode != vibe_policy::config::UsernsMode::Private {
        return None;
    }
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let (uids, gids) = userns::ranges(
        section,
        read("/etc/subuid").as_deref(),
        read("/etc/subgid").as_deref(),
    )
    .ok()?;
    userns::block(uids, gids, 0)
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
        assert!(matches!(
            a.command,
            PolicyCommand::Check {
                json: false,
                strict: false
            }
        ));
        assert!(matches!(
            parsed(&["check", "--json", "--strict"]).unwrap().command,
            PolicyCommand::Check {
                json: true,
                strict: true
            }
        ));
        let a = parsed(&["--config=/c.toml", "check"]).unwrap();
        assert_eq!(a.config, Some(PathBuf::from("/c.toml")));
        let a = parsed(&["explain", "--bundle", "/b", "--config", "/c.toml"]).unwrap();
        assert!(
            matches!(a.command, PolicyCommand::Explain { ref bundle, id: None } if bundle == Path::new("/b"))
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
        let (out, ok) = check_report(&config, &policy, &origins, true, false).unwrap();
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
        let (out, ok) = check_report(&config, &policy, &[], true, false).unwrap();
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

    /// The default is a short summary with the warnings before anything
    /// else (the one that matters was the last of ~450 JSON lines), and
    /// `--strict` fails on a warning that plain check lets pass.
    #[test]
    fn check_summarises_warnings_first_and_strict_fails_on_one() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("c.toml");
        std::fs::write(
            &config,
            "[process]\nuser = \"61000:61000\"\nenv_allow = [\"LC_*\", \"TERM\"]\n[network]\nmode = \"none\"\n",
        )
        .unwrap();
        let policy = crate::policy_file::load(&config).unwrap();
        let (out, ok) = check_report(&config, &policy, &[], false, false).unwrap();
        assert!(ok, "{out}");
        assert!(out.lines().count() < 20, "{out}");
        let first = out.lines().next().unwrap();
        assert!(first.starts_with("warning: process.env_allow"), "{out}");
        assert!(out.contains("is valid (1 warning(s)"), "{out}");
        assert!(out.contains("network: mode none"), "{out}");
        assert!(out.contains("process: user 61000:61000"), "{out}");
        assert!(!out.contains('{'), "{out}");
        let (_, ok) = check_report(&config, &policy, &[], false, true).unwrap();
        assert!(!ok);
        let (json, _) = check_report(&config, &policy, &[], true, false).unwrap();
        assert!(json.starts_with("# warning: process.env_allow"), "{json}");
        assert!(json.contains("\"pids_limit\""), "{json}");
        std::fs::write(&config, "[process]\nuser = \"61000:61000\"\n").unwrap();
        let policy = crate::policy_file::load(&config).unwrap();
        let (out, ok) = check_report(&config, &policy, &[], false, true).unwrap();
        assert!(ok && !out.contains("warning:"), "{out}");
    }

    /// A bundle copied from a live `docker run`: its cgroup exists (here:
    /// this test's own) and its overlay root is gone or still mounted. Explain
    /// judges the rest and says what it skipped, instead of refusing with
    /// `cgroups: ... already exists` or `root_path`.
    #[test]
    fn explain_skips_the_live_containers_own_host_facts() {
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../policy/tests/fixtures/docker-20.10/config-default.json"
        );
        let mut spec: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
        // The engine files (resolv.conf, hosts) were on the capturing host only.
        spec["mounts"]
            .as_array_mut()
            .unwrap()
            .retain(|m| m["type"] != "bind");
        // So was the dockerd its libnetwork-setkey hook names (/proc/<pid>/exe).
        spec.as_object_mut().unwrap().remove("hooks");
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let own = own
            .lines()
            .last()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .to_string();
        spec["linux"]["cgroupsPath"] = own.into();
        spec["root"]["path"] = "/var/lib/vs-dev/overlay2/0123abcd/merged".into();
        let dir = tempfile::tempdir().unwrap();
        let id = "4f1c5e2a9b7d";
        let bundle = dir.path().join(id);
        std::fs::create_dir(&bundle).unwrap();
        std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
        let config = dir.path().join("c.toml");
        std::fs::write(&config, "[process]\nuser = \"61000:61000\"\n").unwrap();
        let policy = crate::policy_file::load(&config).unwrap();
        let (out, ok) = explain(&config, &policy, &bundle, None).unwrap();
        assert!(ok, "{out}");
        assert!(out.contains("not judged"), "{out}");
        assert!(out.ends_with("change(s); allowed\n"), "{out}");
        // What is not the live container's is still judged.
        spec["linux"]["namespaces"] = serde_json::json!([{"type": "mount"}]);
        std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
        let (out, ok) = explain(&config, &policy, &bundle, Some(id.into())).unwrap();
        assert!(
            !ok && out.contains("; refused: namespaces: no pid namespace"),
            "{out}"
        );
    }
}
