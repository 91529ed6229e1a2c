//! Uploads kept on the daemon's host until their last chunk, for a tier
//! whose sandbox takes a file or an archive in one piece (its runtime has
//! no call that appends): one partial file per sandbox, kind (a file or an
//! archive) and path, in a directory of the state dir, resumed by offset
//! as the process tier resumes its own (an offset past 0 must be what the
//! partial holds; 0 starts over). Nothing reaches the sandbox before the
//! last chunk, so an archive is checked whole first. A partial whose upload
//! is abandoned stays until an upload of the same path completes or starts
//! over, or until [`ABANDONED`] after its last chunk, when the start of any
//! upload removes it (its sandbox may be long gone).
//! The docker tier keeps its partials in `<state_dir>/docker/uploads`,
//! the kubernetes tier in `<state_dir>/kubernetes/uploads`.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandboxd_protocol::PutChunk;
use sha2::Digest;

/// How long a partial no chunk was added to is kept.
pub const ABANDONED: Duration = Duration::from_secs(24 * 3600);

/// Why a chunk was not kept.
#[derive(Debug)]
pub enum Refused {
    Io(std::io::Error),
    /// A chunk past 0 with no upload under way.
    NoUpload,
    /// The partial holds this many bytes, not the chunk's offset.
    Resume(u64),
    OverLimit,
}

/// The partials of one tier, in one directory.
#[derive(Clone)]
pub struct Partials {
    dir: PathBuf,
}

/// What an upload has become once a chunk is kept.
pub struct Kept {
    pub file: PathBuf,
    pub size: u64,
}

impl Partials {
    /// `dir`, created 0700 if missing.
    pub fn prepare(dir: &Path) -> std::io::Result<Partials> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        Ok(Partials {
            dir: dir.to_path_buf(),
        })
    }

    /// The partial of `path` in the sandbox `owner`: a name of fixed
    /// length (a path may be 4096 bytes long).
    pub fn file(&self, owner: &str, kind: &str, path: &str) -> PathBuf {
        let digest = sha2::Sha256::digest(format!("{kind}\0{owner}\0{path}").as_bytes());
        let hex: String = digest[..16]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        self.dir.join(format!("{kind}-{hex}"))
    }

    /// Keeps one chunk; `limit` bounds the whole upload (0: none).
    pub fn keep(&self, file: PathBuf, chunk: &PutChunk, limit: u64) -> Result<Kept, Refused> {
        if chunk.offset == 0 {
            self.sweep();
        }
        let opened = if chunk.offset == 0 {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&file)
        } else {
            OpenOptions::new().write(true).open(&file)
        };
        let handle = match opened {
            Ok(handle) => handle,
            Err(error) if error.kind() == ErrorKind::NotFound => return Err(Refused::NoUpload),
            Err(error) => return Err(Refused::Io(error)),
        };
        let held = handle.metadata().map_err(Refused::Io)?.len();
        if held != chunk.offset {
            return Err(Refused::Resume(held));
        }
        let size = chunk.offset + chunk.data.len() as u64;
        if limit > 0 && size > limit {
            let _ = std::fs::remove_file(&file);
            return Err(Refused::OverLimit);
        }
        if let Err(error) = handle.write_all_at(&chunk.data, chunk.offset) {
            let _ = std::fs::remove_file(&file);
            return Err(Refused::Io(error));
        }
        Ok(Kept { file, size })
    }

    /// Removes the partials not written to for [`ABANDONED`].
    fn sweep(&self) {
        let Ok(listed) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in listed.flatten() {
            let stale = entry
                .metadata()
                .and_then(|meta| meta.modified())
                .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > ABANDONED));
            if stale {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(offset: u64, data: &[u8], last: bool) -> PutChunk {
        PutChunk {
            path: "a/b".into(),
            offset,
            data: data.to_vec(),
            last,
            mode: 0o644,
        }
    }

    #[test]
    fn chunks_resume_by_offset_and_the_limit_drops_the_upload() {
        let dir = crate::test_dir::TestDir::new("upload-partials");
        let partials = Partials::prepare(&dir.0.join("uploads")).unwrap();
        let file = partials.file("s1", "file", "a/b");
        assert_ne!(file, partials.file("s2", "file", "a/b"));
        assert!(matches!(
            partials.keep(file.clone(), &chunk(3, b"x", false), 0),
            Err(Refused::NoUpload)
        ));
        let kept = partials.keep(file.clone(), &chunk(0, b"abc", false), 0);
        assert_eq!(kept.unwrap().size, 3);
        assert!(matches!(
            partials.keep(file.clone(), &chunk(1, b"x", false), 0),
            Err(Refused::Resume(3))
        ));
        let kept = partials.keep(file.clone(), &chunk(3, b"de", true), 0);
        assert_eq!(std::fs::read(kept.unwrap().file).unwrap(), b"abcde");
        assert!(matches!(
            partials.keep(file.clone(), &chunk(5, b"fgh", true), 6),
            Err(Refused::OverLimit)
        ));
        assert!(!file.exists(), "an upload past the limit is not kept");
    }
}
