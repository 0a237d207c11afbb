//! The command lines: options, which file, what to print.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{
    apply, binary_path, containerd, docker, load_record, podman, toml_doc, unapply, InstallError,
    Installed, Opts, Uninstalled, DEFAULT_STATE_DIR, RUNTIME_NAME,
};

pub const USAGE: &str = "usage: vibe-shim install docker [--daemon-json PATH] [--default] [--authz] [--policy FILE]\n\
     \x20      vibe-shim install containerd [--config PATH] [--config-version 2|3]\n\
     \x20      vibe-shim install podman [--config PATH] [--default]\n\
     \x20      vibe-shim uninstall docker [--daemon-json PATH] | containerd [--config PATH] | podman [--config PATH] | all\n\
     \x20      common: [--path BINARY] (install) [--state-dir DIR] [--dry-run] (install)";

/// Records name the file by its absolute path: `uninstall all` runs from
/// the package's prerm, in another directory.
fn config_path(opts: &Opts, flag: &str, default: &str) -> Result<PathBuf, InstallError> {
    let path = PathBuf::from(opts.value(flag).unwrap_or(default));
    std::path::absolute(&path).map_err(|source| InstallError::Io { path, source })
}

fn state_dir(opts: &Opts) -> PathBuf {
    PathBuf::from(opts.value("state-dir").unwrap_or(DEFAULT_STATE_DIR))
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

/// `install <target> <options>`; returns what to print.
pub fn install(target: &str, args: &[OsString]) -> Result<String, InstallError> {
    match target {
        "docker" => {
            let opts = Opts::parse(
                args,
                &["daemon-json", "path", "policy", "state-dir"],
                &["default", "authz", "dry-run"],
            )?;
            let config = config_path(&opts, "daemon-json", docker::DEFAULT_DAEMON_JSON)?;
            let dopts = docker::DockerOpts {
                path: binary_path(&opts)?,
                policy: opts.value("policy").map(str::to_string),
                default: opts.flag("default"),
                authz: opts.flag("authz"),
            };
            let result = apply(
                "docker",
                &config,
                &state_dir(&opts),
                opts.flag("dry-run"),
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
        "containerd" => {
            let opts = Opts::parse(
                args,
                &["config", "path", "state-dir", "config-version"],
                &["dry-run"],
            )?;
            let config = config_path(&opts, "config", containerd::DEFAULT_CONFIG)?;
            let binary = binary_path(&opts)?;
            let fresh = match opts.value("config-version") {
                Some(v) => v
                    .parse::<i64>()
                    .ok()
                    .filter(|v| matches!(v, 2 | 3))
                    .ok_or_else(|| {
                        InstallError::Usage(format!("--config-version {v:?}: 2 or 3"))
                    })?,
                None => installed_containerd_config_version(),
            };
            let result = apply(
                "containerd",
                &config,
                &state_dir(&opts),
                opts.flag("dry-run"),
                |t| containerd::add(t, &binary, fresh),
            )?;
            let changed = matches!(result, Installed::Changed { .. });
            let what =
                format!("added CRI runtime {RUNTIME_NAME} (runc v2 shim, BinaryName {binary})");
            let mut out = installed_line(&config, &what, result);
            if changed {
                out.push_str(containerd::reload_hint());
                out.push('\n');
            }
            Ok(out)
        }
        "podman" => {
            let opts = Opts::parse(
                args,
                &["config", "path", "state-dir"],
                &["default", "dry-run"],
            )?;
            let config = config_path(&opts, "config", podman::DEFAULT_DROP_IN)?;
            let binary = binary_path(&opts)?;
            let default = opts.flag("default");
            let result = apply(
                "podman",
                &config,
                &state_dir(&opts),
                opts.flag("dry-run"),
                |t| podman::add(t, &binary, default),
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
        _ => Err(InstallError::Usage(USAGE.into())),
    }
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

fn revert_for(engine: &str) -> fn(&str, &super::Record) -> Result<String, String> {
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

/// `uninstall <target> <options>`.
pub fn uninstall(target: &str, args: &[OsString]) -> Result<String, InstallError> {
    let (engine, path_flag, default) = match target {
        "docker" => ("docker", "daemon-json", docker::DEFAULT_DAEMON_JSON),
        "containerd" => ("containerd", "config", containerd::DEFAULT_CONFIG),
        "podman" => ("podman", "config", podman::DEFAULT_DROP_IN),
        "all" => return uninstall_all(args),
        _ => return Err(InstallError::Usage(USAGE.into())),
    };
    let opts = Opts::parse(args, &[path_flag, "state-dir"], &[])?;
    let config = config_path(&opts, path_flag, default)?;
    let result = unapply(engine, &config, &state_dir(&opts), revert_for(engine))?;
    Ok(uninstalled_line(engine, &config, result))
}

/// Every config install recorded (the package's prerm runs this).
fn uninstall_all(args: &[OsString]) -> Result<String, InstallError> {
    let opts = Opts::parse(args, &["state-dir"], &[])?;
    let dir = state_dir(&opts);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok("vibe-shim: no engine configured by install\n".into())
        }
        Err(source) => return Err(InstallError::Io { path: dir, source }),
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
            &dir,
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
            let out = install(engine, &args(&a)).unwrap();
            assert!(out.contains("added"), "{out}");
            let out = install(engine, &args(&a)).unwrap();
            assert!(out.contains("already configured"), "{out}");
        }
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d("daemon.json")).unwrap()).unwrap();
        assert_eq!(v["debug"], true);
        assert_eq!(v["authorization-plugins"][0], "vibe-shim");
        let out = uninstall("all", &args(&["--state-dir", &state])).unwrap();
        assert_eq!(out.matches("restored").count(), 2, "{out}");
        assert_eq!(out.matches("removed").count(), 1, "{out}");
        assert_eq!(std::fs::read_to_string(d("daemon.json")).unwrap(), daemon);
        assert_eq!(std::fs::read_to_string(d("config.toml")).unwrap(), ctd);
        assert!(!dir.path().join("conf.d").exists());
        assert!(!dir.path().join("daemon.json.vibe-shim.bak").exists());
        for (engine, opts) in &cases {
            let mut a = vec![opts[0], opts[1]];
            a.extend(["--state-dir", &state]);
            let out = uninstall(engine, &args(&a)).unwrap();
            assert!(out.contains("not installed"), "{out}");
        }
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
        let out = install("docker", &a).unwrap();
        assert!(out.contains("\"vibe-shim\""), "{out}");
        assert!(!path.exists() && !state.exists());
        assert!(install("docker", &args(&["--path", "vibe-shim"])).is_err());
    }
}
