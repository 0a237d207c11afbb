//! Volumes the engine made: `docker run -v name:/x`, an anonymous `-v /x`,
//! an image's `VOLUME`, podman's named volumes. The engine hands runc a
//! bind of `<volume dir>/<name>/_data`; allowing the whole volume directory
//! as a `filesystem.bind` subtree would give every container every volume.
//! So a volume is judged on its own (`filesystem.volumes`):
//!
//! - `"none"` refuses it, with a message that names the volume and the key;
//! - `"private"` allows it when `_data` is a plain directory on the volume
//!   directory's own mount (a local volume with `type`/`o`/`device` options
//!   is a mount at `_data`, of `/etc` or a disk, and stays refused), and when
//!   vibe-shim's claim ledger says it is this container's: the first
//!   container that vibe-shim creates with a volume claims it, and every
//!   other container naming it is refused.
//!
//! This module only classifies and decides. The shim pins `_data` below the
//! volume directory (as the binds rule's [`super::binds::pins`] say), takes
//! the volume's identity from that fd, and asks [`judge_claim`] with what
//! its ledger holds (shim/src/sys/volume_ledger.rs).

use std::path::{Path, PathBuf};

use crate::config::{Policy, VolumesMode};
use crate::decision::Denial;
use crate::host::HostView;
use crate::lang::container_id;

pub const RULE: &str = "volumes";

/// The file name the engines give a volume's content directory.
const DATA_DIR: &str = "_data";

/// A bind source that is an engine volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// The canonical volume directory (one of `filesystem.volume_dirs`).
    pub dir: PathBuf,
    /// The volume's name: the directory below `dir` that holds `_data`.
    pub name: String,
}

impl Volume {
    /// `<name>/_data`, relative to [`Volume::dir`].
    pub fn rest(&self) -> PathBuf {
        Path::new(&self.name).join(DATA_DIR)
    }
}

/// Who holds a volume's claim: the container (its runc root and id) that
/// vibe-shim first created with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub runc_root: PathBuf,
    pub id: String,
}

/// The canonical `filesystem.volume_dirs` (a directory that does not exist
/// holds no volume).
pub fn canonical_dirs(policy: &Policy, host: &dyn HostView) -> Vec<PathBuf> {
    policy
        .filesystem
        .volume_dirs
        .iter()
        .filter_map(|d| host.canonicalize(d))
        .collect()
}

/// The volume a canonical bind source is, if it is exactly
/// `<volume dir>/<name>/_data` with a name the engines could have made
/// (letters, digits, `_`, `-`, `.`; never `.` or `..`). A path deeper in a
/// volume, or the volume directory itself, is no volume: it is a bind.
pub fn classify(canonical: &Path, dirs: &[PathBuf]) -> Option<Volume> {
    shape(canonical).filter(|v| dirs.contains(&v.dir))
}

/// A path shaped like an engine volume in a directory that is not one of
/// `filesystem.volume_dirs`: `<…>/volumes/<name>/_data` (an engine on
/// another data-root). It is no volume, but its refusal says what it looks
/// like and which key would make it one.
pub fn looks_like(canonical: &Path) -> Option<Volume> {
    shape(canonical).filter(|v| v.dir.file_name().is_some_and(|n| n == "volumes"))
}

/// `<dir>/<name>/_data` with a name the engines could have made.
fn shape(canonical: &Path) -> Option<Volume> {
    if canonical.file_name()? != DATA_DIR {
        return None;
    }
    let volume = canonical.parent()?;
    let dir = volume.parent()?;
    let name = volume.file_name()?.to_str()?;
    if !container_id::is_valid(name) {
        return None;
    }
    Some(Volume {
        dir: dir.to_path_buf(),
        name: name.to_string(),
    })
}

/// What to do with a bind that [`classify`] found to be a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Allowed as this container's own volume, subject to its claim.
    Private,
    /// Volumes are off: judge it as an ordinary bind, and refuse it with
    /// [`off`] unless `filesystem.bind` allows its path.
    AsBind,
}

/// Judges a volume on the host: under `"private"`, `_data` must be a
/// directory on the volume directory's own mount.
pub fn judge(
    volume: &Volume,
    canonical: &Path,
    field: &str,
    policy: &Policy,
    host: &dyn HostView,
) -> Result<Judgement, Denial> {
    if policy.filesystem.volumes == VolumesMode::None {
        return Ok(Judgement::AsBind);
    }
    let refuse = |reason: String| Denial::new(RULE, field, canonical.display().to_string(), reason);
    let own = host.mount_point_of(&volume.dir);
    let data = host.mount_point_of(canonical);
    if own.is_none() || data != own {
        return Err(refuse(format!(
            "volume {:?} is a mount of its own, not a directory of {}: a local volume \
             with type, o or device options mounts a host path or device there, and is \
             refused (filesystem.volumes)",
            volume.name,
            volume.dir.display()
        )));
    }
    let is_dir = host.file_facts(canonical).is_some_and(|f| {
        f.mode & crate::host::FileFacts::TYPE_MASK == crate::host::FileFacts::DIRECTORY
    });
    if !is_dir {
        return Err(refuse(format!(
            "volume {:?}: {} is not a directory (filesystem.volumes)",
            volume.name,
            canonical.display()
        )));
    }
    Ok(Judgement::Private)
}

/// The refusal of a volume while `filesystem.volumes` is `"none"`.
pub fn off(volume: &Volume, canonical: &Path, field: &str) -> Denial {
    Denial::new(
        RULE,
        field,
        canonical.display().to_string(),
        format!(
            "volume {:?} is refused: this policy allows no volumes (set [filesystem] \
             volumes = \"private\" to give each container its own)",
            volume.name
        ),
    )
}

/// The refusal of what [`looks_like`] a volume of an unlisted directory.
pub fn unlisted(volume: &Volume, canonical: &Path, field: &str) -> Denial {
    Denial::new(
        RULE,
        field,
        canonical.display().to_string(),
        format!(
            "volume {:?} is refused: {} is not one of filesystem.volume_dirs (name the \
             engine's volume directory there, with [filesystem] volumes = \"private\", \
             to give each container its own)",
            volume.name,
            volume.dir.display()
        ),
    )
}

/// The decision from the claim ledger: `holder` is whoever holds the
/// volume's claim after this container tried to take it (this container
/// itself when the claim was free). Anyone else is refused.
pub fn judge_claim(
    volume: &Volume,
    field: &str,
    holder: &Holder,
    this: &Holder,
) -> Result<(), Denial> {
    if holder == this {
        return Ok(());
    }
    let root = if holder.runc_root == this.runc_root {
        String::new()
    } else {
        format!(" (runc root {})", holder.runc_root.display())
    };
    Err(Denial::new(
        RULE,
        field,
        volume.dir.join(volume.rest()).display().to_string(),
        format!(
            "volume {:?} belongs to container {}{root}, the first to use it: \
             filesystem.volumes = \"private\" gives a volume to one container only \
             (use a volume of this container's own, or a filesystem.bind directory \
             to share files)",
            volume.name, holder.id
        ),
    ))
}

/// The root directory of a volume as the stager found it on first use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreshRoot {
    pub uid: u32,
    pub gid: u32,
    /// No entries: the engine copied nothing of the image into it.
    pub empty: bool,
}

/// Who the root directory of a volume this container just claimed is
/// given to. Docker copies the image's directory (owner and mode) into a
/// new volume; with nothing to copy `_data` stays root's, which the user
/// the policy forced in place of the client's cannot write. So an empty,
/// root-owned root of a fresh claim goes to `process.user`; anything else
/// is left as the engine made it.
pub fn fresh_owner(policy: &Policy, root: FreshRoot) -> Option<(u32, u32)> {
    let forced = policy.process.forced_user()?;
    (root.uid == 0 && root.empty && (root.uid, root.gid) != forced).then_some(forced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{FakeHost, FileFacts};

    const DOCKER: &str = "/var/lib/docker/volumes";
    const PODMAN: &str = "/var/lib/containers/storage/volumes";

    fn dirs() -> Vec<PathBuf> {
        vec![PathBuf::from(DOCKER), PathBuf::from(PODMAN)]
    }

    fn private() -> Policy {
        let mut policy = Policy::default();
        policy.filesystem.volumes = VolumesMode::Private;
        policy
    }

    fn volume(dir: &str, name: &str) -> Volume {
        Volume {
            dir: PathBuf::from(dir),
            name: name.into(),
        }
    }

    #[test]
    fn exactly_name_slash_data_below_a_volume_dir_is_a_volume() {
        let anonymous = "4f1c0cbd8e0d6f3a1e0f2c7d9b8a6e5f4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a";
        for (path, expected) in [
            (
                format!("{DOCKER}/myvol/_data"),
                Some(volume(DOCKER, "myvol")),
            ),
            (
                format!("{DOCKER}/{anonymous}/_data"),
                Some(volume(DOCKER, anonymous)),
            ),
            (format!("{PODMAN}/pvol/_data"), Some(volume(PODMAN, "pvol"))),
            (
                format!("{DOCKER}/my.vol-1_x/_data"),
                Some(volume(DOCKER, "my.vol-1_x")),
            ),
            // Deeper, shallower, other names and other directories are binds.
            (format!("{DOCKER}/myvol/_data/sub"), None),
            (format!("{DOCKER}/myvol"), None),
            (format!("{DOCKER}/_data"), None),
            (format!("{DOCKER}/a/b/_data"), None),
            (format!("{DOCKER}/myvol/data"), None),
            ("/var/lib/docker/other/myvol/_data".into(), None),
            ("/srv/volumes/myvol/_data".into(), None),
            (format!("{DOCKER}/my vol/_data"), None),
            (format!("{DOCKER}/../_data"), None),
        ] {
            assert_eq!(classify(Path::new(&path), &dirs()), expected, "{path}");
        }
    }

    #[test]
    fn a_volume_of_an_unlisted_directory_only_looks_like_one() {
        let path = Path::new("/srv/docker/volumes/v1/_data");
        assert_eq!(classify(path, &dirs()), None);
        assert_eq!(looks_like(path), Some(volume("/srv/docker/volumes", "v1")));
        for other in [
            "/srv/docker/vols/v1/_data",
            "/srv/docker/volumes/v1/_data/x",
        ] {
            assert_eq!(looks_like(Path::new(other)), None, "{other}");
        }
        let denial = unlisted(&volume("/srv/docker/volumes", "v1"), path, "/m");
        assert_eq!(denial.rule, RULE);
        for word in [
            "volume \"v1\"",
            "/srv/docker/volumes is not one of filesystem.volume_dirs",
            "volumes = \"private\"",
        ] {
            assert!(denial.reason.contains(word), "{denial}");
        }
    }

    #[test]
    fn volumes_off_is_judged_as_a_bind_and_refused_naming_volume_and_key() {
        let v = volume(DOCKER, "myvol");
        let source = Path::new("/var/lib/docker/volumes/myvol/_data");
        let got = judge(
            &v,
            source,
            "/mounts/3/source",
            &Policy::default(),
            &FakeHost::new(),
        );
        assert_eq!(got, Ok(Judgement::AsBind));
        let denial = off(&v, source, "/mounts/3/source");
        assert_eq!(denial.rule, RULE);
        assert_eq!(denial.value, source.display().to_string());
        for word in ["volume \"myvol\"", "[filesystem] volumes = \"private\""] {
            assert!(denial.reason.contains(word), "{denial}");
        }
        assert!(!denial.reason.contains("bind"), "{denial}");
    }

    #[test]
    fn a_private_volume_must_be_a_directory_on_the_volume_dirs_mount() {
        let v = volume(DOCKER, "myvol");
        let source = PathBuf::from(format!("{DOCKER}/myvol/_data"));
        let mut host = FakeHost::new();
        assert_eq!(
            judge(&v, &source, "/m", &private(), &host),
            Ok(Judgement::Private)
        );
        // The volume directory may be a mount itself (a disk for /var/lib/docker).
        host.mount_points.insert(PathBuf::from("/var/lib/docker"));
        assert_eq!(
            judge(&v, &source, "/m", &private(), &host),
            Ok(Judgement::Private)
        );
        // `--opt type=none --opt o=bind --opt device=/etc`: _data is a mount.
        host.mount_points.insert(source.clone());
        let denial = judge(&v, &source, "/m", &private(), &host).unwrap_err();
        assert_eq!(denial.rule, RULE);
        for word in ["volume \"myvol\"", "mount of its own", "filesystem.volumes"] {
            assert!(denial.reason.contains(word), "{denial}");
        }
        // A mount of the volume itself (the name directory) is refused too.
        let mut host = FakeHost::new();
        host.mount_points
            .insert(PathBuf::from(format!("{DOCKER}/myvol")));
        assert!(judge(&v, &source, "/m", &private(), &host).is_err());
        // A file (or anything but a directory) at _data.
        let mut host = FakeHost::new();
        host.files.insert(
            source.clone(),
            FileFacts {
                dev: 1,
                ino: 7,
                uid: 0,
                mode: FileFacts::REGULAR | 0o644,
            },
        );
        let denial = judge(&v, &source, "/m", &private(), &host).unwrap_err();
        assert!(denial.reason.contains("not a directory"), "{denial}");
    }

    #[test]
    fn an_empty_root_owned_fresh_volume_goes_to_the_forced_user() {
        let mut policy = private();
        let root = FreshRoot {
            uid: 0,
            gid: 0,
            empty: true,
        };
        // No forced user: the client's user is the one that asked.
        assert_eq!(fresh_owner(&policy, root), None);
        policy.process.user = Some("1000:1000".into());
        assert_eq!(fresh_owner(&policy, root), Some((1000, 1000)));
        // The engine copied the image's directory in, or gave it an owner.
        let copied = FreshRoot {
            empty: false,
            ..root
        };
        assert_eq!(fresh_owner(&policy, copied), None);
        let owned = FreshRoot {
            uid: 1000,
            gid: 1000,
            empty: true,
        };
        assert_eq!(fresh_owner(&policy, owned), None);
    }

    #[test]
    fn the_claim_holder_alone_gets_the_volume() {
        let v = volume(DOCKER, "myvol");
        let root = PathBuf::from("/run/docker/runtime-runc/moby");
        let first = Holder {
            runc_root: root.clone(),
            id: "aaaa".into(),
        };
        assert_eq!(judge_claim(&v, "/m", &first, &first), Ok(()));
        let second = Holder {
            runc_root: root.clone(),
            id: "bbbb".into(),
        };
        let denial = judge_claim(&v, "/mounts/2/source", &first, &second).unwrap_err();
        assert_eq!(denial.rule, RULE);
        assert_eq!(denial.field, "/mounts/2/source");
        assert_eq!(denial.value, format!("{DOCKER}/myvol/_data"));
        for word in [
            "volume \"myvol\"",
            "container aaaa",
            "filesystem.volumes = \"private\"",
        ] {
            assert!(denial.reason.contains(word), "{denial}");
        }
        assert!(!denial.reason.contains("runc root"), "{denial}");
        // The same id under another runc root (another engine, another
        // containerd namespace) is another container.
        let elsewhere = Holder {
            runc_root: PathBuf::from("/run/containerd/runc/default"),
            id: "aaaa".into(),
        };
        let denial = judge_claim(&v, "/m", &first, &elsewhere).unwrap_err();
        assert!(denial.reason.contains("runc root /run/docker"), "{denial}");
    }
}
