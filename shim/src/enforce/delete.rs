//! `delete`: before runc deletes the container, vibe-shim removes its own
//! per-container directory (the private bundle and any bind source staged
//! in it).
//! runc then gets its arguments untouched. A container that is still
//! running and is not deleted with `--force` keeps its directory: runc
//! refuses that delete, and its later `exec`s still need the judged spec.

use std::ffi::OsString;
use std::path::Path;

use crate::runc_argv::{first_positional, scan_verb, DELETE_FLAGS};
use crate::sys::state_dir;

/// Removes the container's private directory when runc's delete will
/// remove the container. Errors are reported but never stop the delete: a
/// leftover directory is removed by the next create with the same id.
/// `egress_socket`: the policy's egress daemon.
pub fn cleanup(root: Option<&std::ffi::OsStr>, args: &[OsString], egress_socket: &Path) {
    let items = scan_verb(args, DELETE_FLAGS, false);
    let Some(id) = first_positional(&items).and_then(|id| id.to_str()) else {
        return;
    };
    let force = items.iter().any(|item| {
        matches!(item, crate::runc_argv::Item::Flag { name, value, .. }
            if name == "force" && value.as_deref().is_none_or(|v| v != "false"))
    });
    let root = state_dir::runc_root(root);
    if !force && is_running(&root, id) {
        return;
    }
    crate::timing::mark("scan");
    release(egress_socket, &root, id);
}

/// Everything vibe-shim keeps for a container that runc destroys: `delete`
/// before runc's, and the poststop hook when runc deletes it itself.
pub fn release(egress_socket: &Path, root: &Path, id: &str) {
    let Ok(dir) = state_dir::container_dir(root, id) else {
        return;
    };
    // Staged bind sources first: they are mounts inside the directory.
    crate::sys::stage::release_quietly(root, id);
    crate::timing::mark("stage");
    if let Err(e) = vibe_hooks::remove_host_rules(id) {
        eprintln!("vibe-shim: delete: network: {e}");
    }
    crate::timing::mark("host-rules");
    unregister_egress(egress_socket, root, id);
    crate::timing::mark("egress");
    // A running container's processes still hold its ids: its poststop
    // hook, after runc has killed them, frees the block. Most containers
    // hold none, so the record is looked for before runc's state is read.
    let blocks = crate::sys::userns_blocks::Blocks::default();
    if blocks.has_record(root, id) && !is_running(root, id) {
        let freed = blocks.free(root, id);
        if let Err(e) = freed {
            eprintln!("vibe-shim: delete: userns: {e}");
        }
    }
    crate::timing::mark("userns");
    if let Err(e) = state_dir::remove(&dir) {
        eprintln!("vibe-shim: delete: {e}");
    }
    if let Ok(record) = state_dir::assurance_record(root, id) {
        match std::fs::remove_file(&record) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => eprintln!("vibe-shim: delete: {}: {e}", record.display()),
        }
    }
    crate::timing::mark("state-dir");
    // The per-root level goes with its last container (ENOTEMPTY otherwise):
    // every create's id check lists the levels, so they must not pile up.
    if let Some(parent) = dir.parent() {
        let _ = std::fs::remove_dir(parent);
    }
}

/// Whether anything is left for the poststop hook to release: the
/// container's directory, or the user-namespace block that its running
/// processes held when `delete -f` released the rest. When runc deletes a
/// container itself (a foreground `run`, a failed create) the directory is
/// still there.
pub fn anything_left(root: &Path, id: &str) -> bool {
    let dir =
        state_dir::container_dir(root, id).is_ok_and(|dir| std::fs::symlink_metadata(dir).is_ok());
    dir || crate::sys::userns_blocks::Blocks::default().has_record(root, id)
}

/// Mode "proxy": the egress daemon stops serving the container (closing
/// its listeners, which pin the namespace). Best effort and quiet when no
/// daemon listens: its sweep drops containers whose process is gone.
fn unregister_egress(socket: &Path, root: &Path, id: &str) {
    use vibe_hooks::egress::client::ControlError;
    match vibe_hooks::egress::client::unregister(socket, root, id) {
        Ok(()) | Err(ControlError::Connect { .. }) => {}
        Err(e) => eprintln!("vibe-shim: delete: {e}"),
    }
}

/// Whether runc's state names a live init process (same pid, same start
/// time, as runc itself decides) that has been started: runc deletes a
/// created container (its exec fifo still there) without `--force`.
fn is_running(root: &Path, id: &str) -> bool {
    if root.join(id).join("exec.fifo").exists() {
        return false;
    }
    #[derive(serde::Deserialize)]
    struct State {
        init_process_pid: Option<i64>,
        init_process_start: Option<u64>,
    }
    let Ok(bytes) = std::fs::read(root.join(id).join("state.json")) else {
        return false;
    };
    let Ok(state) = serde_json::from_slice::<State>(&bytes) else {
        return false;
    };
    let (Some(pid), Some(start)) = (state.init_process_pid, state.init_process_start) else {
        return false;
    };
    process_start(pid) == Some(start)
}

fn process_start(pid: i64) -> Option<u64> {
    vibe_hooks::egress::records::process_start(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_read() {
        let me = i64::from(std::process::id());
        assert!(process_start(me).is_some());
        assert_eq!(process_start(-1), None);
    }

    #[test]
    fn running_means_same_pid_and_start() {
        let root = tempfile::tempdir().unwrap();
        let me = i64::from(std::process::id());
        let start = process_start(me).unwrap();
        std::fs::create_dir(root.path().join("c")).unwrap();
        let state = |s: u64| format!(r#"{{"init_process_pid":{me},"init_process_start":{s}}}"#);
        std::fs::write(root.path().join("c/state.json"), state(start)).unwrap();
        assert!(is_running(root.path(), "c"));
        std::fs::write(root.path().join("c/state.json"), state(start + 1)).unwrap();
        assert!(!is_running(root.path(), "c"));
        assert!(!is_running(root.path(), "missing"));
    }
}
