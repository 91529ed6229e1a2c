//! `get_file`: the bytes of one regular file from an offset. The first
//! call of a download (offset 0, or any offset with no download of the
//! path under way) copies the file's data out of the engine's archive of
//! it to the host once ([`super::spool`]); every call answers from that
//! copy, so reading a file chunk by chunk moves it through the engine's
//! socket once.
//!
//! The engine reads as root; the file's header (its mode and owner) is
//! checked against the container's user before any of its data is kept.

use sandboxd_protocol::{FileChunk, SandboxError};
use tar::EntryType;

use super::super::Inner;
use super::resolve::components;
use super::scan::Piece;
use super::spool::{Spool, Spools};
use super::user::READ;
use super::Call;
use crate::provisioner::SandboxKey;

impl Inner {
    pub(in super::super) async fn get_file(
        &self,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError> {
        let call = self.file_call(key, "read", path).await?;
        let spools = &self.files.spools;
        let spool_key = (call.container.clone(), "file", path.to_string());
        let session = spools.session(&spool_key);
        let mut spool = session.state.lock().await;
        if offset == 0 || spool.is_none() {
            *spool = None;
            let copied = call.spool_file(spools, path).await;
            *spool = Some(copied.inspect_err(|_| spools.forget(&spool_key, &session))?);
        }
        let Some(copy) = spool.as_ref() else {
            return Err(SandboxError::Internal("a download lost its copy".into()));
        };
        let data = copy
            .read(offset, max)
            .await
            .map_err(|error| call.told.host(error))?;
        let chunk = FileChunk {
            offset,
            size: copy.size,
            eof: offset + data.len() as u64 >= copy.size,
            data,
        };
        session.touch();
        if chunk.eof {
            *spool = None;
            spools.forget(&spool_key, &session);
        }
        Ok(chunk)
    }
}

impl Call {
    /// The regular file at `path`, checked readable, copied to the host.
    async fn spool_file(&self, spools: &Spools, path: &str) -> Result<Spool, SandboxError> {
        let parts = components(path);
        let (name, parents) = parts
            .split_last()
            .ok_or_else(|| self.told.workspace_itself())?;
        let (dir, _) = self.directory(parents).await?;
        let (at, _) = self.follow(&dir, name).await?;
        let mut download = self.download(&at).await?;
        let head = self.first(&mut download).await?;
        match head.kind {
            EntryType::Regular | EntryType::Continuous => {}
            EntryType::Directory => return Err(self.told.is_dir()),
            _ => return Err(self.told.not_regular()),
        }
        if !self.user.may(head.mode, head.uid, head.gid, READ) {
            return Err(self.told.denied(&at));
        }
        let mut writer = spools.writer().map_err(|error| self.told.host(error))?;
        while writer.written() < head.size {
            let piece = download
                .piece()
                .await
                .map_err(|error| self.told.engine(error))?;
            let Piece::Data(bytes) = piece else { break };
            writer
                .write(&bytes)
                .await
                .map_err(|error| self.told.host(error))?;
        }
        if writer.written() != head.size {
            return Err(self
                .told
                .engine(super::super::engine::CallError::Malformed(format!(
                    "the archive of '{}' ends after {} of its {} bytes",
                    self.told.path.escape_debug(),
                    writer.written(),
                    head.size
                ))));
        }
        // The archive's end is not waited for: the download is dropped
        // here, which releases the container.
        drop(download);
        writer.finish().await.map_err(|error| self.told.host(error))
    }
}
