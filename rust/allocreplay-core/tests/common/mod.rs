//! Scratch paths for the integration tests, removed when dropped: nextest runs each test in a
//! process of its own, so a directory per process left behind would pile up in the temp dir.

use std::ops::Deref;
use std::path::{Path, PathBuf};

/// A path in a fresh directory of its own under the temp dir; the directory and what the test
/// wrote there go when the value is dropped.
pub struct Scratch {
    dir: PathBuf,
    path: PathBuf,
}

impl Scratch {
    fn fresh_dir(prefix: &str, name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("allocreplay-{prefix}-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The file `name` in a new empty directory (`allocreplay-PREFIX-PID-NAME`).
    #[allow(dead_code)] // each test crate compiles this module and uses one of the two
    pub fn file(prefix: &str, name: &str) -> Scratch {
        let dir = Self::fresh_dir(prefix, name);
        Scratch { path: dir.join(name), dir }
    }

    /// A new empty directory (`allocreplay-PREFIX-PID-NAME`).
    #[allow(dead_code)] // each test crate compiles this module and uses one of the two
    pub fn dir(prefix: &str, name: &str) -> Scratch {
        let dir = Self::fresh_dir(prefix, name);
        Scratch { path: dir.clone(), dir }
    }
}

impl Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A policy driven over device memory, the allocator of the upstream ports.
pub mod policy_driver;
