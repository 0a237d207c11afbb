//! `vibe-shim egress [--config P] [--socket S] [--log L] [--records D]
//! [--sweep-secs N]`: the egress proxy daemon (issue 12), in the foreground
//! (systemd's vibe-shim-egress.service, or a test harness). vibe-hooks owns
//! the daemon; this only reads the options.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use vibe_hooks::egress::daemon::{self, Options, DEFAULT_LOG_PATH, DEFAULT_SWEEP_SECS};
use vibe_hooks::egress::records::DEFAULT_RECORDS_DIR;
use vibe_policy::config::DEFAULT_CONFIG_PATH;

use crate::policy_file;
use crate::runc_argv::Invocation;

#[derive(Debug, thiserror::Error)]
pub enum EgressVerbError {
    #[error("egress: {0}")]
    Usage(String),
    #[error("egress: config: {0}")]
    Config(#[from] policy_file::PolicyFileError),
    #[error("egress: {0}")]
    Daemon(#[from] daemon::DaemonError),
}

const USAGE: &str = "usage: vibe-shim egress [--config PATH] [--socket PATH] [--log PATH] \
                     [--records DIR] [--sweep-secs N]";

/// The daemon's options from its arguments (after `egress`); `config` is a
/// global `--config` given before the verb. The socket defaults to the
/// policy's `[network] egress_socket`.
fn options(config: Option<PathBuf>, args: &[OsString]) -> Result<Options, EgressVerbError> {
    let mut config = config;
    let (mut socket, mut log, mut records, mut sweep) = (None, None, None, None);
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let flag = flag.to_string_lossy();
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name.to_string(), Some(OsString::from(value))),
            None => (flag.to_string(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| rest.next().cloned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| EgressVerbError::Usage(format!("{name} needs a value; {USAGE}")))
        };
        match name.trim_start_matches('-') {
            "config" => config = Some(PathBuf::from(value()?)),
            "socket" => socket = Some(PathBuf::from(value()?)),
            "log" => log = Some(PathBuf::from(value()?)),
            "records" => records = Some(PathBuf::from(value()?)),
            "sweep-secs" => {
                let text = value()?.to_string_lossy().into_owned();
                let secs = text.parse::<u64>().ok().filter(|s| *s > 0).ok_or_else(|| {
                    EgressVerbError::Usage(format!("--sweep-secs {text:?}: a positive number"))
                })?;
                sweep = Some(secs);
            }
            _ => {
                return Err(EgressVerbError::Usage(format!(
                    "unknown option {flag:?}; {USAGE}"
                )))
            }
        }
    }
    let config = config.unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH));
    let config = std::fs::canonicalize(&config).unwrap_or(config);
    let socket = match socket {
        Some(socket) => socket,
        None => policy_file::load(&config)?.network.egress_socket,
    };
    Ok(Options {
        socket,
        log_path: log.unwrap_or_else(|| PathBuf::from(DEFAULT_LOG_PATH)),
        records: records.unwrap_or_else(|| PathBuf::from(DEFAULT_RECORDS_DIR)),
        sweep: Duration::from_secs(sweep.unwrap_or(DEFAULT_SWEEP_SECS)),
    })
}

/// Runs the daemon; returns the exit code once it fails to start or stops.
pub fn run(inv: &Invocation) -> i32 {
    let result = options(inv.config.clone(), inv.verb_args())
        .and_then(|options| daemon::run(options).map_err(Into::into));
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("vibe-shim: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(Into::into).collect()
    }

    #[test]
    fn options_and_defaults() {
        let o = options(
            None,
            &os(&[
                "--socket",
                "/t/e.sock",
                "--log=/t/e.jsonl",
                "--sweep-secs",
                "2",
            ]),
        )
        .unwrap();
        assert_eq!(o.socket, PathBuf::from("/t/e.sock"));
        assert_eq!(o.log_path, PathBuf::from("/t/e.jsonl"));
        assert_eq!(o.records, PathBuf::from(DEFAULT_RECORDS_DIR));
        assert_eq!(o.sweep, Duration::from_secs(2));
        assert!(options(None, &os(&["--bogus"])).is_err());
        assert!(options(None, &os(&["--socket"])).is_err());
        assert!(options(None, &os(&["--sweep-secs", "0", "--socket", "/s"])).is_err());
    }

    #[test]
    fn the_socket_comes_from_the_policy_relative_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("c.toml");
        std::fs::write(&config, "[network]\negress_socket = \"run/e.sock\"\n").unwrap();
        let o = options(None, &os(&["--config", config.to_str().unwrap()])).unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(o.socket, dir.join("run/e.sock"));
        let err = options(Some("/nonexistent.toml".into()), &[]).unwrap_err();
        assert!(err.to_string().contains("/nonexistent.toml"), "{err}");
    }
}
