//! `put_tar`: a tar stream kept as an upload is (see [`super::ops::put`]),
//! then, after its last chunk, checked whole ([`super::tar_check`]),
//! unpacked into a hidden staging directory inside its target directory
//! and only then moved into place, merging into directories that exist as
//! `docker cp` does. Runs on the thread that holds the sandbox's user, so
//! what it writes is the sandbox's own and nothing it makes is chowned.
//!
//! Nothing is resolved through a symlink: the target directory is opened
//! beneath the workspace ([`Beneath`]), and every name under it with
//! `O_NOFOLLOW` one component at a time, so neither a link the sandbox
//! planted nor one the archive brings is written through.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, FileType as Kind, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;
use sandboxd_protocol::files::PERMISSION_BITS;
use sandboxd_protocol::PutChunk;
use sandboxd_protocol::PutReport;
use tar::EntryType;

use super::beneath::{components, Beneath};
use super::tar_check::{check, corrupt};
use super::{ops, Failure};
use crate::drivers::archive_names::{entry_parts, shown};

/// Where the stream is kept until its last chunk, inside the target
/// directory (its hidden partial file is named after this).
const STREAM_NAME: &str = ".sandboxd-tar-stream";
/// The staging directory, inside the target directory.
const STAGING_NAME: &str = ".sandboxd-tar-staging";

/// One chunk of a tar stream into the directory `chunk.path`; `room` is
/// what the disk limit still allows (`None`: no limit).
pub fn put(beneath: &Beneath, chunk: &PutChunk, room: Option<u64>) -> Result<PutReport, Failure> {
    let target = beneath.open_at(&components(&chunk.path), OFlags::RDONLY | OFlags::DIRECTORY)?;
    let mut kept = chunk.clone();
    kept.path = join(&chunk.path, STREAM_NAME);
    kept.last = false;
    kept.mode = 0o600;
    let report = ops::put(beneath, &kept, room)?;
    if !chunk.last {
        return Ok(report);
    }
    let stream = ops::partial_name(STREAM_NAME);
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let opened = rustix::fs::openat(&target, stream.as_str(), flags, Mode::empty());
    let result = opened.map_err(Failure::from).and_then(|file| {
        let room = room.map(|room| room.saturating_sub(chunk.data.len() as u64));
        let depth = components(&chunk.path).len();
        let base = join(&chunk.path, "");
        unpack_and_place(beneath, &target, File::from(file), depth, room, &base)
    });
    let _ = rustix::fs::unlinkat(&target, stream.as_str(), AtFlags::empty());
    result?;
    Ok(PutReport {
        received: report.received,
        complete: true,
    })
}

fn join(dir: &str, name: &str) -> String {
    match dir.trim_end_matches('/') {
        "" | "." => name.to_string(),
        dir => format!("{dir}/{name}"),
    }
}

/// Checks, unpacks into staging, moves into place; the staging directory
/// is gone afterwards whatever happened.
fn unpack_and_place(
    beneath: &Beneath,
    target: &OwnedFd,
    mut file: File,
    depth: usize,
    room: Option<u64>,
    base: &str,
) -> Result<(), Failure> {
    let checked = check(&file, depth)?;
    if room.is_some_and(|room| checked.bytes > room) {
        return Err(Failure::OverDiskLimit);
    }
    file.rewind()?;
    let staging = ops::partial_name(STAGING_NAME);
    if rustix::fs::statat(target, staging.as_str(), AtFlags::SYMLINK_NOFOLLOW).is_ok() {
        // Left by a daemon that died mid-unpack.
        ops::remove_tree(beneath, target, staging.as_bytes(), 0)?;
    }
    rustix::fs::mkdirat(target, staging.as_str(), Mode::from(0o700))?;
    let result = (|| {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let stage = rustix::fs::openat(target, staging.as_str(), flags, Mode::empty())?;
        let dirs = unpack(&stage, file, room, base)?;
        find_conflicts(&stage, target, &mut Vec::new())?;
        merge(&stage, target)?;
        finish_dirs(target, dirs)
    })();
    let _ = ops::remove_tree(beneath, target, staging.as_bytes(), 0);
    result
}

/// A directory of the archive: its name and what it gets once in place.
struct DirEntry {
    parts: Vec<Vec<u8>>,
    mode: u32,
    mtime: u64,
}

/// Writes every entry under `stage`; answers the archive's directories,
/// whose modes and times are set once everything is in place (a
/// read-only directory could not be filled or emptied before).
fn unpack(
    stage: &OwnedFd,
    file: File,
    room: Option<u64>,
    base: &str,
) -> Result<Vec<DirEntry>, Failure> {
    // The stream's bytes are copied from its file by offset (in the
    // kernel where it can), so the archive seeks past them.
    let mut unpacking = Unpacking {
        stage,
        stream: file.try_clone()?,
        room,
        written: 0,
    };
    let mut archive = tar::Archive::new(file);
    let mut dirs = Vec::new();
    for entry in archive.entries_with_seek().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        let name = entry.path_bytes().into_owned();
        let placed = unpacking
            .entry(&mut entry, &name)
            .map_err(|error| match error {
                Failure::Io(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                    Failure::Corrupt(format!(
                        "it ends inside the data of '{}' (truncated)",
                        shown(&name)
                    ))
                }
                Failure::Io(error) => Failure::AtEntry(format!("{base}{}", shown(&name)), error),
                other => other,
            })?;
        dirs.extend(placed);
    }
    Ok(dirs)
}

/// What unpacking keeps between entries.
struct Unpacking<'a> {
    stage: &'a OwnedFd,
    /// The stream's file, read by offset.
    stream: File,
    room: Option<u64>,
    /// The bytes of the files written so far.
    written: u64,
}

impl Unpacking<'_> {
    /// Writes one entry named `name` under the staging directory; answers
    /// it when it is a directory (its mode and time come at the end).
    fn entry(
        &mut self,
        entry: &mut tar::Entry<'_, File>,
        name: &[u8],
    ) -> Result<Option<DirEntry>, Failure> {
        let parts: Vec<Vec<u8>> = entry_parts(name)
            .map_err(|why| Failure::BadEntry {
                name: shown(name),
                why: why.into(),
            })?
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect();
        let header = entry.header().clone();
        let mode = header.mode().unwrap_or(0o644) & PERMISSION_BITS;
        let mtime = header.mtime().unwrap_or(0);
        let kind = header.entry_type();
        let Some((last, parents)) = parts.split_last() else {
            return Ok(None); // `.`: the target directory itself.
        };
        if kind == EntryType::XGlobalHeader {
            return Ok(None); // metadata, not a file
        }
        let parent = make_parents(self.stage, parents)?;
        match kind {
            EntryType::Directory => {
                make_dir(&parent, last)?;
                return Ok(Some(DirEntry { parts, mode, mtime }));
            }
            EntryType::Symlink => {
                let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                clear(&parent, last)?;
                rustix::fs::symlinkat(target.as_slice(), &parent, last.as_slice())?;
                set_times(&parent, last, mtime, AtFlags::SYMLINK_NOFOLLOW)?;
            }
            EntryType::Link => {
                let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                let target = entry_parts(&target).unwrap_or_default();
                let (from_name, from_parents) = target.split_last().ok_or(Failure::NotRegular)?;
                let owned: Vec<Vec<u8>> = from_parents.iter().map(|p| p.to_vec()).collect();
                let from = open_parents(self.stage, &owned)?;
                clear(&parent, last)?;
                let flags = AtFlags::empty();
                rustix::fs::linkat(&from, *from_name, &parent, last.as_slice(), flags)?;
            }
            _ => {
                let size = entry.size();
                self.written = self.written.saturating_add(size);
                if self.room.is_some_and(|room| self.written > room) {
                    return Err(Failure::OverDiskLimit);
                }
                let data = match kind {
                    EntryType::Regular | EntryType::Continuous => {
                        Data::Range(&self.stream, entry.raw_file_position())
                    }
                    _ => Data::Reader(entry),
                };
                write_file(&parent, last, data, size, mode, mtime)?;
            }
        }
        Ok(None)
    }
}

/// Opens the directories `parts` under `stage`, none followed if a link.
fn open_parents(stage: &OwnedFd, parts: &[Vec<u8>]) -> Result<OwnedFd, Failure> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = rustix::fs::openat(stage, ".", flags, Mode::empty())?;
    for part in parts {
        dir = rustix::fs::openat(&dir, part.as_slice(), flags, Mode::empty())?;
    }
    Ok(dir)
}

/// As [`open_parents`], making the directories that are missing (as tar
/// does for an archive without their entries).
fn make_parents(stage: &OwnedFd, parts: &[Vec<u8>]) -> Result<OwnedFd, Failure> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = rustix::fs::openat(stage, ".", flags, Mode::empty())?;
    for part in parts {
        make_dir(&dir, part)?;
        dir = rustix::fs::openat(&dir, part.as_slice(), flags, Mode::empty()).map_err(|error| {
            match error {
                // A symlink of the archive where a directory was needed.
                Errno::NOTDIR | Errno::LOOP => Errno::LOOP,
                other => other,
            }
        })?;
    }
    Ok(dir)
}

/// A directory the thread can fill (its own mode comes at the end).
fn make_dir(parent: &OwnedFd, name: &[u8]) -> Result<(), Failure> {
    match rustix::fs::mkdirat(parent, name, Mode::from(0o700)) {
        Err(Errno::EXIST) => {
            let stat = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
            if Kind::from_raw_mode(stat.st_mode) != Kind::Directory {
                return Err(Errno::NOTDIR.into());
            }
            Ok(())
        }
        other => Ok(other?),
    }
}

/// A later entry of the same name replaces an earlier one (never a
/// directory: that would drop what is in it).
fn clear(parent: &OwnedFd, name: &[u8]) -> Result<(), Failure> {
    match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Where a file's bytes come from: a range of the stream's file, or the
/// entry's reader (a sparse entry, whose holes the tar crate fills).
enum Data<'a> {
    Range(&'a File, u64),
    Reader(&'a mut dyn Read),
}

fn write_file(
    parent: &OwnedFd,
    name: &[u8],
    data: Data<'_>,
    size: u64,
    mode: u32,
    mtime: u64,
) -> Result<(), Failure> {
    clear(parent, name)?;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = rustix::fs::openat(parent, name, flags, Mode::from(0o600))?;
    let mut file = File::from(file);
    let copied = match data {
        Data::Range(stream, offset) => copy_range(stream, offset, size, &file)?,
        Data::Reader(reader) => std::io::copy(&mut reader.take(size), &mut file)?,
    };
    if copied != size {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    file.flush()?;
    rustix::fs::fchmod(&file, Mode::from(mode))?;
    rustix::fs::futimens(&file, &times(mtime))?;
    Ok(())
}

/// `size` bytes of `stream` from `offset` to the end of `to`: with
/// `copy_file_range` (no copy through this process; none at all where the
/// file system shares extents), else read and written in 1 MiB pieces.
/// Answers fewer bytes when the stream ends first.
fn copy_range(stream: &File, offset: u64, size: u64, to: &File) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let (mut from, mut copied) = (offset, 0);
    while copied < size {
        let want = (size - copied).min(1 << 30) as usize;
        match rustix::fs::copy_file_range(stream, Some(&mut from), to, None, want) {
            Ok(0) => return Ok(copied),
            Ok(moved) => copied += moved as u64,
            Err(Errno::XDEV | Errno::NOSYS | Errno::INVAL | Errno::OPNOTSUPP) => break,
            Err(error) => return Err(error.into()),
        }
    }
    let mut buffer = vec![0; (size - copied).min(1 << 20) as usize];
    while copied < size {
        let want = buffer.len().min((size - copied) as usize);
        let read = stream.read_at(&mut buffer[..want], offset + copied)?;
        if read == 0 {
            break;
        }
        to.write_all_at(&buffer[..read], copied)?;
        copied += read as u64;
    }
    Ok(copied)
}

fn times(mtime: u64) -> Timestamps {
    let at = Timespec {
        tv_sec: mtime.min(i64::MAX as u64) as i64,
        tv_nsec: 0,
    };
    Timestamps {
        last_access: at,
        last_modification: at,
    }
}

fn set_times(parent: &OwnedFd, name: &[u8], mtime: u64, flags: AtFlags) -> Result<(), Failure> {
    Ok(rustix::fs::utimensat(parent, name, &times(mtime), flags)?)
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
fn find_conflicts(stage: &OwnedFd, place: &OwnedFd, path: &mut Vec<u8>) -> Result<(), Failure> {
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
fn merge(stage: &OwnedFd, place: &OwnedFd) -> Result<(), Failure> {
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
fn finish_dirs(target: &OwnedFd, mut dirs: Vec<DirEntry>) -> Result<(), Failure> {
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
