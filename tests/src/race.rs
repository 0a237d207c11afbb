//! The bind-source race: a host process that flips a path between a real
//! object and a symlink with renameat2(RENAME_EXCHANGE), and a marker file
//! in the host's `/` that must never be visible inside a container.

use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_uint};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

extern "C" {
    // glibc's wrapper; std already links glibc, so no crate is needed.
    fn renameat2(
        olddirfd: c_int,
        oldpath: *const c_char,
        newdirfd: c_int,
        newpath: *const c_char,
        flags: c_uint,
    ) -> c_int;
}
const AT_FDCWD: c_int = -100;
const RENAME_EXCHANGE: c_uint = 2;

/// A file in the host's `/`, removed on drop.
pub struct HostMarker(pub PathBuf);

impl HostMarker {
    pub fn new(tag: &str, content: &str) -> HostMarker {
        let path = PathBuf::from(format!("/vibe-binds-{tag}-{}", std::process::id()));
        std::fs::write(&path, content).expect("marker in /");
        HostMarker(path)
    }
    pub fn name(&self) -> String {
        self.0.file_name().unwrap().to_string_lossy().into_owned()
    }
}

impl Drop for HostMarker {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Swaps `a` and `b` with renameat2(RENAME_EXCHANGE) until dropped.
pub struct Flipper {
    stop: Arc<AtomicBool>,
    pub flips: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flipper {
    pub fn start(a: &Path, b: &Path) -> Flipper {
        let a = CString::new(a.as_os_str().as_bytes()).unwrap();
        let b = CString::new(b.as_os_str().as_bytes()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flips = Arc::new(AtomicU64::new(0));
        let (s, f) = (stop.clone(), flips.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                // SAFETY: two valid NUL-terminated paths.
                let rc = unsafe {
                    renameat2(AT_FDCWD, a.as_ptr(), AT_FDCWD, b.as_ptr(), RENAME_EXCHANGE)
                };
                assert_eq!(rc, 0, "renameat2: {}", std::io::Error::last_os_error());
                f.fetch_add(1, Ordering::Relaxed);
            }
        });
        Flipper {
            stop,
            flips,
            thread: Some(thread),
        }
    }
}

impl Drop for Flipper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
