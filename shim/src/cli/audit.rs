//! `vibe-shim audit verify [PATH]`: walks the audit log's hash chain
//! ([`crate::audit`]) and reports its first break: a line removed, changed
//! or inserted, or a file that starts mid-chain.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

const EXIT_CODES: &str = "Exit codes:\n  0  the chain is whole\n  1  the chain breaks (the first break is printed), or the log cannot be read\n  2  a usage error";

#[derive(Debug, clap::Parser)]
#[command(
    name = "audit",
    bin_name = "vibe-shim audit",
    about = "Check vibe-shim's audit log",
    after_help = EXIT_CODES
)]
pub struct AuditArgs {
    #[command(subcommand)]
    command: AuditCommand,
}

#[derive(Debug, clap::Subcommand)]
enum AuditCommand {
    /// Walk the hash chain of the log and report the first break
    Verify {
        /// The log [default: the policy's [audit] path]
        #[arg(value_name = "PATH")]
        path: Option<PathBuf>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum AuditVerbError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Policy(#[from] crate::policy_file::PolicyFileError),
}

pub fn run(config_path: &Path, args: &[OsString]) -> i32 {
    let parsed = match super::parse::<AuditArgs>("audit", args, 2) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let AuditCommand::Verify { path } = parsed.command;
    let path = match path {
        Some(path) => path,
        None => match crate::policy_file::load(config_path) {
            Ok(policy) => policy.audit.path,
            Err(e) => {
                eprintln!("vibe-shim: audit: {}", AuditVerbError::from(e));
                return 1;
            }
        },
    };
    let bytes = match read_locked(&path) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("vibe-shim: audit: {e}");
            return 1;
        }
    };
    match crate::audit::verify(&bytes) {
        Ok(summary) => {
            let from = summary
                .chained_from
                .map_or("no chained line".to_string(), |n| {
                    format!("chained from line {n}")
                });
            println!(
                "{}: {} lines, {from}: the chain is whole",
                path.display(),
                summary.lines
            );
            0
        }
        Err(broken) => {
            println!("{}: {broken}", path.display());
            1
        }
    }
}

/// The log's bytes, read under a shared lock so no append is half there.
fn read_locked(path: &Path) -> Result<Vec<u8>, AuditVerbError> {
    let fail = |source| AuditVerbError::Read {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(fail)?;
    let mut file = Flock::lock(file, FlockArg::LockShared).map_err(|(_, e)| fail(e.into()))?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut *file, &mut bytes).map_err(fail)?;
    Ok(bytes)
}
