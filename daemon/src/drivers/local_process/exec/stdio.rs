//! A command's standard streams: three pipes (stdin `/dev/null` unless it
//! is kept open), or one terminal for all three.
//!
//! The terminal is a pair the daemon opens: the command gets the follower
//! side as stdin, stdout and stderr (its controlling terminal, see
//! `ExecPlan::with_controlling_terminal`); the daemon keeps the leader
//! side, reads the command's output from it, writes its input to it and
//! sets its size.
//!
//! In a sandbox with a view, the pair comes from the devpts the view has
//! on `/dev/pts` (its own, see `isolation::devpts`), so the command's
//! terminal is a `/dev/pts/N` that exists there and counts against the
//! sandbox's `[limits] ptys`, not the host's. It is reached through
//! `/proc/<leader>/root` (the sandbox's group leader, the daemon's
//! unreaped child), one name at a time with `O_NOFOLLOW`, and checked to
//! be a devpts's `ptmx` before it is used; the follower is the leader's
//! peer (`TIOCGPTPEER`), opened without any path. Without a view (the
//! runner shares the host's `/dev`) the pair comes from the daemon's own
//! `/dev/ptmx`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use sandboxd_protocol::PtySize;

use super::view_terminal;

/// The command's side (for the clone) and the daemon's.
pub struct Stdio {
    pub child: [OwnedFd; 3],
    pub stdout: OwnedFd,
    pub stderr: Option<OwnedFd>,
    pub stdin: Option<OwnedFd>,
    /// The terminal's leader side, to resize it.
    pub terminal: Option<OwnedFd>,
}

/// The daemon's ends of a command's stdout, stderr and stdin.
pub type Streams = (OwnedFd, Option<OwnedFd>, Option<OwnedFd>);

impl Stdio {
    /// The command's side (for its start), the daemon's ends of its
    /// streams (as `exec::started_command` takes them), and the
    /// terminal's leader side.
    pub fn split(self) -> ([OwnedFd; 3], Streams, Option<OwnedFd>) {
        let Stdio {
            child,
            stdout,
            stderr,
            stdin,
            terminal,
        } = self;
        (child, (stdout, stderr, stdin), terminal)
    }

    pub fn pipes(keep_stdin: bool) -> io::Result<Stdio> {
        let (stdout, child_stdout) = pipe()?;
        let (stderr, child_stderr) = pipe()?;
        let (child_stdin, stdin) = if keep_stdin {
            let (read, write) = pipe()?;
            (read, Some(write))
        } else {
            (OwnedFd::from(File::open("/dev/null")?), None)
        };
        Ok(Stdio {
            child: [child_stdin, child_stdout, child_stderr],
            stdout,
            stderr: Some(stderr),
            stdin,
            terminal: None,
        })
    }

    /// A terminal of `size`; from the devpts of the view of the sandbox
    /// whose group leader is `view_of`, when it has a view.
    pub fn terminal(size: PtySize, view_of: Option<u32>) -> io::Result<Stdio> {
        let (leader, follower) = match view_of {
            Some(pid) => view_terminal::open_pair(pid)?,
            None => {
                let leader = open_leader()?;
                let follower = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
                    .open(follower_path(&leader)?)?;
                (leader, OwnedFd::from(follower))
            }
        };
        resize(&leader, size)?;
        Ok(Stdio {
            child: [follower.try_clone()?, follower.try_clone()?, follower],
            stdout: leader.try_clone()?,
            stderr: None,
            stdin: Some(leader.try_clone()?),
            terminal: Some(leader),
        })
    }
}

/// A pipe: (read end, write end), both close-on-exec.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two descriptors the kernel just returned, owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A new terminal's leader side, unlocked.
fn open_leader() -> io::Result<OwnedFd> {
    // SAFETY: posix_openpt with plain flags; its result is checked.
    let fd = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    let leader = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: grantpt and unlockpt on the leader descriptor we hold.
    if unsafe { libc::grantpt(leader.as_raw_fd()) } < 0
        || unsafe { libc::unlockpt(leader.as_raw_fd()) } < 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(leader)
}

/// `/dev/pts/N` of `leader`.
fn follower_path(leader: &OwnedFd) -> io::Result<String> {
    let mut name = [0 as libc::c_char; 64];
    // SAFETY: ptsname_r writes a NUL-terminated name into the buffer, at
    // most its length.
    if unsafe { libc::ptsname_r(leader.as_raw_fd(), name.as_mut_ptr(), name.len()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ptsname_r succeeded, so the buffer holds a C string.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    Ok(name.to_string_lossy().into_owned())
}

/// Sets the terminal's size; its foreground group gets `SIGWINCH`.
pub fn resize(leader: &OwnedFd, size: PtySize) -> io::Result<()> {
    let winsize = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from a live local.
    if unsafe { libc::ioctl(leader.as_raw_fd(), libc::TIOCSWINSZ, &winsize) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
