//! Giving a workspace to its sandbox's user: the directory 0700 and owned
//! by the sandbox's uid:gid, and — when it belonged to someone else before
//! (a workspace of a sandboxd that ran every runner as one user, or one
//! whose ledger record was lost) — everything in it too, so a kept
//! workspace stays usable by, and only by, its sandbox.
//!
//! The common case (a new directory, or a respawn's own) costs one `lstat`.
//! The walk of a foreign tree goes by directory descriptors (`openat` with
//! `O_NOFOLLOW`, `fchownat` with `AT_SYMLINK_NOFOLLOW`), so a symbolic link
//! swapped in by whoever owned the tree before can never lead the daemon's
//! `chown` outside the workspace.

use std::ffi::CString;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{fchownat, Gid, Uid};

/// How deep the walk of a foreign tree goes (one descriptor per level).
const MAX_DEPTH: usize = 128;

/// Makes `workspace` (an existing directory) 0700 and `uid:gid`'s; hands
/// over its contents too when it was not `uid`'s before. Returns the uid it
/// belonged to when that was another.
pub fn give_to(workspace: &Path, uid: u32, gid: u32) -> std::io::Result<Option<u32>> {
    let metadata = std::fs::symlink_metadata(workspace)?;
    if !metadata.is_dir() {
        return Err(std::io::Error::other("exists and is not a directory"));
    }
    if metadata.mode() & 0o7777 != 0o700 {
        std::fs::set_permissions(workspace, std::fs::Permissions::from_mode(0o700))?;
    }
    if metadata.uid() == uid && metadata.gid() == gid {
        return Ok(None);
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let top = Dir::open(workspace, flags, Mode::empty())?;
    if metadata.uid() != uid {
        chown_contents(top, uid, gid, 0)?;
    }
    std::os::unix::fs::lchown(workspace, Some(uid), Some(gid))?;
    Ok((metadata.uid() != uid).then_some(metadata.uid()))
}

/// Chowns everything below `dir` (not `dir` itself), depth first.
fn chown_contents(mut dir: Dir, uid: u32, gid: u32, depth: usize) -> std::io::Result<()> {
    if depth >= MAX_DEPTH {
        return Err(std::io::Error::other(format!(
            "more than {MAX_DEPTH} directory levels to hand over"
        )));
    }
    let entries: Vec<(CString, Option<Type>)> = dir
        .iter()
        .filter_map(Result::ok)
        .filter(|entry| !matches!(entry.file_name().to_bytes(), b"." | b".."))
        .map(|entry| (entry.file_name().to_owned(), entry.file_type()))
        .collect();
    let (owner, group) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
    for (name, kind) in entries {
        match fchownat(
            dir.as_fd(),
            name.as_c_str(),
            owner,
            group,
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(()) => {}
            Err(nix::errno::Errno::ENOENT) => continue,
            Err(errno) => return Err(errno.into()),
        }
        if kind.is_none() || kind == Some(Type::Directory) {
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            match Dir::openat(dir.as_fd(), name.as_c_str(), flags, Mode::empty()) {
                Ok(child) => chown_contents(child, uid, gid, depth + 1)?,
                // Not a directory (or a symbolic link): nothing below it.
                Err(nix::errno::Errno::ENOTDIR | nix::errno::Errno::ELOOP) => {}
                Err(nix::errno::Errno::ENOENT) => {}
                Err(errno) => return Err(errno.into()),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

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
        let root = std::env::temp_dir().join(format!("sandboxd-owner-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let workspace = root.join("workspace");
        let outside = root.join("outside");
        std::fs::create_dir_all(workspace.join("a/b")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(workspace.join("a/b/file"), "x").unwrap();
        std::fs::write(outside.join("secret"), "y").unwrap();
        symlink(&outside, workspace.join("a/link")).unwrap();
        std::fs::set_permissions(&workspace, std::fs::Permissions::from_mode(0o755)).unwrap();

        assert_eq!(give_to(&workspace, 4242, 4343).unwrap(), Some(0));
        for path in ["", "a", "a/b", "a/b/file", "a/link"] {
            assert_eq!(owner(&workspace.join(path)), (4242, 4343), "{path}");
        }
        let mode = std::fs::metadata(&workspace).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        assert_eq!(owner(&outside), (0, 0), "followed the link");
        assert_eq!(owner(&outside.join("secret")), (0, 0), "followed the link");
        // Its own already: nothing to do.
        assert_eq!(give_to(&workspace, 4242, 4343).unwrap(), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
