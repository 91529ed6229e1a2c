//! How a file call's refusals are worded: each names the path as the
//! caller gave it and the sandbox, as the process tier's do.

use sandboxd_protocol::{show_bytes, SandboxError};

use super::super::engine::CallError;
use super::super::spec::WORKSPACE;

/// What a failure is told with.
pub struct Told {
    pub verb: &'static str,
    pub path: String,
    pub what: String,
}

impl Told {
    fn path(&self) -> String {
        self.path.escape_debug().to_string()
    }

    pub fn not_found(&self) -> SandboxError {
        SandboxError::NotFound(format!(
            "'{}' does not exist in the workspace of {}",
            self.path(),
            self.what
        ))
    }

    /// `at` (a path in the container) is a link to `target`, outside.
    pub fn leads_out(&self, at: &str, target: &str) -> SandboxError {
        SandboxError::PermissionDenied(format!(
            "'{}' leads out of the workspace of {} (through a symlink: '{}' leads to {target}): refused",
            self.path(),
            self.what,
            shown(at)
        ))
    }

    /// The container's user lacks a permission on `at`.
    pub fn denied(&self, at: &str) -> SandboxError {
        let at = shown(at);
        let on = if at == self.path {
            String::new()
        } else {
            format!(" ('{at}' does not allow it)")
        };
        SandboxError::PermissionDenied(format!(
            "the sandbox's user may not {} '{}' in {}{on}",
            self.verb,
            self.path(),
            self.what
        ))
    }

    pub fn not_dir(&self) -> SandboxError {
        SandboxError::InvalidArgument(format!(
            "a part of '{}' in {} is not a directory",
            self.path(),
            self.what
        ))
    }

    pub fn is_dir(&self) -> SandboxError {
        SandboxError::InvalidArgument(format!("'{}' in {} is a directory", self.path(), self.what))
    }

    pub fn not_regular(&self) -> SandboxError {
        SandboxError::InvalidArgument(format!(
            "'{}' in {} is not a regular file: cannot {} it",
            self.path(),
            self.what,
            self.verb
        ))
    }

    pub fn workspace_itself(&self) -> SandboxError {
        SandboxError::InvalidArgument(format!(
            "path '{}' names the workspace of {}, not a file in it",
            self.path(),
            self.what
        ))
    }

    pub fn no_upload(&self) -> SandboxError {
        SandboxError::FailedPrecondition(format!(
            "no upload of '{}' is under way in {}: start it at offset 0",
            self.path(),
            self.what
        ))
    }

    pub fn resume(&self, held: u64) -> SandboxError {
        SandboxError::FailedPrecondition(format!(
            "the upload of '{}' in {} holds {held} bytes: resume at offset {held} (or start over at 0)",
            self.path(),
            self.what
        ))
    }

    pub fn over_disk_limit(&self, limit: u64) -> SandboxError {
        SandboxError::FailedPrecondition(format!(
            "writing '{}' would take the upload to {} past its disk limit ([limits] disk = {}); nothing of it was kept",
            self.path(),
            self.what,
            show_bytes(limit)
        ))
    }

    /// An entry of an archive put in, refused by its name.
    pub fn refused_entry(&self, name: &str, why: &str) -> SandboxError {
        SandboxError::InvalidArgument(format!(
            "the archive for '{}' in {} has an entry '{}' that is refused: {why}; nothing of the archive was unpacked",
            self.path(),
            self.what,
            name.escape_debug()
        ))
    }

    pub fn engine(&self, error: CallError) -> SandboxError {
        if let CallError::Refused { status: 404, .. } = error {
            return self.not_found();
        }
        error.into_sandbox_error(&format!(
            "cannot {} '{}' in {}",
            self.verb,
            self.path(),
            self.what
        ))
    }

    pub fn host(&self, error: std::io::Error) -> SandboxError {
        SandboxError::Internal(format!(
            "cannot {} '{}' in {}: the daemon's own copy failed: {error}",
            self.verb,
            self.path(),
            self.what
        ))
    }
}

/// A path in the container as the caller would name it: relative to the
/// workspace (`.` for the workspace itself), or as it is when outside.
pub fn shown(at: &str) -> String {
    match at.strip_prefix(WORKSPACE) {
        Some("") => ".".into(),
        Some(rest) if rest.starts_with('/') => rest[1..].escape_debug().to_string(),
        _ => at.escape_debug().to_string(),
    }
}

/// True for the workspace and what is beneath it.
pub fn inside(at: &str) -> bool {
    at.strip_prefix(WORKSPACE)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}
