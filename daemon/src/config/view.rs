//! `[view]`: what a sandbox sees of the host's file system under
//! `isolation = "full"`.

use std::path::{Path, PathBuf};

use anyhow::bail;
use serde::Deserialize;

use super::values::deserialize_optional_memory;

/// The `[view]` table: what a sandbox sees of the host's file system under
/// `isolation = "full"`, beyond the defaults (the system read-only; `/root`,
/// `/home`, `/run/user`, the state and socket directories hidden; private
/// `/tmp`, `/var/tmp` and `/dev/shm`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ViewConfig {
    /// Visible read-only, even under a hidden path (a toolchain in `/root`).
    pub read_only: Vec<PathBuf>,
    /// Writable (a shared cache), even under a hidden path.
    pub read_write: Vec<PathBuf>,
    /// Out of sight: an empty read-only directory (or, over a file,
    /// `/dev/null` on a `nodev` mount, which cannot be opened).
    pub hidden: Vec<PathBuf>,
    /// The size of each private tmpfs (`/tmp`, `/var/tmp`, `/dev/shm`);
    /// default `[limits] memory` (or 2 GiB when that is unlimited). Their
    /// pages are charged to the sandbox's memory limit either way.
    #[serde(deserialize_with = "deserialize_optional_memory")]
    pub tmp_size: Option<u64>,
}

impl ViewConfig {
    /// The tmpfs size when `[limits] memory` is 0 (unlimited).
    const UNLIMITED_MEMORY_TMP_SIZE: u64 = 2 * 1024 * 1024 * 1024;
    /// The smallest tmpfs size accepted (1 MiB).
    const MIN_TMP_SIZE: u64 = 1024 * 1024;

    /// Each private tmpfs's size in bytes, given the memory limit.
    pub fn tmp_size(&self, memory_limit: u64) -> u64 {
        self.tmp_size.unwrap_or(if memory_limit == 0 {
            Self::UNLIMITED_MEMORY_TMP_SIZE
        } else {
            memory_limit
        })
    }

    /// Every path must be absolute, plain (no `.` or `..`), not `/`, and
    /// exist; the size at least 1 MiB.
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        for (key, paths) in [
            ("read_only", &self.read_only),
            ("read_write", &self.read_write),
            ("hidden", &self.hidden),
        ] {
            for path in paths {
                validate_view_path(key, path)?;
            }
        }
        if let Some(size) = self.tmp_size {
            if size < Self::MIN_TMP_SIZE {
                bail!("[view] tmp_size {size} bytes is below the minimum of 1 MiB");
            }
        }
        Ok(())
    }
}

/// One `[view]` path: absolute, plain, not `/`, existing.
fn validate_view_path(key: &str, path: &Path) -> anyhow::Result<()> {
    use std::path::Component;
    if !path.is_absolute() {
        bail!("[view] {key} path '{}' must be absolute", path.display());
    }
    if path
        .components()
        .any(|part| matches!(part, Component::CurDir | Component::ParentDir))
    {
        bail!(
            "[view] {key} path '{}' must not contain '.' or '..'",
            path.display()
        );
    }
    if path.parent().is_none() {
        bail!("[view] {key} path '/' is not allowed: name a directory or file below it");
    }
    if let Err(error) = std::fs::symlink_metadata(path) {
        bail!("[view] {key} path '{}': {error}", path.display());
    }
    Ok(())
}
