//! A cgroup's `cgroup.procs`, opened relative to the cgroup's directory
//! descriptor: what a process is moved into a cgroup through, by the
//! runner's clone and by the helpers that join a sandbox's cgroup.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `cgroup.procs` in the cgroup directory `dir`, for writing.
pub fn open_procs_in(dir: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: openat with a live directory descriptor and a C string.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c"cgroup.procs".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor openat just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
