//! `get_tar`'s download sessions: a tar stream is made once per download,
//! not once per chunk. A session per (workspace, path) holds a thread with
//! the sandbox's user ([`super::as_owner`]) writing the stream
//! ([`super::tar_out`]) into a bounded channel, so sequential calls read it
//! in O(n) with at most [`PIECES`] pieces of [`PIECE`] bytes held. A piece
//! is a chunk's size, so a call at a piece's start takes it whole, and a
//! file's bytes are read straight into the piece: each byte is copied
//! once on its way from the file to the reply. A call
//! at the session's position reads on; one further ahead skips to it; one
//! behind starts the stream over and skips to it (the stream is the same
//! bytes for an unchanged tree). A session ends at the stream's end, on a
//! failure, or after [`IDLE`] without a call: its channel is dropped and
//! its thread ends at its next write. At most [`MAX_SESSIONS`] are kept.

use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use sandboxd_protocol::files::MAX_FILE_CHUNK;
use sandboxd_protocol::{FileChunk, SandboxError};
use tokio::sync::mpsc;

use super::as_owner::{self, Owner};
use super::beneath::Beneath;
use super::tar_out::{self, Sink};
use super::Told;
use crate::drivers::idle_sessions::IdleSessions;

/// A session without a call for this long ends.
pub const IDLE: Duration = Duration::from_secs(60);
/// The stream moves in pieces of this many bytes (a whole chunk)…
const PIECE: usize = MAX_FILE_CHUNK as usize;
/// …at most this many of them waiting in the channel.
const PIECES: usize = 2;
/// At most this many sessions at once (a thread and up to 4 MiB each:
/// the pieces waiting, the one filling and the one read): a new one past
/// it ends the one unused longest.
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
        if self.fill().await? && self.at == 0 && self.pending.len() <= max {
            // A whole piece: handed on as it is.
            data = std::mem::take(&mut self.pending);
            self.position += data.len() as u64;
        }
        while data.len() < max && self.fill().await? {
            if data.capacity() < max {
                data.reserve_exact(max - data.len());
            }
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

impl Sink for PieceWriter {
    fn file_data(&mut self, file: File, size: u64) -> std::io::Result<()> {
        let mut data = file.take(size);
        let mut left = size;
        while left > 0 {
            let want = (PIECE - self.piece.len()).min(left.try_into().unwrap_or(usize::MAX));
            let before = self.piece.len();
            // Reads into the piece's spare room, which is at least `want`.
            (&mut data).take(want as u64).read_to_end(&mut self.piece)?;
            let read = self.piece.len() - before;
            if read == 0 {
                // The file shrank: zeros stand for the rest.
                self.piece.resize(before + want, 0);
            }
            left -= (self.piece.len() - before) as u64;
            if self.piece.len() == PIECE {
                self.send()?;
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TestDir;

    /// The stream of `dir`'s workspace read in calls of `max` bytes.
    async fn fetch(dir: &std::path::Path, max: u32) -> Vec<u8> {
        let downloads = Downloads::default();
        let mut stream = Vec::new();
        loop {
            let source = Source {
                owner: None,
                workspace: dir.to_path_buf(),
                path: String::new(),
                told: Told {
                    verb: "read",
                    path: String::new(),
                    what: "the test's sandbox".into(),
                    limit: 0,
                },
            };
            let offset = stream.len() as u64;
            let chunk = downloads.read(source, offset, max).await.unwrap();
            assert_eq!(chunk.offset, offset);
            stream.extend_from_slice(&chunk.data);
            if chunk.eof {
                return stream;
            }
        }
    }

    #[tokio::test]
    async fn files_past_a_piece_and_long_names_come_whole_in_any_call_size() {
        let dir = TestDir::new("tar-pieces");
        let long = format!("{}/{}", "d".repeat(90), "f".repeat(120));
        std::fs::create_dir(dir.0.join("d".repeat(90))).unwrap();
        let big: Vec<u8> = (0..(PIECE * 5 / 2 + 7)).map(|n| (n % 251) as u8).collect();
        std::fs::write(dir.0.join(&long), &big).unwrap();
        std::fs::write(dir.0.join("small"), b"odd size").unwrap();
        for max in [MAX_FILE_CHUNK, 100_000] {
            let stream = fetch(&dir.0, max).await;
            assert_eq!(stream.len() % 512, 0);
            let mut archive = tar::Archive::new(stream.as_slice());
            let mut found = Vec::new();
            for entry in archive.entries().unwrap() {
                let mut entry = entry.unwrap();
                let name = entry.path().unwrap().to_string_lossy().into_owned();
                let mut data = Vec::new();
                entry.read_to_end(&mut data).unwrap();
                found.push((name, data));
            }
            let names: Vec<&str> = found.iter().map(|(name, _)| name.as_str()).collect();
            assert_eq!(names, ["d".repeat(90).as_str(), &long, "small"]);
            assert_eq!(found[1].1, big);
            assert_eq!(found[2].1, b"odd size");
        }
        std::fs::remove_dir_all(&dir.0).unwrap();
    }
}
