//! Whole trees in and out of a sandbox as tar streams (protocol 12): a
//! stream read from any [`Read`] or [`AsyncRead`] sent with `put_tar` in
//! chunks of [`MAX_FILE_CHUNK`] bytes, and one fetched with `get_tar` into
//! any [`Write`] or read as it comes ([`TarReader`]). The daemon unpacks
//! and packs; these only move bytes, so a caller builds or reads the
//! archive with whatever tar writer it has.

use std::future::Future;
use std::io::{Read, Write};

use sandboxd_protocol::files::MAX_FILE_CHUNK;
use sandboxd_protocol::{PutChunk, Scope};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc::Receiver;
use tokio::task::JoinHandle;

use crate::chunk_pipeline;
use crate::tar_reader::{self, TarReader};
use crate::{ClientError, SandboxdClient};

/// Why a stream did not get through: the daemon's answer or this side's
/// reading or writing.
#[derive(Debug, thiserror::Error)]
pub enum TarStreamError {
    #[error(transparent)]
    Call(#[from] ClientError),
    #[error("{0}")]
    Local(std::io::Error),
}

impl SandboxdClient {
    /// Sends the tar stream `reader` gives to be unpacked into the
    /// directory `dir` (`""`: the workspace); answers the bytes sent. The
    /// reader is read on a blocking thread, one chunk at a time.
    pub async fn put_tar_from<R: Read + Send + 'static>(
        &self,
        scope: Scope,
        id: &str,
        dir: &str,
        reader: R,
    ) -> Result<u64, TarStreamError> {
        let (mut chunks, reading) = read_on_a_thread(reader);
        let sent = self
            .put_tar_pieces(scope, id, dir, async || chunks.recv().await)
            .await;
        drop(chunks);
        let _ = reading.await;
        sent
    }

    /// As [`SandboxdClient::put_tar_from`], from an [`AsyncRead`].
    pub async fn put_tar_from_async<R: AsyncRead + Unpin>(
        &self,
        scope: Scope,
        id: &str,
        dir: &str,
        mut reader: R,
    ) -> Result<u64, TarStreamError> {
        let read_chunk = async || {
            let mut chunk = Vec::with_capacity(MAX_FILE_CHUNK as usize);
            let read = (&mut reader)
                .take(u64::from(MAX_FILE_CHUNK))
                .read_to_end(&mut chunk)
                .await;
            Some(read.map(|_| chunk))
        };
        self.put_tar_pieces(scope, id, dir, read_chunk).await
    }

    /// Sends the chunks `next` gives (a short one, or none, ends the
    /// stream), a few in flight at once ([`chunk_pipeline`]).
    async fn put_tar_pieces<F>(
        &self,
        scope: Scope,
        id: &str,
        dir: &str,
        next: F,
    ) -> Result<u64, TarStreamError>
    where
        F: AsyncFnMut() -> Option<std::io::Result<Vec<u8>>>,
    {
        let put = |chunk: PutChunk| async move { self.put_tar_owned(scope, id, chunk).await };
        chunk_pipeline::put_all(dir, 0, next, put).await
    }

    /// Fetches the tar stream of `path` (a file, or a directory with all
    /// in it; `""`: the workspace) into `writer`; answers its bytes.
    pub async fn get_tar_into<W: Write>(
        &self,
        scope: Scope,
        id: &str,
        path: &str,
        writer: &mut W,
    ) -> Result<u64, TarStreamError> {
        let get = |offset| self.get_tar(scope, id, path, offset, MAX_FILE_CHUNK);
        let write = async |data: Vec<u8>| writer.write_all(&data);
        let read = chunk_pipeline::fetch(MAX_FILE_CHUNK, false, get, write).await?;
        writer.flush().map_err(TarStreamError::Local)?;
        Ok(read)
    }

    /// The tar stream of `path` (as [`SandboxdClient::get_tar_into`]) as a
    /// [`TarReader`] to unpack on another thread, and the fetching, to
    /// await meanwhile: it answers the bytes fetched, and ends early if the
    /// reader is dropped. A failed fetch fails the reader's next read.
    pub fn get_tar_reader<'a>(
        &'a self,
        scope: Scope,
        id: &'a str,
        path: &'a str,
    ) -> (
        TarReader,
        impl Future<Output = Result<u64, TarStreamError>> + 'a,
    ) {
        let (sender, chunks) = tokio::sync::mpsc::channel(tar_reader::WAITING);
        let fetching = async move {
            let get = |offset| self.get_tar(scope, id, path, offset, MAX_FILE_CHUNK);
            let hand_on = async |data: Vec<u8>| {
                let gone = |_| std::io::Error::from(std::io::ErrorKind::BrokenPipe);
                sender.send(Ok(data)).await.map_err(gone)
            };
            let fetched = chunk_pipeline::fetch(MAX_FILE_CHUNK, false, get, hand_on).await;
            if let Err(error) = &fetched {
                let _ = sender.send(Err(tar_reader::cut_short(error))).await;
            }
            fetched
        };
        (TarReader::new(chunks), fetching)
    }
}

/// Reads `reader` on a blocking thread, a chunk of [`MAX_FILE_CHUNK`]
/// bytes at a time (fewer only at its end), into the channel answered;
/// the thread ends at the end, a failure, or once the channel is dropped.
pub(crate) fn read_on_a_thread<R: Read + Send + 'static>(
    reader: R,
) -> (Receiver<std::io::Result<Vec<u8>>>, JoinHandle<()>) {
    let (pieces, chunks) = tokio::sync::mpsc::channel(2);
    let reading = tokio::task::spawn_blocking(move || {
        let mut reader = reader;
        loop {
            let mut chunk = Vec::with_capacity(MAX_FILE_CHUNK as usize);
            let read = (&mut reader)
                .take(u64::from(MAX_FILE_CHUNK))
                .read_to_end(&mut chunk);
            let end = matches!(read, Ok(0) | Err(_));
            if pieces.blocking_send(read.map(|_| chunk)).is_err() || end {
                return;
            }
        }
    });
    (chunks, reading)
}
