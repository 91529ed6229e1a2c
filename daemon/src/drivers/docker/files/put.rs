//! `put_file`: chunks kept on the host ([`crate::drivers::upload_partials`]), then a tar
//! stream holding the one file, owned by the container's user with the
//! chunk's permission bits, streamed from the partial (never held in
//! memory) into a staging directory, and linked into place from there
//! ([`super::staging`]): a failed upload leaves the path as it was. The
//! engine places the link in place of what was there: a link at the path
//! is replaced, never written through, and a directory there is refused.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use sandboxd_protocol::files::PERMISSION_BITS;
use sandboxd_protocol::{PutChunk, PutReport, SandboxError};
use tokio::io::AsyncReadExt;

use super::super::Inner;
use super::archive::{self, MODE_DIR};
use super::resolve::components;
use super::staging::Stagings;
use super::user::{ContainerUser, SEARCH, WRITE};
use super::Call;
use crate::drivers::upload_partials::{Kept, Partials, Refused};
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
        let placed = place(&call, &self.files.stagings, &chunk.path, &kept, chunk.mode).await;
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
        Refused::OverLimit => call.told.over_disk_limit(limit),
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

/// The partial as the file `path`: staged, then linked into place (see
/// [`super::staging`]).
async fn place(
    call: &Call,
    stagings: &Stagings,
    path: &str,
    kept: &Kept,
    mode: u32,
) -> Result<(), SandboxError> {
    let (dir, name) = call.writable_parent(path).await?;
    let there = archive::path_stat(&call.engine, &call.container, &format!("{dir}/{name}"))
        .await
        .map_err(|error| call.told.engine(error))?;
    if there.is_some_and(|stat| stat.file_mode & MODE_DIR != 0) {
        return Err(call.told.is_dir());
    }
    let staging = call.begin_staging(stagings, &dir)?;
    let staged = format!("{}/{name}", staging.name);
    let mode = mode & PERMISSION_BITS;
    let headers = staged_headers(&staging.name, &staged, kept.size, mode, call.user);
    let placing = entry_header(tar::EntryType::Link, mode, call.user, |builder, header| {
        builder.append_link(header, name, &staged)
    });
    let (headers, placing) = match (headers, placing) {
        (Ok(headers), Ok(placing)) => (headers, placing),
        (Err(error), _) | (_, Err(error)) => {
            let _ = staging.remove(&call.engine).await;
            return Err(call.told.host(error));
        }
    };
    let data = one_file_tar(headers, kept.file.clone(), kept.size);
    let placing = futures::stream::once(async move { Ok(Bytes::from(placing)) });
    call.place_staged(staging, data, placing).await
}

/// The staging directory's entry, then the header of the regular file
/// `staged` in it of `size` bytes.
fn staged_headers(
    staging: &str,
    staged: &str,
    size: u64,
    mode: u32,
    user: ContainerUser,
) -> std::io::Result<Vec<u8>> {
    let mut headers = entry_header(tar::EntryType::Directory, 0o700, user, |builder, header| {
        builder.append_data(header, format!("{staging}/"), std::io::empty())
    })?;
    let file = entry_header(tar::EntryType::Regular, mode, user, |builder, header| {
        header.set_size(size);
        // The data is not the builder's: it is streamed after these bytes.
        builder.append_data(header, staged, std::io::empty())
    })?;
    headers.extend_from_slice(&file);
    Ok(headers)
}

/// The bytes `append` writes of one entry of `kind`, owned by `user`
/// (with a GNU long-name entry before it, for a long name).
fn entry_header(
    kind: tar::EntryType,
    mode: u32,
    user: ContainerUser,
    append: impl FnOnce(&mut tar::Builder<Vec<u8>>, &mut tar::Header) -> std::io::Result<()>,
) -> std::io::Result<Vec<u8>> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_size(0);
    header.set_mode(mode);
    header.set_uid(user.uid);
    header.set_gid(user.gid);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    header.set_mtime(now.as_secs());
    let mut builder = tar::Builder::new(Vec::new());
    append(&mut builder, &mut header)?;
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
