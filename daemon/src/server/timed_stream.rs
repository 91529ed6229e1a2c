//! A connection's byte stream with two clocks: one frame must arrive within
//! `frame_timeout` of its first byte, and a connection with nothing to do
//! for `idle_timeout` is closed.
//!
//! Without the first, a peer sending a partial frame a byte a second holds
//! its slot for ever (slowloris); without the second, idle connections do.
//! The clocks live below the codec, on the bytes, because the codec cannot
//! tell "nothing yet" from "half a frame" until the frame is whole. The
//! frame layout followed is the shared one (`wire::frame_codec`: a 4-byte
//! big-endian length, then that many bytes).
//!
//! "Nothing to do" means no byte either way and no call in flight: a call
//! that takes long (a deprovision waiting out its grace) keeps its
//! connection, and the idle clock starts again when its answer is written.
//! A slow frame ends the connection with a `TimedOut` error (a warning, as
//! for any broken peer); an idle one ends as if the peer had hung up.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use sandboxd_protocol::wire;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::time::{Instant, Sleep};

/// The length header's size in the shared frame layout.
const HEADER_LEN: usize = 4;

/// The two timeouts.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub frame: Duration,
    pub idle: Duration,
}

/// Counts the calls in flight on one connection; the connection raises and
/// lowers it around each call, the stream reads it.
#[derive(Debug, Default, Clone)]
pub struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    /// Counts one call until the guard is dropped.
    pub fn enter(&self) -> InFlightGuard {
        self.0.fetch_add(1, Ordering::AcqRel);
        InFlightGuard(self.0.clone())
    }

    fn is_idle(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }
}

/// One call in flight.
pub struct InFlightGuard(Arc<AtomicUsize>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Where the reader is in the frame layout.
#[derive(Debug, Default)]
struct FrameCursor {
    header: [u8; HEADER_LEN],
    header_read: usize,
    body_left: usize,
}

impl FrameCursor {
    fn in_frame(&self) -> bool {
        self.header_read > 0 || self.body_left > 0
    }

    /// Follows `bytes` through the layout; true when at least one frame
    /// was finished by them. A header naming more than a request may be
    /// (`wire::MAX_REQUEST_LEN`) is an error, seen before the codec
    /// reserves room for its body.
    fn advance(&mut self, mut bytes: &[u8]) -> io::Result<bool> {
        let mut finished = false;
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let taken = self.body_left.min(bytes.len());
                self.body_left -= taken;
                bytes = &bytes[taken..];
                finished |= self.body_left == 0;
                continue;
            }
            self.header[self.header_read] = bytes[0];
            self.header_read += 1;
            bytes = &bytes[1..];
            if self.header_read == HEADER_LEN {
                self.header_read = 0;
                self.body_left = u32::from_be_bytes(self.header) as usize;
                if self.body_left > wire::MAX_REQUEST_LEN {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "a request frame of {} bytes, over the {} a request may be",
                            self.body_left,
                            wire::MAX_REQUEST_LEN
                        ),
                    ));
                }
                finished |= self.body_left == 0;
            }
        }
        Ok(finished)
    }
}

/// The stream with its clocks.
pub struct TimedStream {
    inner: UnixStream,
    timeouts: Timeouts,
    in_flight: InFlight,
    cursor: FrameCursor,
    /// When the unfinished frame's first byte came, if one is unfinished.
    frame_started: Option<Instant>,
    last_activity: Instant,
    timer: Pin<Box<Sleep>>,
}

impl TimedStream {
    pub fn new(inner: UnixStream, timeouts: Timeouts, in_flight: InFlight) -> TimedStream {
        let now = Instant::now();
        TimedStream {
            inner,
            timeouts,
            in_flight,
            cursor: FrameCursor::default(),
            frame_started: None,
            last_activity: now,
            timer: Box::pin(tokio::time::sleep_until(now + timeouts.idle)),
        }
    }

    /// The next moment a clock could run out.
    fn next_deadline(&self) -> Instant {
        match self.frame_started {
            Some(started) => started + self.timeouts.frame,
            None => self.last_activity + self.timeouts.idle,
        }
    }

    /// `Some` when a clock ran out: the error, or `None` inside for "idle,
    /// end the stream". Arms the timer for the next check otherwise.
    fn check_clocks(&mut self, cx: &mut Context<'_>) -> Option<Option<io::Error>> {
        loop {
            let deadline = self.next_deadline();
            if Instant::now() < deadline {
                self.timer.as_mut().reset(deadline);
                // Registers the waker; a pending timer is the normal case.
                if self.timer.as_mut().poll(cx).is_pending() {
                    return None;
                }
                continue;
            }
            if self.frame_started.is_some() {
                return Some(Some(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "a frame did not arrive whole within {:?} of its first byte ([connections] frame_timeout)",
                        self.timeouts.frame
                    ),
                )));
            }
            if self.in_flight.is_idle() {
                return Some(None);
            }
            // Busy, not idle: look again one idle period from now.
            self.last_activity = Instant::now();
        }
    }
}

impl AsyncRead for TimedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let fresh = &buf.filled()[before..];
                if !fresh.is_empty() {
                    let now = Instant::now();
                    this.last_activity = now;
                    let finished = match this.cursor.advance(fresh) {
                        Ok(finished) => finished,
                        Err(oversized) => return Poll::Ready(Err(oversized)),
                    };
                    if !this.cursor.in_frame() {
                        this.frame_started = None;
                    } else if finished || this.frame_started.is_none() {
                        // A frame begun by these bytes: its clock starts now.
                        this.frame_started = Some(now);
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => match this.check_clocks(cx) {
                None => Poll::Pending,
                Some(Some(error)) => Poll::Ready(Err(error)),
                Some(None) => {
                    tracing::debug!(
                        idle_timeout = ?this.timeouts.idle,
                        "closing an idle connection"
                    );
                    Poll::Ready(Ok(()))
                }
            },
        }
    }
}

impl AsyncWrite for TimedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(&mut self.inner).poll_write(cx, buf))?;
        if written > 0 {
            self.last_activity = Instant::now();
        }
        Poll::Ready(Ok(written))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_follows_headers_and_bodies_split_anywhere() {
        let mut cursor = FrameCursor::default();
        assert!(!cursor.advance(&[0, 0]).unwrap());
        assert!(cursor.in_frame(), "half a header is a frame begun");
        assert!(!cursor.advance(&[0, 3, b'a']).unwrap());
        assert!(cursor.in_frame(), "header done, body short");
        assert!(cursor.advance(b"bc").unwrap(), "the frame is whole");
        assert!(!cursor.in_frame());
        assert!(cursor.advance(&[0, 0, 0, 1, b'x', 0, 0, 0, 0]).unwrap());
        assert!(
            !cursor.in_frame(),
            "two whole frames in one read, the second empty"
        );
        assert!(!cursor.advance(&[0, 0, 0, 2, b'y']).unwrap());
        assert!(cursor.in_frame());
    }

    #[test]
    fn a_request_header_over_the_limit_is_refused_and_one_at_it_is_not() {
        let at = (wire::MAX_REQUEST_LEN as u32).to_be_bytes();
        assert!(!FrameCursor::default().advance(&at).unwrap());
        let over = (wire::MAX_REQUEST_LEN as u32 + 1).to_be_bytes();
        let error = FrameCursor::default().advance(&over).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(error.to_string().contains("1048577 bytes"), "{error}");
    }
}
