//! A scratch directory for unit tests, under the system temp dir and
//! removed on drop, so a test leaves nothing behind whether it passes or
//! panics.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `<temp>/sandboxd-<name>-<pid>-<n>`, fresh and empty.
pub struct TestDir(pub PathBuf);

impl TestDir {
    pub fn new(name: &str) -> TestDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("sandboxd-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("cannot make a test directory");
        TestDir(path)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
