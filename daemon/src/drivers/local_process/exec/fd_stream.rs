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

pub struct FdStream(AsyncFd<OwnedFd>);

impl FdStream {
    /// `fd`, made non-blocking and watched by the runtime. Call within it.
    pub fn new(fd: OwnedFd) -> io::Result<FdStream> {
        set_nonblocking(&fd)?;
        let interest = tokio::io::Interest::READABLE | tokio::io::Interest::WRITABLE;
        // SAFETY: the descriptor is owned by the AsyncFd, so it stays open
        // and the same for the registration's whole life.
        let watched = unsafe { AsyncFd::register_with_interest(fd, interest) };
        Ok(FdStream(watched.map_err(std::io::Error::from)?))
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
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let read = guard.try_io(|fd| {
                // SAFETY: a read into the caller's initialized, unfilled
                // buffer, at most its length.
                let count = unsafe {
                    libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len())
                };
                if count < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(count as usize)
                }
            });
            match read {
                Ok(Ok(count)) => {
                    buf.advance(count);
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
            let mut guard = ready!(self.0.poll_write_ready(cx))?;
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
