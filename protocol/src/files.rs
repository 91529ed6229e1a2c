//! Files in and out of a sandbox's workspace: one file at a time, in
//! chunks, by paths relative to the workspace.
//!
//! An upload is a run of `put_file` calls of at most [`MAX_FILE_CHUNK`]
//! bytes each, from offset 0 up, the last one marked `last`. The daemon
//! writes them to a partial file beside the target and renames it over the
//! target only after the last chunk, so a reader never sees half a file
//! and an interrupted upload leaves no target behind: it is resumed by
//! sending again from the offset the last answer gave (one upload of a
//! path at a time: a second one from offset 0 starts it over). An upload
//! abandoned before its last chunk stays in its hidden partial file
//! (`.sandboxd-part-…` beside the target, counted in the workspace's
//! size) until one to the same path completes. A download is a run
//! of `get_file` calls, each naming the offset to read from.
//!
//! The daemon does the work as the sandbox's own user, beneath its
//! workspace: a file the sandbox could not read is not read, a file it
//! writes is its own, and a link it planted cannot lead out.
//!
//! Whole trees move as tar streams with the same chunk types: `put_tar`
//! sends a stream in [`PutChunk`]s whose `path` names the directory it is
//! unpacked into (entries go to a hidden directory and are moved into
//! place only when the last chunk came and the archive ended cleanly, so
//! a corrupt or refused archive leaves nothing behind; a stream resumes
//! by offset as an upload does. On the process tier each chunk is
//! unpacked as it arrives, each entry checked as it is read, and a put
//! left without a call for a minute, or across a daemon restart, is
//! dropped: it starts over at 0); `get_tar` answers [`FileChunk`]s of a stream of a path, where
//! `size` is the bytes of the stream made so far and `eof` marks its end.
//! In an archive put in, an absolute name, a `..`, a device node or a
//! link that leads out of the workspace is refused by its name; modes lose
//! setuid, setgid and sticky; owners are the sandbox's user.

use serde::{Deserialize, Serialize};

/// The most bytes one `put_file` carries or one `get_file` returns: 1 MiB
/// less 16 KiB, so a chunk with its path and id stays inside a request
/// frame ([`crate::wire::MAX_REQUEST_LEN`], 1 MiB).
pub const MAX_FILE_CHUNK: u32 = crate::wire::MAX_REQUEST_DATA as u32;
/// The longest path, in bytes (the kernel's `PATH_MAX`).
pub const MAX_PATH_LEN: usize = 4096;
/// The most entries one `list_files` answer holds.
pub const MAX_LIST_ENTRIES: usize = 10_000;
/// The permission bits a put may set: no setuid, setgid or sticky bit.
pub const PERMISSION_BITS: u32 = 0o777;

/// One piece of an upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutChunk {
    /// Relative to the workspace; its directory must exist.
    pub path: String,
    /// Where `data` goes in the file: 0 starts the upload over, anything
    /// else must be what the previous answer gave as `received`.
    pub offset: u64,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// The file is complete: it takes its place at `path`.
    pub last: bool,
    /// Its permission bits (setuid, setgid and sticky are dropped).
    pub mode: u32,
}

/// What a `put_file` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutReport {
    /// Bytes of the file received so far: the next chunk's offset.
    pub received: u64,
    /// True once the file is at its path (after the `last` chunk).
    pub complete: bool,
}

/// A bounded piece of a file, from an offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChunk {
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// The offset of `data`'s first byte.
    pub offset: u64,
    /// The file's size when it was read.
    pub size: u64,
    /// True when `data` reaches the end of the file.
    pub eof: bool,
}

/// What a directory entry is (never followed: a symlink is shown as one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileType {
    File,
    Dir,
    Symlink,
    Other,
}

impl FileType {
    pub fn as_str(self) -> &'static str {
        match self {
            FileType::File => "file",
            FileType::Dir => "dir",
            FileType::Symlink => "symlink",
            FileType::Other => "other",
        }
    }
}

/// One file's facts, as `stat_file` and `list_files` give them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    /// Its name in its directory (`.` for the workspace itself).
    pub name: String,
    pub file_type: FileType,
    pub size: u64,
    /// Permission bits and the setuid, setgid and sticky bits.
    pub mode: u32,
    pub mtime_unix_ms: u64,
}

/// A directory's entries, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileList {
    pub entries: Vec<FileStat>,
    /// True when the directory holds more than [`MAX_LIST_ENTRIES`] and
    /// only that many are listed.
    pub truncated: bool,
}
