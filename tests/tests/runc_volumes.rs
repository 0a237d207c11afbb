//! Engine volumes (`filesystem.volumes = "private"`) through vibe-shim and
//! the real runc, on a volume directory of the test's own: the first
//! container claims a volume and keeps it across `delete`, another id is
//! refused naming the holder, and a volume whose `_data` is (or is raced
//! into being) a mount of another host directory never shows that
//! directory. Judged from inside (what the container lists). Needs root
//! and runc.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use vibe_shim_tests::bundle::Bundle;
use vibe_shim_tests::race::{Flipper, HostMarker};

fn policy(volume_dir: &Path) -> String {
    format!(
        "[filesystem]\nvolumes = \"private\"\nvolume_dirs = [\"{}\"]\n",
        volume_dir.display()
    )
}

/// A volume directory of the test's own, its ledger records removed on drop.
struct VolumeDir {
    work: tempfile::TempDir,
}

impl VolumeDir {
    fn new() -> VolumeDir {
        let work = tempfile::Builder::new()
            .prefix("vibe-volumes-")
            .tempdir_in("/var/tmp")
            .unwrap();
        std::fs::create_dir_all(work.path().join("volumes")).unwrap();
        VolumeDir { work }
    }

    fn dir(&self) -> PathBuf {
        self.work.path().join("volumes")
    }

    /// Makes `<dir>/<name>/_data` and returns it.
    fn volume(&self, name: &str) -> PathBuf {
        let data = self.dir().join(name).join("_data");
        std::fs::create_dir_all(&data).unwrap();
        data
    }
}

impl Drop for VolumeDir {
    fn drop(&mut self) {
        // The ledger's directory for this volume directory (escaped as the
        // shim escapes runc roots).
        let escaped = vibe_hooks::egress::records::escape_root(&self.dir());
        let _ = std::fs::remove_dir_all(Path::new("/var/lib/vibe-shim/volumes").join(escaped));
    }
}

/// `base` (the client's spec, read before any create rewrote it) with the
/// volume bound at /data.
fn with_volume(base: &Value, data: &Path) -> Value {
    let mut spec = base.clone();
    spec["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/data", "type": "bind", "source": data.to_str().unwrap(),
        "options": ["rbind", "rw"]
    }));
    spec
}

#[test]
#[ignore = "needs root and runc"]
fn a_volume_is_its_first_containers_across_delete() {
    let dirs = VolumeDir::new();
    let data = dirs.volume("v1");
    let script = "cat /data/log 2>/dev/null; echo run >> /data/log; echo END";
    let owner = Bundle::busybox("volowner", &["sh", "-c", script], &policy(&dirs.dir()));
    let spec = with_volume(&owner.spec(), &data);
    let first = owner
        .cycle(&spec)
        .expect("the first container gets the volume");
    assert!(!first.contains("run\n"), "{first}");
    // Deleted and created again (as dockerd does at docker start): still its.
    let again = owner.cycle(&spec).expect("the holder gets its volume back");
    assert!(again.starts_with("run\n"), "{again}");
    // Another container id is refused, naming the volume and the holder.
    let other = Bundle::busybox("volother", &["sh", "-c", script], &policy(&dirs.dir()));
    let other_base = other.spec();
    let refusal = other
        .cycle(&with_volume(&other_base, &data))
        .expect_err("not the holder");
    for word in [
        "vibe-shim: volumes: volume \"v1\" belongs to container",
        owner.id.as_str(),
        "filesystem.volumes",
    ] {
        assert!(refusal.contains(word), "{word}: {refusal}");
    }
    assert!(!other.runc_list().contains(&other.id));
    // A new volume of the same name is a new one: the other id claims it.
    std::fs::remove_dir_all(dirs.dir().join("v1")).unwrap();
    let data = dirs.volume("v1");
    let fresh = other
        .cycle(&with_volume(&other_base, &data))
        .expect("a new volume");
    assert!(!fresh.contains("run\n"), "{fresh}");
}

/// A volume whose `_data` is a mount (a local volume with o=bind) is
/// refused, and so is one that only becomes a mount by a rename after the
/// check: the host directory behind the mount never shows.
#[test]
#[ignore = "needs root and runc"]
fn a_volume_that_is_a_mount_is_refused_even_when_raced() {
    let marker = HostMarker::new("volmnt", "HOST-SECRET\n");
    let dirs = VolumeDir::new();
    let elsewhere = dirs.work.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::copy(&marker.0, elsewhere.join(marker.name())).unwrap();
    let mounted = dirs.volume("p");
    let plain = dirs.volume("q");
    std::fs::write(plain.join("inside"), "").unwrap();
    let st = Command::new("mount")
        .arg("--bind")
        .arg(&elsewhere)
        .arg(&mounted)
        .status()
        .unwrap();
    assert!(st.success());
    // The race below swaps p and q, so the mount may end up under either.
    struct Unmount(Vec<PathBuf>);
    impl Drop for Unmount {
        fn drop(&mut self) {
            for path in &self.0 {
                while Command::new("umount")
                    .arg("-l")
                    .arg(path)
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
                {}
            }
        }
    }
    let _guard = Unmount(vec![mounted.clone(), plain.clone()]);
    let bundle = Bundle::busybox(
        "volmnt",
        &["sh", "-c", "ls /data; echo END"],
        &policy(&dirs.dir()),
    );
    let base = bundle.spec();
    let refusal = bundle
        .cycle(&with_volume(&base, &mounted))
        .expect_err("a mount");
    assert!(
        refusal.contains("volumes: volume \"p\" is a mount of its own"),
        "{refusal}"
    );
    let spec = with_volume(&base, &plain);
    let out = bundle.cycle(&spec).expect("a plain volume passes");
    assert!(out.contains("inside"), "{out}");

    // Raced: p and q swap names, so q/_data is a mount half of the time.
    let flipper = Flipper::start(&dirs.dir().join("p"), &dirs.dir().join("q"));
    let (mut escaped, mut real, mut refused) = (0, 0, 0);
    for _ in 0..100 {
        match bundle.cycle(&spec) {
            Err(_) => refused += 1,
            Ok(out) if out.contains(&marker.name()) => escaped += 1,
            Ok(out) if out.contains("inside") => real += 1,
            Ok(_) => {}
        }
    }
    drop(flipper);
    eprintln!("volmnt: 100 cycles: escaped {escaped}, real {real}, refused {refused}");
    assert_eq!(escaped, 0, "the host directory behind a mount showed");
    assert!(real > 0, "no cycle mounted the plain volume");
}

/// Under a forced `process.user`, a volume's empty, root-owned root goes to
/// that user on its first use (the engine had nothing of the image to copy
/// in), so the container can write it; a root that has content is left as
/// the engine made it.
#[test]
#[ignore = "needs root and runc"]
fn a_fresh_empty_volume_goes_to_the_forced_user() {
    use std::os::unix::fs::MetadataExt;
    let dirs = VolumeDir::new();
    let fresh = dirs.volume("fresh");
    let full = dirs.volume("full");
    std::fs::write(full.join("from-image"), "").unwrap();
    let policy = format!("{}\n[process]\nuser = \"1000:1000\"\n", policy(&dirs.dir()));
    let script = "id -u; touch /data/mine && echo wrote; echo END";
    let bundle = Bundle::busybox("volfresh", &["sh", "-c", script], &policy);
    let base = bundle.spec();
    let out = bundle
        .cycle(&with_volume(&base, &fresh))
        .expect("a fresh volume");
    assert!(out.contains("1000\nwrote"), "{out}");
    let meta = std::fs::metadata(&fresh).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1000, 1000));
    let other = Bundle::busybox("volfull", &["sh", "-c", script], &policy);
    let out = other
        .cycle(&with_volume(&other.spec(), &full))
        .expect("a volume with content");
    assert!(
        !out.contains("wrote"),
        "a root-owned volume became writable: {out}"
    );
    assert_eq!(std::fs::metadata(&full).unwrap().uid(), 0);
}
