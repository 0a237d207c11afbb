//! `vibe-shim install lockdown` / `uninstall lockdown`: make `runc`, as
//! every engine resolves it, be vibe-shim.
//!
//! - divert (Debian/Ubuntu, runc packaged): `dpkg-divert --package vibe-shim
//!   --divert <runc>.vibe-shim-real <runc>`, so dpkg writes every runc upgrade
//!   to the diverted name; the original path becomes a symlink to the
//!   installed vibe-shim. A symlink, not a copy: upgrading vibe-shim upgrades
//!   what engines run, and a removed vibe-shim leaves a dangling `runc` that
//!   fails closed instead of a stale copy that keeps running old rules.
//!   There is never a moment without a `runc`: the real binary is hard-linked
//!   to the diverted name first, and the symlink renamed over the original
//!   (uninstall renames the real one back over the symlink).
//! - path (elsewhere): a `runc` symlink in a directory of its own, which the
//!   engines must get first on their PATH (printed as systemd drop-ins).
//!
//! Either way a root-owned record, `/etc/vibe-shim/lockdown.toml`, names the
//! real runc; vibe-shim run as `runc` runs that file (main.rs: find_runtime),
//! never a `runc` from PATH, which is itself. The real runc is kept at mode
//! 0400: every engine client is root, but root cannot exec a file without
//! an execute bit, so `ctr run --runc-binary <real>` or `podman --runtime
//! <real>` is refused by the kernel, while vibe-shim runs a sealed memfd
//! copy of it (runtime::exec_sealed, which also takes back the execute bit
//! a package upgrade restores). Uninstall puts the recorded mode back. Its
//! paths are as seen inside the root it was written for (`--root`), so a
//! vibe-shim running in another root reads that root's record, or, without
//! one, searches PATH skipping itself and fails closed when only it is there.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// The record of an installed lockdown (inside the root).
pub const RECORD_PATH: &str = "/etc/vibe-shim/lockdown.toml";
/// Appended to the packaged runc's path to make the divert target.
pub const DIVERT_SUFFIX: &str = ".vibe-shim-real";
/// The dpkg "package" that owns the diversion.
pub const DIVERT_PACKAGE: &str = "vibe-shim";
/// Path mode: the directory that holds the `runc` symlink.
pub const PATH_DIR: &str = "/usr/local/lib/vibe-shim/bin";
/// systemd's default PATH for services (dockerd, containerd), which the
/// engines search for `runc`.
pub const ENGINE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Where a packaged runc may live.
const RUNC_CANDIDATES: &[&str] = &["/usr/sbin/runc", "/usr/bin/runc", "/sbin/runc", "/bin/runc"];

#[derive(Debug, thiserror::Error)]
pub enum LockdownError {
    #[error("refused: {0}")]
    Refused(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{command} failed: {source}")]
    Spawn {
        command: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The command ran and said why it failed (its stderr).
    #[error("{command} failed: {message}")]
    Command { command: String, message: String },
    #[error("lockdown record {}: {source}", path.display())]
    RecordIo {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("lockdown record {}: {source}", path.display())]
    RecordParse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("lockdown record {}: {source}", path.display())]
    RecordWrite {
        path: PathBuf,
        #[source]
        source: toml::ser::Error,
    },
    /// Fail closed: someone may have tampered with it.
    #[error("lockdown record {}: {why}", path.display())]
    RecordUnsafe { path: PathBuf, why: &'static str },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LockdownError + '_ {
    move |source| LockdownError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Divert,
    Path,
}

/// `/etc/vibe-shim/lockdown.toml`. Paths as seen inside the root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub mode: Mode,
    /// Where engines find `runc` (now vibe-shim).
    pub runc: PathBuf,
    /// The real runc, which vibe-shim execs.
    pub real: PathBuf,
    /// The vibe-shim binary the `runc` symlink names.
    pub shim: PathBuf,
    /// The real runc's mode before lockdown took its execute bits, which
    /// uninstall puts back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real_mode: Option<u32>,
}

/// The real runc named by this root's lockdown record; `None` without a
/// record. A record that is not root-owned and unwritable by others, or
/// does not parse, is an error (fail closed: someone tampered with it).
pub fn recorded_real_runc() -> Result<Option<PathBuf>, LockdownError> {
    read_record(Path::new("/")).map(|r| r.map(|r| r.real))
}

/// The whole lockdown record of the root at `root` (as seen from here),
/// checked as [`recorded_real_runc`] checks it: the API gate verifies that
/// it still holds for each engine.
pub fn recorded_in(root: &Path) -> Result<Option<Record>, LockdownError> {
    read_record(root)
}

fn read_record(root: &Path) -> Result<Option<Record>, LockdownError> {
    let path = inside(root, Path::new(RECORD_PATH));
    let read_failed = |source| LockdownError::RecordIo {
        path: path.clone(),
        source,
    };
    let unsafe_record = |why| LockdownError::RecordUnsafe {
        path: path.clone(),
        why,
    };
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_failed(e)),
    };
    if !meta.file_type().is_file() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(unsafe_record(
            "must be a regular file owned by root and writable by nobody else",
        ));
    }
    let text = std::fs::read_to_string(&path).map_err(read_failed)?;
    let record: Record = toml::from_str(&text).map_err(|source| LockdownError::RecordParse {
        path: path.clone(),
        source,
    })?;
    if !record.real.is_absolute() || !record.runc.is_absolute() || !record.shim.is_absolute() {
        return Err(unsafe_record("paths must be absolute"));
    }
    Ok(Some(record))
}

fn write_record(root: &Path, record: &Record) -> Result<(), LockdownError> {
    let path = inside(root, Path::new(RECORD_PATH));
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let text = format!(
        "# Written by `vibe-shim install lockdown`; removed by `uninstall lockdown`.\n\
         # vibe-shim, run as runc, execs `real`. Do not edit.\n{}",
        toml::to_string(record).map_err(|source| LockdownError::RecordWrite {
            path: path.clone(),
            source,
        })?
    );
    vibe_hooks::fsio::write_atomic(&path, text.as_bytes(), 0o644).map_err(io(&path))
}

fn remove_record(root: &Path) -> Result<(), LockdownError> {
    let path = inside(root, Path::new(RECORD_PATH));
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&path)(e)),
        _ => Ok(()),
    }
}

/// Takes the real runc's execute bits (see `runtime::SEALED_MODE`): root
/// cannot exec a file with none, so a client naming it (`ctr
/// --runc-binary`, `podman --runtime`) is refused by the kernel; vibe-shim
/// runs it through a sealed memfd copy. The mode to restore: the current
/// one if it has execute bits (a fresh package upgrade), else the recorded.
fn seal_real(root: &Path, real: &Path, recorded: Option<u32>) -> Result<u32, LockdownError> {
    let here = inside(root, real);
    let mode = std::fs::metadata(&here).map_err(io(&here))?.mode() & 0o7777;
    let restore = match mode & 0o111 {
        0 => recorded.unwrap_or(0o755),
        _ => mode,
    };
    let sealed = crate::runtime::SEALED_MODE;
    std::fs::set_permissions(&here, std::fs::Permissions::from_mode(sealed)).map_err(io(&here))?;
    Ok(restore)
}

/// Gives the real runc its mode back (0755, dpkg's, when none was recorded
/// and it has no execute bit).
fn unseal_real(root: &Path, real: &Path, recorded: Option<u32>) -> Result<(), LockdownError> {
    let here = inside(root, real);
    let mode = std::fs::metadata(&here).map_err(io(&here))?.mode() & 0o7777;
    let restore = match (recorded, mode & 0o111) {
        (Some(m), _) => m,
        (None, 0) => 0o755,
        (None, _) => return Ok(()),
    };
    std::fs::set_permissions(&here, std::fs::Permissions::from_mode(restore)).map_err(io(&here))
}

/// `path` (absolute, as seen inside `root`) as seen from here.
fn inside(root: &Path, path: &Path) -> PathBuf {
    match path.strip_prefix("/") {
        Ok(rel) => root.join(rel),
        Err(_) => root.join(path),
    }
}

/// The options of both verbs (cli/install.rs reads them from argv; every
/// path is absolute, as seen inside `root`).
#[derive(Debug, Clone)]
pub struct Options {
    pub root: PathBuf,
    /// `None`: divert when dpkg owns a runc here, else path.
    pub mode: Option<Mode>,
    /// The vibe-shim the `runc` link names [default: this binary].
    pub shim: Option<PathBuf>,
    /// The packaged runc to divert [default: the one dpkg owns].
    pub runc: Option<PathBuf>,
    pub path_dir: PathBuf,
    pub engine_path: String,
    /// The policy runc-as-vibe-shim will read (inside `root`).
    pub policy: PathBuf,
}

#[cfg(test)]
impl Options {
    /// The defaults, for the root at `root`.
    pub fn new(root: PathBuf) -> Options {
        Options {
            root,
            mode: None,
            shim: None,
            runc: None,
            path_dir: PathBuf::from(PATH_DIR),
            engine_path: ENGINE_PATH.to_string(),
            policy: PathBuf::from(vibe_policy::config::DEFAULT_CONFIG_PATH),
        }
    }
}

fn dpkg_divert(o: &Options, args: &[&str]) -> Result<String, LockdownError> {
    let mut cmd = Command::new("dpkg-divert");
    cmd.arg("--root").arg(&o.root).args(args);
    let out = cmd.output().map_err(|source| LockdownError::Spawn {
        command: "dpkg-divert",
        source,
    })?;
    if !out.status.success() {
        return Err(LockdownError::Command {
            command: format!("dpkg-divert {}", args.join(" ")),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn have_dpkg() -> bool {
    Command::new("dpkg-divert")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The packaged runc: the first candidate `dpkg-query -S` says a package
/// owns (diversion lines are skipped).
fn packaged_runc(o: &Options) -> Option<PathBuf> {
    RUNC_CANDIDATES.iter().map(PathBuf::from).find(|p| {
        Command::new("dpkg-query")
            .arg("--root")
            .arg(&o.root)
            .arg("-S")
            .arg(p)
            .output()
            .is_ok_and(|out| {
                out.status.success()
                    && String::from_utf8_lossy(&out.stdout).lines().any(|l| {
                        !l.starts_with("diversion ")
                            && l.rsplit_once(": ").is_some_and(|(_, f)| Path::new(f) == p)
                    })
            })
    })
}

/// The installed vibe-shim: `--shim`, or this binary. It must be a regular
/// file owned by root and writable by nobody else, since every container
/// on the host will run through it.
fn shim_path(o: &Options) -> Result<PathBuf, LockdownError> {
    let shim = match &o.shim {
        Some(p) => p.clone(),
        None => std::fs::canonicalize("/proc/self/exe").map_err(io(Path::new("/proc/self/exe")))?,
    };
    let here = inside(&o.root, &shim);
    let meta = std::fs::metadata(&here).map_err(io(&here))?;
    if !meta.is_file() || meta.mode() & 0o111 == 0 {
        return Err(LockdownError::Refused(format!(
            "{} is not an executable file",
            here.display()
        )));
    }
    if meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(LockdownError::Refused(format!(
            "{} must be owned by root and writable by nobody else: every container would run through it (install vibe-shim to /usr/local/bin first)",
            here.display()
        )));
    }
    // Nor may anyone else rename another file into its place.
    for dir in shim.ancestors().skip(1) {
        if dir == Path::new("/") && o.root != Path::new("/") {
            break;
        }
        let here = inside(&o.root, dir);
        let meta = std::fs::metadata(&here).map_err(io(&here))?;
        if meta.uid() != 0 || meta.mode() & 0o022 != 0 {
            return Err(LockdownError::Refused(format!(
                "{}, a directory above vibe-shim, must be owned by root and writable by nobody else",
                here.display()
            )));
        }
    }
    Ok(shim)
}

/// What is at `path` (inside the root), as far as lockdown cares.
#[derive(Debug, PartialEq)]
enum Entry {
    Missing,
    /// A symlink naming exactly `shim`.
    OurLink,
    File {
        dev: u64,
        ino: u64,
    },
    Other(String),
}

fn entry(root: &Path, path: &Path, shim: &Path) -> Entry {
    let here = inside(root, path);
    match std::fs::symlink_metadata(&here) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Entry::Missing,
        Err(e) => Entry::Other(e.to_string()),
        Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&here) {
            Ok(target) if target == shim => Entry::OurLink,
            Ok(target) => Entry::Other(format!("a symlink to {}", target.display())),
            Err(e) => Entry::Other(e.to_string()),
        },
        Ok(m) if m.file_type().is_file() => Entry::File {
            dev: m.dev(),
            ino: m.ino(),
        },
        Ok(_) => Entry::Other("not a regular file".into()),
    }
}

/// Puts a symlink to `shim` at `path` (inside the root) by rename, so the
/// name never goes missing.
fn place_link(root: &Path, path: &Path, shim: &Path) -> Result<(), LockdownError> {
    let here = inside(root, path);
    let tmp = here.with_file_name(".runc.vibe-shim-tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(shim, &tmp).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &here).map_err(io(&here))
}

/// Every `runc` the engines could find before `stop_at` on their PATH that
/// is neither vibe-shim's link nor `stop_at` itself: each would bypass the
/// lockdown.
fn shadows(o: &Options, engine_path: &str, stop_at: &Path, shim: &Path) -> Vec<PathBuf> {
    let stop = entry(&o.root, stop_at, shim);
    let stop_dir = stop_at.parent().map(|d| inside(&o.root, d));
    let stop_dir = stop_dir.and_then(|d| std::fs::canonicalize(d).ok());
    let mut found = Vec::new();
    for dir in engine_path.split(':').filter(|d| d.starts_with('/')) {
        let here_dir = inside(&o.root, Path::new(dir));
        if std::fs::canonicalize(&here_dir).ok() == stop_dir && stop_dir.is_some() {
            break;
        }
        let candidate = Path::new(dir).join("runc");
        match entry(&o.root, &candidate, shim) {
            Entry::Missing | Entry::OurLink => {}
            e if e == stop && e != Entry::Missing => break,
            _ => found.push(candidate),
        }
    }
    found
}

/// The PATH of every running dockerd and containerd (which hands its own
/// to the runc shims), when installing into this host's root.
fn running_engine_paths(o: &Options) -> Vec<(String, String)> {
    if o.root != Path::new("/") {
        return Vec::new();
    }
    engine_paths_here()
}

/// The PATH of every dockerd, containerd and podman running here, named
/// `comm (pid N)` (doctor resolves `runc` on each).
pub fn engine_paths_here() -> Vec<(String, String)> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in procs.flatten() {
        let dir = entry.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if !matches!(comm, "dockerd" | "containerd" | "podman") {
            continue;
        }
        let environ = std::fs::read(dir.join("environ")).unwrap_or_default();
        let path = environ
            .split(|b| *b == 0)
            .find_map(|kv| kv.strip_prefix(b"PATH="))
            .map(|p| String::from_utf8_lossy(p).into_owned())
            // Go's exec.LookPath with no PATH finds nothing; nothing to shadow.
            .unwrap_or_default();
        let name = format!("{comm} (pid {})", entry.file_name().to_string_lossy());
        found.push((name, path));
    }
    found
}

fn refuse_shadows(o: &Options, stop_at: &Path, shim: &Path) -> Result<(), LockdownError> {
    let mut paths = vec![(
        "the engines' default PATH".to_string(),
        o.engine_path.clone(),
    )];
    paths.extend(running_engine_paths(o));
    for (whose, engine_path) in paths {
        let found = shadows(o, &engine_path, stop_at, shim);
        if found.is_empty() {
            continue;
        }
        let list: Vec<String> = found.iter().map(|p| p.display().to_string()).collect();
        return Err(LockdownError::Refused(format!(
            "{} comes before {} on the PATH of {whose} ({engine_path}) and would bypass the lockdown; remove it",
            list.join(", "),
            stop_at.display(),
        )));
    }
    Ok(())
}

fn choose_mode(o: &Options) -> Result<(Mode, Option<PathBuf>), LockdownError> {
    match o.mode {
        Some(Mode::Path) => Ok((Mode::Path, None)),
        Some(Mode::Divert) => {
            let runc = o.runc.clone().or_else(|| packaged_runc(o)).ok_or_else(|| {
                LockdownError::Refused(
                    "--mode divert: no runc owned by a dpkg package (pass --runc)".into(),
                )
            })?;
            Ok((Mode::Divert, Some(runc)))
        }
        None if have_dpkg() => match o.runc.clone().or_else(|| packaged_runc(o)) {
            Some(runc) => Ok((Mode::Divert, Some(runc))),
            None => Ok((Mode::Path, None)),
        },
        None => Ok((Mode::Path, None)),
    }
}

/// Under lockdown vibe-shim runs the real runc its record names, and only
/// when the policy names none: a `[runtime] path` that is the runc about to
/// be diverted becomes vibe-shim itself (every container then fails), and
/// any other runc it names stays executable for any client to run directly.
/// So lockdown refuses while the policy sets one; nothing rewrites the
/// admin's file.
fn refuse_runtime_path(o: &Options) -> Result<(), LockdownError> {
    let policy = inside(&o.root, &o.policy);
    let Some(path) = crate::policy_file::runtime_path_only(&policy) else {
        return Ok(());
    };
    let canonical = |p: &Path| std::fs::canonicalize(inside(&o.root, p)).ok();
    let same = |a: &Path, b: &Path| a == b || canonical(a).is_some_and(|c| Some(c) == canonical(b));
    let diverted = [o.runc.clone(), packaged_runc(o)]
        .into_iter()
        .flatten()
        .chain(RUNC_CANDIDATES.iter().map(PathBuf::from))
        .chain(std::iter::once(o.path_dir.join("runc")))
        .any(|runc| {
            let mut target = runc.as_os_str().to_owned();
            target.push(DIVERT_SUFFIX);
            same(&path, &runc) || same(&path, Path::new(&target))
        });
    let why = match diverted {
        true => "is the runc lockdown makes vibe-shim (every container would fail: [runtime] path is vibe-shim itself)",
        false => "would stay executable outside the lockdown, for any client to run directly",
    };
    Err(LockdownError::Refused(format!(
        "{}: [runtime] path {} {why}; remove [runtime] path: under lockdown vibe-shim runs the real runc lockdown records",
        policy.display(),
        path.display(),
    )))
}

/// The diversion of `runc`: `None`, or `(package, target)`.
fn diversion(o: &Options, runc: &Path) -> Result<Option<(String, PathBuf)>, LockdownError> {
    let runc = runc.to_string_lossy();
    let package = dpkg_divert(o, &["--listpackage", &runc])?;
    if package.is_empty() {
        return Ok(None);
    }
    let target = dpkg_divert(o, &["--truename", &runc])?;
    Ok(Some((package, PathBuf::from(target))))
}

pub fn install(o: &Options) -> Result<String, LockdownError> {
    refuse_runtime_path(o)?;
    let shim = shim_path(o)?;
    let (mode, runc) = choose_mode(o)?;
    match (mode, runc) {
        (Mode::Divert, Some(runc)) => install_divert(o, &shim, &runc),
        _ => install_path(o, &shim),
    }
}

fn install_divert(o: &Options, shim: &Path, runc: &Path) -> Result<String, LockdownError> {
    let mut target = runc.as_os_str().to_owned();
    target.push(DIVERT_SUFFIX);
    let target = PathBuf::from(target);
    refuse_shadows(o, runc, shim)?;
    match diversion(o, runc)? {
        None => {}
        Some((pkg, to)) if pkg == DIVERT_PACKAGE && to == target => {}
        Some((pkg, to)) => {
            return Err(LockdownError::Refused(format!(
                "{} is already diverted to {} by {pkg}",
                runc.display(),
                to.display()
            )))
        }
    }
    let (r, t) = (inside(&o.root, runc), inside(&o.root, &target));
    let mut done = "already installed";
    match (entry(&o.root, runc, shim), entry(&o.root, &target, shim)) {
        (Entry::OurLink, Entry::File { .. }) => {}
        (Entry::File { .. }, Entry::Missing) => {
            let (rs, ts) = (runc.to_string_lossy(), target.to_string_lossy());
            let args = [
                "--package", DIVERT_PACKAGE, "--divert", &ts, "--no-rename", "--add", &rs,
            ];
            dpkg_divert(o, &args)?;
            std::fs::hard_link(&r, &t).map_err(io(&t))?;
            place_link(&o.root, runc, shim)?;
            done = "installed";
        }
        // A run stopped after the hard link: finish it.
        (Entry::File { dev, ino }, Entry::File { dev: d2, ino: i2 }) if (dev, ino) == (d2, i2) => {
            place_link(&o.root, runc, shim)?;
            done = "installed";
        }
        (Entry::OurLink, Entry::Missing) => {
            return Err(LockdownError::Refused(format!(
                "{} links to vibe-shim but the real runc {} is missing: reinstall the runc package, then run uninstall lockdown",
                runc.display(),
                target.display()
            )))
        }
        (a, b) => {
            return Err(LockdownError::Refused(format!(
                "unexpected state: {} is {a:?}, {} is {b:?}",
                r.display(),
                t.display()
            )))
        }
    }
    if diversion(o, runc)?.is_none() {
        let (rs, ts) = (runc.to_string_lossy(), target.to_string_lossy());
        let args = [
            "--package",
            DIVERT_PACKAGE,
            "--divert",
            &ts,
            "--no-rename",
            "--add",
            &rs,
        ];
        dpkg_divert(o, &args)?;
    }
    let recorded = read_record(&o.root)?.and_then(|r| r.real_mode);
    let mut record = Record {
        mode: Mode::Divert,
        runc: runc.to_path_buf(),
        real: target.clone(),
        shim: shim.to_path_buf(),
        real_mode: recorded,
    };
    // The record first: vibe-shim finds the real runc only through it.
    write_record(&o.root, &record)?;
    record.real_mode = Some(seal_real(&o.root, &target, recorded)?);
    write_record(&o.root, &record)?;
    Ok(format!(
        "vibe-shim: lockdown {done} (divert): {} -> {}; the real runc is {} (dpkg keeps upgrading it there; mode 0400, run only through vibe-shim); policy {}\n",
        runc.display(),
        shim.display(),
        target.display(),
        vibe_policy::config::DEFAULT_CONFIG_PATH
    ))
}

/// The real runc in path mode: the first `runc` on the engines' PATH that
/// is not vibe-shim.
fn path_real_runc(o: &Options, shim: &Path) -> Result<PathBuf, LockdownError> {
    o.engine_path
        .split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| Path::new(d).join("runc"))
        .find(|p| matches!(entry(&o.root, p, shim), Entry::File { .. }))
        .ok_or_else(|| {
            LockdownError::Refused(format!(
                "no runc on the engines' PATH ({}) to hand containers to",
                o.engine_path
            ))
        })
}

fn install_path(o: &Options, shim: &Path) -> Result<String, LockdownError> {
    let link = o.path_dir.join("runc");
    let prior = read_record(&o.root)?;
    let recorded = prior.as_ref().and_then(|r| r.real_mode);
    let real = match prior {
        Some(r) if r.mode == Mode::Path && r.runc == link => r.real,
        Some(r) => {
            return Err(LockdownError::Refused(format!(
                "a lockdown is already installed ({:?}, {}); uninstall it first",
                r.mode,
                r.runc.display()
            )))
        }
        None => path_real_runc(o, shim)?,
    };
    let mut done = "already installed";
    match entry(&o.root, &link, shim) {
        Entry::OurLink => {}
        Entry::Missing => {
            let dir = inside(&o.root, &o.path_dir);
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
            place_link(&o.root, &link, shim)?;
            done = "installed";
        }
        other => {
            return Err(LockdownError::Refused(format!(
                "{} exists and is not vibe-shim's link ({other:?})",
                link.display()
            )))
        }
    }
    let mut record = Record {
        mode: Mode::Path,
        runc: link.clone(),
        real: real.clone(),
        shim: shim.to_path_buf(),
        real_mode: recorded,
    };
    write_record(&o.root, &record)?;
    record.real_mode = Some(seal_real(&o.root, &real, recorded)?);
    write_record(&o.root, &record)?;
    let path = format!("{}:{}", o.path_dir.display(), ENGINE_PATH);
    let mut stale = String::new();
    for (whose, engine_path) in running_engine_paths(o) {
        let first = engine_path
            .split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| Path::new(d).join("runc"))
            .find(|p| !matches!(entry(&o.root, p, shim), Entry::Missing));
        if first.as_deref() != Some(link.as_path()) {
            stale.push_str(&format!(
                "NOT YET LOCKED DOWN: {whose} resolves runc to {}; restart it with the PATH below.\n",
                first.map_or("nothing".into(), |p| p.display().to_string())
            ));
        }
    }
    Ok(format!(
        "{stale}vibe-shim: lockdown {done} (path): {} -> {}; the real runc is {}.\n\
         No dpkg-packaged runc here, so engines use vibe-shim only when {} comes first on THEIR PATH. Do:\n\
         \x20 for unit in docker containerd; do\n\
         \x20   mkdir -p /etc/systemd/system/$unit.service.d\n\
         \x20   printf '[Service]\\nEnvironment=\"PATH={path}\"\\n' > /etc/systemd/system/$unit.service.d/vibe-shim-lockdown.conf\n\
         \x20 done\n\
         \x20 systemctl daemon-reload && systemctl restart containerd docker\n\
         Without systemd: start dockerd and containerd with PATH={path}.\n\
         Check: every `runc` an engine runs then logs to the vibe-shim audit log.\n",
        link.display(),
        shim.display(),
        real.display(),
        o.path_dir.display(),
    ))
}

pub fn uninstall(o: &Options) -> Result<String, LockdownError> {
    let record = read_record(&o.root)?;
    let mut said = Vec::new();
    // Path mode: the link named by the record or --path-dir.
    let link = match &record {
        Some(r) if r.mode == Mode::Path => r.runc.clone(),
        _ => o.path_dir.join("runc"),
    };
    let shim = record
        .as_ref()
        .map(|r| r.shim.clone())
        .or_else(|| o.shim.clone())
        .or_else(|| std::fs::canonicalize("/proc/self/exe").ok())
        .unwrap_or_default();
    if entry(&o.root, &link, &shim) == Entry::OurLink {
        let here = inside(&o.root, &link);
        std::fs::remove_file(&here).map_err(io(&here))?;
        said.push(format!("removed {}", link.display()));
    }
    if let Some(r) = record.as_ref().filter(|r| r.mode == Mode::Path) {
        unseal_real(&o.root, &r.real, r.real_mode)?;
    }
    // Divert mode: every candidate we diverted.
    if have_dpkg() {
        let runcs: Vec<PathBuf> = match (&record, &o.runc) {
            (_, Some(r)) => vec![r.clone()],
            (Some(r), None) if r.mode == Mode::Divert => vec![r.runc.clone()],
            _ => RUNC_CANDIDATES.iter().map(PathBuf::from).collect(),
        };
        for runc in runcs {
            let mode = record.as_ref().and_then(|r| r.real_mode);
            if let Some(line) = uninstall_divert(o, &runc, &shim, mode)? {
                said.push(line);
            }
        }
    }
    remove_record(&o.root)?;
    Ok(match said.is_empty() {
        true => "vibe-shim: lockdown not installed; nothing to do\n".into(),
        false => format!("vibe-shim: lockdown uninstalled: {}\n", said.join("; ")),
    })
}

fn uninstall_divert(
    o: &Options,
    runc: &Path,
    shim: &Path,
    real_mode: Option<u32>,
) -> Result<Option<String>, LockdownError> {
    let Some((pkg, target)) = diversion(o, runc)? else {
        return Ok(None);
    };
    if pkg != DIVERT_PACKAGE {
        return Ok(None);
    }
    let (r, t) = (inside(&o.root, runc), inside(&o.root, &target));
    match (entry(&o.root, runc, shim), entry(&o.root, &target, shim)) {
        // The real runc goes back over the link in one rename, its mode
        // restored first so `runc` is never there without an execute bit.
        (Entry::OurLink | Entry::Missing, Entry::File { .. }) => {
            unseal_real(&o.root, &target, real_mode)?;
            std::fs::rename(&t, &r).map_err(io(&r))?;
        }
        // A run stopped after the hard link, or after the rename.
        (Entry::File { dev, ino }, Entry::File { dev: d2, ino: i2 }) if (dev, ino) == (d2, i2) => {
            unseal_real(&o.root, &target, real_mode)?;
            std::fs::remove_file(&t).map_err(io(&t))?;
        }
        (Entry::File { .. }, Entry::Missing) => unseal_real(&o.root, runc, real_mode)?,
        (a, b) => {
            return Err(LockdownError::Refused(format!(
                "unexpected state: {} is {a:?}, {} is {b:?}; left as is",
                r.display(),
                t.display()
            )))
        }
    }
    let (rs, ts) = (runc.to_string_lossy(), target.to_string_lossy());
    dpkg_divert(
        o,
        &[
            "--package",
            DIVERT_PACKAGE,
            "--divert",
            &ts,
            "--no-rename",
            "--remove",
            &rs,
        ],
    )?;
    Ok(Some(format!(
        "{} restored, diversion removed",
        runc.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn exe(path: &Path, body: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, body).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn shadow_before_the_packaged_runc_is_found() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        exe(&r.join("usr/sbin/runc"), "real");
        let mut o = Options::new(r.to_path_buf());
        let shim = Path::new("/usr/local/bin/vibe-shim");
        let sh = |o: &Options| shadows(o, &o.engine_path, Path::new("/usr/sbin/runc"), shim);
        assert!(sh(&o).is_empty());
        exe(&r.join("usr/local/sbin/runc"), "other");
        assert_eq!(sh(&o), vec![PathBuf::from("/usr/local/sbin/runc")]);
        // After the packaged one: harmless.
        exe(&r.join("bin/runc"), "late");
        assert_eq!(sh(&o).len(), 1);
        // Our own link is not a shadow.
        fs::remove_file(r.join("usr/local/sbin/runc")).unwrap();
        fs::create_dir_all(r.join("usr/local/bin")).unwrap();
        std::os::unix::fs::symlink(shim, r.join("usr/local/bin/runc")).unwrap();
        assert!(sh(&o).is_empty());
        o.engine_path = "/opt/x:/usr/sbin".into();
        exe(&r.join("opt/x/runc"), "x");
        assert_eq!(sh(&o).len(), 1);
    }

    /// A policy naming the runc lockdown diverts would break every
    /// container once it is diverted; any other runc it names bypasses the
    /// lockdown. Both are refused before anything changes, naming the key.
    #[test]
    fn a_policy_runtime_path_is_refused_before_anything_changes() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        exe(&r.join("usr/sbin/runc"), "real");
        exe(&r.join("opt/runc"), "other");
        let o = Options::new(r.to_path_buf());
        let policy = inside(r, &o.policy);
        fs::create_dir_all(policy.parent().unwrap()).unwrap();
        fs::write(&policy, "[process]\nuser = \"61000:61000\"\n").unwrap();
        refuse_runtime_path(&o).unwrap();
        for (path, says) in [
            ("/usr/sbin/runc", "is the runc lockdown makes vibe-shim"),
            (
                "/usr/sbin/runc.vibe-shim-real",
                "is the runc lockdown makes vibe-shim",
            ),
            ("/opt/runc", "would stay executable"),
        ] {
            fs::write(&policy, format!("[runtime]\npath = \"{path}\"\n")).unwrap();
            let err = install(&o).unwrap_err().to_string();
            assert!(
                err.contains(&format!("[runtime] path {path} {says}"))
                    && err.contains("remove [runtime] path"),
                "{err}"
            );
            assert!(fs::symlink_metadata(r.join("usr/sbin/runc"))
                .unwrap()
                .is_file());
            assert!(read_record(r).unwrap().is_none());
        }
    }

    #[test]
    fn record_must_be_root_only_and_parse() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        assert!(read_record(r).unwrap().is_none());
        let record = Record {
            mode: Mode::Divert,
            runc: "/usr/sbin/runc".into(),
            real: "/usr/sbin/runc.vibe-shim-real".into(),
            shim: "/usr/local/bin/vibe-shim".into(),
            real_mode: Some(0o755),
        };
        write_record(r, &record).unwrap();
        let path = inside(r, Path::new(RECORD_PATH));
        if nix::unistd::geteuid().is_root() {
            assert_eq!(read_record(r).unwrap(), Some(record));
            fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
            assert!(read_record(r).is_err());
            fs::write(&path, "mode = \"divert\"\n").unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
            assert!(read_record(r).is_err());
        }
        remove_record(r).unwrap();
        remove_record(r).unwrap();
        assert!(read_record(r).unwrap().is_none());
    }
}
