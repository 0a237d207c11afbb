//! Volumes of the `local` driver that are really host mounts. moby's local
//! driver takes the options `type`, `device`, `o` (and `size` on newer
//! engines) and, when any is set, mounts `device` with `mount(2)` as root on
//! the host: `type=none,o=bind,device=/etc` is a bind of /etc, and
//! `type=ext4,device=/dev/sda1` mounts a host disk. A tmpfs is fine; any
//! other mount is refused, binds too: the driver resolves `device`
//! (following symlinks) each time a container uses the volume, long after
//! this judgement, and dockerd copies the image's files into an empty
//! volume as root (owners and setuid bits kept). A container that writes
//! the allowed directory swaps `device` for a symlink in between, and
//! dockerd writes into any empty host directory. `--mount type=bind` has
//! neither step. A bind outside `[[filesystem.bind]]` is refused for that.

use serde_json::{Map, Value};

use super::host_path;
use crate::config::Policy;
use crate::decision::Denial;
use crate::host::HostView;
use crate::lang::text::one_line;

pub const RULE: &str = "authz-volume";

/// The option keys the local driver knows (exact, as it looks them up).
const LOCAL_OPTIONS: &[&str] = &["type", "device", "o", "size"];

/// Whether `driver` names the built-in local driver (empty = the default).
pub fn is_local(driver: &str) -> bool {
    driver.is_empty() || driver == "local"
}

/// Judges the driver options of a local volume; `field` locates them.
pub fn judge_local_options(
    options: &Map<String, Value>,
    field: &str,
    policy: &Policy,
    host: &dyn HostView,
) -> Result<(), Denial> {
    let get = |key: &str| -> Result<&str, Denial> {
        match options.get(key) {
            None | Some(Value::Null) => Ok(""),
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(other) => Err(Denial::new(
                RULE,
                format!("{field}/{key}"),
                other.to_string(),
                "volume option is not a string",
            )),
        }
    };
    for key in options.keys() {
        if !LOCAL_OPTIONS.contains(&key.as_str()) {
            return Err(Denial::new(
                RULE,
                format!("{field}/{key}"),
                key.as_str(),
                "unknown local volume option: vibe-shim judges only type, device, o and size",
            ));
        }
    }
    let kind = get("type")?;
    let device = get("device")?;
    let mount_opts = get("o")?;
    // moby/sys/mount matches each flag exactly: " bind" is fs data.
    let is_bind = mount_opts.split(',').any(|o| matches!(o, "bind" | "rbind"));
    if is_bind {
        let field = format!("{field}/device");
        host_path(device, &field, RULE, policy, host)?;
        return Err(Denial::new(
            RULE,
            field,
            one_line(device, 256),
            "local volumes that bind a host path are refused: the driver resolves \
             device again at each use, and dockerd copies image files into it as \
             root; use --mount type=bind",
        ));
    }
    if kind.is_empty() && device.is_empty() && mount_opts.is_empty() {
        // A plain directory under the data-root.
        return Ok(());
    }
    if kind == "tmpfs" {
        return Ok(());
    }
    Err(Denial::new(
        RULE,
        format!("{field}/type"),
        format!("type={kind} device={device} o={mount_opts}"),
        "a local volume that mounts a device or filesystem on the host: vibe-shim \
         cannot judge what it exposes (only binds under filesystem.bind and tmpfs)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BindAllow, BindMode};
    use crate::host::FakeHost;
    use serde_json::json;
    use std::path::PathBuf;

    fn policy() -> Policy {
        let mut p = Policy::default();
        p.filesystem.bind = vec![BindAllow {
            source: PathBuf::from("/srv/wt"),
            mode: BindMode::Rw,
        }];
        p
    }

    fn judge(opts: Value) -> Result<(), Denial> {
        let Value::Object(map) = opts else {
            panic!("not an object")
        };
        judge_local_options(&map, "/DriverOpts", &policy(), &FakeHost::new())
    }

    #[test]
    fn binds_are_refused_and_outside_ones_for_the_allowlist() {
        // Even an allowed directory: resolved again at each use, and
        // copied into (setuid bits kept) when empty.
        let d = judge(json!({"type": "none", "o": "bind", "device": "/srv/wt/a"})).unwrap_err();
        assert_eq!(d.field, "/DriverOpts/device");
        assert!(d.reason.contains("--mount type=bind"), "{d}");
        let d = judge(json!({"type": "none", "o": "ro,bind", "device": "/etc"})).unwrap_err();
        assert_eq!(d.field, "/DriverOpts/device");
        assert!(d.reason.contains("filesystem.bind"), "{d}");
        assert!(judge(json!({"o": "rbind", "device": "/"})).is_err());
    }

    #[test]
    fn tmpfs_and_plain_pass_devices_do_not() {
        judge(json!({})).unwrap();
        judge(json!({"type": "tmpfs", "device": "tmpfs", "o": "size=10m"})).unwrap();
        assert!(judge(json!({"type": "ext4", "device": "/dev/sda1"})).is_err());
        assert!(judge(json!({"type": "nfs", "o": "addr=10.0.0.1", "device": ":/x"})).is_err());
        assert!(judge(json!({"Type": "none"})).is_err());
        assert!(judge(json!({"type": 1})).is_err());
    }
}
