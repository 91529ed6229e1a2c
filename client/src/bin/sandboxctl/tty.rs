//! sandboxctl's own terminal, for `exec -it`: raw mode while the command
//! has it (every key, Ctrl-C and Ctrl-D included, goes to the command's
//! terminal, which does its own echo and line editing), and the window
//! size the command's terminal is kept at.

use std::io;

use sandboxd_client::PtySize;

/// Raw mode on stdin, restored (as it was) when dropped, however the
/// command or sandboxctl ends.
pub struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    /// Puts stdin, a terminal, in raw mode.
    pub fn enter() -> io::Result<RawMode> {
        // SAFETY: termios is plain data; an all-zero value is valid and is
        // overwritten by tcgetattr before use.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: fd 0 and a valid pointer to a termios to fill.
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut saved) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut raw = saved;
        // SAFETY: cfmakeraw only edits the termios it is given.
        unsafe { libc::cfmakeraw(&mut raw) };
        // SAFETY: fd 0 and a valid, fully initialised termios.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: fd 0 and the termios tcgetattr filled in `enter`.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSADRAIN, &self.saved) };
    }
}

/// The size of the terminal on stdout, else stdin, else stderr; `None`
/// when none of them is one.
pub fn window_size() -> Option<PtySize> {
    [libc::STDOUT_FILENO, libc::STDIN_FILENO, libc::STDERR_FILENO]
        .into_iter()
        .find_map(size_of)
}

fn size_of(fd: libc::c_int) -> Option<PtySize> {
    // SAFETY: winsize is plain data; all zeroes is a valid value.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize through a valid pointer; a
    // descriptor that is not a terminal makes it fail, which is checked.
    let answered = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) } == 0;
    (answered && size.ws_row > 0 && size.ws_col > 0).then_some(PtySize {
        rows: size.ws_row,
        cols: size.ws_col,
    })
}
