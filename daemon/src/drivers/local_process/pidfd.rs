//! Process descriptors (`pidfd_open`, Linux 5.3): a handle on one process
//! that can never name another, readable once that process has exited
//! (before it is reaped). Used where one exit is awaited for a moment —
//! a stop, a holder or parked runner being ended — never one per running
//! sandbox (see `child_exits` for why).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A pidfd of `pid`.
pub fn open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open with a pid and no flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A pidfd of `pid` watched by the tokio runtime: `readable()` once the
/// process has exited. Call within the runtime.
pub fn open_watched(pid: libc::pid_t) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    let pidfd = open(pid)?;
    // SAFETY: an OwnedFd is a valid open descriptor, and it stays open and
    // the same for the AsyncFd's whole life (it owns it).
    let watched = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    };
    watched.map_err(io::Error::from)
}

/// Sends SIGKILL to the process of `pidfd`; one gone already is fine.
pub fn kill(pidfd: &OwnedFd) {
    // SAFETY: a live pidfd and a plain signal number.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
}

/// Whether the process of `pidfd` has exited.
pub fn has_exited(pidfd: &OwnedFd) -> bool {
    wait_readable(pidfd.as_raw_fd(), Duration::ZERO)
}

/// Whether `fd` became readable within `timeout`.
pub fn wait_readable(fd: RawFd, timeout: Duration) -> bool {
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd and a timeout.
    unsafe { libc::poll(&mut poll, 1, millis) > 0 }
}
