//! Whether a path is a program this host could run: a leaf that the
//! runner's launch, the command and runsc lookups and `status` all ask.

use std::path::Path;

/// A regular file with an execute bit (for anyone: the runner may run as
/// another user than the daemon).
pub(in crate::drivers::local_process) fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}
