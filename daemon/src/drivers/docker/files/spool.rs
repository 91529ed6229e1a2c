//! Downloads copied once to the daemon's host: `get_file` and `get_tar`
//! read chunk by chunk, and the engine has no range, so the first call of
//! a download copies the engine's stream (checked as it passes) into a
//! file under `<state_dir>/docker/downloads` and every later call reads
//! its offset there, in O(n) for the whole download. The engine's stream
//! cannot stay open between calls instead: the engine holds the
//! container's lock while an archive of it is open, which would hold up
//! every other call on the container until the download ended.
//!
//! The copy is the daemon's, on its own disk, charged to nothing the
//! sandbox owns. It is unlinked as soon as it is opened (its space is
//! freed when its session drops it) and it ends: when the read reaches the
//! end, when a new read of the same path starts at offset 0, after
//! [`IDLE`] without a call, when the container is removed (see
//! [`Spools::forget_container`]); one left by a daemon that died between
//! opening and unlinking it is removed when the next daemon starts.

use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;

use crate::drivers::idle_sessions::{IdleSessions, Session};

/// A download without a call for this long ends.
pub const IDLE: Duration = Duration::from_secs(60);
/// At most this many downloads are kept at once.
const MAX_SPOOLS: usize = 64;

/// Which download: the container, the call (`file` or `tar`) and its path.
pub type SpoolKey = (String, &'static str, String);

/// The downloads of a daemon.
pub struct Spools {
    dir: PathBuf,
    sessions: IdleSessions<SpoolKey, Option<Spool>>,
    made: AtomicU64,
}

/// One download's copy: its bytes and how many there are.
pub struct Spool {
    file: Arc<File>,
    pub size: u64,
}

/// A copy being written.
pub struct Writer {
    file: Arc<File>,
    out: tokio::fs::File,
    size: u64,
}

impl Spools {
    /// `<state_dir>/docker/downloads`, created 0700, emptied of what an
    /// earlier daemon left.
    pub fn prepare(state_dir: &Path) -> std::io::Result<Spools> {
        let dir = state_dir.join("docker").join("downloads");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
        Ok(Spools {
            dir,
            sessions: IdleSessions::new(IDLE, MAX_SPOOLS),
            made: AtomicU64::new(0),
        })
    }

    pub fn session(&self, key: &SpoolKey) -> Arc<Session<Option<Spool>>> {
        self.sessions.session(key)
    }

    pub fn forget(&self, key: &SpoolKey, session: &Arc<Session<Option<Spool>>>) {
        self.sessions.forget(key, session);
    }

    /// Ends every download of `container` (it is being removed).
    pub fn forget_container(&self, container: &str) {
        self.sessions.forget_where(|(of, _, _)| of == container);
    }

    /// A new, empty copy, already unlinked.
    pub fn writer(&self) -> std::io::Result<Writer> {
        let number = self.made.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("{}-{number}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        std::fs::remove_file(&path)?;
        let out = tokio::fs::File::from_std(file.try_clone()?);
        Ok(Writer {
            file: Arc::new(file),
            out,
            size: 0,
        })
    }
}

impl Writer {
    pub async fn write(&mut self, bytes: &Bytes) -> std::io::Result<()> {
        self.out.write_all(bytes).await?;
        self.size += bytes.len() as u64;
        Ok(())
    }

    pub fn written(&self) -> u64 {
        self.size
    }

    /// The copy, whole, to read from.
    pub async fn finish(mut self) -> std::io::Result<Spool> {
        self.out.flush().await?;
        Ok(Spool {
            file: self.file,
            size: self.size,
        })
    }
}

impl Spool {
    /// Up to `max` bytes from `offset` (none past the end).
    pub async fn read(&self, offset: u64, max: u32) -> std::io::Result<Vec<u8>> {
        let length = self.size.saturating_sub(offset).min(u64::from(max)) as usize;
        let file = self.file.clone();
        tokio::task::spawn_blocking(move || {
            let mut data = vec![0; length];
            file.read_exact_at(&mut data, offset)?;
            Ok(data)
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_copy_is_read_by_offset_and_leaves_no_file() {
        let dir = crate::test_dir::TestDir::new("docker-spools");
        let left = dir.0.join("docker").join("downloads");
        std::fs::create_dir_all(&left).unwrap();
        std::fs::write(left.join("1-0"), b"left by a daemon that died").unwrap();
        let spools = Spools::prepare(&dir.0).unwrap();
        assert_eq!(std::fs::read_dir(&left).unwrap().count(), 0, "swept");
        let mut writer = spools.writer().unwrap();
        assert_eq!(std::fs::read_dir(&left).unwrap().count(), 0, "unlinked");
        writer.write(&Bytes::from_static(b"hello, ")).await.unwrap();
        writer.write(&Bytes::from_static(b"world")).await.unwrap();
        let spool = writer.finish().await.unwrap();
        assert_eq!(spool.size, 12);
        assert_eq!(spool.read(0, 5).await.unwrap(), b"hello");
        assert_eq!(spool.read(7, 100).await.unwrap(), b"world");
        assert!(spool.read(12, 100).await.unwrap().is_empty());
        assert!(spool.read(40, 100).await.unwrap().is_empty());
    }
}
