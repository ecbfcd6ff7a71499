//! Helpers shared by the unit tests of several modules.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// A unique path under the system temp dir, removed (with its contents) on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh path that does not exist yet, for code that must create it itself.
    pub fn fresh(tag: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "handnode-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        TempDir(path)
    }

    /// A fresh, empty, existing directory.
    pub fn new(tag: &str) -> Self {
        let dir = TempDir::fresh(tag);
        std::fs::create_dir_all(&dir.0).expect("create temp dir");
        dir
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl TempDir {
    /// Write `content` to `rel` inside the dir (parents created); returns the path.
    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().expect("a file inside the dir")).expect("mkdir");
        std::fs::write(&path, content).expect("write test file");
        path
    }
}

/// Re-check `done` every millisecond until it holds, or panic after a 10 s watchdog: for state
/// with no signal to wait on (a counter released after the work that signals has returned).
pub fn wait_for(done: impl Fn() -> bool, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "watchdog: waited 10 s for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
