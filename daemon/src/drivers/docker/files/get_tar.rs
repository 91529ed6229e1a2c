//! `get_tar`: the engine's archive of a path, handed out in bounded
//! pieces: each call asks for the archive anew and reads up to its offset
//! (the engine has no range), as `get_file` does.
//!
//! Every header that passes is checked against the container's user (see
//! [`super::user`]): a directory it could not list or a file it could not
//! read stops the stream with a refusal naming it, before any of its data
//! is handed out.

use bytes::Bytes;
use sandboxd_protocol::{FileChunk, SandboxError};
use tar::EntryType;

use super::super::Inner;
use super::archive::{Download, RawError};
use super::resolve::components;
use super::scan::Head;
use super::user::{READ, SEARCH};
use super::Call;
use crate::provisioner::SandboxKey;

/// One archive, open for one call.
struct TarSession {
    download: Download,
    /// The container's path the archive is of.
    at: String,
    /// Bytes handed out so far.
    position: u64,
    /// Checked, not yet handed out.
    leftover: Bytes,
}

impl Inner {
    pub(in super::super) async fn get_tar(
        &self,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError> {
        let call = self.file_call(key, "read", path).await?;
        let at = call.tar_root(path).await?;
        // Opened anew for each call, and dropped before it answers (see
        // `get_file`: the engine holds the container's lock meanwhile).
        let session = call.start_at(&at, offset).await?;
        if session.position != offset {
            return Err(SandboxError::InvalidArgument(format!(
                "offset {offset} is past the end of the tar stream of '{}' in {} ({} bytes)",
                path.escape_debug(),
                call.told.what,
                session.position
            )));
        }
        call.serve(session, max as usize).await
    }
}

impl Call {
    /// The container path an archive of `path` is made of: a link at its
    /// end followed inside the workspace only, every directory on the way
    /// searchable.
    async fn tar_root(&self, path: &str) -> Result<String, SandboxError> {
        let parts = components(path);
        let Some((name, parents)) = parts.split_last() else {
            return Ok(self.directory(&[]).await?.0);
        };
        let (dir, _) = self.directory(parents).await?;
        Ok(self.follow(&dir, name).await?.0)
    }

    /// A new archive of `at`, read up to `offset`.
    async fn start_at(&self, at: &str, offset: u64) -> Result<TarSession, SandboxError> {
        let mut session = TarSession {
            download: self.download(at).await?,
            at: at.to_string(),
            position: 0,
            leftover: Bytes::new(),
        };
        while session.position < offset {
            let bytes = match self.next_checked(&mut session).await? {
                Some(bytes) => bytes,
                None => break,
            };
            let skipped = (offset - session.position).min(bytes.len() as u64);
            session.position += skipped;
            session.leftover = bytes.slice(skipped as usize..);
        }
        Ok(session)
    }

    /// The next checked bytes: what was left over, else the engine's next.
    async fn next_checked(&self, session: &mut TarSession) -> Result<Option<Bytes>, SandboxError> {
        if !session.leftover.is_empty() {
            return Ok(Some(std::mem::take(&mut session.leftover)));
        }
        let at = session.at.clone();
        let result = session
            .download
            .raw(|head| self.readable_entry(&at, head))
            .await;
        match result {
            Ok(bytes) => Ok(bytes),
            Err(RawError::Call(error)) => Err(self.told.engine(error)),
            Err(RawError::Refused(error)) => Err(error),
        }
    }

    /// Up to `max` bytes from where `session` stands.
    async fn serve(&self, mut session: TarSession, max: usize) -> Result<FileChunk, SandboxError> {
        let offset = session.position;
        let mut data = Vec::new();
        let mut ended = false;
        while data.len() < max {
            let Some(bytes) = self.next_checked(&mut session).await? else {
                ended = true;
                break;
            };
            let taken = (max - data.len()).min(bytes.len());
            data.extend_from_slice(&bytes[..taken]);
            session.leftover = bytes.slice(taken..);
        }
        Ok(FileChunk {
            offset,
            size: offset + data.len() as u64,
            eof: ended,
            data,
        })
    }

    /// The permission check the engine, reading as root, skips: a
    /// directory must let the container's user list and search it, a file
    /// must let it read it.
    fn readable_entry(&self, at: &str, head: &Head) -> Result<(), SandboxError> {
        let wanted = match head.kind {
            EntryType::Directory => READ | SEARCH,
            EntryType::Regular | EntryType::Continuous => READ,
            _ => return Ok(()),
        };
        if self.user.may(head.mode, head.uid, head.gid, wanted) {
            return Ok(());
        }
        let parent = at.rsplit_once('/').map_or("", |(parent, _)| parent);
        Err(self.told.denied(&format!("{parent}/{}", head.name)))
    }
}
