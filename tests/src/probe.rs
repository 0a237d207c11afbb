//! The static probe (`cargo probe-static`) as the e2e suites bind it into
//! containers: a copy under the worktree root, the default policy's one rw
//! bind root (bound :ro).

use std::path::PathBuf;

use crate::env::env;

/// What `cargo probe-static` builds; `VIBE_TEST_PROBE` names another.
const STATIC_PROBE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../target/x86_64-unknown-linux-gnu/release/vibe-shim-probe"
);

/// Where the probe is bound inside the container.
pub const PROBE: &str = "/vibe-shim-probe";

/// The static probe, copied for one run into a directory of its own under
/// the worktree root, as `vibe-shim-probe`; removed on drop.
pub fn probe_copy() -> tempfile::TempDir {
    // This checkout's build (the env's REPO may be another's).
    let built = std::env::var("VIBE_TEST_PROBE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(STATIC_PROBE));
    assert!(
        built.is_file(),
        "{} missing: build the static probe with `cargo probe-static` (tests/run.sh does)",
        built.display()
    );
    let dir = tempfile::Builder::new()
        .prefix("vibe-e2e-probe-")
        .tempdir_in(env().var("VIBE_TEST_WORKTREES"))
        .expect("a directory under the worktree root");
    std::fs::copy(&built, dir.path().join("vibe-shim-probe")).expect("copying the probe");
    dir
}
