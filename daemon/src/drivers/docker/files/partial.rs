//! Uploads kept on the host until their last chunk: one partial file per
//! container, kind (a file or an archive) and path, in
//! `<state_dir>/docker/uploads`, resumed by offset as the process tier
//! resumes its own (an offset past 0 must be what the partial holds; 0
//! starts over). The engine takes a whole tar stream in one `PUT`, so
//! nothing reaches the container before the last chunk. A partial whose
//! upload is abandoned stays until an upload of the same path completes
//! or starts over, or until [`ABANDONED`] after its last chunk, when the
//! start of any upload removes it (its container may be long gone).

use std::fs::{File, OpenOptions};
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
    NoUpload,
    Resume(u64),
    OverDiskLimit,
}

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
    pub fn prepare(state_dir: &Path) -> std::io::Result<Partials> {
        let dir = state_dir.join("docker").join("uploads");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(Partials { dir })
    }

    /// The partial of `path` in `container`: a name of fixed length (a
    /// path may be 4096 bytes long).
    pub fn file(&self, container: &str, kind: &str, path: &str) -> PathBuf {
        let digest = sha2::Sha256::digest(format!("{kind}\0{container}\0{path}").as_bytes());
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
        let handle: File = match opened {
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
            return Err(Refused::OverDiskLimit);
        }
        if let Err(error) = handle.write_all_at(&chunk.data, chunk.offset) {
            let _ = std::fs::remove_file(&file);
            return Err(Refused::Io(error));
        }
        Ok(Kept { file, size })
    }
}

impl Partials {
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
        let dir = crate::test_dir::TestDir::new("docker-partials");
        let partials = Partials::prepare(&dir.0).unwrap();
        let file = partials.file("c1", "file", "a/b");
        assert_ne!(file, partials.file("c2", "file", "a/b"));
        assert!(matches!(
            partials.keep(file.clone(), &chunk(3, b"x", false), 0),
            Err(Refused::NoUpload)
        ));
        assert_eq!(
            partials
                .keep(file.clone(), &chunk(0, b"abc", false), 0)
                .unwrap()
                .size,
            3
        );
        assert!(matches!(
            partials.keep(file.clone(), &chunk(1, b"x", false), 0),
            Err(Refused::Resume(3))
        ));
        let kept = partials
            .keep(file.clone(), &chunk(3, b"de", true), 0)
            .unwrap();
        assert_eq!(std::fs::read(&kept.file).unwrap(), b"abcde");
        assert!(matches!(
            partials.keep(file.clone(), &chunk(5, b"fgh", true), 6),
            Err(Refused::OverDiskLimit)
        ));
        assert!(!file.exists(), "an upload past the limit is not kept");
    }
}
