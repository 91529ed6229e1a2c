//! The pipe a runner writes its output into, and moving bytes out of it
//! with `splice(2)`: from the pipe's buffer into the page cache of the
//! output file, with no copy through the daemon's memory.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};

/// The most one `splice` call moves: the "one chunk" by which a file
/// could pass its share of the cap (it never does: `OutputFile::step`
/// splices at most the room left). The pipe keeps its default 64 KiB:
/// pipe buffers count against a per-user budget (`fs.pipe-user-pages-soft`,
/// 16,384 pages), and a daemon without `CAP_SYS_RESOURCE` that enlarged
/// its pipes would exhaust it for every process of its user, after which
/// the kernel gives each new pipe of that user 8 KiB.
pub const CHUNK: usize = 1024 * 1024;

/// `(read end, write end)`. Both close on exec, so no other runner started
/// meanwhile inherits a write end (which would keep the read end from ever
/// seeing EOF); the spawn's `dup2` gives the runner its own copy as fd 1
/// and 2. The read end is non-blocking, for the daemon's event loop.
pub fn runner_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    fcntl(&read, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok((read, write))
}

/// How many bytes the pipe holds now.
pub fn buffered(pipe: impl AsFd) -> io::Result<usize> {
    let mut count: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which points at
    // a live local; the descriptor is borrowed for the call.
    let result = unsafe { libc::ioctl(pipe.as_fd().as_raw_fd(), libc::FIONREAD, &mut count) };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(count.max(0) as usize)
}

/// For a pipe that holds nothing: `Ok(0)` when every write end is closed
/// (end of file), else `WouldBlock`. Asked without touching the file, so a
/// quiet runner's closed output file is not opened just to learn that.
pub fn empty_state(pipe: impl AsFd) -> io::Result<usize> {
    let mut poll = libc::pollfd {
        fd: pipe.as_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a zero timeout; the descriptor is borrowed.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    if ready < 0 {
        return Err(io::Error::last_os_error());
    }
    if poll.revents & libc::POLLHUP != 0 && poll.revents & libc::POLLIN == 0 {
        return Ok(0);
    }
    Err(io::ErrorKind::WouldBlock.into())
}

/// Moves up to `len` bytes from the pipe to `file` at `*offset`, advancing
/// it. `Ok(0)` is end of file: every write end is closed and the pipe is
/// empty. `WouldBlock` when the pipe is empty but still has a writer.
pub fn splice_to_file(
    pipe: impl AsFd,
    file: impl AsFd,
    offset: &mut u64,
    len: usize,
) -> io::Result<usize> {
    let mut at = *offset as libc::loff_t;
    loop {
        match splice(
            &pipe,
            None,
            &file,
            Some(&mut at),
            len,
            SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK,
        ) {
            Ok(moved) => {
                *offset = at as u64;
                return Ok(moved);
            }
            Err(Errno::EINTR) => continue,
            Err(errno) => return Err(errno.into()),
        }
    }
}

/// Throws away up to `len` bytes of the pipe (at most 64 KiB a call: a
/// read into a scratch buffer, for the rare case that nothing can be
/// written). `Ok(0)` and `WouldBlock` mean what they do for
/// [`splice_to_file`].
pub fn discard(pipe: impl AsFd, len: usize) -> io::Result<usize> {
    let mut scratch = vec![0; len.min(64 * 1024)];
    loop {
        match nix::unistd::read(&pipe, &mut scratch) {
            Ok(read) => return Ok(read),
            Err(Errno::EINTR) => continue,
            Err(errno) => return Err(errno.into()),
        }
    }
}

/// A write failed for want of room: the file system or the quota is full,
/// or the file reached the largest size allowed.
pub fn is_out_of_room(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn splice_moves_what_was_written_then_reports_end_of_file() {
        let path = std::env::temp_dir().join(format!("sandboxd-pipe-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let (read, write) = runner_pipe().unwrap();
        let mut writer = std::fs::File::from(write);
        writer.write_all(b"hello ").unwrap();
        writer.write_all(b"world\n").unwrap();
        assert_eq!(buffered(&read).unwrap(), 12);

        let mut offset = 0;
        assert_eq!(splice_to_file(&read, &file, &mut offset, 5).unwrap(), 5);
        assert_eq!(splice_to_file(&read, &file, &mut offset, CHUNK).unwrap(), 7);
        assert_eq!(offset, 12);
        let empty = splice_to_file(&read, &file, &mut offset, CHUNK).unwrap_err();
        assert_eq!(empty.kind(), io::ErrorKind::WouldBlock, "a writer remains");
        drop(writer);
        assert_eq!(splice_to_file(&read, &file, &mut offset, CHUNK).unwrap(), 0);
        assert_eq!(std::fs::read(&path).unwrap(), b"hello world\n");
        std::fs::remove_file(&path).unwrap();
    }
}
