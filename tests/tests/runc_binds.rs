//! The bind-source race, through vibe-shim and the real runc: a host process
//! (standing in for a container that can write in an allowed subtree) flips
//! a path there between a real directory and a symlink to `/` while
//! containers start with that path as a bind source. Judged from inside: a
//! marker file in the host's `/` must never be visible at the destination.
//! Needs root and runc.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::json;
use vibe_shim_tests::bundle::{describe, Bundle};
use vibe_shim_tests::race::{Flipper, HostMarker};

/// How many create/start cycles the race tests run (>= 200 by default).
fn cycles(default: usize) -> usize {
    std::env::var("VIBE_BINDS_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A writable bind needs a regular id (host_ids): the processes run as 1000.
fn policy_allowing(root: &Path) -> String {
    format!(
        "[process]\nuser = \"1000:1000\"\n\n[[filesystem.bind]]\nsource = \"{}\"\nmode = \"rw\"\n",
        root.display()
    )
}

/// The staging directory vibe-shim keeps for this bundle's container.
fn staging_dir(bundle: &Bundle) -> PathBuf {
    let escaped = vibe_hooks::egress::records::escape_root(&bundle.root_dir());
    Path::new("/run/vibe-shim/containers")
        .join(escaped)
        .join(&bundle.id)
}

fn mountinfo() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap()
}

/// Mount points under vibe-shim's per-container directories.
fn staging_mounts() -> std::collections::BTreeSet<String> {
    mountinfo()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with("/run/vibe-shim/containers/"))
        .map(str::to_string)
        .collect()
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[derive(Default, Debug)]
struct Tally {
    escaped: usize,
    real: usize,
    refused: usize,
    other: usize,
}

/// The race: `dst` shows the host's `/` (the marker) or the real content.
fn race(name: &str, is_file: bool) {
    let marker = HostMarker::new(name, "HOST-SECRET\n");
    let work = tempfile::Builder::new()
        .prefix("vibe-binds-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let allowed = work.path().join("allowed");
    std::fs::create_dir_all(&allowed).unwrap();
    let real = allowed.join("x");
    let decoy = allowed.join("y");
    let (check, target) = if is_file {
        std::fs::write(&real, "inside\n").unwrap();
        // The decoy points at the marker file itself.
        ("cat /x", marker.0.clone())
    } else {
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("inside"), "").unwrap();
        ("ls /x", PathBuf::from("/"))
    };
    std::os::unix::fs::symlink(&target, &decoy).unwrap();
    let script = format!("{check}; echo END");
    let bundle = Bundle::busybox(name, &["sh", "-c", &script], &policy_allowing(&allowed));
    let mut spec = bundle.spec();
    spec["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/x", "type": "bind", "source": real.to_str().unwrap(),
        "options": ["rbind", "rw"]
    }));

    // Without the attacker the bind shows the real content.
    let out = bundle.cycle(&spec).expect("a plain bind is allowed");
    assert!(
        out.contains("inside") && !out.contains(&marker.name()) && !out.contains("HOST-SECRET"),
        "{out}"
    );

    let fds = fd_count();
    let flipper = Flipper::start(&real, &decoy);
    let mut tally = Tally::default();
    let n = cycles(200);
    for _ in 0..n {
        match bundle.cycle(&spec) {
            Err(_) => tally.refused += 1,
            Ok(out) if out.contains(&marker.name()) || out.contains("HOST-SECRET") => {
                tally.escaped += 1
            }
            Ok(out) if out.contains("inside") => tally.real += 1,
            Ok(_) => tally.other += 1,
        }
    }
    let flips = flipper.flips.load(Ordering::Relaxed);
    drop(flipper);
    eprintln!("{name}: {n} cycles, {flips} flips: {tally:?}");
    assert_eq!(tally.escaped, 0, "host / reached the container: {tally:?}");
    assert!(
        tally.real > 0,
        "no cycle mounted the real source: {tally:?}"
    );
    assert!(flips > 0);
    // Nothing staged is left behind.
    let staged = staging_dir(&bundle);
    assert!(!staged.exists(), "{} is left", staged.display());
    assert!(
        !mountinfo().contains(&staged.display().to_string()),
        "a staging mount is left"
    );
    assert_eq!(fd_count(), fds, "fds leaked in the test process");
}

#[test]
#[ignore = "needs root and runc"]
fn flipping_a_directory_to_root_never_escapes() {
    race("flipdir", false);
}

#[test]
#[ignore = "needs root and runc"]
fn flipping_a_file_to_a_host_file_never_escapes() {
    race("flipfile", true);
}

/// A bind whose source is a mount point inside the allowed subtree (a
/// volume that carries another host path in) is refused, and so is one
/// that only becomes a mount point by a rename after the check.
#[test]
#[ignore = "needs root and runc"]
fn mount_point_sources_are_refused_even_when_raced() {
    let marker = HostMarker::new("mnt", "HOST-SECRET\n");
    let work = tempfile::Builder::new()
        .prefix("vibe-binds-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let allowed = work.path().join("allowed");
    let elsewhere = work.path().join("elsewhere");
    std::fs::create_dir_all(allowed.join("p/m")).unwrap();
    std::fs::create_dir_all(allowed.join("q/m")).unwrap();
    std::fs::write(allowed.join("q/m/inside"), "").unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::copy(&marker.0, elsewhere.join(marker.name())).unwrap();
    // p/m carries `elsewhere` in.
    let st = Command::new("mount")
        .arg("--bind")
        .arg(&elsewhere)
        .arg(allowed.join("p/m"))
        .status()
        .unwrap();
    assert!(st.success());
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
    let _guards = [Unmount(allowed.join("p/m")), Unmount(allowed.join("q/m"))];
    let bundle = Bundle::busybox(
        "mntpoint",
        &["sh", "-c", "ls /m; echo END"],
        &policy_allowing(&allowed),
    );
    let base = bundle.spec();
    let with_source = |source: &Path| {
        let mut spec = base.clone();
        spec["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/m", "type": "bind", "source": source.to_str().unwrap(),
            "options": ["rbind", "rw"]
        }));
        spec
    };
    // Statically: the mount point itself, and a bind of its parent (not
    // recursive, so the mount does not come along).
    let spec = with_source(&allowed.join("p/m"));
    let refusal = bundle
        .cycle(&spec)
        .expect_err("a mount point source must be refused");
    assert!(refusal.contains("separate mount"), "{refusal}");
    let spec = with_source(&allowed.join("q/m"));
    let out = bundle.cycle(&spec).expect("a plain directory passes");
    assert!(out.contains("inside"), "{out}");

    // Raced: p and q swap, so q/m is a mount point half of the time.
    let flipper = Flipper::start(&allowed.join("p"), &allowed.join("q"));
    let mut tally = Tally::default();
    let n = cycles(200) / 2;
    for _ in 0..n {
        match bundle.cycle(&spec) {
            Err(_) => tally.refused += 1,
            Ok(out) if out.contains(&marker.name()) => tally.escaped += 1,
            Ok(out) if out.contains("inside") => tally.real += 1,
            Ok(_) => tally.other += 1,
        }
    }
    drop(flipper);
    eprintln!("mntpoint: {n} cycles: {tally:?}");
    assert_eq!(tally.escaped, 0, "another mount was carried in: {tally:?}");
    assert!(!staging_dir(&bundle).exists());
}

/// create/delete cycles (without start) leave no staging mount, directory
/// or fd behind. VIBE_BINDS_CYCLES=500 for the full soak.
#[test]
#[ignore = "needs root and runc"]
fn create_delete_cycles_leave_nothing_behind() {
    let work = tempfile::Builder::new()
        .prefix("vibe-binds-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let allowed = work.path().join("allowed");
    std::fs::create_dir_all(allowed.join("d")).unwrap();
    std::fs::write(allowed.join("f"), "file\n").unwrap();
    let bundle = Bundle::busybox("soak", &["true"], &policy_allowing(&allowed));
    let mut spec = bundle.spec();
    for (dst, src) in [("/d", "d"), ("/f", "f")] {
        spec["mounts"].as_array_mut().unwrap().push(json!({
            "destination": dst, "type": "bind",
            "source": allowed.join(src).to_str().unwrap(), "options": ["rbind", "ro"]
        }));
    }
    // Other tests share this host: count only mounts that could be ours.
    let ours = || {
        mountinfo()
            .lines()
            .filter(|l| l.contains("/run/vibe-shim") || l.contains(&*work.path().to_string_lossy()))
            .count()
    };
    let mounts_before = ours();
    let staged_before = staging_mounts();
    let fds_before = fd_count();
    let n = cycles(50);
    let started = Instant::now();
    for i in 0..n {
        bundle.write_spec(&spec);
        let out = bundle.create();
        assert!(out.status.success(), "create {i}: {}", describe(&out));
        let staged = staging_dir(&bundle).join("binds");
        assert!(staged.exists(), "create {i} staged nothing");
        let del = bundle.shim(&["delete", "-f", &bundle.id], b"");
        assert!(del.status.success(), "delete {i}: {}", describe(&del));
        assert!(
            !staging_dir(&bundle).exists(),
            "cycle {i} left its directory"
        );
    }
    let mounts_after = ours();
    eprintln!(
        "soak: {n} create/delete cycles in {:?}; mounts {mounts_before} -> {mounts_after}; fds {fds_before} -> {}",
        started.elapsed(),
        fd_count()
    );
    assert_eq!(mounts_after, mounts_before, "mounts leaked");
    // Other tests' containers may hold staging mounts: only new ones count.
    let new: Vec<_> = staging_mounts()
        .difference(&staged_before)
        .cloned()
        .collect();
    assert!(new.is_empty(), "staging mounts left: {new:?}");
    assert_eq!(fd_count(), fds_before, "fds leaked");
}

/// A failed create (runc refuses the spec after staging) is cleaned at the
/// next create of the same id and at delete.
#[test]
#[ignore = "needs root and runc"]
fn staging_of_a_failed_create_is_released() {
    let work = tempfile::Builder::new()
        .prefix("vibe-binds-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let allowed = work.path().join("allowed");
    std::fs::create_dir_all(allowed.join("d")).unwrap();
    let bundle = Bundle::busybox("failed", &["true"], &policy_allowing(&allowed));
    let mut spec = bundle.spec();
    spec["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/d", "type": "bind",
        "source": allowed.join("d").to_str().unwrap(), "options": ["rbind"]
    }));
    // runc fails after vibe-shim staged: the process cannot be found.
    let mut broken = spec.clone();
    broken["process"]["args"] = json!(["/no/such/binary"]);
    broken["process"]["cwd"] = json!("relative/cwd");
    bundle.write_spec(&broken);
    let out = bundle.create();
    assert!(
        !out.status.success(),
        "runc should fail: {}",
        describe(&out)
    );
    let del = bundle.shim(&["delete", "-f", &bundle.id], b"");
    let _ = del;
    assert!(!staging_dir(&bundle).exists(), "delete left the staging");
    assert!(!mountinfo().contains(&staging_dir(&bundle).display().to_string()));
}

/// The engine-file exemption (resolv.conf, hosts, ...) is for the container
/// that owns its id: a client naming the id of a container that already
/// exists under another runc root does not get that container's files.
#[test]
#[ignore = "needs root and runc"]
fn engine_files_of_another_containers_id_are_refused() {
    let work = tempfile::Builder::new()
        .prefix("vibe-binds-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let id = format!("{:016x}{:016x}", std::process::id(), 0xfeed_u64);
    let engine_dir = work.path().join("containers").join(&id);
    std::fs::create_dir_all(&engine_dir).unwrap();
    std::fs::write(engine_dir.join("hosts"), "127.0.0.1 victim-hosts\n").unwrap();
    let with_hosts = |bundle: &Bundle| {
        let mut spec = bundle.spec();
        spec["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/etc/hosts", "type": "bind",
            "source": engine_dir.join("hosts").to_str().unwrap(), "options": ["rbind", "rw"]
        }));
        spec
    };
    let script = "cat /etc/hosts; echo END";
    // The victim: its engine files pass, staged, while no one else uses the id.
    let mut victim = Bundle::busybox("victim", &["sh", "-c", script], "");
    victim.id = id.clone();
    let victim_spec = with_hosts(&victim);
    victim.write_spec(&victim_spec);
    let out = victim.create();
    assert!(out.status.success(), "victim create: {}", describe(&out));

    // The attacker: same id, its own runc root.
    let mut attacker = Bundle::busybox("attacker", &["sh", "-c", script], "");
    attacker.id = id.clone();
    let spec = with_hosts(&attacker);
    let refusal = attacker
        .cycle(&spec)
        .expect_err("another container's files");
    assert!(refusal.contains("already exists"), "{refusal}");

    // Once the victim is gone the id is free again.
    let del = victim.shim(&["delete", "-f", &id], b"");
    assert!(del.status.success(), "{}", describe(&del));
    let out = attacker.cycle(&spec).expect("engine file of a free id");
    assert!(out.contains("victim-hosts"), "{out}");

    // A directory others can write is not an engine's.
    let mut perms = std::fs::metadata(&engine_dir).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o777);
    std::fs::set_permissions(&engine_dir, perms).unwrap();
    let refusal = attacker
        .cycle(&spec)
        .expect_err("a world-writable engine dir");
    assert!(refusal.contains("writable by nobody else"), "{refusal}");
}

/// `run` in the foreground: runc deletes the container itself when it
/// exits, so vibe-shim's `delete` never runs; the staging must go anyway.
#[test]
#[ignore = "needs root and runc"]
fn foreground_run_releases_its_staging() {
    let work = tempfile::Builder::new()
        .prefix("vibe-binds-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let allowed = work.path().join("allowed");
    std::fs::create_dir_all(allowed.join("d")).unwrap();
    std::fs::write(allowed.join("f"), "file\n").unwrap();
    let bundle = Bundle::busybox(
        "fgrun",
        &["sh", "-c", "cat /f; ls /d; exit 7"],
        &policy_allowing(&allowed),
    );
    let mut spec = bundle.spec();
    for (dst, src) in [("/d", "d"), ("/f", "f")] {
        spec["mounts"].as_array_mut().unwrap().push(json!({
            "destination": dst, "type": "bind",
            "source": allowed.join(src).to_str().unwrap(), "options": ["rbind", "ro"]
        }));
    }
    bundle.write_spec(&spec);
    let before = staging_mounts();
    let out = bundle
        .shim_command(["run", "--bundle"])
        .arg(bundle.bundle_dir())
        .arg(&bundle.id)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    // runc's exit status is the container's; its stdout is the container's.
    assert_eq!(out.status.code(), Some(7), "{}", describe(&out));
    assert!(text(&out.stdout).contains("file"), "{}", describe(&out));
    assert!(bundle.runc_list().is_empty(), "runc kept the container");
    let left: Vec<_> = staging_mounts().difference(&before).cloned().collect();
    assert!(left.is_empty(), "staging mounts left: {left:?}");
    assert!(
        !staging_dir(&bundle).exists(),
        "{} left behind",
        staging_dir(&bundle).display()
    );
}
