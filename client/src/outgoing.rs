//! The write side of a connection: frames go out whole and in the order
//! they were handed over, written by the calling task itself.
//!
//! A frame is written with one non-blocking write from the task that makes
//! the call, so sending wakes no other thread. Only when the socket's
//! buffer is full (large file chunks, a daemon slow to read) does the rest
//! wait in a backlog, which a task flushes as the socket drains; frames
//! handed over meanwhile queue behind it, so two frames never interleave.
//! A frame handed over is written whole even if its caller gives up: half
//! a frame would corrupt every call after it.

use std::collections::VecDeque;
use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::net::unix::OwnedWriteHalf;
use tokio_util::bytes::{Buf, BytesMut};

pub(crate) struct Outgoing {
    socket: OwnedWriteHalf,
    /// Held only for the non-blocking writes, never across an `.await`.
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// Frames not yet written, the first one possibly in part.
    backlog: VecDeque<BytesMut>,
    /// True while a task is flushing the backlog.
    flushing: bool,
}

/// What [`Outgoing::send`] did with a frame.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Written whole.
    Written,
    /// Queued; the caller must start a task running [`Outgoing::flush`].
    QueuedFlushNeeded,
    /// Queued behind a flush already running.
    Queued,
}

impl Outgoing {
    pub(crate) fn new(socket: OwnedWriteHalf) -> Outgoing {
        Outgoing {
            socket,
            queue: Mutex::default(),
        }
    }

    /// Writes `frame` now if nothing is queued and the socket takes it,
    /// else queues it. An error means the socket can no longer be written.
    pub(crate) fn send(&self, mut frame: BytesMut) -> io::Result<Sent> {
        let mut queue = self.queue();
        if queue.backlog.is_empty() {
            match self.socket.try_write(&frame) {
                Ok(written) if written == frame.len() => return Ok(Sent::Written),
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) => frame.advance(written),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Err(error),
            }
        }
        queue.backlog.push_back(frame);
        if queue.flushing {
            return Ok(Sent::Queued);
        }
        queue.flushing = true;
        Ok(Sent::QueuedFlushNeeded)
    }

    /// Writes the backlog out as the socket drains; returns once it is
    /// empty, or with the error that ends the connection.
    pub(crate) async fn flush(&self) -> io::Result<()> {
        loop {
            let writable = self.socket.writable().await;
            if let Err(error) = writable {
                self.give_up();
                return Err(error);
            }
            if self.write_backlog()? {
                return Ok(());
            }
        }
    }

    /// Writes what the socket takes; true once the backlog is empty.
    fn write_backlog(&self) -> io::Result<bool> {
        let mut queue = self.queue();
        while let Some(front) = queue.backlog.front_mut() {
            match self.socket.try_write(front) {
                Ok(written) if written == front.len() => {
                    queue.backlog.pop_front();
                }
                Ok(0) => {
                    drop(queue);
                    self.give_up();
                    return Err(io::ErrorKind::WriteZero.into());
                }
                Ok(written) => front.advance(written),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(error) => {
                    drop(queue);
                    self.give_up();
                    return Err(error);
                }
            }
        }
        queue.flushing = false;
        Ok(true)
    }

    /// Drops the backlog of a socket that cannot be written any more.
    fn give_up(&self) {
        let mut queue = self.queue();
        queue.backlog.clear();
        queue.flushing = false;
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;
    use tokio::net::UnixStream;

    use super::*;

    /// Frames of `len` bytes, each filled with its own number.
    fn frame(number: u8, len: usize) -> BytesMut {
        BytesMut::from(&vec![number; len][..])
    }

    #[tokio::test]
    async fn a_full_socket_queues_frames_and_the_flush_keeps_their_order() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let (_read, write) = ours.into_split();
        let outgoing = std::sync::Arc::new(Outgoing::new(write));
        // Far more than a socket buffer holds while nobody reads.
        let big = 8 * 1024 * 1024;
        assert_eq!(
            outgoing.send(frame(1, big)).unwrap(),
            Sent::QueuedFlushNeeded
        );
        assert_eq!(outgoing.send(frame(2, 10)).unwrap(), Sent::Queued);
        let flushing = tokio::spawn({
            let outgoing = outgoing.clone();
            async move { outgoing.flush().await }
        });
        let mut received = vec![0u8; big + 10];
        theirs.read_exact(&mut received).await.unwrap();
        flushing.await.unwrap().unwrap();
        assert!(received[..big].iter().all(|&byte| byte == 1));
        assert_eq!(&received[big..], &[2u8; 10]);
        // The backlog is empty again: the next frame goes out at once.
        assert_eq!(outgoing.send(frame(3, 10)).unwrap(), Sent::Written);
    }

    #[tokio::test]
    async fn a_closed_peer_is_an_error() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (_read, write) = ours.into_split();
        drop(theirs);
        let outgoing = Outgoing::new(write);
        // Written at once or queued (before tokio has seen the socket
        // writable), it fails either way.
        let error = match outgoing.send(frame(1, 10)) {
            Err(error) => error,
            Ok(Sent::Written | Sent::Queued) => panic!("a frame went to a closed peer"),
            Ok(Sent::QueuedFlushNeeded) => outgoing.flush().await.unwrap_err(),
        };
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
        // The backlog was dropped with the socket.
        assert!(outgoing.queue().backlog.is_empty());
    }
}
