//! The mount point every view mounts its workspace on: [`WORKSPACE`].
//!
//! A view's root is the host's, read-only, so the directory must exist on
//! the host before any view is built: the daemon makes it once, empty,
//! root's, `0755`, when it starts (an existing directory is used as it is:
//! inside a view the workspace covers whatever it holds; the host's stays
//! as it was). Where it cannot be had (a read-only root, a file or a
//! symbolic link there), views mount the workspace at its host path, as
//! before, and `status` says so.

use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

pub use super::mounts::WORKSPACE;

/// [`WORKSPACE`], made when missing; `Err` says why it cannot serve.
pub fn workspace_mount_point() -> Result<PathBuf, String> {
    let path = Path::new(WORKSPACE);
    match DirBuilder::new().mode(0o755).create(path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(format!("cannot make {WORKSPACE} on the host: {error}")),
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(path.to_path_buf()),
        Ok(_) => Err(format!("{WORKSPACE} on the host is not a directory")),
        Err(error) => Err(format!("{WORKSPACE} on the host: {error}")),
    }
}
