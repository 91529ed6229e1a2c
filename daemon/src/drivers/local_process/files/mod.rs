//! Files in and out of a process-tier sandbox's workspace (see
//! [`sandboxd_protocol::files`]): done as the sandbox's user
//! ([`as_owner`]), beneath its workspace ([`beneath`]), on a running
//! sandbox or a stopped one whose workspace is kept. An upload is charged
//! to `[limits] disk` before it is written: the file thread keeps
//! `CAP_SYS_RESOURCE`, which would let it write past a project quota.

mod as_owner;
mod beneath;
mod chunk_reader;
mod downloads;
mod ops;
mod tar_check;
mod tar_in;
mod tar_out;
mod tar_place;
mod tar_uploads;

pub use downloads::Downloads;
pub use tar_uploads::{remove_abandoned_puts, Uploads};

use std::path::PathBuf;
use std::sync::Arc;

use sandboxd_protocol::{
    show_bytes, FileChunk, FileList, FileStat, PutChunk, PutReport, SandboxError,
};

use super::users::identity::RunnerUsers;
use super::Inner;
use crate::sandbox_key::SandboxKey;
use as_owner::Owner;
use beneath::Beneath;

/// Why a file operation failed, before it is told in the caller's terms.
#[derive(Debug)]
pub enum Failure {
    Io(std::io::Error),
    /// The path names the workspace, where a file in it was needed.
    WorkspaceItself,
    /// A chunk past 0 with no upload under way.
    NoUpload,
    /// The upload under way holds this many bytes, not the chunk's offset.
    Resume(u64),
    NotRegular,
    OverDiskLimit,
    NotEmpty,
    TooDeep,
    /// An archive's entry refused by its name: what it is and why.
    BadEntry {
        name: String,
        why: String,
    },
    /// The stream put in is no whole tar archive.
    Corrupt(String),
    /// An entry of the archive and what stands in its way at its place.
    Conflict(String, &'static str),
    /// A failure at one entry below the call's path (its path in the
    /// workspace).
    AtEntry(String, std::io::Error),
}

impl From<std::io::Error> for Failure {
    fn from(error: std::io::Error) -> Self {
        Failure::Io(error)
    }
}

impl From<rustix::io::Errno> for Failure {
    fn from(error: rustix::io::Errno) -> Self {
        Failure::Io(error.into())
    }
}

/// The sandbox a file call works in: its workspace and its user.
struct FileTarget {
    workspace: PathBuf,
    owner: Option<Owner>,
    what: String,
}

impl Inner {
    fn file_target(&self, key: &SandboxKey) -> Result<FileTarget, SandboxError> {
        if self.stopping.load(std::sync::atomic::Ordering::Acquire) {
            return Err(SandboxError::Unavailable(
                "sandboxd is shutting down".into(),
            ));
        }
        let workspace = self.settings.workspace(key);
        if !workspace.is_dir() {
            return Err(SandboxError::FailedPrecondition(format!(
                "{} has no workspace on this host: ensure it first",
                key.what()
            )));
        }
        let owner = match &self.settings.identity.users {
            RunnerUsers::PerSandbox(_) => {
                let uid = self.uids.as_ref().and_then(|uids| uids.uid_of(key));
                let Some(uid) = uid else {
                    return Err(SandboxError::FailedPrecondition(format!(
                        "{} has no uid of its own now: ensure it first",
                        key.what()
                    )));
                };
                Some(Owner { uid, gid: uid })
            }
            RunnerUsers::Shared { uid, gid } => Some(Owner {
                uid: *uid,
                gid: *gid,
            }),
            RunnerUsers::DaemonsOwn => None,
        };
        Ok(FileTarget {
            workspace,
            owner,
            what: key.what(),
        })
    }

    /// Runs `work` on the workspace of `key`, as its user; failures told
    /// with `verb` and `path`.
    async fn on_workspace<T, F>(
        &self,
        key: &SandboxKey,
        verb: &'static str,
        path: &str,
        work: F,
    ) -> Result<T, SandboxError>
    where
        T: Send + 'static,
        F: FnOnce(&Beneath) -> Result<T, Failure> + Send + 'static,
    {
        let target = self.file_target(key)?;
        let told = Told {
            verb,
            path: path.to_string(),
            what: target.what.clone(),
            limit: self.disk_limit.bytes,
        };
        as_owner::run_as(target.owner, move || {
            let beneath = Beneath::open(&target.workspace).map_err(|error| {
                SandboxError::Unavailable(format!(
                    "cannot open the workspace of {}: {error}",
                    target.what
                ))
            })?;
            work(&beneath).map_err(|failure| told.error(failure))
        })
        .await
    }

    /// What `[limits] disk` still allows the workspace of `key` (`None`:
    /// no limit).
    async fn disk_room(&self, key: &SandboxKey) -> Result<Option<u64>, SandboxError> {
        match self.disk_limit.bytes {
            0 => Ok(None),
            limit => {
                let workspace = self.settings.workspace(key);
                let used = tokio::task::spawn_blocking(move || {
                    super::workspaces::disk::bytes_on_disk(&workspace)
                })
                .await
                .map_err(|error| SandboxError::Internal(format!("disk measure failed: {error}")))?;
                Ok(Some(limit.saturating_sub(used)))
            }
        }
    }

    pub(super) async fn put_file(
        self: &Arc<Self>,
        key: &SandboxKey,
        chunk: &PutChunk,
    ) -> Result<PutReport, SandboxError> {
        let room = self.disk_room(key).await?;
        let chunk = chunk.clone();
        let path = chunk.path.clone();
        self.on_workspace(key, "write", &path, move |beneath| {
            ops::put(beneath, &chunk, room)
        })
        .await
    }

    pub(super) async fn get_file(
        self: &Arc<Self>,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError> {
        let owned = path.to_string();
        self.on_workspace(key, "read", path, move |beneath| {
            ops::get(beneath, &owned, offset, max)
        })
        .await
    }

    pub(super) async fn stat_file(
        self: &Arc<Self>,
        key: &SandboxKey,
        path: &str,
    ) -> Result<FileStat, SandboxError> {
        let owned = path.to_string();
        self.on_workspace(key, "look at", path, move |beneath| {
            ops::stat(beneath, &owned)
        })
        .await
    }

    pub(super) async fn list_files(
        self: &Arc<Self>,
        key: &SandboxKey,
        path: &str,
    ) -> Result<FileList, SandboxError> {
        let owned = path.to_string();
        self.on_workspace(key, "list", path, move |beneath| ops::list(beneath, &owned))
            .await
    }

    pub(super) async fn remove_file(
        self: &Arc<Self>,
        key: &SandboxKey,
        path: &str,
        recursive: bool,
    ) -> Result<(), SandboxError> {
        let owned = path.to_string();
        self.on_workspace(key, "remove", path, move |beneath| {
            ops::remove(beneath, &owned, recursive)
        })
        .await
    }

    pub(super) async fn put_tar(
        self: &Arc<Self>,
        key: &SandboxKey,
        chunk: &PutChunk,
    ) -> Result<PutReport, SandboxError> {
        let target = self.file_target(key)?;
        let told = Told {
            verb: "write",
            path: chunk.path.clone(),
            what: target.what,
            limit: self.disk_limit.bytes,
        };
        let target = tar_uploads::Target {
            owner: target.owner,
            workspace: target.workspace,
            told,
        };
        let room = self.disk_room(key);
        self.tar_uploads.put(target, chunk.clone(), room).await
    }

    pub(super) async fn get_tar(
        self: &Arc<Self>,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError> {
        let target = self.file_target(key)?;
        let told = Told {
            verb: "read",
            path: path.to_string(),
            what: target.what.clone(),
            limit: self.disk_limit.bytes,
        };
        let source = downloads::Source {
            owner: target.owner,
            workspace: target.workspace,
            path: path.to_string(),
            told,
        };
        self.tar_downloads.read(source, offset, max).await
    }
}

/// What a failure is told with.
#[derive(Clone)]
pub struct Told {
    verb: &'static str,
    path: String,
    what: String,
    limit: u64,
}

impl Told {
    fn error(&self, failure: Failure) -> SandboxError {
        let Told {
            verb, path, what, ..
        } = self;
        let path = path.escape_debug();
        match failure {
            Failure::Io(error) => self.io_error(error),
            Failure::WorkspaceItself => SandboxError::InvalidArgument(format!(
                "path '{path}' names the workspace of {what}, not a file in it"
            )),
            Failure::NoUpload => SandboxError::FailedPrecondition(format!(
                "no upload of '{path}' is under way in {what}: start it at offset 0"
            )),
            Failure::Resume(held) => SandboxError::FailedPrecondition(format!(
                "the upload of '{path}' in {what} holds {held} bytes: resume at offset {held} (or start over at 0)"
            )),
            Failure::NotRegular => SandboxError::InvalidArgument(format!(
                "'{path}' in {what} is not a regular file: cannot {verb} it"
            )),
            Failure::OverDiskLimit => SandboxError::FailedPrecondition(format!(
                "writing '{path}' would take the workspace of {what} past its disk limit ([limits] disk = {}); nothing of it was kept",
                show_bytes(self.limit)
            )),
            Failure::NotEmpty => SandboxError::FailedPrecondition(format!(
                "'{path}' in {what} is a directory that is not empty: remove it recursively"
            )),
            Failure::TooDeep => SandboxError::FailedPrecondition(format!(
                "'{path}' in {what} is nested too deep to {verb}"
            )),
            Failure::BadEntry { name, why } => SandboxError::InvalidArgument(format!(
                "the archive for '{path}' in {what} has an entry '{name}' that is refused: {why}; nothing of the archive was kept"
            )),
            Failure::Corrupt(why) => SandboxError::InvalidArgument(format!(
                "the archive for '{path}' in {what} is not a whole tar stream: {why}; nothing of it was kept"
            )),
            Failure::Conflict(name, why) => SandboxError::FailedPrecondition(format!(
                "cannot unpack '{name}' into '{path}' in {what}: {why}; nothing of the archive was kept"
            )),
            Failure::AtEntry(name, error) => {
                let below = Told {
                    path: name,
                    ..self.clone()
                };
                below.io_error(error)
            }
        }
    }

    fn io_error(&self, error: std::io::Error) -> SandboxError {
        let Told {
            verb, path, what, ..
        } = self;
        let path = path.escape_debug();
        match error.raw_os_error().unwrap_or(0) {
            libc::ENOENT => SandboxError::NotFound(format!(
                "'{path}' does not exist in the workspace of {what}"
            )),
            libc::EXDEV => SandboxError::PermissionDenied(format!(
                "'{path}' leads out of the workspace of {what} (through a symlink or a mount): refused"
            )),
            libc::ELOOP => SandboxError::PermissionDenied(format!(
                "'{path}' in {what} is a symlink the daemon does not {verb} through: refused"
            )),
            libc::EACCES | libc::EPERM => SandboxError::PermissionDenied(format!(
                "the sandbox's user may not {verb} '{path}' in {what}"
            )),
            libc::ENOTDIR => SandboxError::InvalidArgument(format!(
                "a part of '{path}' in {what} is not a directory"
            )),
            libc::EISDIR => {
                SandboxError::InvalidArgument(format!("'{path}' in {what} is a directory"))
            }
            libc::EDQUOT | libc::ENOSPC => SandboxError::FailedPrecondition(format!(
                "no room to {verb} '{path}' in {what}: {error}"
            )),
            _ => SandboxError::Internal(format!("cannot {verb} '{path}' in {what}: {error}")),
        }
    }
}
