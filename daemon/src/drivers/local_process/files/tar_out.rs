//! `get_tar`'s stream: a path of the workspace written as a tar archive,
//! read as the sandbox's user beneath the workspace. Symlinks are stored
//! as links (never followed), a file seen again through another hard link
//! is stored as a link to its first name (its bytes are read once), and
//! sockets, FIFOs and device nodes are left out. A file the sandbox's user
//! cannot read fails the stream, naming it: an archive silently missing a
//! file would look whole.
//!
//! Entries are written in name order, so generating the stream twice over
//! an unchanged tree gives the same bytes (a resumed download skips to
//! its offset in a new one).

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType as Kind, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::beneath::{components, Beneath};
use super::Failure;

/// How deep a tree is walked (one descriptor open per level).
const MAX_DEPTH: usize = 256;
/// A tar block: an entry's data is padded to a whole number of them.
const BLOCK: u64 = 512;

/// Where the stream goes: a writer that can take a file's bytes itself.
pub trait Sink: Write {
    /// Writes exactly `size` bytes of `file`: cut if it grew, padded with
    /// zeros if it shrank, so the archive stays whole. The default goes
    /// through a buffer; a sink that holds its own can read into it.
    fn file_data(&mut self, file: File, size: u64) -> std::io::Result<()> {
        let mut data = file.take(size).chain(std::io::repeat(0)).take(size);
        std::io::copy(&mut data, self)?;
        Ok(())
    }
}

/// Writes the archive of `path` (`""`: the workspace's contents, with no
/// entry for the workspace itself) to `out`.
pub fn write_tree<W: Sink>(beneath: &Beneath, path: &str, out: W) -> Result<W, Failure> {
    let parts = components(path);
    let base = match parts.len() {
        0 | 1 => Vec::new(),
        n => [parts[..n - 1].join("/").as_bytes(), b"/"].concat(),
    };
    let mut walk = Walk {
        beneath,
        builder: tar::Builder::new(out),
        seen: HashMap::new(),
        base,
    };
    match parts.split_last() {
        None => {
            let root = beneath.open_at(&[], OFlags::RDONLY | OFlags::DIRECTORY)?;
            walk.children(&root, b"", 0)?;
        }
        Some((name, parents)) => {
            let parent = beneath.open_at(parents, OFlags::PATH | OFlags::DIRECTORY)?;
            let stat = rustix::fs::statat(&parent, *name, AtFlags::SYMLINK_NOFOLLOW)?;
            walk.entry(&parent, name.as_bytes(), name.as_bytes(), &stat, 0)?;
        }
    }
    walk.builder.finish()?;
    Ok(walk.builder.into_inner()?)
}

struct Walk<'a, W: Sink> {
    beneath: &'a Beneath,
    builder: tar::Builder<W>,
    /// Files with more than one link, by device and inode: their first name.
    seen: HashMap<(u64, u64), Vec<u8>>,
    /// What comes before a stored name to make its path in the workspace.
    base: Vec<u8>,
}

impl<W: Sink> Walk<'_, W> {
    /// A failure at the entry stored as `stored`, named by its path.
    fn at(&self, stored: &[u8], error: std::io::Error) -> Failure {
        Failure::AtEntry(shown(&[&self.base, stored].concat()), error)
    }

    /// One entry, `name` in `parent`, stored as `stored`.
    fn entry(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        stored: &[u8],
        stat: &Stat,
        depth: usize,
    ) -> Result<(), Failure> {
        let named = |error: Errno| self.at(stored, error.into());
        match Kind::from_raw_mode(stat.st_mode) {
            Kind::Directory => {
                if depth >= MAX_DEPTH {
                    return Err(Failure::TooDeep);
                }
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let dir = rustix::fs::openat(parent, name, flags, Mode::empty()).map_err(named)?;
                self.beneath
                    .same_file_system(&dir)
                    .map_err(|error| self.at(stored, error))?;
                let mut header = header_of(stat, tar::EntryType::Directory);
                self.builder
                    .append_data(&mut header, as_path(stored), std::io::empty())?;
                self.children(&dir, stored, depth + 1)
            }
            Kind::Symlink => {
                let target = rustix::fs::readlinkat(parent, name, Vec::new()).map_err(named)?;
                let mut header = header_of(stat, tar::EntryType::Symlink);
                let target = target.as_bytes();
                self.builder
                    .append_link(&mut header, as_path(stored), as_path(target))?;
                Ok(())
            }
            Kind::RegularFile => self.file(parent, name, stored, stat),
            _ => Ok(()),
        }
    }

    /// A directory's entries, in name order, stored under `prefix`.
    fn children(&mut self, dir: &OwnedFd, prefix: &[u8], depth: usize) -> Result<(), Failure> {
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(dir)? {
            let name = entry?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.push(name);
            }
        }
        names.sort();
        for name in names {
            let stat = match rustix::fs::statat(dir, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
                Err(Errno::NOENT) => continue, // gone since it was listed
                other => other?,
            };
            let stored = if prefix.is_empty() {
                name.clone()
            } else {
                [prefix, b"/", &name].concat()
            };
            self.entry(dir, &name, &stored, &stat, depth)?;
        }
        Ok(())
    }

    fn file(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        stored: &[u8],
        stat: &Stat,
    ) -> Result<(), Failure> {
        let inode = (stat.st_dev, stat.st_ino);
        if stat.st_nlink > 1 {
            if let Some(first) = self.seen.get(&inode) {
                let mut header = header_of(stat, tar::EntryType::Link);
                header.set_size(0);
                let first = first.clone();
                self.builder
                    .append_link(&mut header, as_path(stored), as_path(&first))?;
                return Ok(());
            }
        }
        // Non-blocking: a FIFO put in its place since the look must not hang.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let named = |error: Errno| self.at(stored, error.into());
        let file = rustix::fs::openat(parent, name, flags, Mode::empty()).map_err(named)?;
        let stat = rustix::fs::fstat(&file).map_err(named)?;
        if Kind::from_raw_mode(stat.st_mode) != Kind::RegularFile {
            return Ok(());
        }
        let size = stat.st_size.max(0) as u64;
        let mut header = header_of(&stat, tar::EntryType::Regular);
        header.set_size(size);
        // The builder writes the header (and a long name's entry before
        // it) for no data; the data goes straight to the sink, which reads
        // the file into what it sends instead of through two buffers.
        let data = (|| {
            self.builder
                .append_data(&mut header, as_path(stored), std::io::empty())?;
            let sink = self.builder.get_mut();
            sink.file_data(File::from(file), size)?;
            let padding = (BLOCK - size % BLOCK) % BLOCK;
            sink.write_all(&[0; BLOCK as usize][..padding as usize])
        })();
        data.map_err(|error| self.at(stored, error))?;
        if stat.st_nlink > 1 {
            self.seen.insert(inode, stored.to_vec());
        }
        Ok(())
    }
}

fn header_of(stat: &Stat, kind: tar::EntryType) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(stat.st_mode & 0o7777);
    header.set_mtime(stat.st_mtime.max(0) as u64);
    header.set_uid(u64::from(stat.st_uid));
    header.set_gid(u64::from(stat.st_gid));
    header.set_size(0);
    header
}

fn as_path(bytes: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(bytes))
}

fn shown(name: &[u8]) -> String {
    String::from_utf8_lossy(name).escape_debug().to_string()
}
