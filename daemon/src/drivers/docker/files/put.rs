//! `put_file`: chunks kept on the host ([`super::partial`]), then one
//! `PUT` of a tar stream holding the one file, owned by the container's
//! user with the chunk's permission bits, streamed from the partial (never
//! held in memory). The engine unpacks it by writing a new file in place
//! of what was there: a link at the path is replaced, never written
//! through, and a directory there is refused.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use sandboxd_protocol::files::PERMISSION_BITS;
use sandboxd_protocol::{PutChunk, PutReport, SandboxError};
use tokio::io::AsyncReadExt;

use super::super::Inner;
use super::archive::{self, MODE_DIR};
use super::partial::{Kept, Partials, Refused};
use super::resolve::components;
use super::user::{ContainerUser, SEARCH, WRITE};
use super::Call;
use crate::provisioner::SandboxKey;

/// How much of the partial one piece of the upload's body carries.
const PIECE: u64 = 256 * 1024;

impl Inner {
    pub(in super::super) async fn put_file(
        &self,
        key: &SandboxKey,
        chunk: &PutChunk,
    ) -> Result<PutReport, SandboxError> {
        let call = self.file_call(key, "write", &chunk.path).await?;
        // Looked at when the upload starts (a bad path fails at once) and
        // again before it is placed.
        if chunk.offset == 0 {
            call.writable_parent(&chunk.path).await?;
        }
        let file = self
            .files
            .partials
            .file(&call.container, "file", &chunk.path);
        let kept = keep(&call, &self.files.partials, file, chunk, self.spec.disk).await?;
        if !chunk.last {
            return Ok(PutReport {
                received: kept.size,
                complete: false,
            });
        }
        let placed = place(&call, &chunk.path, &kept, chunk.mode).await;
        let _ = tokio::fs::remove_file(&kept.file).await;
        placed?;
        Ok(PutReport {
            received: kept.size,
            complete: true,
        })
    }
}

/// Keeps `chunk` in the partial `file`, told in the call's words.
pub async fn keep(
    call: &Call,
    partials: &Partials,
    file: PathBuf,
    chunk: &PutChunk,
    limit: u64,
) -> Result<Kept, SandboxError> {
    let (partials, chunk) = (partials.clone(), chunk.clone());
    let kept = tokio::task::spawn_blocking(move || partials.keep(file, &chunk, limit))
        .await
        .map_err(|error| SandboxError::Internal(format!("an upload's writer failed: {error}")))?;
    kept.map_err(|refused| match refused {
        Refused::Io(error) => call.told.host(error),
        Refused::NoUpload => call.told.no_upload(),
        Refused::Resume(held) => call.told.resume(held),
        Refused::OverDiskLimit => call.told.over_disk_limit(limit),
    })
}

impl Call {
    /// The directory `path`'s last component goes in, which the container's
    /// user must be able to write; and that component.
    pub async fn writable_parent<'a>(
        &self,
        path: &'a str,
    ) -> Result<(String, &'a str), SandboxError> {
        let parts = components(path);
        let (name, parents) = parts
            .split_last()
            .ok_or_else(|| self.told.workspace_itself())?;
        let (dir, head) = self.directory(parents).await?;
        if !self.user.may(head.mode, head.uid, head.gid, WRITE | SEARCH) {
            return Err(self.told.denied(&dir));
        }
        Ok((dir, name))
    }
}

/// One `PUT` of the partial as the file `path`.
async fn place(call: &Call, path: &str, kept: &Kept, mode: u32) -> Result<(), SandboxError> {
    let (dir, name) = call.writable_parent(path).await?;
    let there = archive::path_stat(&call.engine, &call.container, &format!("{dir}/{name}"))
        .await
        .map_err(|error| call.told.engine(error))?;
    if there.is_some_and(|stat| stat.file_mode & MODE_DIR != 0) {
        return Err(call.told.is_dir());
    }
    let header = file_header(name, kept.size, mode & PERMISSION_BITS, call.user)
        .map_err(|error| call.told.host(error))?;
    let body = one_file_tar(header, kept.file.clone(), kept.size);
    archive::upload(&call.engine, &call.container, &dir, body)
        .await
        .map_err(|error| call.told.engine(error))
}

/// The header (and a GNU long-name entry before it, for a long name) of
/// a regular file `name` of `size` bytes, owned by `user`.
fn file_header(name: &str, size: u64, mode: u32, user: ContainerUser) -> std::io::Result<Vec<u8>> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(size);
    header.set_mode(mode);
    header.set_uid(user.uid);
    header.set_gid(user.gid);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    header.set_mtime(now.as_secs());
    let mut builder = tar::Builder::new(Vec::new());
    // The data is not the builder's: it is streamed after these bytes.
    builder.append_data(&mut header, name, std::io::empty())?;
    Ok(builder.get_ref().clone())
}

/// `header`, the partial's bytes, the padding and the end marker.
fn one_file_tar(
    header: Vec<u8>,
    file: PathBuf,
    size: u64,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    let padding = (512 - size % 512) % 512;
    let trailer = vec![0; padding as usize + 1024];
    futures::stream::once(async move { Ok(Bytes::from(header)) })
        .chain(file_body(file, size))
        .chain(futures::stream::once(
            async move { Ok(Bytes::from(trailer)) },
        ))
}

/// The first `size` bytes of `file`, a piece at a time.
pub fn file_body(
    file: PathBuf,
    size: u64,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    let start: (Option<tokio::fs::File>, PathBuf, u64) = (None, file, size);
    futures::stream::try_unfold(start, |(open, file, left)| async move {
        if left == 0 {
            return Ok(None);
        }
        let mut handle = match open {
            Some(handle) => handle,
            None => tokio::fs::File::open(&file).await?,
        };
        let mut piece = vec![0; left.min(PIECE) as usize];
        handle.read_exact(&mut piece).await?;
        let left = left - piece.len() as u64;
        Ok(Some((Bytes::from(piece), (Some(handle), file, left))))
    })
}
