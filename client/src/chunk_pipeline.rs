//! A few chunks of one stream in flight on the connection at once: a call
//! per chunk, acknowledged before the next was sent, idled the disk and
//! the socket for a round trip per MiB. The daemon takes one connection's
//! chunks of a stream in offset order (a chunk that arrives early waits
//! for those before it), so the calls and their resumable offsets are the
//! same as one at a time; only the waiting overlaps.

use std::future::Future;

use futures::stream::{FuturesOrdered, StreamExt};
use sandboxd_protocol::files::MAX_FILE_CHUNK;
use sandboxd_protocol::{FileChunk, PutChunk, PutReport};
use tokio::sync::mpsc;

use crate::{ClientError, TarStreamError};

/// Chunks in flight at once: enough to cover a round trip and the
/// daemon's writing, few enough that neither side holds much (the daemon
/// waits for at most this many MiB ahead).
pub const WINDOW: usize = 4;

/// Sends what `next` reads (a short piece, or none, ends it) as the
/// chunks of `path` with `mode`, with one piece of look-ahead so the last
/// is marked, by [`send`]; answers the bytes sent.
pub async fn put_all<F, P, Fut>(
    path: &str,
    mode: u32,
    mut next: F,
    put: P,
) -> Result<u64, TarStreamError>
where
    F: AsyncFnMut() -> Option<std::io::Result<Vec<u8>>>,
    P: Fn(PutChunk) -> Fut,
    Fut: Future<Output = Result<PutReport, ClientError>>,
{
    let (chunks, pending) = mpsc::channel(1);
    let reading = async move {
        let mut read = async || -> Result<Vec<u8>, TarStreamError> {
            match next().await {
                Some(read) => read.map_err(TarStreamError::Local),
                None => Ok(Vec::new()),
            }
        };
        let mut offset = 0;
        let mut current = read().await?;
        loop {
            let next = if current.len() == MAX_FILE_CHUNK as usize {
                read().await?
            } else {
                Vec::new()
            };
            let (length, last) = (current.len() as u64, next.is_empty());
            let chunk = PutChunk {
                path: path.to_string(),
                offset,
                data: current,
                last,
                mode,
            };
            // Closed: a call was refused, which is the answer.
            if chunks.send(chunk).await.is_err() || last {
                return Ok::<(), TarStreamError>(());
            }
            offset += length;
            current = next;
        }
    };
    let (read, sent) = tokio::join!(reading, send(pending, put));
    let sent = sent?;
    read?;
    match sent {
        Some(report) if report.complete => Ok(report.received),
        _ => Err(TarStreamError::Local(std::io::Error::other(
            "the stream ended before its last chunk was sent",
        ))),
    }
}

/// Sends the chunks `chunks` gives (the last one marked `last`) with
/// `put`, up to [`WINDOW`] at once once the first is answered; answers the last chunk's report. The
/// first refusal is the answer, and the calls after it are dropped.
pub async fn send<F, Fut>(
    mut chunks: mpsc::Receiver<PutChunk>,
    put: F,
) -> Result<Option<PutReport>, ClientError>
where
    F: Fn(PutChunk) -> Fut,
    Fut: Future<Output = Result<PutReport, ClientError>>,
{
    let mut flying = FuturesOrdered::new();
    let mut more = true;
    let mut report = None;
    while more || !flying.is_empty() {
        tokio::select! {
            biased;
            answer = flying.next(), if !flying.is_empty() => {
                let answer: PutReport = answer.expect("a call in flight")?;
                report = Some(answer);
            }
            // The first chunk goes alone: the daemon takes a stream's
            // first chunk on a connection as where it starts.
            chunk = chunks.recv(), if more && flying.len() < WINDOW && (report.is_some() || flying.is_empty()) => match chunk {
                Some(chunk) => flying.push_back(put(chunk)),
                None => more = false,
            },
        }
    }
    Ok(report)
}

/// Reads a stream with `get(offset)` into `write`, up to [`WINDOW`] calls
/// at once at the offsets full chunks of `max` bytes would reach; answers
/// the bytes read. `write` takes each chunk's bytes as they came, to keep
/// or hand on without a copy. A short chunk before the end drops the calls
/// after it and goes on from where it ended; `eof` ends it. A file's size
/// (`sized`) keeps calls from going past its end.
pub async fn fetch<F, Fut, W>(
    max: u32,
    sized: bool,
    get: F,
    mut write: W,
) -> Result<u64, TarStreamError>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = Result<FileChunk, ClientError>>,
    W: AsyncFnMut(Vec<u8>) -> std::io::Result<()>,
{
    let mut flying = FuturesOrdered::new();
    let (mut read, mut asked) = (0u64, 0u64);
    // A file's first call tells its size.
    let mut end = if sized { u64::from(max) } else { u64::MAX };
    loop {
        while flying.len() < WINDOW && (asked < end || flying.is_empty()) {
            flying.push_back(get(asked));
            asked += u64::from(max);
        }
        let chunk = flying.next().await.expect("a call in flight")?;
        let (length, eof, size) = (chunk.data.len(), chunk.eof, chunk.size);
        write(chunk.data).await.map_err(TarStreamError::Local)?;
        read += length as u64;
        if eof || length == 0 {
            return Ok(read);
        }
        if sized {
            end = size;
        }
        if length < max as usize {
            flying = FuturesOrdered::new();
            asked = read;
        }
    }
}
