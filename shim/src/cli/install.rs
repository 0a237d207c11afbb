//! `vibe-shim install <target>` / `vibe-shim uninstall <target>`: the
//! options of each target, what to print, and the exit code. The file I/O
//! and the engines' edits are `crate::install`.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::install::lockdown::{self, ENGINE_PATH, PATH_DIR};
use crate::install::{
    apply, containerd, docker, load_record, podman, runtime_binary, toml_doc, unapply, EditError,
    InstallError, Installed, Record, Uninstalled, DEFAULT_STATE_DIR, RUNTIME_NAME,
};

/// Exit codes, for `--help` and the package's maintainer scripts.
const EXIT_CODES: &str = "Exit codes:\n  0  done (or nothing to do)\n  1  refused or failed (nothing half-done is left), or a bad option\n  2  an unknown or missing target";

/// `vibe-shim install <target>`.
#[derive(Debug, clap::Parser)]
#[command(
    name = "install",
    bin_name = "vibe-shim install",
    about = "Register vibe-shim with an engine, or make every runc on the host vibe-shim (lockdown)",
    after_help = EXIT_CODES
)]
pub struct InstallArgs {
    #[command(subcommand)]
    target: InstallTarget,
}

#[derive(Debug, clap::Subcommand)]
enum InstallTarget {
    /// Add the runtime (and optionally the authorization plugin) to daemon.json
    #[command(args_override_self = true)]
    Docker(DockerInstall),
    /// Add the CRI runtime to containerd's config
    #[command(args_override_self = true)]
    Containerd(ContainerdInstall),
    /// Add the engine runtime in a containers.conf drop-in
    #[command(args_override_self = true)]
    Podman(PodmanInstall),
    /// Make `runc`, as every engine resolves it, be vibe-shim
    #[command(args_override_self = true)]
    Lockdown(LockdownArgs),
}

/// `vibe-shim uninstall <target>`: undoes what install recorded.
#[derive(Debug, clap::Parser)]
#[command(
    name = "uninstall",
    bin_name = "vibe-shim uninstall",
    about = "Undo what install changed, and nothing else",
    after_help = EXIT_CODES
)]
pub struct UninstallArgs {
    #[command(subcommand)]
    target: UninstallTarget,
}

#[derive(Debug, clap::Subcommand)]
enum UninstallTarget {
    #[command(args_override_self = true)]
    Docker {
        #[arg(long, value_name = "PATH", default_value = docker::DEFAULT_DAEMON_JSON)]
        daemon_json: PathBuf,
        #[command(flatten)]
        state: StateDir,
    },
    #[command(args_override_self = true)]
    Containerd {
        #[arg(long, value_name = "PATH", default_value = containerd::DEFAULT_CONFIG)]
        config: PathBuf,
        #[command(flatten)]
        state: StateDir,
    },
    #[command(args_override_self = true)]
    Podman {
        #[arg(long, value_name = "PATH", default_value = podman::DEFAULT_DROP_IN)]
        config: PathBuf,
        #[command(flatten)]
        state: StateDir,
    },
    /// Every engine config install recorded (the package's prerm)
    #[command(args_override_self = true)]
    All {
        #[command(flatten)]
        state: StateDir,
    },
    /// Put the real runc back
    #[command(args_override_self = true)]
    Lockdown(LockdownArgs),
}

#[derive(Debug, clap::Args)]
struct StateDir {
    /// Where install records what it changed
    #[arg(long = "state-dir", value_name = "DIR", default_value = DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
}

/// What every engine install takes.
#[derive(Debug, clap::Args)]
struct Common {
    /// The vibe-shim binary the engine runs (absolute: engines exec it
    /// from their own cwd); it must exist and be executable [default: this
    /// binary, by its canonical path]
    #[arg(long, value_name = "BINARY", value_parser = absolute_binary)]
    path: Option<String>,
    #[command(flatten)]
    state: StateDir,
    /// Print what the file would become; write nothing
    #[arg(long)]
    dry_run: bool,
}

#[derive(Debug, clap::Args)]
struct DockerInstall {
    #[arg(long, value_name = "PATH", default_value = docker::DEFAULT_DAEMON_JSON)]
    daemon_json: PathBuf,
    /// Make vibe-shim dockerd's default-runtime
    #[arg(long)]
    default: bool,
    /// Add the vibe-shim authorization plugin
    #[arg(long)]
    authz: bool,
    /// Pass `--config FILE` to vibe-shim as runtimeArgs
    #[arg(long, value_name = "FILE", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    policy: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, clap::Args)]
struct ContainerdInstall {
    #[arg(long, value_name = "PATH", default_value = containerd::DEFAULT_CONFIG)]
    config: PathBuf,
    /// The config version of a new file [default: 3 for containerd 2.x, else 2]
    #[arg(long, value_name = "2|3", value_parser = clap::value_parser!(i64).range(2..=3))]
    config_version: Option<i64>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, clap::Args)]
struct PodmanInstall {
    #[arg(long, value_name = "PATH", default_value = podman::DEFAULT_DROP_IN)]
    config: PathBuf,
    /// Make vibe-shim podman's engine.runtime
    #[arg(long)]
    default: bool,
    #[command(flatten)]
    common: Common,
}

/// Both lockdown verbs' options; every path absolute.
#[derive(Debug, clap::Args)]
struct LockdownArgs {
    /// The root to lock down (a chroot or an image tree)
    #[arg(long, value_name = "DIR", default_value = "/", value_parser = absolute_path)]
    root: PathBuf,
    /// [default: divert when dpkg owns a runc here, else path]
    #[arg(long, value_enum, value_name = "MODE")]
    mode: Option<LockdownMode>,
    /// The vibe-shim the `runc` link names [default: this binary]
    #[arg(long, value_name = "PATH", value_parser = absolute_path)]
    shim: Option<PathBuf>,
    /// The packaged runc to divert [default: the one dpkg owns]
    #[arg(long, value_name = "PATH", value_parser = absolute_path)]
    runc: Option<PathBuf>,
    /// Path mode: the directory that holds the `runc` link
    #[arg(long, value_name = "DIR", default_value = PATH_DIR, value_parser = absolute_path)]
    path_dir: PathBuf,
    /// The engines' PATH, searched for a `runc` that would bypass the lockdown
    #[arg(long, value_name = "PATH", default_value = ENGINE_PATH)]
    engine_path: String,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LockdownMode {
    Divert,
    Path,
}

impl From<LockdownArgs> for lockdown::Options {
    fn from(a: LockdownArgs) -> Self {
        lockdown::Options {
            root: a.root,
            mode: a.mode.map(|m| match m {
                LockdownMode::Divert => lockdown::Mode::Divert,
                LockdownMode::Path => lockdown::Mode::Path,
            }),
            shim: a.shim,
            runc: a.runc,
            path_dir: a.path_dir,
            engine_path: a.engine_path,
            policy: PathBuf::from(vibe_policy::config::DEFAULT_CONFIG_PATH),
        }
    }
}

fn absolute_path(value: &str) -> Result<PathBuf, String> {
    match Path::new(value).is_absolute() {
        true => Ok(PathBuf::from(value)),
        false => Err(format!("{value} must be absolute")),
    }
}

/// `--path` must name an absolute path: engines exec it from their own cwd.
fn absolute_binary(value: &str) -> Result<String, String> {
    match value.starts_with('/') {
        true => Ok(value.to_string()),
        false => Err(format!("{value:?}: an absolute path is needed")),
    }
}

/// Why `install`/`uninstall` failed: the line printed after the target.
#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error(transparent)]
    Install(#[from] InstallError),
    #[error(transparent)]
    Lockdown(#[from] lockdown::LockdownError),
}

/// Runs `install`/`uninstall`; prints what was done, or one line naming
/// vibe-shim on failure. (Run as `runc`, main.rs refuses these verbs.)
/// `config` is the global `--config` (or the default): the policy lockdown
/// checks, as seen inside `--root`.
pub fn run(verb: &str, config: &Path, args: &[OsString]) -> i32 {
    let argv = std::iter::once(OsString::from(verb)).chain(args.iter().cloned());
    let parsed = match verb {
        "install" => <InstallArgs as clap::Parser>::try_parse_from(argv)
            .map(|a| run_install(a.target, config)),
        _ => <UninstallArgs as clap::Parser>::try_parse_from(argv).map(|a| run_uninstall(a.target)),
    };
    let (target, result) = match parsed {
        Ok(done) => done,
        Err(e) => {
            let _ = e.print();
            return usage_code(&e);
        }
    };
    match result {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("vibe-shim: {verb} {target}: {e}");
            1
        }
    }
}

/// `--help`: 0; a missing or unknown target: 2; a bad option: 1, the
/// codes install has always used.
fn usage_code(e: &clap::Error) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
        ErrorKind::InvalidSubcommand
        | ErrorKind::MissingSubcommand
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => 2,
        _ => 1,
    }
}

fn run_install(target: InstallTarget, config: &Path) -> (&'static str, Result<String, Failed>) {
    match target {
        InstallTarget::Docker(a) => ("docker", install_docker(&a).map_err(Into::into)),
        InstallTarget::Containerd(a) => ("containerd", install_containerd(&a).map_err(Into::into)),
        InstallTarget::Podman(a) => ("podman", install_podman(&a).map_err(Into::into)),
        InstallTarget::Lockdown(a) => {
            let options = lockdown::Options {
                policy: config.to_path_buf(),
                ..a.into()
            };
            ("lockdown", lockdown::install(&options).map_err(Into::into))
        }
    }
}

fn run_uninstall(target: UninstallTarget) -> (&'static str, Result<String, Failed>) {
    let engine =
        |engine, config: &Path, state: &StateDir| uninstall(engine, config, &state.state_dir);
    match target {
        UninstallTarget::Docker { daemon_json, state } => (
            "docker",
            engine("docker", &daemon_json, &state).map_err(Into::into),
        ),
        UninstallTarget::Containerd { config, state } => (
            "containerd",
            engine("containerd", &config, &state).map_err(Into::into),
        ),
        UninstallTarget::Podman { config, state } => (
            "podman",
            engine("podman", &config, &state).map_err(Into::into),
        ),
        UninstallTarget::All { state } => {
            ("all", uninstall_all(&state.state_dir).map_err(Into::into))
        }
        UninstallTarget::Lockdown(a) => (
            "lockdown",
            lockdown::uninstall(&a.into()).map_err(Into::into),
        ),
    }
}

/// Records name the file by its absolute path: `uninstall all` runs from
/// the package's prerm, in another directory.
fn absolute(path: &Path) -> Result<PathBuf, InstallError> {
    std::path::absolute(path).map_err(|source| InstallError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn installed_line(config: &Path, what: &str, result: Installed) -> String {
    match result {
        Installed::Already => format!("vibe-shim: {}: already configured\n", config.display()),
        Installed::DryRun(text) => {
            format!("# {} would become:\n{text}", config.display())
        }
        Installed::Changed { backup } => {
            let mut line = format!("vibe-shim: {}: {what}", config.display());
            match backup {
                Some(b) => {
                    let _ = write!(line, "; the original is kept in {}", b.display());
                }
                None => line.push_str(" (new file)"),
            }
            line + "\n"
        }
    }
}

fn install_docker(a: &DockerInstall) -> Result<String, InstallError> {
    let config = absolute(&a.daemon_json)?;
    let dopts = docker::DockerOpts {
        path: runtime_binary(a.common.path.as_deref())?,
        policy: a.policy.clone(),
        default: a.default,
        authz: a.authz,
    };
    let result = apply(
        "docker",
        &config,
        &a.common.state.state_dir,
        a.common.dry_run,
        |t| docker::add(t, &dopts),
    )?;
    let mut what = format!("runtime {RUNTIME_NAME} ({})", dopts.path);
    if dopts.default {
        what.push_str(", default-runtime");
    }
    if dopts.authz {
        let _ = write!(what, ", authorization plugin {}", docker::AUTHZ_PLUGIN);
    }
    let changed = matches!(result, Installed::Changed { .. });
    let mut out = installed_line(&config, &format!("added {what}"), result);
    if changed {
        out.push_str(&docker::reload_hint(dopts.authz));
        out.push('\n');
    }
    if dopts.authz && !Path::new(docker::AUTHZ_SOCKET).exists() {
        let _ = writeln!(
            out,
            "WARNING: {} does not exist yet: do not reload dockerd before the plugin runs",
            docker::AUTHZ_SOCKET
        );
    }
    Ok(out)
}

fn install_containerd(a: &ContainerdInstall) -> Result<String, InstallError> {
    let config = absolute(&a.config)?;
    let binary = &runtime_binary(a.common.path.as_deref())?;
    let fresh = a
        .config_version
        .unwrap_or_else(installed_containerd_config_version);
    let result = apply(
        "containerd",
        &config,
        &a.common.state.state_dir,
        a.common.dry_run,
        |t| containerd::add(t, binary, fresh),
    )?;
    let changed = matches!(result, Installed::Changed { .. });
    let what = format!("added CRI runtime {RUNTIME_NAME} (runc v2 shim, BinaryName {binary})");
    let mut out = installed_line(&config, &what, result);
    if changed {
        out.push_str(containerd::reload_hint());
        out.push('\n');
    }
    Ok(out)
}

fn install_podman(a: &PodmanInstall) -> Result<String, InstallError> {
    let config = absolute(&a.config)?;
    let binary = &runtime_binary(a.common.path.as_deref())?;
    let default = a.default;
    let result = apply(
        "podman",
        &config,
        &a.common.state.state_dir,
        a.common.dry_run,
        |t| podman::add(t, binary, default),
    )?;
    let changed = matches!(result, Installed::Changed { .. });
    let what = format!(
        "added engine runtime {RUNTIME_NAME} ({binary}){}",
        if default { ", default runtime" } else { "" }
    );
    let mut out = installed_line(&config, &what, result);
    if changed {
        out.push_str(podman::reload_hint());
        out.push('\n');
    }
    Ok(out)
}

/// 2 for containerd 1.x (or when it cannot be asked), 3 for 2.x.
fn installed_containerd_config_version() -> i64 {
    let out = std::process::Command::new("containerd")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    match containerd::major_version(&out) {
        Some(major) if major >= 2 => 3,
        _ => 2,
    }
}

fn revert_for(engine: &str) -> fn(&str, &Record) -> Result<String, EditError> {
    match engine {
        "docker" => docker::revert,
        _ => toml_doc::revert,
    }
}

fn uninstalled_line(engine: &str, config: &Path, result: Uninstalled) -> String {
    let hint = match engine {
        "docker" => "reload dockerd: `systemctl reload docker`",
        "containerd" => "restart containerd: `systemctl restart containerd`",
        _ => "nothing to reload",
    };
    match result {
        Uninstalled::NotInstalled => format!(
            "vibe-shim: {}: not installed by vibe-shim (no record); nothing changed\n",
            config.display()
        ),
        Uninstalled::Restored => format!(
            "vibe-shim: {}: restored as it was before install; {hint}\n",
            config.display()
        ),
        Uninstalled::Removed => format!(
            "vibe-shim: {}: removed (install had created it); {hint}\n",
            config.display()
        ),
        Uninstalled::Reverted => format!(
            "vibe-shim: {}: changed since install; took out only what install added; {hint}\n",
            config.display()
        ),
    }
}

/// `uninstall <engine>`.
fn uninstall(engine: &str, config: &Path, state_dir: &Path) -> Result<String, InstallError> {
    let config = absolute(config)?;
    let result = unapply(engine, &config, state_dir, revert_for(engine))?;
    Ok(uninstalled_line(engine, &config, result))
}

/// Every config install recorded (the package's prerm runs this).
fn uninstall_all(dir: &Path) -> Result<String, InstallError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok("vibe-shim: no engine configured by install\n".into())
        }
        Err(source) => {
            return Err(InstallError::Io {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let mut out = String::new();
    for path in paths {
        let Some(record) = load_record(&path)? else {
            continue;
        };
        let result = unapply(
            &record.engine,
            &record.config,
            dir,
            revert_for(&record.engine),
        )?;
        out.push_str(&uninstalled_line(&record.engine, &record.config, result));
    }
    if out.is_empty() {
        out.push_str("vibe-shim: no engine configured by install\n");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn argv<'a>(
        verb: &str,
        target: &str,
        args: &'a [OsString],
    ) -> impl Iterator<Item = OsString> + 'a {
        [OsString::from(verb), OsString::from(target)]
            .into_iter()
            .chain(args.iter().cloned())
    }

    fn do_install(target: &str, args: &[OsString]) -> Result<String, String> {
        use clap::Parser;
        let a = InstallArgs::try_parse_from(argv("install", target, args))
            .map_err(|e| e.to_string())?;
        run_install(
            a.target,
            Path::new(vibe_policy::config::DEFAULT_CONFIG_PATH),
        )
        .1
        .map_err(|e| e.to_string())
    }

    fn do_uninstall(target: &str, args: &[OsString]) -> Result<String, String> {
        use clap::Parser;
        let a = UninstallArgs::try_parse_from(argv("uninstall", target, args))
            .map_err(|e| e.to_string())?;
        run_uninstall(a.target).1.map_err(|e| e.to_string())
    }

    fn usage(verb: &str, list: &[&str]) -> i32 {
        use clap::Parser;
        let argv = std::iter::once(verb).chain(list.iter().copied());
        match verb {
            "install" => InstallArgs::try_parse_from(argv).map(|_| 0),
            _ => UninstallArgs::try_parse_from(argv).map(|_| 0),
        }
        .unwrap_or_else(|e| usage_code(&e))
    }

    #[test]
    fn options_keep_their_spellings_and_exit_codes() {
        assert_eq!(
            usage(
                "install",
                &["docker", "--daemon-json", "/x", "--default", "--path=/p"]
            ),
            0
        );
        assert_eq!(
            usage(
                "install",
                &["docker", "--authz", "--policy", "/c.toml", "--dry-run"]
            ),
            0
        );
        assert_eq!(
            usage(
                "install",
                &["containerd", "--config", "/c", "--config-version", "3"]
            ),
            0
        );
        assert_eq!(
            usage("install", &["containerd", "--config-version", "4"]),
            1
        );
        assert_eq!(
            usage(
                "install",
                &["podman", "--config", "/c", "--default", "--state-dir", "/s"]
            ),
            0
        );
        assert_eq!(usage("install", &["docker", "--daemon-json"]), 1);
        assert_eq!(usage("install", &["docker", "--daemon-json="]), 1);
        assert_eq!(usage("install", &["docker", "--bogus"]), 1);
        assert_eq!(usage("install", &["docker", "--default=yes"]), 1);
        assert_eq!(usage("install", &["docker", "--path", "vibe-shim"]), 1);
        assert_eq!(usage("install", &["nothing"]), 2);
        assert_eq!(usage("install", &[]), 2);
        assert_eq!(usage("uninstall", &["all", "--state-dir", "/s"]), 0);
        assert_eq!(usage("uninstall", &["docker", "--daemon-json", "/x"]), 0);
        assert_eq!(usage("uninstall", &["docker", "--dry-run"]), 1);
        assert_eq!(usage("uninstall", &["nothing"]), 2);
        assert_eq!(usage("install", &["--help"]), 0);
    }

    #[test]
    fn lockdown_options_parse_and_refuse_relative_paths() {
        use clap::Parser;
        let parse = |list: &[&str]| {
            let argv = ["install", "lockdown"]
                .into_iter()
                .chain(list.iter().copied());
            InstallArgs::try_parse_from(argv).map(|a| match a.target {
                InstallTarget::Lockdown(l) => lockdown::Options::from(l),
                other => panic!("{other:?}"),
            })
        };
        let o = parse(&["--root", "/r", "--mode=path", "--path-dir", "/d"]).unwrap();
        assert_eq!(o.root, Path::new("/r"));
        assert_eq!(o.mode, Some(lockdown::Mode::Path));
        assert_eq!(o.path_dir, Path::new("/d"));
        let o = parse(&[]).unwrap();
        assert_eq!(o.root, Path::new("/"));
        assert_eq!(o.mode, None);
        assert_eq!(o.engine_path, ENGINE_PATH);
        assert!(parse(&["--root", "r"]).is_err());
        assert!(parse(&["--mode", "x"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
        assert!(parse(&["--root"]).is_err());
        assert_eq!(usage("uninstall", &["lockdown", "--root", "/r"]), 0);
    }

    /// install twice, uninstall twice, for each engine: the second install
    /// says "already configured", the files come back byte for byte.
    #[test]
    fn every_engine_round_trips_to_the_original_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let d = |p: &str| dir.path().join(p).to_str().unwrap().to_string();
        let state = d("state");
        let daemon = "{\n\t\"debug\": true,\n\t\"runtimes\": {}\n}\n";
        let ctd = "# mine\nversion = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause\"\n";
        std::fs::write(d("daemon.json"), daemon).unwrap();
        std::fs::write(d("config.toml"), ctd).unwrap();
        let (dj, ct, pd) = (
            d("daemon.json"),
            d("config.toml"),
            d("conf.d/vibe-shim.conf"),
        );
        let cases = [
            ("docker", vec!["--daemon-json", &dj, "--default", "--authz"]),
            ("containerd", vec!["--config", &ct]),
            ("podman", vec!["--config", &pd]),
        ];
        for (engine, opts) in &cases {
            let mut a = opts.clone();
            a.extend(["--state-dir", &state]);
            let out = do_install(engine, &args(&a)).unwrap();
            assert!(out.contains("added"), "{out}");
            let out = do_install(engine, &args(&a)).unwrap();
            assert!(out.contains("already configured"), "{out}");
        }
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d("daemon.json")).unwrap()).unwrap();
        assert_eq!(v["debug"], true);
        assert_eq!(v["authorization-plugins"][0], "vibe-shim");
        let out = do_uninstall("all", &args(&["--state-dir", &state])).unwrap();
        assert_eq!(out.matches("restored").count(), 2, "{out}");
        assert_eq!(out.matches("removed").count(), 1, "{out}");
        assert_eq!(std::fs::read_to_string(d("daemon.json")).unwrap(), daemon);
        assert_eq!(std::fs::read_to_string(d("config.toml")).unwrap(), ctd);
        assert!(!dir.path().join("conf.d").exists());
        assert!(!dir.path().join("daemon.json.vibe-shim.bak").exists());
        for (engine, opts) in &cases {
            let mut a = vec![opts[0], opts[1]];
            a.extend(["--state-dir", &state]);
            let out = do_uninstall(engine, &args(&a)).unwrap();
            assert!(out.contains("not installed"), "{out}");
        }
    }

    /// The default is this binary (not a packaged path that may not exist),
    /// and a `--path` that is missing or not executable is refused before
    /// any file is touched.
    #[test]
    fn the_runtime_path_is_this_binary_or_a_runnable_one() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = |p: &str| dir.path().join(p).to_str().unwrap().to_string();
        let (dj, state) = (d("daemon.json"), d("state"));
        let base = ["--daemon-json", &dj, "--state-dir", &state];
        do_install("docker", &args(&base)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&dj).unwrap()).unwrap();
        let me = std::fs::canonicalize("/proc/self/exe").unwrap();
        assert_eq!(v["runtimes"]["vibe-shim"]["path"], me.to_str().unwrap());
        let (pd, ct) = (d("podman.conf"), d("containerd.toml"));
        for (engine, flag, file) in [("podman", "--config", &pd), ("containerd", "--config", &ct)] {
            let missing = [
                flag,
                file.as_str(),
                "--state-dir",
                &state,
                "--path",
                "/nonexistent/vibe-shim",
            ];
            let err = do_install(engine, &args(&missing)).unwrap_err();
            assert!(
                err.contains("/nonexistent/vibe-shim: does not exist"),
                "{err}"
            );
            assert!(!Path::new(file).exists(), "{engine} wrote {file}");
        }
        let plain = d("not-executable");
        std::fs::write(&plain, "").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        for path in [plain.as_str(), dir.path().to_str().unwrap()] {
            let a = [
                "--daemon-json",
                &d("other.json"),
                "--state-dir",
                &state,
                "--path",
                path,
            ];
            let err = do_install("docker", &args(&a)).unwrap_err();
            assert!(err.contains("is not an executable file"), "{err}");
        }
        assert!(!Path::new(&d("other.json")).exists());
    }

    #[test]
    fn dry_run_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.json");
        let state = dir.path().join("state");
        let a = args(&[
            "--daemon-json",
            path.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
            "--dry-run",
        ]);
        let out = do_install("docker", &a).unwrap();
        assert!(out.contains("\"vibe-shim\""), "{out}");
        assert!(!path.exists() && !state.exists());
        assert!(do_install("docker", &args(&["--path", "vibe-shim"])).is_err());
    }
}
