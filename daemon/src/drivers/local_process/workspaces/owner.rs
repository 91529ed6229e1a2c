//! Giving a workspace to its sandbox's user: the directory 0700 and owned
//! by the sandbox's uid:gid, and — when it belonged to someone else before
//! (a workspace of a sandboxd that ran every runner as one user, or one
//! whose ledger record was lost) — its contents too, so a kept workspace
//! stays usable by its sandbox.
//!
//! The common case (a new directory, or a respawn's own) costs one open
//! and one `fstat`.
//!
//! The walk of a foreign tree is done as root on a tree its previous owner
//! shaped, so it changes only what it has verified, and only through the
//! descriptor it verified:
//! - each entry is opened `O_PATH | O_NOFOLLOW` relative to its verified
//!   parent's descriptor (one name from `readdir`, never a path resolved
//!   again), so a symbolic link is the link itself and a directory swapped
//!   for one after the look is never followed;
//! - it is handed over only when the previous owner owns it and, unless a
//!   directory, it has a single link: a hard link of a file of root's, of
//!   another sandbox's (all of them shared one uid under `run_as`), or of
//!   any file with a name outside the workspace, is left as it is;
//! - the change is `fchownat(fd, "", AT_EMPTY_PATH)` on that descriptor.
//!
//! What is left is counted and logged. No crate (`openat2`, `pathrs`,
//! `cap-std`): every open here resolves one name from `readdir` against a
//! directory descriptor with `O_NOFOLLOW`, which is already all that
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` would enforce, on every kernel.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, FileStat, Mode, SFlag};

/// How deep the walk of a foreign tree goes (one descriptor per level).
const MAX_DEPTH: usize = 128;
/// How many of the entries left as they were are named in the log.
const NAMED_IN_LOG: usize = 5;

/// Makes `workspace` (an existing directory) 0700 and `uid:gid`'s; hands
/// over its contents too when it was not `uid`'s before (see the module
/// doc). Returns the uid it belonged to when that was another.
pub fn give_to(workspace: &Path, uid: u32, gid: u32) -> io::Result<Option<u32>> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let top = nix::fcntl::open(workspace, flags, Mode::empty()).map_err(|errno| match errno {
        nix::errno::Errno::ENOTDIR | nix::errno::Errno::ELOOP => {
            io::Error::other("exists and is not a directory")
        }
        errno => errno.into(),
    })?;
    let stat = fstat(&top)?;
    if stat.st_mode & 0o7777 != 0o700 {
        nix::sys::stat::fchmod(&top, Mode::from_bits_truncate(0o700))?;
    }
    if stat.st_uid == uid && stat.st_gid == gid {
        return Ok(None);
    }
    if stat.st_uid != uid {
        let mut handover = Handover::new(stat.st_uid, uid, gid);
        let walked = handover.contents(top.try_clone()?, Path::new(""), 0);
        handover.log(workspace);
        walked?;
    }
    nix::unistd::fchown(&top, Some(uid.into()), Some(gid.into()))?;
    Ok((stat.st_uid != uid).then_some(stat.st_uid))
}

/// One walk: from whom to whom, and what it left as it was.
struct Handover {
    previous: u32,
    uid: u32,
    gid: u32,
    handed: u64,
    skipped: u64,
    /// The first few skipped, relative to the workspace.
    named: Vec<PathBuf>,
}

impl Handover {
    fn new(previous: u32, uid: u32, gid: u32) -> Handover {
        Handover {
            previous,
            uid,
            gid,
            handed: 0,
            skipped: 0,
            named: Vec::new(),
        }
    }

    /// Hands over what is below the directory `dir` (not `dir` itself),
    /// depth first; `at` is its path in the workspace, for the log.
    fn contents(&mut self, dir: OwnedFd, at: &Path, depth: usize) -> io::Result<()> {
        if depth >= MAX_DEPTH {
            return Err(io::Error::other(format!(
                "more than {MAX_DEPTH} directory levels to hand over"
            )));
        }
        let mut listing = Dir::from_fd(dir)?;
        let names: Vec<CString> = listing
            .iter()
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_owned())
            .filter(|name| !matches!(name.to_bytes(), b"." | b".."))
            .collect();
        let dir = listing.as_fd();
        for name in names {
            self.entry(dir, &name, at, depth)?;
        }
        Ok(())
    }

    /// One entry of `dir`: opened without following it, checked, handed
    /// over through its descriptor, and walked when a directory.
    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        at: &Path,
        depth: usize,
    ) -> io::Result<()> {
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let entry = match openat(dir, name, flags, Mode::empty()) {
            Ok(entry) => entry,
            // Gone since the listing: nothing to hand over.
            Err(nix::errno::Errno::ENOENT) => return Ok(()),
            Err(errno) => return Err(errno.into()),
        };
        let stat = fstat(&entry)?;
        let path = at.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        if !self.may_hand_over(&stat) {
            self.skip(path);
            return Ok(());
        }
        fchown_empty_path(entry.as_fd(), self.uid, self.gid)?;
        self.handed += 1;
        if is_directory(&stat) {
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            // The very directory checked: "." of its own descriptor.
            let listing = openat(&entry, c".", flags, Mode::empty())?;
            self.contents(listing, &path, depth + 1)?;
        }
        Ok(())
    }

    /// The previous owner's, and for anything but a directory its only
    /// name (a second one may be outside the workspace).
    fn may_hand_over(&self, stat: &FileStat) -> bool {
        stat.st_uid == self.previous && (is_directory(stat) || stat.st_nlink == 1)
    }

    fn skip(&mut self, path: PathBuf) {
        self.skipped += 1;
        if self.named.len() < NAMED_IN_LOG {
            self.named.push(path);
        }
    }

    fn log(&self, workspace: &Path) {
        if self.skipped == 0 {
            return;
        }
        let named: Vec<String> = self
            .named
            .iter()
            .map(|path| path.display().to_string())
            .collect();
        tracing::warn!(
            workspace = %workspace.display(),
            previous = self.previous,
            uid = self.uid,
            handed = self.handed,
            skipped = self.skipped,
            first_skipped = %named.join(", "),
            "a workspace's hand-over left entries as they were: not the previous owner's, or a file with more than one link (a hard link may have a name outside the workspace)"
        );
    }
}

fn is_directory(stat: &FileStat) -> bool {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR
}

/// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH)`: the file `fd` (an `O_PATH`
/// descriptor, a symbolic link's own included) itself.
fn fchown_empty_path(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: a live descriptor, a NUL-terminated empty path; the call
    // reads nothing else.
    let result =
        unsafe { libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH) };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    fn owner(path: &Path) -> (u32, u32) {
        let metadata = std::fs::symlink_metadata(path).unwrap();
        (metadata.uid(), metadata.gid())
    }

    #[test]
    fn hands_over_a_foreign_tree_without_following_links() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: chown needs root");
            return;
        }
        let dir = crate::test_dir::TestDir::new("owner");
        let workspace = dir.0.join("workspace");
        let outside = dir.0.join("outside");
        std::fs::create_dir_all(workspace.join("a/b")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(workspace.join("a/b/file"), "x").unwrap();
        std::fs::write(outside.join("secret"), "y").unwrap();
        symlink(&outside, workspace.join("a/link")).unwrap();
        std::fs::set_permissions(&workspace, std::fs::Permissions::from_mode(0o755)).unwrap();
        let previous = ["", "a", "a/b", "a/b/file", "a/link"];
        for path in previous {
            std::os::unix::fs::lchown(workspace.join(path), Some(4141), Some(4141)).unwrap();
        }
        // Root's file, hard-linked in; a file of root's made in; and a
        // file of the previous owner's with a second name.
        std::fs::hard_link(outside.join("secret"), workspace.join("a/stolen")).unwrap();
        std::fs::write(workspace.join("a/roots"), "z").unwrap();
        std::fs::write(workspace.join("a/twice"), "t").unwrap();
        std::os::unix::fs::lchown(workspace.join("a/twice"), Some(4141), Some(4141)).unwrap();
        std::fs::hard_link(workspace.join("a/twice"), outside.join("twice")).unwrap();

        assert_eq!(give_to(&workspace, 4242, 4343).unwrap(), Some(4141));
        for path in previous {
            assert_eq!(owner(&workspace.join(path)), (4242, 4343), "{path}");
        }
        for path in ["a/stolen", "a/roots"] {
            assert_eq!(owner(&workspace.join(path)), (0, 0), "{path}");
        }
        assert_eq!(owner(&workspace.join("a/twice")), (4141, 4141));
        let mode = std::fs::metadata(&workspace).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        assert_eq!(owner(&outside), (0, 0), "followed the link");
        assert_eq!(owner(&outside.join("secret")), (0, 0), "followed the link");
        // Its own already: nothing to do.
        assert_eq!(give_to(&workspace, 4242, 4343).unwrap(), None);
    }

    #[test]
    fn a_workspace_that_is_a_symbolic_link_is_refused() {
        let dir = crate::test_dir::TestDir::new("owner-link");
        std::fs::create_dir(dir.0.join("real")).unwrap();
        symlink(dir.0.join("real"), dir.0.join("workspace")).unwrap();
        let error = give_to(&dir.0.join("workspace"), 4242, 4343).unwrap_err();
        assert!(error.to_string().contains("not a directory"), "{error}");
    }
}
