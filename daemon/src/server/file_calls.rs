//! The calls on files in sandboxes (`put_file` and the rest), as the
//! service's methods call them: authorize → validate → the tier → reply.

use sandboxd_protocol::files::MAX_FILE_CHUNK;
use sandboxd_protocol::validate_files;
use sandboxd_protocol::{FileChunk, FileList, FileStat, PutChunk, PutReport, SandboxError, Scope};

use super::chunk_turns::Turned;
use super::service::ConnectionService;
use crate::access::Call;
use crate::sandbox_key::SandboxKey;

impl ConnectionService {
    pub(super) async fn put_file_call(
        &self,
        scope: Scope,
        id: String,
        chunk: PutChunk,
    ) -> Result<PutReport, SandboxError> {
        let _timer = self.authorize(Call::PutFile)?;
        let key = super::service::key(scope, super::service::id_field(scope), id)?;
        validate_files::put_chunk(&chunk)?;
        let turned = self.turn("put_file", &key, &chunk.path, chunk.offset).await;
        let result = self.daemon.driver.put_file(&key, &chunk).await;
        turned.answered(result.as_ref().ok().map(|report| report.received), false);
        log_refusal("put_file", &key, &chunk.path, &result);
        if let Ok(report) = &result {
            if report.complete {
                tracing::info!(scope = %key.scope, id = %key.shown_id(), path = %chunk.path.escape_debug(), bytes = report.received, "file put into the sandbox");
            }
        }
        result
    }

    pub(super) async fn get_file_call(
        &self,
        scope: Scope,
        id: String,
        path: String,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError> {
        let _timer = self.authorize(Call::GetFile)?;
        let key = super::service::key(scope, super::service::id_field(scope), id)?;
        validate_files::file_path(&path)?;
        let max = max.clamp(1, MAX_FILE_CHUNK);
        let turned = self.turn("get_file", &key, &path, offset).await;
        let result = self.daemon.driver.get_file(&key, &path, offset, max).await;
        read_on(turned, offset, &result);
        log_refusal("get_file", &key, &path, &result);
        result
    }

    pub(super) async fn stat_file_call(
        &self,
        scope: Scope,
        id: String,
        path: String,
    ) -> Result<FileStat, SandboxError> {
        let _timer = self.authorize(Call::StatFile)?;
        let key = super::service::key(scope, super::service::id_field(scope), id)?;
        validate_files::path(&path)?;
        self.daemon.driver.stat_file(&key, &path).await
    }

    pub(super) async fn list_files_call(
        &self,
        scope: Scope,
        id: String,
        path: String,
    ) -> Result<FileList, SandboxError> {
        let _timer = self.authorize(Call::ListFiles)?;
        let key = super::service::key(scope, super::service::id_field(scope), id)?;
        validate_files::path(&path)?;
        self.daemon.driver.list_files(&key, &path).await
    }

    pub(super) async fn remove_file_call(
        &self,
        scope: Scope,
        id: String,
        path: String,
        recursive: bool,
    ) -> Result<(), SandboxError> {
        let _timer = self.authorize(Call::RemoveFile)?;
        let key = super::service::key(scope, super::service::id_field(scope), id)?;
        validate_files::file_path(&path)?;
        let result = self.daemon.driver.remove_file(&key, &path, recursive).await;
        log_refusal("remove_file", &key, &path, &result);
        if result.is_ok() {
            tracing::info!(scope = %key.scope, id = %key.shown_id(), path = %path.escape_debug(), recursive, "file removed from the sandbox");
        }
        result
    }
}

impl ConnectionService {
    pub(super) async fn put_tar_call(
        &self,
        scope: Scope,
        id: String,
        chunk: PutChunk,
    ) -> Result<PutReport, SandboxError> {
        let _timer = self.authorize(Call::PutTar)?;
        let key = super::service::key(scope, super::service::id_field(scope), id)?;
        validate_files::tar_chunk(&chunk)?;
        let turned = self.turn("put_tar", &key, &chunk.path, chunk.offset).await;
        let result = self.daemon.driver.put_tar(&key, &chunk).await;
        turned.answered(result.as_ref().ok().map(|report| report.received), false);
        log_refusal("put_tar", &key, &chunk.path, &result);
        if let Ok(report) = &result {
            if report.complete {
                tracing::info!(scope = %key.scope, id = %key.shown_id(), path = %chunk.path.escape_debug(), bytes = report.received, "archive unpacked into the sandbox");
            }
        }
        result
    }

    pub(super) async fn get_tar_call(
        &self,
        scope: Scope,
        id: String,
        path: String,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError> {
        let _timer = self.authorize(Call::GetTar)?;
        let key = super::service::key(scope, super::service::id_field(scope), id)?;
        validate_files::path(&path)?;
        let max = max.clamp(1, MAX_FILE_CHUNK);
        let turned = self.turn("get_tar", &key, &path, offset).await;
        let result = self.daemon.driver.get_tar(&key, &path, offset, max).await;
        read_on(turned, offset, &result);
        log_refusal("get_tar", &key, &path, &result);
        result
    }
}

impl ConnectionService {
    /// Waits until the chunk at `offset` of this connection's `call` of
    /// `path` in `key` is next (see [`super::chunk_turns`]); the chunk of
    /// an upload ahead can only be early.
    fn turn(
        &self,
        call: &'static str,
        key: &SandboxKey,
        path: &str,
        offset: u64,
    ) -> impl std::future::Future<Output = Turned> + '_ {
        self.turns.wait(
            (call, key.clone(), path.to_string()),
            offset,
            call.starts_with("put"),
        )
    }
}

/// Where a read's stream goes on after its answer.
fn read_on(turned: Turned, offset: u64, result: &Result<FileChunk, SandboxError>) {
    match result {
        Ok(chunk) => turned.answered(Some(offset + chunk.data.len() as u64), chunk.eof),
        Err(_) => turned.answered(None, false),
    }
}

/// One line for a refused file call that got past validation: a refusal
/// there is the sandbox's doing (a planted link) or the host's, worth
/// seeing in the log.
fn log_refusal<T>(call: &str, key: &SandboxKey, path: &str, result: &Result<T, SandboxError>) {
    if let Err(error) = result {
        tracing::warn!(call, scope = %key.scope, id = %key.shown_id(), path = %path.escape_debug(), kind = error.kind(), %error, "file call refused");
    }
}
