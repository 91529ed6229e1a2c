//! `get_file`: the bytes of one regular file from an offset, out of the
//! engine's archive of it, streamed through (never held whole): what comes
//! before the offset is read and dropped as it arrives (the engine has no
//! range), so reading a file chunk by chunk moves it through the engine's
//! socket about n²/2 chunk-lengths in all.
//!
//! The engine reads as root; the file's header (its mode and owner) is
//! checked against the container's user before any of its data is kept.

use bytes::Bytes;
use sandboxd_protocol::{FileChunk, SandboxError};
use tar::EntryType;

use super::super::Inner;
use super::archive::Download;
use super::resolve::components;
use super::scan::Piece;
use super::user::READ;
use super::Call;
use crate::provisioner::SandboxKey;

/// One file's archive, open for one call.
struct FileSession {
    download: Download,
    /// The file's size, from its header.
    size: u64,
    /// Bytes of the file read (handed out or skipped) so far.
    position: u64,
    /// Read, not yet handed out.
    leftover: Bytes,
}

impl Inner {
    pub(in super::super) async fn get_file(
        &self,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError> {
        let call = self.file_call(key, "read", path).await?;
        let parts = components(path);
        let (name, parents) = parts
            .split_last()
            .ok_or_else(|| call.told.workspace_itself())?;
        let (dir, _) = call.directory(parents).await?;
        let (at, _) = call.follow(&dir, name).await?;
        // Opened anew for each call, and dropped before it answers: the
        // engine holds the container's lock while an archive of it is
        // open, so a download kept between calls would hold up every
        // other call on the container (its inspect too) until it ended.
        let mut session = call.open_file(&at, offset).await?;
        let data = call.take(&mut session, max as usize).await?;
        Ok(FileChunk {
            offset,
            size: session.size,
            eof: session.position >= session.size,
            data,
        })
    }
}

impl Call {
    /// The archive of the regular file at `at`, checked readable, read up
    /// to `offset`.
    async fn open_file(&self, at: &str, offset: u64) -> Result<FileSession, SandboxError> {
        let mut download = self.download(at).await?;
        let head = self.first(&mut download).await?;
        match head.kind {
            EntryType::Regular | EntryType::Continuous => {}
            EntryType::Directory => return Err(self.told.is_dir()),
            _ => return Err(self.told.not_regular()),
        }
        if !self.user.may(head.mode, head.uid, head.gid, READ) {
            return Err(self.told.denied(at));
        }
        let mut session = FileSession {
            download,
            size: head.size,
            position: 0,
            leftover: Bytes::new(),
        };
        while session.position < offset {
            let Some(bytes) = self.next_data(&mut session).await? else {
                break;
            };
            let skipped = (offset - session.position).min(bytes.len() as u64);
            session.position += skipped;
            session.leftover = bytes.slice(skipped as usize..);
        }
        // Past the end: nothing to hand out, at the offset asked for.
        session.position = session.position.max(offset);
        Ok(session)
    }

    /// The next bytes of the file's data; `None` at its end.
    async fn next_data(&self, session: &mut FileSession) -> Result<Option<Bytes>, SandboxError> {
        if !session.leftover.is_empty() {
            return Ok(Some(std::mem::take(&mut session.leftover)));
        }
        if session.position >= session.size {
            return Ok(None);
        }
        match session
            .download
            .piece()
            .await
            .map_err(|error| self.told.engine(error))?
        {
            Piece::Data(bytes) => Ok(Some(bytes)),
            Piece::Head(_) | Piece::End => Ok(None),
        }
    }

    /// Up to `max` bytes from where `session` stands.
    async fn take(&self, session: &mut FileSession, max: usize) -> Result<Vec<u8>, SandboxError> {
        let mut data = Vec::new();
        while data.len() < max {
            let Some(bytes) = self.next_data(session).await? else {
                break;
            };
            let taken = (max - data.len()).min(bytes.len());
            data.extend_from_slice(&bytes[..taken]);
            session.leftover = bytes.slice(taken..);
        }
        session.position += data.len() as u64;
        Ok(data)
    }
}
