//! `get_tar`: the engine's archive of a path, handed out in bounded
//! pieces. The first call of a download (offset 0, or any offset with no
//! download of the path under way) copies the archive to the host once
//! ([`super::spool`]), checking it as it passes; every call answers from
//! that copy.
//!
//! Every header that passes is checked against the container's user (see
//! [`super::user`]): a directory it could not list or a file it could not
//! read stops the copy with a refusal naming it, before any of its data is
//! handed out. Links are stored as links, as the engine writes them.

use sandboxd_protocol::{FileChunk, SandboxError};
use tar::EntryType;

use super::super::Inner;
use super::archive::RawError;
use super::resolve::components;
use super::scan::Head;
use super::spool::{Spool, Spools};
use super::user::{READ, SEARCH};
use super::Call;
use crate::provisioner::SandboxKey;

impl Inner {
    pub(in super::super) async fn get_tar(
        &self,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError> {
        let call = self.file_call(key, "read", path).await?;
        let spools = &self.files.spools;
        let spool_key = (call.container.clone(), "tar", path.to_string());
        let session = spools.session(&spool_key);
        let mut spool = session.state.lock().await;
        if offset == 0 || spool.is_none() {
            *spool = None;
            let copied = call.spool_tar(spools, path).await;
            *spool = Some(copied.inspect_err(|_| spools.forget(&spool_key, &session))?);
        }
        let Some(copy) = spool.as_ref() else {
            return Err(SandboxError::Internal("a download lost its copy".into()));
        };
        if offset > copy.size {
            let size = copy.size;
            *spool = None;
            spools.forget(&spool_key, &session);
            return Err(SandboxError::InvalidArgument(format!(
                "offset {offset} is past the end of the tar stream of '{}' in {} ({size} bytes)",
                path.escape_debug(),
                call.told.what,
            )));
        }
        let data = copy
            .read(offset, max)
            .await
            .map_err(|error| call.told.host(error))?;
        let chunk = FileChunk {
            offset,
            size: offset + data.len() as u64,
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

    /// The archive of `path`, every header checked, copied to the host.
    async fn spool_tar(&self, spools: &Spools, path: &str) -> Result<Spool, SandboxError> {
        let at = self.tar_root(path).await?;
        let mut download = self.download(&at).await?;
        let mut writer = spools.writer().map_err(|error| self.told.host(error))?;
        loop {
            let bytes = match download.raw(|head| self.readable_entry(&at, head)).await {
                Ok(Some(bytes)) => bytes,
                Ok(None) => break,
                Err(RawError::Call(error)) => return Err(self.told.engine(error)),
                Err(RawError::Refused(error)) => return Err(error),
            };
            writer
                .write(&bytes)
                .await
                .map_err(|error| self.told.host(error))?;
        }
        writer.finish().await.map_err(|error| self.told.host(error))
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
