//! A pipe end or a terminal's leader side as a tokio stream: reads and
//! writes on a non-blocking descriptor, woken by the runtime's epoll.
//!
//! Why not `tokio::net::unix::pipe`: a terminal is not a pipe, and its
//! leader side reads `EIO` (not 0) once the last follower closed; one type
//! serves both, and says `EIO` as the error it is (the reader treats it as
//! the end).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct FdStream {
    fd: AsyncFd<OwnedFd>,
    /// Whether its pipe was grown already (or cannot be: a terminal).
    grown: bool,
}

/// A read of this much (a default pipe's whole size, so it was full)
/// proves the stream busy: its pipe grows to [`BUSY_PIPE`].
const BUSY_READ: usize = 64 * 1024;
/// A busy pipe's size: a flood then moves 1 MiB per wake-up of its reader
/// (16 of a 64 KiB pipe's), and its writer waits for the reader 16 times
/// less often. The pages are the writer's (charged to its sandbox's
/// memory), and only exist while the pipe holds that much; `fs.pipe-max-size`
/// is 1 MiB by default.
const BUSY_PIPE: libc::c_int = 1024 * 1024;

impl FdStream {
    /// `fd`, made non-blocking and watched by the runtime. Call within it.
    pub fn new(fd: OwnedFd) -> io::Result<FdStream> {
        set_nonblocking(&fd)?;
        let interest = tokio::io::Interest::READABLE | tokio::io::Interest::WRITABLE;
        // SAFETY: the descriptor is owned by the AsyncFd, so it stays open
        // and the same for the registration's whole life.
        let watched = unsafe { AsyncFd::register_with_interest(fd, interest) };
        Ok(FdStream {
            fd: watched.map_err(std::io::Error::from)?,
            grown: false,
        })
    }

    /// After a read of `count` bytes: grows the pipe once the stream
    /// proves busy. Failing (not a pipe, or a size the kernel refuses) it
    /// stays as it is: slower, never wrong.
    fn grow_when_busy(&mut self, count: usize) {
        if self.grown || count < BUSY_READ {
            return;
        }
        self.grown = true;
        // SAFETY: fcntl on a descriptor we own, with an integer argument.
        unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_SETPIPE_SZ, BUSY_PIPE) };
    }
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own, with plain flags.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

impl AsyncRead for FdStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let mut guard = ready!(this.fd.poll_read_ready(cx))?;
            // SAFETY: the kernel writes only the bytes it returns, and the
            // ones it returns are then marked initialized and filled; the
            // rest is neither read nor de-initialized.
            let unfilled = unsafe { buf.unfilled_mut() };
            let asked = unfilled.len();
            let read = guard.try_io(|fd| {
                // SAFETY: a read into the caller's unfilled buffer, at most
                // its length.
                let count =
                    unsafe { libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), asked) };
                if count < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(count as usize)
                }
            });
            drop(guard);
            match read {
                Ok(Ok(count)) => {
                    // SAFETY: the read initialized these `count` bytes.
                    unsafe { buf.assume_init(count) };
                    buf.advance(count);
                    this.grow_when_busy(count);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(error)) => return Poll::Ready(Err(error)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for FdStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            let written = guard.try_io(|fd| {
                // SAFETY: a write of the caller's buffer, at most its length.
                let count =
                    unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
                if count < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(count as usize)
                }
            });
            match written {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
