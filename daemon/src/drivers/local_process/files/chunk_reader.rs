//! The bytes of a `put_tar` stream as its chunks arrive, read on the
//! thread that unpacks it ([`super::tar_in`]). One chunk is held at a
//! time, and the next waits in the channel; a tar header a chunk's end
//! cuts waits, partly read, inside the tar reader for the rest, so the
//! daemon holds two chunks and the header in hand, never the stream. A
//! chunk is answered [`Answer::Taken`] as soon as the thread takes it, so
//! the caller sends the next while this one is written: a failure it
//! causes is told to the next call (or the last's).
//!
//! The tar reader takes an entry's long name or PAX records whole into
//! memory: the bytes it reads between two entries are held to
//! [`MAX_HEADERS`], so a hostile archive cannot make the daemon hold more.

use std::cell::Cell;
use std::io::{ErrorKind, Read};
use std::rc::Rc;

use tokio::sync::mpsc;

use sandboxd_protocol::SandboxError;

use super::Failure;

/// The most bytes an entry's headers may take: its header, long name,
/// long link name and PAX records (a path is at most 4 KiB).
pub const MAX_HEADERS: u64 = 1 << 20;

/// One chunk of the stream, with what the disk limit allows.
pub struct Piece {
    pub data: Vec<u8>,
    pub last: bool,
    pub room: Room,
}

/// What the disk limit allows the workspace, told with a chunk.
#[derive(Debug, Clone, Copy)]
pub enum Room {
    /// Measured when this chunk's call came (`None`: no limit); the bytes
    /// written are counted from here.
    Measured(Option<u64>),
    /// As last measured: the bytes written since go on counting.
    AsBefore,
}

/// What the unpacking thread answers a chunk.
#[derive(Debug)]
pub enum Answer {
    /// Everything in it is unpacked into the staging directory.
    Taken,
    /// It was the last: the archive ended cleanly and is in place.
    Done,
}

pub type Answers = mpsc::Sender<Result<Answer, SandboxError>>;

/// What the reader and the unpacking share on their one thread.
#[derive(Default)]
pub struct Tally {
    /// The disk limit's room when the workspace was last measured, and
    /// the bytes written since.
    room: Cell<Option<u64>>,
    written: Cell<u64>,
    /// Bytes read since the unpacking asked for the next entry (`None`
    /// while it reads an entry's data).
    headers: Cell<Option<u64>>,
    /// Set when [`MAX_HEADERS`] was passed.
    headers_too_long: Cell<bool>,
}

impl Tally {
    /// Counts `bytes` about to be written; refused past the disk limit.
    pub fn charge(&self, bytes: u64) -> Result<(), Failure> {
        let written = self.written.get().saturating_add(bytes);
        self.written.set(written);
        match self.room.get() {
            Some(room) if written > room => Err(Failure::OverDiskLimit),
            _ => Ok(()),
        }
    }

    /// Whether `bytes` more still fit the room last measured.
    pub fn fits(&self, bytes: u64) -> bool {
        self.room
            .get()
            .is_none_or(|room| self.written.get().saturating_add(bytes) <= room)
    }

    /// Between entries: what is read is headers, and counted.
    pub fn reading_headers(&self, yes: bool) {
        self.headers.set(yes.then_some(0));
    }

    /// A failure of the tar reader, in the caller's terms.
    pub fn tar_failure(&self, error: std::io::Error) -> Failure {
        if self.headers_too_long.get() {
            return Failure::Corrupt(format!(
                "an entry's headers (its long names or PAX records) pass {} KiB",
                MAX_HEADERS / 1024
            ));
        }
        match error.kind() {
            ErrorKind::ConnectionAborted => Failure::Io(error),
            _ => Failure::Corrupt(error.to_string()),
        }
    }
}

/// The stream, read from the chunks its calls send.
pub struct ChunkReader {
    pieces: mpsc::Receiver<Piece>,
    answers: Answers,
    held: Vec<u8>,
    at: usize,
    /// The chunk in hand is the last: past it the stream ends.
    last: bool,
    tally: Rc<Tally>,
}

impl ChunkReader {
    pub fn new(pieces: mpsc::Receiver<Piece>, answers: Answers, tally: Rc<Tally>) -> ChunkReader {
        ChunkReader {
            pieces,
            answers,
            held: Vec::new(),
            at: 0,
            last: false,
            tally,
        }
    }

    /// Where the put's answers go.
    pub fn answers(&self) -> Answers {
        self.answers.clone()
    }

    /// Makes sure a byte is in hand; false at the stream's end.
    fn fill(&mut self) -> std::io::Result<bool> {
        while self.at == self.held.len() {
            if self.last {
                return Ok(false);
            }
            let Some(piece) = self.pieces.blocking_recv() else {
                return Err(std::io::Error::new(
                    ErrorKind::ConnectionAborted,
                    "the put was abandoned",
                ));
            };
            if !piece.last {
                // Nobody waiting: the call went away, the next read says so.
                let _ = self.answers.blocking_send(Ok(Answer::Taken));
            }
            (self.held, self.at, self.last) = (piece.data, 0, piece.last);
            if let Room::Measured(room) = piece.room {
                self.tally.room.set(room);
                self.tally.written.set(0);
            }
        }
        Ok(true)
    }

    /// Reads (and drops) what is left up to the last chunk: the padding
    /// after the archive's end marker.
    pub fn read_to_last(&mut self) -> std::io::Result<()> {
        while self.fill()? {
            self.at = self.held.len();
        }
        Ok(())
    }
}

impl Read for ChunkReader {
    fn read(&mut self, into: &mut [u8]) -> std::io::Result<usize> {
        if into.is_empty() || !self.fill()? {
            return Ok(0);
        }
        let take = into.len().min(self.held.len() - self.at);
        if let Some(read) = self.tally.headers.get() {
            let read = read + take as u64;
            self.tally.headers.set(Some(read));
            if read > MAX_HEADERS {
                self.tally.headers_too_long.set(true);
                return Err(std::io::Error::other("headers too long"));
            }
        }
        into[..take].copy_from_slice(&self.held[self.at..self.at + take]);
        self.at += take;
        Ok(take)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reader on a thread of its own, fed `chunks`; answers what it
    /// read and the answers the chunks got.
    fn read_all(chunks: Vec<Vec<u8>>) -> (Vec<u8>, usize) {
        let (send, pieces) = mpsc::channel(1);
        let (answers, mut answered) = mpsc::channel(1);
        let reading = std::thread::spawn(move || {
            let mut reader = ChunkReader::new(pieces, answers, Rc::default());
            let mut read = Vec::new();
            reader.read_to_end(&mut read).unwrap();
            read
        });
        let count = chunks.len();
        let mut taken = 0;
        for (index, data) in chunks.into_iter().enumerate() {
            let last = index + 1 == count;
            send.blocking_send(Piece {
                data,
                last,
                room: Room::Measured(None),
            })
            .unwrap();
            if !last {
                assert!(matches!(answered.blocking_recv(), Some(Ok(Answer::Taken))));
                taken += 1;
            }
        }
        (reading.join().unwrap(), taken)
    }

    #[test]
    fn chunks_read_as_one_stream_each_but_the_last_answered_once_taken() {
        let chunks = vec![b"ab".to_vec(), Vec::new(), b"cde".to_vec(), b"f".to_vec()];
        assert_eq!(read_all(chunks), (b"abcdef".to_vec(), 3));
    }

    /// Two chunks of two bytes, each byte charged as read, the second
    /// chunk told `second`: whether every byte fit a room of 3.
    fn charged(second: Room) -> bool {
        let (send, pieces) = mpsc::channel(2);
        let (answers, _answered) = mpsc::channel(2);
        let first = Piece {
            data: vec![1, 2],
            last: false,
            room: Room::Measured(Some(3)),
        };
        send.blocking_send(first).unwrap();
        let (data, last, room) = (vec![3, 4], true, second);
        send.blocking_send(Piece { data, last, room }).unwrap();
        let tally = Rc::new(Tally::default());
        let mut reader = ChunkReader::new(pieces, answers, tally.clone());
        let mut byte = [0];
        while reader.read(&mut byte).unwrap() == 1 {
            if tally.charge(1).is_err() {
                return false;
            }
        }
        true
    }

    #[test]
    fn bytes_written_count_on_until_the_workspace_is_measured_again() {
        assert!(!charged(Room::AsBefore));
        assert!(charged(Room::Measured(Some(3))));
    }

    #[test]
    fn the_disk_room_is_that_last_measured() {
        let tally = Tally::default();
        tally.room.set(Some(10));
        assert!(tally.fits(10) && !tally.fits(11));
        assert!(tally.charge(6).is_ok());
        assert!(matches!(tally.charge(5), Err(Failure::OverDiskLimit)));
    }
}
