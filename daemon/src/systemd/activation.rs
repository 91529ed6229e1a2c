//! Socket activation: serving the listening socket systemd passed.
//!
//! `sandboxd.socket` makes systemd bind `/run/stigmer/sandboxd.sock` itself,
//! with the owner, group and mode the unit gives, and hand it to the daemon
//! as fd 3 with `LISTEN_PID` set to the daemon's pid and `LISTEN_FDS=1`.
//! The daemon serves that descriptor exactly as given: it never binds,
//! chmods, chowns or unlinks the path. The socket unit owns it and keeps it
//! open across daemon restarts, so callers wait in the backlog instead of
//! failing while the daemon restarts.
//!
//! fd 3 is checked before it is trusted (a listening Unix stream socket),
//! and made close-on-exec at once: systemd passes it inheritable, and a
//! runner holding the daemon's listening socket could accept the
//! control plane's connections.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::socket::{getsockname, getsockopt, sockopt, SockType, SockaddrLike, UnixAddr};

/// The first passed descriptor (`SD_LISTEN_FDS_START`).
pub const FIRST_FD: RawFd = 3;

/// Why the passed socket cannot be served.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActivationError {
    #[error("LISTEN_PID={0:?} is not a process id")]
    BadPid(String),
    #[error("LISTEN_FDS={0:?} is not a number of descriptors")]
    BadCount(String),
    #[error(
        "systemd passed {0} sockets (LISTEN_FDS={0}); sandboxd serves exactly one: \
         give sandboxd.socket a single ListenStream="
    )]
    TooMany(u32),
    #[error("fd 3 passed by systemd {0}; sandboxd.socket must have one ListenStream= on a Unix socket path")]
    NotUsable(String),
}

/// The listening socket systemd passed.
#[derive(Debug)]
pub struct Inherited {
    /// Non-blocking, as `tokio::net::UnixListener::from_std` requires
    /// (systemd hands sockets over blocking).
    pub listener: UnixListener,
    /// The path it is bound to, when it has one.
    pub path: Option<PathBuf>,
    /// Its `FileDescriptorName=` (`LISTEN_FDNAMES`), when systemd gave one.
    pub name: Option<String>,
}

/// How many sockets systemd passed to this process: 0 when the variables
/// are absent or meant for another process (`LISTEN_PID` is not ours, as
/// for a child that inherited them), else exactly 1 — more is an error.
pub fn passed_count(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    our_pid: u32,
) -> Result<u32, ActivationError> {
    let Some(pid) = listen_pid.filter(|pid| !pid.is_empty()) else {
        return Ok(0);
    };
    let pid: u32 = pid
        .parse()
        .map_err(|_| ActivationError::BadPid(pid.to_string()))?;
    if pid != our_pid {
        return Ok(0);
    }
    let Some(count) = listen_fds.filter(|count| !count.is_empty()) else {
        return Ok(0);
    };
    match count.parse::<u32>() {
        Ok(0) => Ok(0),
        Ok(1) => Ok(1),
        Ok(many) => Err(ActivationError::TooMany(many)),
        Err(_) => Err(ActivationError::BadCount(count.to_string())),
    }
}

/// Takes ownership of fd 3, makes it close-on-exec, checks that it is a
/// listening Unix stream socket, and makes it non-blocking.
///
/// Called only by `Handoff::take`, once, after `passed_count` said fd 3 is
/// this process's.
pub(super) fn adopt(names: Option<&str>) -> Result<Inherited, ActivationError> {
    let unusable = |what: String| ActivationError::NotUsable(what);
    // SAFETY: F_GETFD only reads the descriptor's flags; on a number that is
    // not an open descriptor it fails with EBADF and touches nothing.
    if unsafe { libc::fcntl(FIRST_FD, libc::F_GETFD) } < 0 {
        return Err(unusable(format!(
            "is not open ({})",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: fd 3 is open (checked above) and, by the activation protocol
    // with LISTEN_PID equal to our pid, it was passed to this process for
    // it to own. Nothing else in the process claims it: this runs once
    // (guarded by `Handoff::take`), first thing in `main`.
    let fd = unsafe { OwnedFd::from_raw_fd(FIRST_FD) };
    fcntl(&fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map_err(|errno| unusable(format!("cannot be made close-on-exec: {errno}")))?;
    match getsockopt(&fd, sockopt::SockType) {
        Ok(SockType::Stream) => {}
        Ok(other) => {
            return Err(unusable(format!(
                "is a {other:?} socket, not a stream socket"
            )))
        }
        Err(errno) => return Err(unusable(format!("is not a socket: {errno}"))),
    }
    if !getsockopt(&fd, sockopt::AcceptConn).unwrap_or(false) {
        return Err(unusable("is not listening".to_string()));
    }
    let address: UnixAddr = getsockname(fd.as_raw_fd())
        .map_err(|errno| unusable(format!("has no readable address: {errno}")))?;
    if address.family() != Some(nix::sys::socket::AddressFamily::Unix) {
        return Err(unusable("is not a Unix socket".to_string()));
    }
    let path = address.path().map(|path| path.to_path_buf());
    let listener = UnixListener::from(fd);
    listener
        .set_nonblocking(true)
        .map_err(|error| unusable(format!("cannot be made non-blocking: {error}")))?;
    Ok(Inherited {
        listener,
        path,
        name: names
            .and_then(|names| names.split(':').next())
            .filter(|name| !name.is_empty())
            .map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_pid_counts() {
        assert_eq!(passed_count(None, None, 42), Ok(0));
        assert_eq!(passed_count(Some("42"), Some("1"), 42), Ok(1));
        assert_eq!(
            passed_count(Some("1"), Some("1"), 42),
            Ok(0),
            "meant for pid 1"
        );
        assert_eq!(passed_count(Some("42"), None, 42), Ok(0));
        assert_eq!(passed_count(Some("42"), Some("0"), 42), Ok(0));
    }

    #[test]
    fn malformed_or_too_many_are_errors_naming_the_value() {
        assert_eq!(
            passed_count(Some("x"), Some("1"), 42),
            Err(ActivationError::BadPid("x".into()))
        );
        assert_eq!(
            passed_count(Some("42"), Some("one"), 42),
            Err(ActivationError::BadCount("one".into()))
        );
        let error = passed_count(Some("42"), Some("2"), 42).unwrap_err();
        assert_eq!(error, ActivationError::TooMany(2));
        assert!(error.to_string().contains("LISTEN_FDS=2"), "{error}");
    }
}
