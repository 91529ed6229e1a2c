//! `get_tar`'s download sessions: a tar stream is made once per download,
//! not once per chunk. A session per (workspace, path) holds a thread with
//! the sandbox's user ([`super::as_owner`]) writing the stream
//! ([`super::tar_out`]) into a bounded channel, so sequential calls read it
//! in O(n) with at most [`PIECES`] pieces of [`PIECE`] bytes held. A call
//! at the session's position reads on; one further ahead skips to it; one
//! behind starts the stream over and skips to it (the stream is the same
//! bytes for an unchanged tree). A session ends at the stream's end, on a
//! failure, or after [`IDLE`] without a call: its channel is dropped and
//! its thread ends at its next write. At most [`MAX_SESSIONS`] are kept.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use sandboxd_protocol::{FileChunk, SandboxError};
use tokio::sync::mpsc;

use super::as_owner::{self, Owner};
use super::beneath::Beneath;
use super::{tar_out, Told};
use crate::drivers::idle_sessions::IdleSessions;

/// A session without a call for this long ends.
pub const IDLE: Duration = Duration::from_secs(60);
/// The stream moves in pieces of this many bytes…
const PIECE: usize = 256 * 1024;
/// …at most this many of them waiting in the channel.
const PIECES: usize = 8;
/// At most this many sessions at once (a thread and up to 2 MiB each):
/// a new one past it ends the one unused longest.
const MAX_SESSIONS: usize = 64;

type Piece = Result<Vec<u8>, SandboxError>;
type Key = (PathBuf, String);

/// The download sessions of a daemon.
pub struct Downloads {
    sessions: IdleSessions<Key, Stream>,
}

impl Default for Downloads {
    fn default() -> Self {
        Downloads {
            sessions: IdleSessions::new(IDLE, MAX_SESSIONS),
        }
    }
}

/// What a stream is made of: whose, where, and how failures are told.
pub struct Source {
    pub owner: Option<Owner>,
    pub workspace: PathBuf,
    pub path: String,
    pub told: Told,
}

#[derive(Default)]
struct Stream {
    pieces: Option<mpsc::Receiver<Piece>>,
    pending: Vec<u8>,
    /// How much of `pending` was read.
    at: usize,
    /// Bytes of the stream read or skipped: where `pending[at]` is.
    position: u64,
}

impl Downloads {
    /// At most `max` bytes of the stream of `source` from `offset`.
    pub async fn read(
        &self,
        source: Source,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError> {
        let key = (source.workspace.clone(), source.path.clone());
        let session = self.sessions.session(&key);
        let mut stream = session.state.lock().await;
        session.touch();
        let result = match stream.pieces.is_none() || offset < stream.position {
            true => Stream::start(&source).map(|started| *stream = started),
            false => Ok(()),
        };
        let result = match result {
            Ok(()) => stream.read(offset, max).await,
            Err(error) => Err(error),
        };
        session.touch();
        if result.as_ref().map_or(true, |chunk| chunk.eof) {
            *stream = Stream::default();
            drop(stream);
            self.sessions.forget(&key, &session);
        }
        result
    }
}

impl Stream {
    /// A new stream of `source`, made on a thread of its own.
    fn start(source: &Source) -> Result<Stream, SandboxError> {
        let (sender, pieces) = mpsc::channel(PIECES);
        let (owner, workspace, path) =
            (source.owner, source.workspace.clone(), source.path.clone());
        let told = source.told.clone();
        std::thread::Builder::new()
            .name("sandboxd-tar-out".into())
            .spawn(move || {
                let writer = PieceWriter {
                    sender: sender.clone(),
                    piece: Vec::with_capacity(PIECE),
                };
                let made = generate(owner, &workspace, &path, writer, &told);
                if let Err(error) = made {
                    let _ = sender.blocking_send(Err(error));
                }
            })
            .map_err(|error| {
                SandboxError::Unavailable(format!("cannot start a file thread: {error}"))
            })?;
        Ok(Stream {
            pieces: Some(pieces),
            ..Stream::default()
        })
    }

    /// Makes sure a byte is pending; false at the stream's end.
    async fn fill(&mut self) -> Result<bool, SandboxError> {
        if self.at < self.pending.len() {
            return Ok(true);
        }
        let Some(pieces) = self.pieces.as_mut() else {
            return Ok(false);
        };
        match pieces.recv().await {
            Some(Ok(piece)) => {
                self.pending = piece;
                self.at = 0;
                Ok(true)
            }
            Some(Err(error)) => Err(error),
            None => Ok(false),
        }
    }

    async fn read(&mut self, offset: u64, max: u32) -> Result<FileChunk, SandboxError> {
        while self.position < offset && self.fill().await? {
            let skip = (self.pending.len() - self.at).min((offset - self.position) as usize);
            self.at += skip;
            self.position += skip as u64;
        }
        let max = max as usize;
        let mut data = Vec::new();
        while data.len() < max && self.fill().await? {
            let take = (self.pending.len() - self.at).min(max - data.len());
            data.extend_from_slice(&self.pending[self.at..self.at + take]);
            self.at += take;
            self.position += take as u64;
        }
        // Waits for the next piece, which the next call needs anyway, so
        // the last bytes come with `eof` set.
        let eof = !self.fill().await?;
        Ok(FileChunk {
            data,
            offset: offset.min(self.position),
            size: self.position,
            eof,
        })
    }
}

/// The stream itself, on the generating thread.
fn generate(
    owner: Option<Owner>,
    workspace: &std::path::Path,
    path: &str,
    writer: PieceWriter,
    told: &Told,
) -> Result<(), SandboxError> {
    if let Some(owner) = owner {
        as_owner::become_owner(owner)?;
    }
    let beneath = Beneath::open(workspace).map_err(|error| {
        SandboxError::Unavailable(format!(
            "cannot open the workspace of {}: {error}",
            told.what
        ))
    })?;
    let mut writer =
        tar_out::write_tree(&beneath, path, writer).map_err(|failure| told.error(failure))?;
    writer.send().map_err(|error| told.error(error.into()))
}

/// Cuts what is written into pieces for the channel; fails once nobody
/// reads it (the session ended), which ends the thread.
struct PieceWriter {
    sender: mpsc::Sender<Piece>,
    piece: Vec<u8>,
}

impl PieceWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.piece.is_empty() {
            return Ok(());
        }
        let piece = std::mem::replace(&mut self.piece, Vec::with_capacity(PIECE));
        self.sender
            .blocking_send(Ok(piece))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }
}

impl Write for PieceWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let take = bytes.len().min(PIECE - self.piece.len());
        self.piece.extend_from_slice(&bytes[..take]);
        if self.piece.len() == PIECE {
            self.send()?;
        }
        Ok(take)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
