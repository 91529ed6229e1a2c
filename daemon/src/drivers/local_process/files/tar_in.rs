//! `put_tar`'s unpacking, on a thread of its own per put that holds the
//! sandbox's user (so what it writes is the sandbox's own and nothing is
//! chowned): the stream is read as its chunks arrive ([`ChunkReader`]),
//! each entry checked as it is read ([`super::tar_check`]) and written
//! once, into a hidden staging directory at the workspace's top; only
//! when the last chunk came and the archive ended cleanly does it move
//! into place ([`super::tar_place`]). A corrupt or truncated archive, a
//! refused entry, the disk limit passed or the put abandoned removes the
//! staging directory: nothing of the archive appears before its end.
//!
//! Nothing is resolved through a symlink: the target directory is opened
//! beneath the workspace ([`Beneath`]), and every name under the staging
//! directory with `O_NOFOLLOW` one component at a time, so neither a link
//! the sandbox planted nor one the archive brings is written through.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::rc::Rc;

use rustix::fs::{AtFlags, FileType as Kind, Mode, OFlags};
use rustix::io::Errno;
use sandboxd_protocol::files::PERMISSION_BITS;
use sandboxd_protocol::SandboxError;
use tar::EntryType;

use super::as_owner::{self, Owner};
use super::beneath::{components, Beneath};
use super::chunk_reader::{Answer, ChunkReader, Tally};
use super::tar_check::{check, Entry};
use super::tar_place::{find_conflicts, finish_dirs, merge, open_parents, times, DirEntry};
use super::{ops, Failure, Told};
use crate::drivers::archive_names::shown;

/// The staging directories' names begin with this (a serial follows);
/// one left by a daemon that died is removed at the next start.
pub const STAGING_PREFIX: &str = ".sandboxd-tar-in-";

/// A file's bytes are written in pieces of at most this many.
const WRITE_PIECE: usize = 256 * 1024;

/// What one put unpacks, where, and as whom.
pub struct Job {
    pub owner: Option<Owner>,
    pub workspace: PathBuf,
    /// The target directory, relative to the workspace.
    pub path: String,
    /// The staging directory's name, at the workspace's top.
    pub staging: String,
    pub told: Told,
}

/// The put's whole work: answers its last chunk, or the call waiting when
/// it failed.
pub fn run(job: Job, reader: ChunkReader, tally: Rc<Tally>) {
    let answers = reader.answers();
    let result = match job.owner {
        Some(owner) => as_owner::become_owner(owner),
        None => Ok(()),
    }
    .and_then(|()| {
        let beneath = Beneath::open(&job.workspace).map_err(|error| {
            SandboxError::Unavailable(format!(
                "cannot open the workspace of {}: {error}",
                job.told.what
            ))
        })?;
        unpack_and_place(&beneath, &job, reader, &tally).map_err(|failure| job.told.error(failure))
    });
    let _ = answers.blocking_send(result.map(|()| Answer::Done));
}

/// Unpacks into staging, moves into place; the staging directory is gone
/// afterwards whatever happened.
fn unpack_and_place(
    beneath: &Beneath,
    job: &Job,
    reader: ChunkReader,
    tally: &Tally,
) -> Result<(), Failure> {
    let parts = components(&job.path);
    let target = beneath.open_at(&parts, OFlags::RDONLY | OFlags::DIRECTORY)?;
    let top = beneath.open_at(&[], OFlags::PATH | OFlags::DIRECTORY)?;
    rustix::fs::mkdirat(&top, job.staging.as_str(), Mode::from(0o700))?;
    let result = (|| {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let stage = rustix::fs::openat(&top, job.staging.as_str(), flags, Mode::empty())?;
        let base = match job.path.trim_end_matches('/') {
            "" | "." => String::new(),
            dir => format!("{dir}/"),
        };
        let mut archive = tar::Archive::new(reader);
        let mut unpacking = Unpacking {
            stage: &stage,
            tally,
            depth: parts.len(),
            buffer: vec![0; WRITE_PIECE],
        };
        let dirs = unpacking.unpack(&mut archive, &base)?;
        let mut reader = archive.into_inner();
        reader
            .read_to_last()
            .map_err(|error| tally.tar_failure(error))?;
        find_conflicts(&stage, &target, &mut Vec::new())?;
        merge(&stage, &target)?;
        finish_dirs(&target, dirs)
    })();
    let _ = ops::remove(beneath, &job.staging, true);
    result
}

/// What unpacking keeps between entries.
struct Unpacking<'a> {
    stage: &'a OwnedFd,
    tally: &'a Tally,
    /// How many directories below the workspace the archive goes.
    depth: usize,
    buffer: Vec<u8>,
}

impl Unpacking<'_> {
    /// Writes every entry under the staging directory; answers the
    /// archive's directories, whose modes and times are set once
    /// everything is in place (a read-only directory could not be filled
    /// or emptied before).
    fn unpack(
        &mut self,
        archive: &mut tar::Archive<ChunkReader>,
        base: &str,
    ) -> Result<Vec<DirEntry>, Failure> {
        let tally = self.tally;
        let mut entries = archive
            .entries()
            .map_err(|error| tally.tar_failure(error))?;
        let mut dirs = Vec::new();
        loop {
            tally.reading_headers(true);
            let next = entries.next();
            tally.reading_headers(false);
            let Some(entry) = next else {
                return Ok(dirs);
            };
            let mut entry = entry.map_err(|error| tally.tar_failure(error))?;
            let name = entry.path_bytes().into_owned();
            let placed = self.entry(&mut entry, &name).map_err(|error| match error {
                Failure::Io(error) if error.kind() != std::io::ErrorKind::ConnectionAborted => {
                    Failure::AtEntry(format!("{base}{}", shown(&name)), error)
                }
                other => other,
            })?;
            dirs.extend(placed);
            // What an entry holds past what was unpacked (a directory's
            // data, say) is skipped here, not counted as headers.
            std::io::copy(&mut entry, &mut std::io::sink())
                .map_err(|error| tally.tar_failure(error))?;
        }
    }

    /// Writes one entry named `name` under the staging directory; answers
    /// it when it is a directory (its mode and time come at the end).
    fn entry(
        &mut self,
        entry: &mut tar::Entry<'_, ChunkReader>,
        name: &[u8],
    ) -> Result<Option<DirEntry>, Failure> {
        let header = entry.header();
        let mode = header.mode().unwrap_or(0o644) & PERMISSION_BITS;
        let mtime = header.mtime().unwrap_or(0);
        let kind = header.entry_type();
        let link = entry.link_name_bytes().unwrap_or_default().into_owned();
        let checked = Entry {
            name,
            kind,
            link: &link,
        };
        let parts = check(&checked, self.depth, self.stage)?;
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
                clear(&parent, last)?;
                rustix::fs::symlinkat(link.as_slice(), &parent, last.as_slice())?;
                let flags = AtFlags::SYMLINK_NOFOLLOW;
                rustix::fs::utimensat(&parent, last.as_slice(), &times(mtime), flags)?;
            }
            EntryType::Link => {
                // The check found it a file of the staging directory.
                let from: Vec<Vec<u8>> = components_of(&link);
                let (from_name, from_parents) = from.split_last().ok_or(Failure::NotRegular)?;
                let from = open_parents(self.stage, from_parents)?;
                clear(&parent, last)?;
                let (from_name, flags) = (from_name.as_slice(), AtFlags::empty());
                rustix::fs::linkat(&from, from_name, &parent, last.as_slice(), flags)?;
            }
            _ => {
                let size = entry.size();
                let file = self.write_file(entry, name, &parent, last, size)?;
                rustix::fs::fchmod(&file, Mode::from(mode))?;
                rustix::fs::futimens(&file, &times(mtime))?;
            }
        }
        Ok(None)
    }

    /// The `size` bytes of `data` as the file `last` of `parent`, charged
    /// to the disk limit as they are written.
    fn write_file(
        &mut self,
        data: &mut impl Read,
        name: &[u8],
        parent: &OwnedFd,
        last: &[u8],
        size: u64,
    ) -> Result<File, Failure> {
        if !self.tally.fits(size) {
            return Err(Failure::OverDiskLimit);
        }
        clear(parent, last)?;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let file = rustix::fs::openat(parent, last, flags, Mode::from(0o600))?;
        let mut file = File::from(file);
        let mut left = size;
        while left > 0 {
            let want = (self.buffer.len() as u64).min(left) as usize;
            let read = data
                .read(&mut self.buffer[..want])
                .map_err(|error| self.tally.tar_failure(error))?;
            if read == 0 {
                return Err(Failure::Corrupt(format!(
                    "it ends inside the data of '{}' (truncated)",
                    shown(name)
                )));
            }
            self.tally.charge(read as u64)?;
            file.write_all(&self.buffer[..read])?;
            left -= read as u64;
        }
        Ok(file)
    }
}

/// A hard link's target as components (the check refused a bad one).
fn components_of(link: &[u8]) -> Vec<Vec<u8>> {
    crate::drivers::archive_names::entry_parts(link)
        .unwrap_or_default()
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect()
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
