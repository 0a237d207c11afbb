//! The probe: one verdict per isolation rule, judged from inside the
//! container by what the kernel shows this process (`/proc/self/status`,
//! mountinfo, cgroup files, syscalls that must fail, connect attempts, a
//! DNS query). Nothing is read from an engine or a runtime, so it judges
//! runc, vibe-shim or any other runtime alike. The thresholds are fixed;
//! docs/admin/probe.md lists them.
//!
//! It stays a static binary's worth of code: no name service (a static
//! glibc must not load NSS modules), no threads (unshare needs a
//! single-threaded caller), raw syscalls through `libc`.

pub mod cgroup;
pub mod mounts;
pub mod net;
pub mod report;
pub mod secrets;
pub mod status;
pub mod syscalls;

use std::net::SocketAddr;
use std::time::Duration;

pub use report::{Check, Verdict};

const EXIT_CODES: &str = "Exit codes:\n  0  every rule holds (skipped rules aside)\n  1  at least one rule does not hold, or could not be observed\n  2  a usage error\n\nThe rules and what \"holds\" means for each: docs/admin/probe.md.";

/// The probe's options, shared by `vibe-shim-probe` and `vibe-shim probe`.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "probe",
    bin_name = "vibe-shim probe",
    about = "Judge the sandbox this process runs in: one verdict per rule, from what the kernel shows",
    after_help = EXIT_CODES
)]
pub struct Args {
    /// Print JSON (one object, the verdicts in `rules`) instead of the table
    #[arg(long)]
    pub json: bool,
    /// An outside address that must be unreachable (repeatable); without
    /// one the rule net.outside is skipped
    #[arg(long, value_name = "ADDR:PORT")]
    pub outside: Vec<SocketAddr>,
    /// Private-range addresses that must be unreachable (repeatable)
    /// [default: 10.0.0.1:80, 172.16.0.1:80, 192.168.0.1:80, 192.168.1.1:80]
    #[arg(long, value_name = "ADDR:PORT")]
    pub private: Vec<SocketAddr>,
    /// The port tried on each default gateway
    #[arg(long, value_name = "PORT", default_value_t = 80)]
    pub port: u16,
    /// Cloud metadata addresses that must be unreachable (repeatable)
    /// [default: 169.254.169.254:80]
    #[arg(long, value_name = "ADDR:PORT")]
    pub metadata: Vec<SocketAddr>,
    /// The name asked of the resolv.conf nameservers
    #[arg(long, value_name = "NAME", default_value = "example.com")]
    pub dns_name: String,
    /// How long a connect or a DNS query may take, in milliseconds
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub timeout_ms: u64,
    /// A mount point the operator means to be writable (repeatable)
    #[arg(long, value_name = "PATH")]
    pub allow_writable: Vec<String>,
    /// A secret-looking environment name the operator knows is harmless,
    /// such as vibe-shim's credential placeholders (repeatable)
    #[arg(long, value_name = "NAME")]
    pub allow_env: Vec<String>,
}

/// The private-range targets tried when `--private` is not given.
pub const DEFAULT_PRIVATE: &[&str] = &[
    "10.0.0.1:80",
    "172.16.0.1:80",
    "192.168.0.1:80",
    "192.168.1.1:80",
];

/// Runs every check and returns them in the documented order.
pub fn probe(args: &Args) -> Vec<Check> {
    let mut checks = Vec::new();
    checks.extend(status::checks(read("/proc/self/status").as_deref()));
    checks.extend(syscalls::checks());
    let mountinfo = read("/proc/self/mountinfo");
    let own_exe = std::fs::read_link("/proc/self/exe")
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    checks.extend(mounts::checks(
        mountinfo.as_deref(),
        &args.allow_writable,
        own_exe.as_deref(),
        &mounts::Fs {
            exists: &|p| std::fs::symlink_metadata(p).is_ok(),
            writable: &may_write,
        },
    ));
    checks.extend(cgroup::checks(
        mountinfo.as_deref(),
        read("/proc/self/cgroup").as_deref(),
        &|p| read(p),
    ));
    let env: Vec<String> = std::env::vars_os()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    checks.push(secrets::check(&env, &args.allow_env));
    let timeout = Duration::from_millis(args.timeout_ms);
    checks.extend(net::checks(args, timeout));
    checks
}

/// `probe`, printed as `args` asks; returns the exit code.
pub fn run(args: &Args) -> i32 {
    let checks = probe(args);
    let text = match args.json {
        true => report::json(&checks),
        false => report::table(&checks),
    };
    println!("{text}");
    match report::holds(&checks) {
        true => 0,
        false => 1,
    }
}

/// Whether this process may write at `path`: access(2) with the effective
/// ids, as an open or a create would be judged.
fn may_write(path: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(path) else {
        return false;
    };
    // SAFETY: c is NUL-terminated.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0 }
}

/// A kernel file's text; `None` when it cannot be read (the check that
/// needs it then says so and does not hold).
fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}
