//! The file operations themselves, on a workspace opened [`Beneath`], run
//! on the thread that holds the sandbox's user (see [`super::as_owner`]).
//! Every path was checked by the protocol's rules first (relative, no
//! `..`, no NUL); every final component is opened `O_NOFOLLOW` or looked
//! at without following, so a symlink the sandbox planted is never written
//! through, and a hard link to a file it may not write is refused by the
//! kernel (the thread has no capability to override it).

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;

use rustix::fs::{AtFlags, FileType as Kind, Mode, OFlags, Stat};
use rustix::io::Errno;
use sandboxd_protocol::files::{MAX_LIST_ENTRIES, PERMISSION_BITS};
use sandboxd_protocol::{FileChunk, FileList, FileStat, FileType, PutChunk, PutReport};
use sha2::Digest;

use super::beneath::{components, Beneath};
use super::Failure;

/// How deep a recursive remove goes (one descriptor open per level).
const MAX_REMOVE_DEPTH: usize = 256;

/// The directory holding the last component of `path`, and that component.
fn parent_of<'a>(beneath: &Beneath, path: &'a str) -> Result<(OwnedFd, &'a str), Failure> {
    let parts = components(path);
    let (name, parents) = parts.split_last().ok_or(Failure::WorkspaceItself)?;
    let dir = beneath.open_at(parents, OFlags::PATH | OFlags::DIRECTORY)?;
    Ok((dir, name))
}

/// Where an upload of `name` is written until its last chunk: a hidden
/// name of fixed length beside it (a long name plus a suffix could pass
/// the file system's limit).
pub(super) fn partial_name(name: &str) -> String {
    let digest = sha2::Sha256::digest(name.as_bytes());
    let hex: String = digest[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!(".sandboxd-part-{hex}")
}

/// One chunk of an upload; `room` is what the disk limit still allows the
/// workspace (`None`: no limit).
pub fn put(beneath: &Beneath, chunk: &PutChunk, room: Option<u64>) -> Result<PutReport, Failure> {
    let (dir, name) = parent_of(beneath, &chunk.path)?;
    let partial = partial_name(name);
    let file = if chunk.offset == 0 {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW;
        rustix::fs::openat(&dir, &partial, flags | OFlags::CLOEXEC, Mode::from(0o600))?
    } else {
        let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let file =
            rustix::fs::openat(&dir, &partial, flags, Mode::empty()).map_err(
                |error| match error {
                    Errno::NOENT => Failure::NoUpload,
                    other => other.into(),
                },
            )?;
        let held = rustix::fs::fstat(&file)?;
        if Kind::from_raw_mode(held.st_mode) != Kind::RegularFile {
            return Err(Failure::NotRegular);
        }
        if held.st_size as u64 != chunk.offset {
            return Err(Failure::Resume(held.st_size as u64));
        }
        file
    };
    if room.is_some_and(|room| chunk.data.len() as u64 > room) {
        let _ = rustix::fs::unlinkat(&dir, &partial, AtFlags::empty());
        return Err(Failure::OverDiskLimit);
    }
    let file = std::fs::File::from(file);
    if let Err(error) = file.write_all_at(&chunk.data, chunk.offset) {
        let _ = rustix::fs::unlinkat(&dir, &partial, AtFlags::empty());
        return Err(error.into());
    }
    if chunk.last {
        let placed = rustix::fs::fchmod(&file, Mode::from(chunk.mode & PERMISSION_BITS))
            .and_then(|()| rustix::fs::renameat(&dir, &partial, &dir, name));
        if let Err(error) = placed {
            // A directory in the way, say: nothing half-done is kept.
            let _ = rustix::fs::unlinkat(&dir, &partial, AtFlags::empty());
            return Err(error.into());
        }
    }
    Ok(PutReport {
        received: chunk.offset + chunk.data.len() as u64,
        complete: chunk.last,
    })
}

/// At most `max` bytes of a regular file, from `offset`.
pub fn get(beneath: &Beneath, path: &str, offset: u64, max: u32) -> Result<FileChunk, Failure> {
    // Non-blocking: opening a FIFO the sandbox planted must not hang.
    let file = beneath.open_at(&components(path), OFlags::RDONLY | OFlags::NONBLOCK)?;
    let stat = rustix::fs::fstat(&file)?;
    if Kind::from_raw_mode(stat.st_mode) != Kind::RegularFile {
        return Err(Failure::NotRegular);
    }
    let file = std::fs::File::from(file);
    let mut data = vec![0; max as usize];
    let mut filled = 0;
    while filled < data.len() {
        match file.read_at(&mut data[filled..], offset + filled as u64)? {
            0 => break,
            read => filled += read,
        }
    }
    data.truncate(filled);
    let size = stat.st_size as u64;
    Ok(FileChunk {
        offset,
        eof: offset + filled as u64 >= size,
        size,
        data,
    })
}

/// One file's facts, its last component not followed.
pub fn stat(beneath: &Beneath, path: &str) -> Result<FileStat, Failure> {
    if components(path).is_empty() {
        let root = beneath.open_at(&[], OFlags::PATH | OFlags::DIRECTORY)?;
        return Ok(file_stat(".".into(), &rustix::fs::fstat(&root)?));
    }
    let (dir, name) = parent_of(beneath, path)?;
    let stat = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(file_stat(name.to_string(), &stat))
}

/// A directory's entries, by name.
pub fn list(beneath: &Beneath, path: &str) -> Result<FileList, Failure> {
    let dir = beneath.open_at(&components(path), OFlags::RDONLY | OFlags::DIRECTORY)?;
    let mut entries = Vec::new();
    let mut truncated = false;
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        if entries.len() == MAX_LIST_ENTRIES {
            truncated = true;
            break;
        }
        // Gone since it was listed: left out.
        let Ok(stat) = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let shown = std::ffi::OsStr::from_bytes(name.to_bytes()).to_string_lossy();
        entries.push(file_stat(shown.into_owned(), &stat));
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(FileList { entries, truncated })
}

/// Removes a file or symlink, or a directory (its contents too when
/// `recursive`), never crossing into another file system.
pub fn remove(beneath: &Beneath, path: &str, recursive: bool) -> Result<(), Failure> {
    let (dir, name) = parent_of(beneath, path)?;
    let stat = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if Kind::from_raw_mode(stat.st_mode) != Kind::Directory {
        return Ok(rustix::fs::unlinkat(&dir, name, AtFlags::empty())?);
    }
    if recursive {
        remove_tree(beneath, &dir, name.as_bytes(), 0)
    } else {
        rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR).map_err(|error| match error {
            Errno::NOTEMPTY => Failure::NotEmpty,
            other => other.into(),
        })
    }
}

/// The directory `name` in `parent`, with everything in it.
pub(super) fn remove_tree(
    beneath: &Beneath,
    parent: &OwnedFd,
    name: &[u8],
    depth: usize,
) -> Result<(), Failure> {
    if depth >= MAX_REMOVE_DEPTH {
        return Err(Failure::TooDeep);
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = rustix::fs::openat(parent.as_fd(), name, flags, Mode::empty())?;
    beneath.same_file_system(&dir)?;
    let names: Vec<Vec<u8>> = rustix::fs::Dir::read_from(&dir)?
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_bytes().to_vec())
        .filter(|name| name != b"." && name != b"..")
        .collect();
    for child in names {
        let stat = rustix::fs::statat(&dir, child.as_slice(), AtFlags::SYMLINK_NOFOLLOW)?;
        if Kind::from_raw_mode(stat.st_mode) == Kind::Directory {
            remove_tree(beneath, &dir, &child, depth + 1)?;
        } else {
            rustix::fs::unlinkat(&dir, child.as_slice(), AtFlags::empty())?;
        }
    }
    Ok(rustix::fs::unlinkat(
        parent.as_fd(),
        name,
        AtFlags::REMOVEDIR,
    )?)
}

fn file_stat(name: String, stat: &Stat) -> FileStat {
    let file_type = match Kind::from_raw_mode(stat.st_mode) {
        Kind::RegularFile => FileType::File,
        Kind::Directory => FileType::Dir,
        Kind::Symlink => FileType::Symlink,
        _ => FileType::Other,
    };
    let mtime_ms = (stat.st_mtime.max(0) as u64) * 1000 + stat.st_mtime_nsec / 1_000_000;
    FileStat {
        name,
        file_type,
        size: stat.st_size.max(0) as u64,
        mode: stat.st_mode & 0o7777,
        mtime_unix_ms: mtime_ms,
    }
}
