//! The end of a `put_tar`: what the archive unpacked into its staging
//! directory is moved into the target directory, merging into directories
//! that exist as `docker cp` does, once nothing stands in its way; then the
//! archive's directories get their modes and times. Nothing is resolved
//! through a symlink: every name is opened with `O_NOFOLLOW`.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, FileType as Kind, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;

use super::Failure;
use crate::drivers::archive_names::shown;

/// A directory of the archive: its name and what it gets once in place.
pub struct DirEntry {
    pub parts: Vec<Vec<u8>>,
    pub mode: u32,
    pub mtime: u64,
}

/// Opens the directories `parts` under `stage`, none followed if a link.
pub fn open_parents(stage: &OwnedFd, parts: &[Vec<u8>]) -> Result<OwnedFd, Failure> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = rustix::fs::openat(stage, ".", flags, Mode::empty())?;
    for part in parts {
        dir = rustix::fs::openat(&dir, part.as_slice(), flags, Mode::empty())?;
    }
    Ok(dir)
}

/// An entry's time, as a file's access and modification times.
pub fn times(mtime: u64) -> Timestamps {
    let at = Timespec {
        tv_sec: mtime.min(i64::MAX as u64) as i64,
        tv_nsec: 0,
    };
    Timestamps {
        last_access: at,
        last_modification: at,
    }
}

/// The entries of a directory, `.` and `..` left out.
fn names(dir: &OwnedFd) -> Result<Vec<Vec<u8>>, Failure> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    Ok(names)
}

fn is_dir(stat: &rustix::fs::Stat) -> bool {
    Kind::from_raw_mode(stat.st_mode) == Kind::Directory
}

fn open_dir(parent: &OwnedFd, name: &[u8]) -> Result<OwnedFd, Failure> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(parent, name, flags, Mode::empty())?)
}

/// A directory of the archive where the target holds a file, or a file
/// where it holds a directory, refused before anything moves. `path` is
/// where the walk is, for the refusal.
pub fn find_conflicts(stage: &OwnedFd, place: &OwnedFd, path: &mut Vec<u8>) -> Result<(), Failure> {
    for name in names(stage)? {
        let staged = rustix::fs::statat(stage, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)?;
        let there = match rustix::fs::statat(place, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => continue,
            other => other?,
        };
        let depth = path.len();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&name);
        match (is_dir(&staged), is_dir(&there)) {
            (true, true) => {
                let (inner_stage, inner_place) = (open_dir(stage, &name)?, open_dir(place, &name)?);
                find_conflicts(&inner_stage, &inner_place, path)?;
            }
            (false, false) => {}
            (true, false) => {
                return Err(Failure::Conflict(
                    shown(path),
                    "the archive holds a directory where the target holds something else",
                ));
            }
            (false, true) => {
                return Err(Failure::Conflict(
                    shown(path),
                    "the archive holds a file where the target holds a directory",
                ));
            }
        }
        path.truncate(depth);
    }
    Ok(())
}

/// Moves what `stage` holds into `place`: a new name by a rename, a file
/// over a file (or symlink) by a rename, a directory into the directory
/// already there entry by entry.
pub fn merge(stage: &OwnedFd, place: &OwnedFd) -> Result<(), Failure> {
    for name in names(stage)? {
        let staged = rustix::fs::statat(stage, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)?;
        let there = rustix::fs::statat(place, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW);
        if is_dir(&staged) && there.as_ref().is_ok_and(is_dir) {
            merge(&open_dir(stage, &name)?, &open_dir(place, &name)?)?;
            continue;
        }
        rustix::fs::renameat(stage, name.as_slice(), place, name.as_slice())?;
    }
    Ok(())
}

/// The archive's directories get their modes and times, deepest first.
pub fn finish_dirs(target: &OwnedFd, mut dirs: Vec<DirEntry>) -> Result<(), Failure> {
    dirs.sort_by_key(|dir| std::cmp::Reverse(dir.parts.len()));
    for dir in dirs {
        let Some((last, parents)) = dir.parts.split_last() else {
            continue;
        };
        let parent = open_parents(target, parents)?;
        let opened = open_dir(&parent, last)?;
        rustix::fs::fchmod(opened.as_fd(), Mode::from(dir.mode))?;
        rustix::fs::futimens(opened.as_fd(), &times(dir.mtime))?;
    }
    Ok(())
}
