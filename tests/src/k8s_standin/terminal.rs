//! Stand-in API server: the terminal of a `tty=true` exec, made as a
//! container runtime makes one, but for a local process of the test (see
//! [super::exec]): a new pseudo-terminal pair, the follower side the
//! command's stdin, stdout, stderr and controlling terminal (in a session
//! of its own), the leader side the exec's channels 0 and 1; a resize on
//! channel 4 sets its size (`TIOCSWINSZ`, so the command gets `SIGWINCH`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;

/// The leader side of a command's terminal.
pub struct Terminal {
    leader: OwnedFd,
}

impl Terminal {
    /// A new pair of this size: the terminal, and the follower side for
    /// [`Terminal::attach`].
    pub fn open(rows: u16, cols: u16) -> std::io::Result<(Terminal, OwnedFd)> {
        let size = winsize(rows, cols);
        let (mut leader, mut follower) = (-1, -1);
        // SAFETY: openpty writes two new descriptors into the two ints we
        // pass; name and termios are null (not wanted), the size is read.
        let done = unsafe {
            libc::openpty(
                &mut leader,
                &mut follower,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        if done < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors are new and ours alone.
        let (leader, follower) =
            unsafe { (OwnedFd::from_raw_fd(leader), OwnedFd::from_raw_fd(follower)) };
        Ok((Terminal { leader }, follower))
    }

    /// Makes `follower` the command's stdin, stdout, stderr and
    /// controlling terminal, in a session of its own.
    pub fn attach(command: &mut tokio::process::Command, follower: OwnedFd) -> std::io::Result<()> {
        command
            .stdin(follower.try_clone()?)
            .stdout(follower.try_clone()?)
            .stderr(follower);
        // SAFETY: setsid and ioctl are async-signal-safe; the closure
        // touches nothing of the parent's but the child's own stdin.
        unsafe {
            command.as_std_mut().pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// Its output (a blocking read on tokio's threads; EIO once every
    /// follower is closed, its end).
    pub fn reader(&self) -> std::io::Result<tokio::fs::File> {
        Ok(tokio::fs::File::from_std(self.leader.try_clone()?.into()))
    }

    /// Its input.
    pub fn writer(&self) -> std::io::Result<tokio::fs::File> {
        Ok(tokio::fs::File::from_std(self.leader.try_clone()?.into()))
    }

    pub fn resize(&self, rows: u16, cols: u16) {
        let size = winsize(rows, cols);
        // SAFETY: TIOCSWINSZ reads one winsize from the pointer given.
        unsafe {
            libc::ioctl(self.leader.as_raw_fd(), libc::TIOCSWINSZ, &size);
        }
    }
}

fn winsize(rows: u16, cols: u16) -> libc::winsize {
    libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}
