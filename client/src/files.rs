//! Files in and out of a sandbox (protocol 11, tar streams protocol 12;
//! see [`sandboxd_protocol::files`]): the calls as the daemon serves them.
//! `sandboxctl cp` sends and fetches whole files and trees with them,
//! chunk by chunk.

use sandboxd_protocol::{
    validate, validate_files, FileChunk, FileList, FileStat, PutChunk, PutReport, Scope,
};

use crate::calls::id_field;
use crate::client::Resend;
use crate::{ClientError, SandboxdClient};

impl SandboxdClient {
    /// One chunk of an upload of one file (at most
    /// [`sandboxd_protocol::files::MAX_FILE_CHUNK`] bytes). Never re-sent
    /// after a broken connection (the lost attempt may have been written):
    /// [`SandboxdClient::stat_file`] cannot see a partial upload, so start
    /// over at 0, or resume at the offset the daemon's refusal names.
    pub async fn put_file(
        &self,
        scope: Scope,
        id: &str,
        chunk: &PutChunk,
    ) -> Result<PutReport, ClientError> {
        self.put_file_owned(scope, id, chunk.clone()).await
    }

    /// As [`SandboxdClient::put_file`], the chunk moved into the request
    /// instead of copied (a MiB a call, on a stream's hot path).
    pub(crate) async fn put_file_owned(
        &self,
        scope: Scope,
        id: &str,
        chunk: PutChunk,
    ) -> Result<PutReport, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_files::put_chunk(&chunk)?;
        let chunk = SentOnce::new(chunk);
        self.call(Resend::Never, |rpc, ctx| {
            let (id, chunk) = (id.to_string(), chunk.take());
            async move { rpc.put_file(ctx, scope, id, chunk).await }
        })
        .await
    }

    /// At most `max` bytes of a file in the workspace, from `offset`.
    pub async fn get_file(
        &self,
        scope: Scope,
        id: &str,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_files::file_path(path)?;
        self.call(Resend::Once, |rpc, ctx| {
            let (id, path) = (id.to_string(), path.to_string());
            async move { rpc.get_file(ctx, scope, id, path, offset, max).await }
        })
        .await
    }

    /// One file's facts (a symlink is not followed).
    pub async fn stat_file(
        &self,
        scope: Scope,
        id: &str,
        path: &str,
    ) -> Result<FileStat, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_files::path(path)?;
        self.call(Resend::Once, |rpc, ctx| {
            let (id, path) = (id.to_string(), path.to_string());
            async move { rpc.stat_file(ctx, scope, id, path).await }
        })
        .await
    }

    /// A directory's entries (`""`: the workspace).
    pub async fn list_files(
        &self,
        scope: Scope,
        id: &str,
        path: &str,
    ) -> Result<FileList, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_files::path(path)?;
        self.call(Resend::Once, |rpc, ctx| {
            let (id, path) = (id.to_string(), path.to_string());
            async move { rpc.list_files(ctx, scope, id, path).await }
        })
        .await
    }

    /// Removes a file, a symlink, or a directory (its contents too when
    /// `recursive`). Not re-sent: a second try would report the file gone.
    pub async fn remove_file(
        &self,
        scope: Scope,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<(), ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_files::file_path(path)?;
        self.call(Resend::Never, |rpc, ctx| {
            let (id, path) = (id.to_string(), path.to_string());
            async move { rpc.remove_file(ctx, scope, id, path, recursive).await }
        })
        .await
    }

    /// One chunk of a tar stream unpacked into the directory `chunk.path`
    /// (`""`: the workspace) after its last chunk. Never re-sent, as
    /// [`SandboxdClient::put_file`].
    pub async fn put_tar(
        &self,
        scope: Scope,
        id: &str,
        chunk: &PutChunk,
    ) -> Result<PutReport, ClientError> {
        self.put_tar_owned(scope, id, chunk.clone()).await
    }

    /// As [`SandboxdClient::put_tar`], the chunk moved into the request
    /// instead of copied.
    pub(crate) async fn put_tar_owned(
        &self,
        scope: Scope,
        id: &str,
        chunk: PutChunk,
    ) -> Result<PutReport, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_files::tar_chunk(&chunk)?;
        let chunk = SentOnce::new(chunk);
        self.call(Resend::Never, |rpc, ctx| {
            let (id, chunk) = (id.to_string(), chunk.take());
            async move { rpc.put_tar(ctx, scope, id, chunk).await }
        })
        .await
    }

    /// At most `max` bytes of a tar stream of `path` (a file, or a
    /// directory with everything in it; `""`: the workspace), from
    /// `offset`.
    pub async fn get_tar(
        &self,
        scope: Scope,
        id: &str,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_files::path(path)?;
        self.call(Resend::Once, |rpc, ctx| {
            let (id, path) = (id.to_string(), path.to_string());
            async move { rpc.get_tar(ctx, scope, id, path, offset, max).await }
        })
        .await
    }
}

/// A chunk handed to a call made at most once ([`Resend::Never`]): the
/// call's closure takes it instead of copying it.
struct SentOnce(std::sync::Mutex<Option<PutChunk>>);

impl SentOnce {
    fn new(chunk: PutChunk) -> SentOnce {
        SentOnce(std::sync::Mutex::new(Some(chunk)))
    }

    fn take(&self) -> PutChunk {
        let mut chunk = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        chunk
            .take()
            .expect("a call under Resend::Never is made once")
    }
}
