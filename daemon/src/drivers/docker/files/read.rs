//! `stat_file` and `list_files`, from the headers of the archive the
//! engine sends of a path (its data passes unread). The engine reads as
//! root: a directory the container's user could not list is refused here,
//! by its header's mode and owner (see [`super::user`]).

use sandboxd_protocol::files::MAX_LIST_ENTRIES;
use sandboxd_protocol::{FileList, FileStat, FileType, SandboxError};
use tar::EntryType;

use super::super::Inner;
use super::archive::Download;
use super::resolve::components;
use super::scan::{Head, Piece};
use super::user::{READ, SEARCH};
use super::Call;
use crate::provisioner::SandboxKey;

impl Inner {
    pub(in super::super) async fn stat_file(
        &self,
        key: &SandboxKey,
        path: &str,
    ) -> Result<FileStat, SandboxError> {
        let call = self.file_call(key, "look at", path).await?;
        let parts = components(path);
        let Some((name, parents)) = parts.split_last() else {
            let (_, head) = call.directory(&[]).await?;
            return Ok(file_stat(".".into(), &head));
        };
        let (dir, _) = call.directory(parents).await?;
        let head = call
            .probe(&format!("{dir}/{name}"))
            .await?
            .ok_or_else(|| call.told.not_found())?;
        Ok(file_stat(name.to_string(), &head))
    }

    pub(in super::super) async fn list_files(
        &self,
        key: &SandboxKey,
        path: &str,
    ) -> Result<FileList, SandboxError> {
        let call = self.file_call(key, "list", path).await?;
        let (dir, head) = call.directory(&components(path)).await?;
        if !call.user.may(head.mode, head.uid, head.gid, READ | SEARCH) {
            return Err(call.told.denied(&dir));
        }
        let mut download = call.download(&dir).await?;
        let base = call.first(&mut download).await?.name;
        let mut entries = Vec::new();
        let mut truncated = false;
        loop {
            let piece = download
                .piece()
                .await
                .map_err(|error| call.told.engine(error))?;
            let head = match piece {
                Piece::Head(head) => head,
                Piece::Data(_) => continue,
                Piece::End => break,
            };
            let Some(name) = head
                .name
                .strip_prefix(&base)
                .and_then(|rest| rest.strip_prefix('/'))
            else {
                continue;
            };
            if name.contains('/') {
                continue;
            }
            if entries.len() == MAX_LIST_ENTRIES {
                truncated = true;
                break;
            }
            entries.push(file_stat(name.to_string(), &head));
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(FileList { entries, truncated })
    }
}

impl Call {
    pub async fn download(&self, at: &str) -> Result<Download, SandboxError> {
        Download::open(&self.engine, &self.container, at)
            .await
            .map_err(|error| self.told.engine(error))
    }

    /// The archive's first header: the path's own entry.
    pub async fn first(&self, download: &mut Download) -> Result<Head, SandboxError> {
        match download
            .piece()
            .await
            .map_err(|error| self.told.engine(error))?
        {
            Piece::Head(head) => Ok(head),
            _ => Err(self.told.not_found()),
        }
    }
}

fn file_stat(name: String, head: &Head) -> FileStat {
    let file_type = match head.kind {
        EntryType::Regular | EntryType::Continuous => FileType::File,
        EntryType::Directory => FileType::Dir,
        EntryType::Symlink => FileType::Symlink,
        _ => FileType::Other,
    };
    FileStat {
        name,
        file_type,
        size: if file_type == FileType::File {
            head.size
        } else {
            0
        },
        mode: head.mode,
        mtime_unix_ms: head.mtime.saturating_mul(1000),
    }
}
