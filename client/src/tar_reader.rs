//! A fetched tar stream read where its chunks landed: the [`Read`] that
//! [`crate::SandboxdClient::get_tar_reader`] answers, for a tar reader on
//! a thread of its own. A pipe between the fetching and the unpacking
//! cost two more copies of every byte and a system call per 8 KiB read;
//! here a chunk moves through a bounded channel as it came off the wire.

use std::io::{ErrorKind, Read};

use tokio::sync::mpsc;

/// Chunks fetched and not yet read, at most: with the calls in flight
/// ([`crate::chunk_pipeline::WINDOW`]) a few MiB held on this side.
pub(crate) const WAITING: usize = 2;

/// What the fetching hands on: a chunk, or why the stream stopped short.
pub(crate) type Fetched = std::io::Result<Vec<u8>>;

/// The stream's bytes in order; its end once the fetching is done, an
/// error if the fetching failed first. Blocking: read it off the async
/// runtime (a thread of its own, or `spawn_blocking`).
pub struct TarReader {
    chunks: mpsc::Receiver<Fetched>,
    held: Vec<u8>,
    at: usize,
}

impl TarReader {
    pub(crate) fn new(chunks: mpsc::Receiver<Fetched>) -> TarReader {
        TarReader {
            chunks,
            held: Vec::new(),
            at: 0,
        }
    }
}

impl Read for TarReader {
    fn read(&mut self, into: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.held.len() {
            match self.chunks.blocking_recv() {
                Some(chunk) => (self.held, self.at) = (chunk?, 0),
                None => return Ok(0),
            }
        }
        let take = into.len().min(self.held.len() - self.at);
        into[..take].copy_from_slice(&self.held[self.at..self.at + take]);
        self.at += take;
        Ok(take)
    }
}

/// The error a reader gets when the fetching stopped before the end.
pub(crate) fn cut_short(why: &dyn std::fmt::Display) -> std::io::Error {
    std::io::Error::new(
        ErrorKind::UnexpectedEof,
        format!("the tar stream stopped short: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sent` through the reader, read 3 bytes at a time.
    fn read_through(sent: Vec<Fetched>) -> std::io::Result<Vec<u8>> {
        let (sender, chunks) = mpsc::channel(sent.len().max(1));
        for chunk in sent {
            sender.try_send(chunk).unwrap();
        }
        drop(sender);
        let mut reader = TarReader::new(chunks);
        let mut read = Vec::new();
        let mut piece = [0; 3];
        loop {
            match reader.read(&mut piece)? {
                0 => return Ok(read),
                n => read.extend_from_slice(&piece[..n]),
            }
        }
    }

    #[test]
    fn chunks_read_as_one_stream_to_its_end() {
        let sent = vec![Ok(b"abcd".to_vec()), Ok(Vec::new()), Ok(b"efg".to_vec())];
        assert_eq!(read_through(sent).unwrap(), b"abcdefg");
    }

    #[test]
    fn a_stream_stopped_short_fails_the_read_after_what_came() {
        let sent = vec![Ok(b"ab".to_vec()), Err(cut_short(&"refused"))];
        let error = read_through(sent).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::UnexpectedEof);
        assert!(error.to_string().contains("refused"), "{error}");
    }
}
