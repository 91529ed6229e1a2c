//! What an entry of an archive put into a workspace may be, checked as it
//! is read, before anything of it is written: its name stays in the
//! directory it is unpacked into, a symlink stays in the workspace from
//! its place, a hard link names a file the archive brought earlier (one in
//! the staging directory, which holds nothing else), and no device node
//! or FIFO comes in. Refusals name the entry.

use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType as Kind, Mode, OFlags};
use tar::EntryType;

use super::Failure;
use crate::drivers::archive_names::{entry_parts, shown, symlink_stays_inside};

fn refused(name: &[u8], why: impl Into<String>) -> Failure {
    Failure::BadEntry {
        name: shown(name),
        why: why.into(),
    }
}

/// An entry as read: its name, kind and link name.
pub struct Entry<'a> {
    pub name: &'a [u8],
    pub kind: EntryType,
    pub link: &'a [u8],
}

/// The components of `entry`'s name, once the entry is found fit to
/// unpack under `stage`, `depth` directories below the workspace.
pub fn check(entry: &Entry<'_>, depth: usize, stage: &OwnedFd) -> Result<Vec<Vec<u8>>, Failure> {
    let Entry { name, kind, link } = *entry;
    let parts = entry_parts(name).map_err(|why| refused(name, why))?;
    if parts.is_empty() && kind != EntryType::Directory && kind != EntryType::XGlobalHeader {
        return Err(refused(name, "its name names no file"));
    }
    match kind {
        EntryType::Regular
        | EntryType::Continuous
        | EntryType::GNUSparse
        | EntryType::Directory
        | EntryType::XGlobalHeader => {}
        EntryType::Symlink => {
            symlink_stays_inside(link, depth + parts.len() - 1, None)
                .map_err(|why| refused(name, why))?;
        }
        EntryType::Link => {
            if !is_staged_file(stage, link) {
                return Err(refused(
                    name,
                    format!(
                        "it is a hard link to '{}', which is no file earlier in the archive",
                        shown(link)
                    ),
                ));
            }
        }
        EntryType::Char | EntryType::Block | EntryType::Fifo => {
            return Err(refused(name, "it is a device node or a FIFO"));
        }
        other => {
            return Err(refused(
                name,
                format!("it is of a kind not unpacked here ({other:?})"),
            ));
        }
    }
    Ok(parts.into_iter().map(<[u8]>::to_vec).collect())
}

/// Whether `name` is a regular file in `stage`, no symlink followed.
fn is_staged_file(stage: &OwnedFd, name: &[u8]) -> bool {
    let Ok(parts) = entry_parts(name) else {
        return false;
    };
    let Some((last, parents)) = parts.split_last() else {
        return false;
    };
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = match rustix::fs::openat(stage, ".", flags, Mode::empty()) {
        Ok(dir) => dir,
        Err(_) => return false,
    };
    for part in parents {
        match rustix::fs::openat(&dir, *part, flags, Mode::empty()) {
            Ok(next) => dir = next,
            Err(_) => return false,
        }
    }
    rustix::fs::statat(&dir, *last, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|stat| Kind::from_raw_mode(stat.st_mode) == Kind::RegularFile)
}
