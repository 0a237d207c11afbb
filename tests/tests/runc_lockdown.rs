//! `vibe-shim install|uninstall lockdown` on scratch roots (`--root`), and
//! vibe-shim run as `runc` finding the real runc, never itself. Root only:
//!
//!   cargo test --release -p vibe-shim-tests --test runc_lockdown -- --ignored --test-threads=1
//!
//! Never touches the host's /usr/sbin/runc: every install here names a
//! scratch root.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vibe_shim_tests::bundle::{shim_bin, Bundle};

const RUNC: &str = "/usr/sbin/runc";
const REAL: &str = "/usr/sbin/runc.vibe-shim-real";
const SHIM: &str = "/usr/local/bin/vibe-shim";

/// A scratch root: a copy of the host's runc at /usr/sbin/runc, vibe-shim
/// at /usr/local/bin/vibe-shim, and the dpkg admin dir dpkg-divert needs
/// (`diversions` and `status`, empty).
fn scratch_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    fs::set_permissions(r, fs::Permissions::from_mode(0o755)).unwrap();
    for d in [
        "usr/sbin",
        "usr/local/bin",
        "var/lib/dpkg/info",
        "var/lib/dpkg/updates",
        "etc",
    ] {
        fs::create_dir_all(r.join(d)).unwrap();
    }
    fs::copy(RUNC, r.join("usr/sbin/runc")).unwrap();
    fs::copy(shim_bin(), r.join("usr/local/bin/vibe-shim")).unwrap();
    fs::set_permissions(
        r.join("usr/local/bin/vibe-shim"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    fs::write(r.join("var/lib/dpkg/diversions"), "").unwrap();
    fs::write(r.join("var/lib/dpkg/status"), "").unwrap();
    root
}

fn shim(args: &[&str]) -> Output {
    Command::new(shim_bin()).args(args).output().unwrap()
}

fn lockdown(verb: &str, root: &Path, extra: &[&str]) -> Output {
    let mut args = vec![verb, "lockdown", "--root", root.to_str().unwrap()];
    args.extend_from_slice(extra);
    shim(&args)
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn diversions(root: &Path) -> String {
    let out = Command::new("dpkg-divert")
        .args(["--root", root.to_str().unwrap(), "--list", "*runc*"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn at(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

#[test]
#[ignore]
fn divert_install_and_uninstall_restore_runc_byte_for_byte() {
    let root = scratch_root();
    let r = root.path();
    let before = fs::read(at(r, RUNC)).unwrap();
    let inode = fs::metadata(at(r, RUNC)).unwrap().ino();
    let divert = ["--mode", "divert", "--runc", RUNC, "--shim", SHIM];
    for round in 0..2 {
        let out = lockdown("install", r, &divert);
        assert!(out.status.success(), "install {round}: {}", text(&out));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.contains(if round == 0 {
                "installed"
            } else {
                "already installed"
            }),
            "{said}"
        );
        assert_eq!(fs::read_link(at(r, RUNC)).unwrap(), Path::new(SHIM));
        assert_eq!(
            fs::read(at(r, REAL)).unwrap(),
            before,
            "the real runc moved intact"
        );
        assert!(
            diversions(r).contains(&format!("diversion of {RUNC} to {REAL} by vibe-shim")),
            "{}",
            diversions(r)
        );
        let record = fs::read_to_string(at(r, "/etc/vibe-shim/lockdown.toml")).unwrap();
        assert!(record.contains(&format!("real = \"{REAL}\"")), "{record}");
    }
    for round in 0..2 {
        let out = lockdown("uninstall", r, &[]);
        assert!(out.status.success(), "uninstall {round}: {}", text(&out));
        let meta = fs::symlink_metadata(at(r, RUNC)).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(fs::read(at(r, RUNC)).unwrap(), before, "byte for byte");
        assert_eq!(meta.ino(), inode, "the very same file is back");
        assert!(!at(r, REAL).exists());
        assert!(!diversions(r).contains("runc"), "{}", diversions(r));
        assert!(!at(r, "/etc/vibe-shim/lockdown.toml").exists());
    }
}

#[test]
#[ignore]
fn divert_finishes_a_half_done_install_and_uninstall() {
    let root = scratch_root();
    let r = root.path();
    let before = fs::read(at(r, RUNC)).unwrap();
    let divert = ["--mode", "divert", "--runc", RUNC, "--shim", SHIM];
    // Stopped after the hard link: runc still the real one at both names.
    fs::hard_link(at(r, RUNC), at(r, REAL)).unwrap();
    let out = lockdown("install", r, &divert);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(fs::read_link(at(r, RUNC)).unwrap(), Path::new(SHIM));
    let out = lockdown("uninstall", r, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(fs::read(at(r, RUNC)).unwrap(), before);
}

#[test]
#[ignore]
fn a_runc_earlier_on_the_engines_path_is_refused() {
    let root = scratch_root();
    let r = root.path();
    fs::create_dir_all(at(r, "/usr/local/sbin")).unwrap();
    fs::copy(RUNC, at(r, "/usr/local/sbin/runc")).unwrap();
    let out = lockdown(
        "install",
        r,
        &["--mode", "divert", "--runc", RUNC, "--shim", SHIM],
    );
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("vibe-shim:") && err.contains("/usr/local/sbin/runc"),
        "{err}"
    );
    // Nothing was changed.
    assert!(fs::symlink_metadata(at(r, RUNC)).unwrap().is_file());
    assert!(!diversions(r).contains("runc"));
}

#[test]
#[ignore]
fn someone_elses_diversion_is_refused() {
    let root = scratch_root();
    let r = root.path();
    let status = Command::new("dpkg-divert")
        .args(["--root", r.to_str().unwrap(), "--local", "--no-rename"])
        .args(["--divert", "/usr/sbin/runc.distrib", "--add", RUNC])
        .status()
        .unwrap();
    assert!(status.success());
    let out = lockdown(
        "install",
        r,
        &["--mode", "divert", "--runc", RUNC, "--shim", SHIM],
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already diverted"));
}

#[test]
#[ignore]
fn path_mode_install_and_uninstall() {
    let root = scratch_root();
    let r = root.path();
    let args = ["--mode", "path", "--shim", SHIM];
    for _ in 0..2 {
        let out = lockdown("install", r, &args);
        assert!(out.status.success(), "{}", text(&out));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.contains("Environment=\"PATH=/usr/local/lib/vibe-shim/bin:"),
            "{said}"
        );
        assert_eq!(
            fs::read_link(at(r, "/usr/local/lib/vibe-shim/bin/runc")).unwrap(),
            Path::new(SHIM)
        );
        let record = fs::read_to_string(at(r, "/etc/vibe-shim/lockdown.toml")).unwrap();
        assert!(record.contains("real = \"/usr/sbin/runc\""), "{record}");
    }
    for _ in 0..2 {
        let out = lockdown("uninstall", r, &[]);
        assert!(out.status.success(), "{}", text(&out));
        assert!(!at(r, "/usr/local/lib/vibe-shim/bin/runc").exists());
        assert!(!at(r, "/etc/vibe-shim/lockdown.toml").exists());
    }
}

#[test]
#[ignore]
fn a_writable_shim_is_refused() {
    let root = scratch_root();
    let r = root.path();
    fs::set_permissions(at(r, SHIM), fs::Permissions::from_mode(0o777)).unwrap();
    let out = lockdown("install", r, &["--mode", "path", "--shim", SHIM]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("writable by nobody else"));
}

/// A directory holding `runc` -> vibe-shim, as PATH mode makes it.
fn runc_link_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(shim_bin(), dir.path().join("runc")).unwrap();
    dir
}

#[test]
#[ignore]
fn as_runc_it_execs_the_real_runc_never_itself() {
    let dir = runc_link_dir();
    let path = format!("{}:/usr/sbin:/usr/bin", dir.path().display());
    let out = Command::new("runc")
        .env("PATH", &path)
        .env_remove("VIBE_SHIM_ACTIVE")
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("runc version"),
        "{}",
        text(&out)
    );
}

#[test]
#[ignore]
fn as_runc_with_only_itself_on_path_it_fails_closed() {
    let dir = runc_link_dir();
    let out = Command::new("runc")
        .env("PATH", dir.path())
        .env_remove("VIBE_SHIM_ACTIVE")
        .args(["state", "x"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("vibe-shim"), "{err}");
    // Nor its own verbs (root-only work such as the tmpfs-modes hook), nor
    // a policy of the caller's choosing, for whoever reaches runc's argv.
    for args in [
        &["uninstall", "lockdown"][..],
        &[
            "hook",
            "tmpfs-modes",
            "vibe-shim-tmpfs-modes-hook",
            "/",
            "0777:1000:1000:/run",
        ],
        &["policy", "check"],
        &["--config", "/nonexistent.toml", "state", "x"],
    ] {
        let out = Command::new("runc")
            .env("PATH", dir.path())
            .env_remove("VIBE_SHIM_ACTIVE")
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(
            err.contains("runs as runc") || err.contains("run as runc"),
            "{args:?}: {err}"
        );
    }
}

/// An engine-made executor directory: root-owned 0711 all the way up (not
/// under /tmp, which anyone can write).
struct Executor {
    base: PathBuf,
}

impl Executor {
    fn new(tag: &str) -> Executor {
        let base = PathBuf::from(format!(
            "/run/vibe-lockdown-it/{}-{tag}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(&base).unwrap();
        for dir in ["/run/vibe-lockdown-it", base.to_str().unwrap()] {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o711)).unwrap();
        }
        Executor { base }
    }

    /// A copy of `bundle`'s directory at `<base>/<sub>/<id>`.
    fn place(&self, bundle: &Bundle, sub: &str) -> PathBuf {
        let dir = self.base.join(sub);
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o711)).unwrap();
        let to = dir.join(&bundle.id);
        let ok = Command::new("cp")
            .arg("-a")
            .arg(bundle.bundle_dir())
            .arg(&to)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        fs::set_permissions(&to, fs::Permissions::from_mode(0o711)).unwrap();
        to
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
    }
}

fn run_in(bundle: &Bundle, dir: &Path) -> String {
    let out = bundle
        .shim_command(["run", "--bundle"])
        .arg(dir)
        .arg(&bundle.id)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let _ = bundle.shim(&["delete", "--force", &bundle.id], b"");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
#[ignore]
fn the_build_profile_applies_only_to_engine_made_bundles() {
    let exec = Executor::new("profile");
    let build = exec.base.join("build.toml");
    fs::write(
        &build,
        format!(
            "[filesystem]\nreadonly_root = false\n[audit]\npath = \"{}\"\n",
            exec.base.join("build-audit.jsonl").display()
        ),
    )
    .unwrap();
    let policy = format!(
        "[[profiles]]\nname = \"build\"\nconfig = \"{}\"\nwhen = {{ bundle_under = [\"{}\"] }}\n",
        build.display(),
        exec.base.join("executor").display()
    );
    let script = "if echo ok > /f; then echo WROTE; fi; grep CapEff /proc/self/status";
    let bundle = Bundle::busybox("profile", &["sh", "-c", script], &policy);
    // As BuildKit asks: a writable root (runc spec's default is read-only).
    let mut spec = bundle.spec();
    spec["root"]["readonly"] = serde_json::Value::Bool(false);
    bundle.write_spec(&spec);
    // Every copy from the pristine bundle (a run rewrites its config.json).
    let engine = exec.place(&bundle, "executor");
    let evil = exec.place(&bundle, "executor-evil");
    let nested = exec.place(&bundle, "executor/sub");
    exec.place(&bundle, "executor-evil2");
    let elsewhere = exec.place(&bundle, "elsewhere");
    let owned = exec.base.join("executor/owned");
    Command::new("cp")
        .arg("-a")
        .arg(bundle.bundle_dir())
        .arg(&owned)
        .status()
        .unwrap();
    std::os::unix::fs::chown(&owned, Some(1000), None).unwrap();

    // Made by the engine in its executor directory: the build profile.
    let out = run_in(&bundle, &engine);
    assert!(out.contains("WROTE"), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    let audit = fs::read_to_string(exec.base.join("build-audit.jsonl")).unwrap();
    assert!(audit.contains(build.to_str().unwrap()), "{audit}");

    let main_policy = |what: &str, dir: &Path| {
        let out = run_in(&bundle, dir);
        assert!(!out.contains("WROTE"), "{what}: {out}");
        assert!(out.contains("Read-only file system"), "{what}: {out}");
    };
    main_policy("lookalike", &evil);
    main_policy("nested", &nested);
    let dotdot = exec
        .base
        .join("executor/../executor-evil2")
        .join(&bundle.id);
    main_policy("via ..", &dotdot);
    main_policy("user-owned bundle", &owned);
    let link = exec.base.join("executor/linked");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    main_policy("symlink in the executor dir", &link);
    main_policy("client's temp dir", &bundle.bundle_dir());
}

/// Copies the shared libraries `bin` needs (as `ldd` lists them) into
/// `root`, so a chroot can run vibe-shim and runc.
fn libs_into(root: &Path, bin: &Path) {
    let out = Command::new("ldd").arg(bin).output().unwrap();
    assert!(
        out.status.success(),
        "ldd {}: {}",
        bin.display(),
        text(&out)
    );
    for lib in String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        let to = at(root, lib);
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::copy(lib, &to).unwrap();
    }
}

/// `runc ARGS` as the engines call it, chrooted into the scratch root: the
/// vibe-shim there reads that root's lockdown record.
fn runc_in(root: &Path, args: &[&str]) -> Output {
    libs_into(root, &at(root, SHIM));
    libs_into(root, &at(root, REAL));
    Command::new("chroot")
        .arg(root)
        .arg(RUNC)
        .args(args)
        .env_remove("VIBE_SHIM_ACTIVE")
        .output()
        .unwrap()
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().mode() & 0o7777
}

#[test]
#[ignore]
fn divert_keeps_the_real_runc_unexecutable_and_runs_it_through_vibe_shim() {
    let root = scratch_root();
    let r = root.path();
    let before = fs::read(at(r, RUNC)).unwrap();
    let before_mode = mode(&at(r, RUNC));
    assert_ne!(before_mode & 0o111, 0, "the scratch runc starts executable");
    let divert = ["--mode", "divert", "--runc", RUNC, "--shim", SHIM];
    let out = lockdown("install", r, &divert);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        mode(&at(r, REAL)),
        0o400,
        "the diverted runc has no exec bit"
    );
    // What `ctr run --runc-binary <real>` or `podman --runtime <real>` does:
    // exec it by path, as root. The kernel refuses.
    let direct = Command::new(at(r, REAL)).arg("--version").output();
    match direct {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}"),
        Ok(out) => panic!("the real runc ran by path: {}", text(&out)),
    }
    // Through vibe-shim (its sealed memfd copy) runc still runs.
    let out = runc_in(r, &["--version"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("runc version"),
        "{}",
        text(&out)
    );
    // A runc upgrade lands at the diverted name with 0755: the next run
    // through vibe-shim takes the exec bit back, and install does too.
    fs::set_permissions(at(r, REAL), fs::Permissions::from_mode(0o755)).unwrap();
    let out = runc_in(r, &["--version"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(mode(&at(r, REAL)), 0o400, "re-sealed at exec");
    fs::set_permissions(at(r, REAL), fs::Permissions::from_mode(0o755)).unwrap();
    let out = lockdown("install", r, &divert);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(mode(&at(r, REAL)), 0o400, "re-sealed by install");
    let out = lockdown("uninstall", r, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(fs::read(at(r, RUNC)).unwrap(), before, "byte for byte");
    assert_eq!(mode(&at(r, RUNC)), before_mode, "its mode restored");
}

#[test]
#[ignore]
fn path_mode_keeps_the_real_runc_unexecutable_and_uninstall_restores_it() {
    let root = scratch_root();
    let r = root.path();
    let before_mode = mode(&at(r, RUNC));
    let out = lockdown("install", r, &["--mode", "path", "--shim", SHIM]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(mode(&at(r, RUNC)), 0o400, "{}", text(&out));
    // Installing again keeps the original mode to restore.
    let out = lockdown("install", r, &["--mode", "path", "--shim", SHIM]);
    assert!(out.status.success(), "{}", text(&out));
    let out = lockdown("uninstall", r, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(mode(&at(r, RUNC)), before_mode);
}

#[test]
#[ignore]
fn a_tampered_real_runc_is_refused_not_run() {
    let root = scratch_root();
    let r = root.path();
    let divert = ["--mode", "divert", "--runc", RUNC, "--shim", SHIM];
    let out = lockdown("install", r, &divert);
    assert!(out.status.success(), "{}", text(&out));
    fs::set_permissions(at(r, REAL), fs::Permissions::from_mode(0o602)).unwrap();
    let out = runc_in(r, &["--version"]);
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("vibe-shim") && err.contains("writable by nobody else"),
        "{err}"
    );
}
