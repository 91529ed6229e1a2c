//! Opening paths beneath a workspace and nowhere else.
//!
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)`
//! (Linux 5.6+) resolves a path the way a chroot would: no `..` above the
//! workspace, no absolute symlink, no `/proc` magic link, no mount crossed,
//! checked by the kernel at every step, so a link the sandbox plants
//! between a check and a use cannot lead out. On an older kernel the path
//! is walked one component at a time with `O_NOFOLLOW`, refusing every
//! symlink and every other file system on the way: stricter (a link that
//! stays inside is refused too), never looser.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Set once `openat2` answered `ENOSYS`: the walk is used from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// A workspace, open, and the file system it is on.
pub struct Beneath {
    root: OwnedFd,
    dev: u64,
}

impl Beneath {
    /// Opens `workspace` (a path of the daemon's own, never the sandbox's).
    pub fn open(workspace: &Path) -> std::io::Result<Beneath> {
        let root = rustix::fs::open(
            workspace,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let dev = rustix::fs::fstat(&root)?.st_dev;
        Ok(Beneath { root, dev })
    }

    /// `relative` (components of a checked path; none: the workspace),
    /// opened with `flags` beneath the workspace.
    pub fn open_at(&self, relative: &[&str], flags: OFlags) -> std::io::Result<OwnedFd> {
        let flags = flags | OFlags::CLOEXEC;
        if relative.is_empty() {
            return Ok(rustix::fs::openat(&self.root, ".", flags, Mode::empty())?);
        }
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            let resolve =
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_XDEV;
            match rustix::fs::openat2(
                &self.root,
                relative.join("/"),
                flags,
                Mode::empty(),
                resolve,
            ) {
                Err(Errno::NOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
                other => return Ok(other?),
            }
        }
        self.walk(relative, flags)
    }

    /// The fallback: one component at a time, no symlink followed, no
    /// other file system entered.
    fn walk(&self, relative: &[&str], flags: OFlags) -> std::io::Result<OwnedFd> {
        let (last, parents) = relative.split_last().expect("a component at least");
        let mut dir: Option<OwnedFd> = None;
        for part in parents {
            let at = dir.as_ref().map_or(self.root.as_fd(), |fd| fd.as_fd());
            let next = rustix::fs::openat(
                at,
                *part,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|error| symlink_as_loop(at, part, error))?;
            self.same_file_system(&next)?;
            dir = Some(next);
        }
        let at = dir.as_ref().map_or(self.root.as_fd(), |fd| fd.as_fd());
        let file = rustix::fs::openat(at, *last, flags | OFlags::NOFOLLOW, Mode::empty())?;
        self.same_file_system(&file)?;
        Ok(file)
    }

    /// `EXDEV` when `fd` is on another file system than the workspace.
    pub fn same_file_system(&self, fd: &OwnedFd) -> std::io::Result<()> {
        if rustix::fs::fstat(fd)?.st_dev != self.dev {
            return Err(Errno::XDEV.into());
        }
        Ok(())
    }
}

/// `ELOOP` for a directory component that is a symlink (`O_NOFOLLOW`
/// with `O_DIRECTORY` says `ENOTDIR`), as `openat2` says it.
fn symlink_as_loop(at: std::os::fd::BorrowedFd<'_>, part: &str, error: Errno) -> Errno {
    let is_link = rustix::fs::statat(at, part, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|stat| rustix::fs::FileType::from_raw_mode(stat.st_mode).is_symlink());
    if error == Errno::NOTDIR && is_link {
        Errno::LOOP
    } else {
        error
    }
}

/// The components of a checked relative path, without empty ones and `.`.
pub fn components(path: &str) -> Vec<&str> {
    path.split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_out_is_refused_both_ways_and_a_path_inside_is_opened() {
        let dir = crate::test_dir::TestDir::new("files-beneath");
        let workspace = dir.0.join("ws");
        std::fs::create_dir_all(workspace.join("sub")).unwrap();
        std::fs::write(workspace.join("sub/file"), b"inside").unwrap();
        std::os::unix::fs::symlink("/etc", workspace.join("out")).unwrap();
        std::os::unix::fs::symlink("../../..", workspace.join("sub/up")).unwrap();
        let beneath = Beneath::open(&workspace).unwrap();
        let read = OFlags::RDONLY;
        assert!(beneath.open_at(&components("sub/./file"), read).is_ok());
        for escape in ["out/passwd", "sub/up/etc/passwd"] {
            let error = beneath.open_at(&components(escape), read).unwrap_err();
            assert_eq!(error.raw_os_error(), Some(libc::EXDEV), "{escape}");
            let walked = beneath.walk(&components(escape), read).unwrap_err();
            assert_eq!(walked.raw_os_error(), Some(libc::ELOOP), "{escape}");
        }
        assert_eq!(components("./a//b/."), ["a", "b"]);
    }
}
