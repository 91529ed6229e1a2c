//! All-or-nothing puts on the docker tier. The engine unpacks an upload
//! in place, entry by entry, and stops at its first failure (a full disk,
//! a container going away) with what it wrote before left there. So a put
//! goes in three uploads, each into the target directory:
//!
//! 1. the data, into a new hidden staging directory there
//!    (`.sandboxd-staging-<random>`): a failure leaves only the staging;
//! 2. the placing archive: the same entries, each regular file a hard link
//!    to its staged copy (the engine links a `Link` entry's target inside
//!    the directory it unpacks into), directories and symbolic links made
//!    anew. It carries no data, so what the disk holds does not change;
//! 3. the staging's removal.
//!
//! The Engine API has no call that renames or deletes, and an exec (`mv`
//! as the container's user) would need a running container and an image
//! with its own `mv`, where the archive calls work on any container of
//! ours, stopped too. So the staging is removed by the archive endpoint
//! itself: an upload of one entry named after it, of a type the engine
//! does not unpack, makes the engine remove what is at that name (as it
//! does before writing any entry over a path) and then fail on the type.
//! The failure is expected; whether the staging is gone is then looked at
//! with the path stat.
//!
//! A staging is recorded in `<state_dir>/docker/staging` (container name,
//! directory, staging name) while it exists, so one left by a daemon that
//! died mid-put is removed when the next daemon starts. The record names
//! the container, not its id: a container made anew for the sandbox
//! mounts the same workspace.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;
use sandboxd_protocol::SandboxError;

use super::super::engine::{CallError, Engine};
use super::archive;
use super::Call;

/// How a staging directory's name starts.
pub const PREFIX: &str = ".sandboxd-staging-";
/// The entry type an upload removes the staging with: one the engine does
/// not unpack (POSIX leaves `A`–`Z` to vendors; the engine knows none).
const REMOVING_TYPE: u8 = b'Z';

/// The records of stagings that exist.
pub struct Stagings {
    dir: PathBuf,
}

/// One staging directory in a container, recorded.
pub struct Staging {
    pub container: String,
    /// The directory it is in (a path in the container).
    pub dir: String,
    /// Its name in `dir`.
    pub name: String,
    record: PathBuf,
}

impl Stagings {
    /// `<state_dir>/docker/staging`, created 0700 if missing.
    pub fn prepare(state_dir: &Path) -> std::io::Result<Stagings> {
        let dir = state_dir.join("docker").join("staging");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(Stagings { dir })
    }

    /// A new staging name in `dir` of `container`, recorded before
    /// anything is written there.
    pub fn begin(&self, container: &str, dir: &str) -> std::io::Result<Staging> {
        let random = format!("{:016x}", rand::random::<u64>());
        let record = self.dir.join(&random);
        std::fs::write(&record, format!("{container}\n{dir}\n{PREFIX}{random}\n"))?;
        Ok(Staging {
            container: container.to_string(),
            dir: dir.to_string(),
            name: format!("{PREFIX}{random}"),
            record,
        })
    }

    /// The stagings an earlier daemon recorded and did not remove.
    pub fn left(&self) -> Vec<Staging> {
        let Ok(listed) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut left = Vec::new();
        for entry in listed.flatten() {
            let record = entry.path();
            let text = std::fs::read_to_string(&record).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            match lines[..] {
                [container, dir, name] if name.starts_with(PREFIX) => left.push(Staging {
                    container: container.to_string(),
                    dir: dir.to_string(),
                    name: name.to_string(),
                    record,
                }),
                // Cut short as it was written: nothing was staged yet.
                _ => drop(std::fs::remove_file(&record)),
            }
        }
        left
    }
}

impl Staging {
    /// Removes the staging directory; true once it is gone (its record
    /// then goes too). A container that is gone took it along.
    pub async fn remove(&self, engine: &Engine) -> Result<bool, CallError> {
        let at = format!("{}/{}", self.dir, self.name);
        let gone = match archive::discard(engine, &self.container, &self.dir, removing(&self.name))
            .await
        {
            Err(error) if error.is_not_found() => true,
            // Expected: the engine fails on the entry's type after it
            // removed what was at its name.
            Ok(()) | Err(CallError::Refused { .. }) => {
                archive::path_stat(engine, &self.container, &at)
                    .await?
                    .is_none()
            }
            Err(error) => return Err(error),
        };
        if gone {
            let _ = std::fs::remove_file(&self.record);
        }
        Ok(gone)
    }
}

impl Call {
    /// A new staging in `dir`, recorded.
    pub fn begin_staging(&self, stagings: &Stagings, dir: &str) -> Result<Staging, SandboxError> {
        stagings
            .begin(&self.name, dir)
            .map_err(|error| self.told.host(error))
    }

    /// The data into `staging`, then the placing archive into its
    /// directory (see the module doc); the staging is removed whatever
    /// happened.
    pub async fn place_staged(
        &self,
        staging: Staging,
        data: impl Stream<Item = std::io::Result<Bytes>> + Send + 'static,
        placing: impl Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    ) -> Result<(), SandboxError> {
        let engine = &self.engine;
        let mut placed = archive::upload(engine, &self.container, &staging.dir, data).await;
        if placed.is_ok() {
            placed = archive::upload(engine, &self.container, &staging.dir, placing).await;
        }
        let (dir, name) = (&staging.dir, &staging.name);
        match staging.remove(engine).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(container = %self.name, %dir, %name, "a put's staging is still there after its removal; the next daemon tries again")
            }
            Err(error) => {
                tracing::warn!(container = %self.name, %dir, %name, %error, "cannot remove a put's staging; the next daemon tries again")
            }
        }
        placed.map_err(|error| self.told.engine(error))
    }
}

/// The one-entry archive that removes `name`.
fn removing(name: &str) -> Bytes {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::new(REMOVING_TYPE));
    header.set_size(0);
    header.set_mode(0o600);
    let mut builder = tar::Builder::new(Vec::new());
    // A staging's name is short and plain: no long-name entry needed.
    let appended = builder.append_data(&mut header, name, std::io::empty());
    debug_assert!(appended.is_ok());
    Bytes::from(builder.into_inner().unwrap_or_default())
}

/// Removes what an earlier daemon left staged, once at start; a staging
/// whose container cannot be reached now is tried again at the next start.
pub async fn remove_left(engine: Arc<Engine>, stagings: Vec<Staging>) {
    for staging in stagings {
        match staging.remove(&engine).await {
            Ok(true) => {
                tracing::info!(container = %staging.container, dir = %staging.dir, name = %staging.name, "removed a put's staging an earlier daemon left")
            }
            Ok(false) => {
                tracing::warn!(container = %staging.container, dir = %staging.dir, name = %staging.name, "a put's staging an earlier daemon left is still there")
            }
            Err(error) => {
                tracing::warn!(container = %staging.container, dir = %staging.dir, name = %staging.name, %error, "cannot remove a put's staging an earlier daemon left")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staging_is_recorded_and_its_removal_is_one_entry_of_an_unknown_type() {
        let dir = crate::test_dir::TestDir::new("docker-stagings");
        let stagings = Stagings::prepare(&dir.0).unwrap();
        let staging = stagings.begin("sbx-1", "/workspace/d").unwrap();
        assert!(staging.name.starts_with(PREFIX));
        std::fs::write(stagings.dir.join("torn"), "sbx-2\n").unwrap();
        let left = stagings.left();
        assert_eq!(left.len(), 1, "a torn record is dropped");
        assert_eq!(
            (
                left[0].container.as_str(),
                left[0].dir.as_str(),
                &left[0].name
            ),
            ("sbx-1", "/workspace/d", &staging.name)
        );
        assert!(!stagings.dir.join("torn").exists());
        let archive = removing(&staging.name);
        let mut reading = tar::Archive::new(&archive[..]);
        let entries: Vec<_> = reading.entries().unwrap().map(Result::unwrap).collect();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].header().entry_type().as_byte(), REMOVING_TYPE);
        assert_eq!(entries[0].path_bytes().as_ref(), staging.name.as_bytes());
    }
}
