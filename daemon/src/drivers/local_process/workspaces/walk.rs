//! Measuring a workspace so that nothing in it can hide from the count.
//!
//! A walk by path names misses what a runner can arrange: a tree deeper
//! than `PATH_MAX` (every `lstat` of its depths fails with `ENAMETOOLONG`),
//! a symbolic link swapped in mid-walk. So this walk goes from directory
//! descriptor to directory descriptor (`openat` with `O_NOFOLLOW`,
//! `fstatat` with `AT_SYMLINK_NOFOLLOW`): no path is ever longer than one
//! name, no link is followed, and a directory on another file system (a
//! mount point) is neither counted nor entered. It counts the blocks
//! actually allocated (`st_blocks`, so a sparse file counts what it holds
//! and a preallocated one what it reserved), a file of several hard links
//! once, and every entry as an inode. The directories of the current path
//! are held open, at most [`MAX_DEPTH`] of them; a deeper tree, or one of
//! more entries than asked, cannot be told and says so.

use std::collections::HashSet;
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::dir::Dir;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, FileStat, Mode, SFlag};

/// The deepest directory a walk enters (each level holds a descriptor
/// while the walk is below it). A path of 4096 nested one-letter names is
/// twice `PATH_MAX`.
pub const MAX_DEPTH: usize = 4096;

/// What a walk found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Measured {
    /// Allocated bytes, hard links counted once.
    pub bytes: u64,
    /// Files, directories and other entries, the top included.
    pub inodes: u64,
    /// False when the walk stopped early (too many entries, too deep):
    /// both figures are then lower bounds.
    pub complete: bool,
}

/// One directory being walked: its descriptor and the names not yet seen.
struct Level {
    dir: OwnedFd,
    names: Vec<CString>,
}

/// Measures the tree at `root` (a file or a directory), visiting at most
/// `max_entries` entries. A root that is gone measures as empty. Blocking.
pub fn measure(root: &Path, max_entries: u64) -> Measured {
    let Ok(top) = nix::sys::stat::lstat(root) else {
        return Measured {
            complete: true,
            ..Measured::default()
        };
    };
    let mut walk = Walk {
        device: top.st_dev,
        found: Measured {
            complete: true,
            ..Measured::default()
        },
        linked: HashSet::new(),
        max_entries,
    };
    walk.count(&top);
    if !is_dir(&top) {
        return walk.found;
    }
    let Some(first) = open_level(None, root) else {
        return walk.found;
    };
    walk.descend(first);
    walk.found
}

struct Walk {
    device: u64,
    found: Measured,
    /// (device, inode) of files of more than one link already counted.
    linked: HashSet<(u64, u64)>,
    max_entries: u64,
}

impl Walk {
    fn count(&mut self, stat: &FileStat) {
        let first_sight =
            stat.st_nlink <= 1 || is_dir(stat) || self.linked.insert((stat.st_dev, stat.st_ino));
        if first_sight {
            self.found.bytes += stat.st_blocks as u64 * 512;
            self.found.inodes += 1;
        }
    }

    /// Walks below `first`, depth first, with one open level per depth.
    fn descend(&mut self, first: Level) {
        let mut levels = vec![first];
        while let Some(level) = levels.last_mut() {
            let Some(name) = level.names.pop() else {
                levels.pop();
                continue;
            };
            let Ok(stat) = fstatat(
                level.dir.as_fd(),
                name.as_c_str(),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            ) else {
                continue; // gone since the listing
            };
            if stat.st_dev != self.device {
                continue; // a mount point: another file system's
            }
            self.count(&stat);
            if self.found.inodes > self.max_entries {
                self.found.complete = false;
                return;
            }
            if !is_dir(&stat) {
                continue;
            }
            if levels.len() >= MAX_DEPTH {
                self.found.complete = false;
                return;
            }
            let parent = levels.last().map(|level| level.dir.as_fd());
            if let Some(next) = parent.and_then(|parent| open_level(Some(parent), name.as_c_str()))
            {
                levels.push(next);
            }
        }
    }
}

fn is_dir(stat: &FileStat) -> bool {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
}

/// Opens the directory `name` (relative to `parent`, or a path without
/// one) and lists it; the listing's buffer is freed, the descriptor kept.
fn open_level<P: ?Sized + nix::NixPath>(
    parent: Option<std::os::fd::BorrowedFd<'_>>,
    name: &P,
) -> Option<Level> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let dir = match parent {
        Some(parent) => openat(parent, name, flags, Mode::empty()),
        None => nix::fcntl::open(name, flags, Mode::empty()),
    }
    .ok()?;
    let mut listing = Dir::from_fd(dir.try_clone().ok()?).ok()?;
    let names = listing
        .iter()
        .flatten()
        .map(|entry| entry.file_name().to_owned())
        .filter(|name| name.as_bytes() != b"." && name.as_bytes() != b"..")
        .collect();
    Some(Level { dir, names })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::stat::mkdirat;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sandboxd-walk-{}-{name}", std::process::id()));
        let _ = super::super::super::trash::remove(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn hard_links_count_once_and_sparse_files_as_allocated() {
        let dir = scratch("links");
        std::fs::write(dir.join("data"), vec![1u8; 256 * 1024]).unwrap();
        std::fs::hard_link(dir.join("data"), dir.join("again")).unwrap();
        let sparse = std::fs::File::create(dir.join("sparse")).unwrap();
        sparse.set_len(1 << 30).unwrap();
        std::os::unix::fs::symlink("/usr", dir.join("link")).unwrap();
        let measured = measure(&dir, u64::MAX);
        assert!(measured.complete);
        assert!(
            measured.bytes >= 256 * 1024 && measured.bytes < 1 << 20,
            "{measured:?}"
        );
        // The directory, the linked file once, the sparse file, the link.
        assert_eq!(measured.inodes, 4);
        assert!(!measure(&dir, 2).complete);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_tree_deeper_than_path_max_is_measured_and_removed() {
        let dir = scratch("deep");
        let mut here =
            nix::fcntl::open(&dir, OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty()).unwrap();
        for _ in 0..2500 {
            mkdirat(here.as_fd(), "d", Mode::from_bits_truncate(0o755)).unwrap();
            here = openat(
                here.as_fd(),
                "d",
                OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
        }
        let file = openat(
            here.as_fd(),
            "data",
            OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        nix::unistd::write(&file, &vec![7u8; 2 << 20]).unwrap();
        drop((file, here));
        let measured = measure(&dir, u64::MAX);
        assert!(measured.complete, "{measured:?}");
        assert!(measured.bytes >= 2 << 20, "{measured:?}");
        assert_eq!(measured.inodes, 2502);
        super::super::super::trash::remove(&dir).unwrap();
        assert!(!dir.exists());
    }
}
