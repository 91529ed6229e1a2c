//! A terminal pair from the devpts a sandbox's view has on `/dev/pts`.
//!
//! The daemon reaches it from the host as `/proc/<leader>/root/dev/pts`:
//! `<leader>` is the sandbox's group leader (its init, or its runner in a
//! view prepared ahead), the daemon's own unreaped child, so the pid names
//! it and no other, and its root is the view's. The walk from there takes
//! one name at a time (`openat` with `O_NOFOLLOW`), so nothing the sandbox
//! could shape is followed, and what it reaches must be a devpts
//! (`fstatfs`) whose `ptmx` is the pty multiplexer (char 5:2) before it is
//! opened for the pair. The follower is the leader's peer (`TIOCGPTPEER`,
//! Linux 4.13), opened without any path; an older kernel opens `N` from the
//! same directory descriptor. glibc's `grantpt`, `ptsname` and their kind
//! are not used: they look `/dev/pts/N` up in the daemon's own `/dev`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `TTYAUX_MAJOR` and the minor of `ptmx`.
const PTMX_DEVICE: (u32, u32) = (5, 2);

/// (leader, follower) of a new terminal in the view whose group leader is
/// `pid`: unlocked, both close-on-exec and neither the daemon's
/// controlling terminal.
pub fn open_pair(pid: u32) -> io::Result<(OwnedFd, OwnedFd)> {
    let root = open_at(
        None,
        &format!("/proc/{pid}/root"),
        libc::O_PATH | libc::O_DIRECTORY,
    )
    .map_err(context(&format!(
        "open /proc/{pid}/root, the sandbox's view"
    )))?;
    let directory = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    let dev = open_at(Some(&root), "dev", directory).map_err(context("open its /dev"))?;
    let pts = open_at(Some(&dev), "pts", directory).map_err(context("open its /dev/pts"))?;
    check_devpts(&pts)?;
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_NOFOLLOW;
    let leader = open_at(Some(&pts), "ptmx", flags).map_err(|error| {
        match error.raw_os_error() {
            Some(libc::ENOSPC) => io::Error::new(
                error.kind(),
                format!("its /dev/pts/ptmx: {error}: the sandbox holds as many ptys as its devpts allows ([limits] ptys)"),
            ),
            _ => context("open its /dev/pts/ptmx")(error),
        }
    })?;
    check_ptmx(&leader)?;
    unlock(&leader)?;
    let follower = peer(&leader, &pts)?;
    Ok((leader, follower))
}

/// `openat(dir, name, flags | O_CLOEXEC)` (`open` when `dir` is `None`).
fn open_at(dir: Option<&OwnedFd>, name: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    let name = CString::new(name).map_err(|_| io::Error::other("a NUL byte in a name"))?;
    let dir = dir.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: a live descriptor (or AT_FDCWD) and a NUL-terminated name.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `pts` is the root of a devpts, not a directory the sandbox made.
fn check_devpts(pts: &OwnedFd) -> io::Result<()> {
    // SAFETY: statfs is plain data, filled by the call.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a live descriptor and a writable statfs.
    if unsafe { libc::fstatfs(pts.as_raw_fd(), &mut fs) } < 0 {
        return Err(context("fstatfs its /dev/pts")(io::Error::last_os_error()));
    }
    if fs.f_type != libc::DEVPTS_SUPER_MAGIC {
        return Err(io::Error::other(format!(
            "its /dev/pts is not a devpts (file system type {:#x})",
            fs.f_type
        )));
    }
    Ok(())
}

/// `leader` is the pty multiplexer (char 5:2).
fn check_ptmx(leader: &OwnedFd) -> io::Result<()> {
    // SAFETY: stat is plain data, filled by the call.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a live descriptor and a writable stat.
    if unsafe { libc::fstat(leader.as_raw_fd(), &mut stat) } < 0 {
        return Err(context("fstat its /dev/pts/ptmx")(
            io::Error::last_os_error(),
        ));
    }
    let device = (libc::major(stat.st_rdev), libc::minor(stat.st_rdev));
    if stat.st_mode & libc::S_IFMT != libc::S_IFCHR || device != PTMX_DEVICE {
        return Err(io::Error::other(
            "its /dev/pts/ptmx is not the pty multiplexer",
        ));
    }
    Ok(())
}

/// Unlocks the follower (`TIOCSPTLCK` 0), as `unlockpt` does.
fn unlock(leader: &OwnedFd) -> io::Result<()> {
    let unlocked: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from a live local.
    if unsafe { libc::ioctl(leader.as_raw_fd(), libc::TIOCSPTLCK, &unlocked) } < 0 {
        return Err(context("unlock the pty")(io::Error::last_os_error()));
    }
    Ok(())
}

/// The follower of `leader`: its peer, or (before Linux 4.13) its number
/// opened in `pts`.
fn peer(leader: &OwnedFd, pts: &OwnedFd) -> io::Result<OwnedFd> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: TIOCGPTPEER takes the open flags as its argument and
    // returns a new descriptor.
    let fd = unsafe { libc::ioctl(leader.as_raw_fd(), libc::TIOCGPTPEER, flags) };
    if fd >= 0 {
        // SAFETY: a descriptor the kernel just returned, owned by no one else.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    let error = io::Error::last_os_error();
    if !matches!(error.raw_os_error(), Some(libc::EINVAL | libc::ENOTTY)) {
        return Err(context("open the pty's follower")(error));
    }
    let mut number: libc::c_uint = 0;
    // SAFETY: TIOCGPTN writes one unsigned int into a live local.
    if unsafe { libc::ioctl(leader.as_raw_fd(), libc::TIOCGPTN, &mut number) } < 0 {
        return Err(context("number the pty")(io::Error::last_os_error()));
    }
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_NOFOLLOW;
    open_at(Some(pts), &number.to_string(), flags).map_err(context("open the pty's follower"))
}

/// The error of `step`.
fn context(step: &str) -> impl Fn(io::Error) -> io::Error + '_ {
    move |error| io::Error::new(error.kind(), format!("{step}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_opens_through_this_processs_own_root() {
        // This process's root is the host's: its /dev/pts is a devpts.
        if !nix::unistd::geteuid().is_root() || !std::path::Path::new("/dev/pts").is_dir() {
            return;
        }
        let (leader, follower) = open_pair(std::process::id()).unwrap();
        // SAFETY: isatty on a live descriptor.
        assert_eq!(unsafe { libc::isatty(follower.as_raw_fd()) }, 1);
        let mut number: libc::c_uint = 0;
        // SAFETY: TIOCGPTN writes one unsigned int into a live local.
        assert_eq!(
            unsafe { libc::ioctl(leader.as_raw_fd(), libc::TIOCGPTN, &mut number) },
            0
        );
        let name = std::fs::read_link(format!("/proc/self/fd/{}", follower.as_raw_fd())).unwrap();
        assert_eq!(name, std::path::PathBuf::from(format!("/dev/pts/{number}")));
    }
}
