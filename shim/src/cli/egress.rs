//! `vibe-shim egress [--config P] [--socket S] [--log L] [--records D]
//! [--sweep-secs N]`: the egress proxy daemon, in the foreground
//! (systemd's vibe-shim-egress.service, or a test harness). vibe-hooks owns
//! the daemon; this only reads the options.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use vibe_hooks::egress::daemon::{self, Options, DEFAULT_LOG_PATH, DEFAULT_SWEEP_SECS};
use vibe_hooks::egress::records::DEFAULT_RECORDS_DIR;

use crate::policy_file;

/// Exit codes, for `--help` and the unit file.
const EXIT_CODES: &str = "Exit codes:\n  0  the daemon stopped (SIGTERM)\n  1  a usage error, a bad policy, or the daemon failed to start or failed";

/// `vibe-shim egress`: the daemon's options. The socket defaults to the
/// policy's `[network] egress_socket`.
#[derive(Debug, clap::Parser)]
#[command(
    name = "egress",
    bin_name = "vibe-shim egress",
    about = "Run the egress proxy daemon in the foreground (vibe-shim-egress.service)",
    args_override_self = true,
    after_help = EXIT_CODES
)]
pub struct EgressArgs {
    /// The policy [default: the global --config, else /etc/vibe-shim/config.toml]
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The daemon's socket [default: the policy's [network] egress_socket]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// The connection log, one JSON line per connection
    #[arg(long, value_name = "PATH", default_value = DEFAULT_LOG_PATH)]
    log: PathBuf,
    /// Where create records each proxied container
    #[arg(long, value_name = "DIR", default_value = DEFAULT_RECORDS_DIR)]
    records: PathBuf,
    /// Seconds between sweeps of the records of gone containers
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SWEEP_SECS,
          value_parser = clap::value_parser!(u64).range(1..))]
    sweep_secs: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum EgressVerbError {
    #[error("egress: config: {0}")]
    Config(#[from] policy_file::PolicyFileError),
    #[error("egress: {0}")]
    Daemon(#[from] daemon::DaemonError),
}

/// The daemon's options from its arguments; `config` is a global
/// `--config` given before the verb (the verb's own wins).
fn options(config: &Path, args: EgressArgs) -> Result<Options, EgressVerbError> {
    let config = args.config.unwrap_or_else(|| config.to_path_buf());
    let config = std::fs::canonicalize(&config).unwrap_or(config);
    let socket = match args.socket {
        Some(socket) => socket,
        None => policy_file::load(&config)?.network.egress_socket,
    };
    Ok(Options {
        socket,
        log_path: args.log,
        records: args.records,
        sweep: Duration::from_secs(args.sweep_secs),
    })
}

/// Runs the daemon; returns the exit code once it fails to start or stops.
pub fn run(config: &Path, args: &[OsString]) -> i32 {
    let args = match super::parse::<EgressArgs>("egress", args, 1) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let result = options(config, args).and_then(|options| daemon::run(options).map_err(Into::into));
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
    use vibe_policy::config::DEFAULT_CONFIG_PATH;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(Into::into).collect()
    }

    fn parsed(args: &[&str]) -> Result<EgressArgs, clap::Error> {
        use clap::Parser;
        EgressArgs::try_parse_from(std::iter::once("egress").chain(args.iter().copied()))
    }

    fn options(config: &Path, args: &[OsString]) -> Result<Options, String> {
        use clap::Parser;
        let argv = std::iter::once(OsString::from("egress")).chain(args.iter().cloned());
        let args = EgressArgs::try_parse_from(argv).map_err(|e| e.to_string())?;
        super::options(config, args).map_err(|e| e.to_string())
    }

    #[test]
    fn options_and_defaults() {
        let o = options(
            Path::new(DEFAULT_CONFIG_PATH),
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
        assert!(parsed(&["--bogus"]).is_err());
        assert!(parsed(&["--socket"]).is_err());
        assert!(parsed(&["--socket="]).is_err());
        assert!(parsed(&["--sweep-secs", "0", "--socket", "/s"]).is_err());
        // The last of a repeated flag wins, as before.
        assert_eq!(
            parsed(&["--log", "/a", "--log", "/b"]).unwrap().log,
            PathBuf::from("/b")
        );
    }

    #[test]
    fn the_socket_comes_from_the_policy_relative_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("c.toml");
        std::fs::write(&config, "[network]\negress_socket = \"run/e.sock\"\n").unwrap();
        let o = options(
            Path::new(DEFAULT_CONFIG_PATH),
            &os(&["--config", config.to_str().unwrap()]),
        )
        .unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(o.socket, dir.join("run/e.sock"));
        let err = options(Path::new("/nonexistent.toml"), &[]).unwrap_err();
        assert!(err.to_string().contains("/nonexistent.toml"), "{err}");
    }
}
