//! `put_tar`: the stream kept on the host as an upload is
//! ([`super::partial`]), then after its last chunk checked whole and
//! written anew ([`super::tar_check`]), and put into its directory.
//!
//! All or nothing: a refused archive (a bad entry, a directory it needs
//! that is a link or a file, an entry where a directory is, or a directory
//! the container's user may not write) puts nothing in, because all of
//! that is looked at before the first upload; and the data goes into a
//! staging directory first, then is linked into place with an archive
//! that carries none ([`super::staging`]), so an engine failing part way
//! through the data (a full disk, a container gone) leaves nothing of it.
//! What can still fail part way is the placing itself, which writes no
//! data: a directory the sandbox makes meanwhile where an entry goes.

use std::collections::BTreeSet;

use sandboxd_protocol::{PutChunk, PutReport, SandboxError};
use tar::EntryType;

use super::super::Inner;
use super::archive::{self, MODE_DIR, MODE_SYMLINK};
use super::put::{file_body, keep};
use super::resolve::components;
use super::staging::Stagings;
use super::tar_check::{self, Checked, Copies, Needs};
use super::told::shown;
use super::user::{SEARCH, WRITE};
use super::Call;
use crate::provisioner::SandboxKey;

impl Inner {
    pub(in super::super) async fn put_tar(
        &self,
        key: &SandboxKey,
        chunk: &PutChunk,
    ) -> Result<PutReport, SandboxError> {
        let call = self.file_call(key, "unpack into", &chunk.path).await?;
        if chunk.offset == 0 {
            call.writable_dir(&chunk.path).await?;
        }
        let file = self
            .files
            .partials
            .file(&call.container, "tar", &chunk.path);
        let kept = keep(&call, &self.files.partials, file, chunk, self.spec.disk).await?;
        if !chunk.last {
            return Ok(PutReport {
                received: kept.size,
                complete: false,
            });
        }
        let placed = unpack(&call, &self.files.stagings, &chunk.path, &kept.file).await;
        let _ = tokio::fs::remove_file(&kept.file).await;
        placed?;
        Ok(PutReport {
            received: kept.size,
            complete: true,
        })
    }
}

impl Call {
    /// The directory `path` names, which the container's user must be able to write.
    async fn writable_dir(&self, path: &str) -> Result<String, SandboxError> {
        let (dir, head) = self.directory(&components(path)).await?;
        if !self.user.may(head.mode, head.uid, head.gid, WRITE | SEARCH) {
            return Err(self.told.denied(&dir));
        }
        Ok(dir)
    }

    /// Refuses an entry that is not a directory where a directory is: the
    /// engine would refuse it part way through placing. Only the entries
    /// in directories that exist already can meet one.
    async fn no_dir_replaced(
        &self,
        dir: &str,
        needs: &Needs,
        existing: &BTreeSet<String>,
    ) -> Result<(), SandboxError> {
        for name in &needs.others {
            let parent = name.rsplit_once('/').map_or("", |(parent, _)| parent);
            if !parent.is_empty() && !existing.contains(parent) {
                continue;
            }
            let at = format!("{dir}/{name}");
            let stat = archive::path_stat(&self.engine, &self.container, &at)
                .await
                .map_err(|error| self.told.engine(error))?;
            if stat.is_some_and(|stat| stat.file_mode & MODE_DIR != 0) {
                return Err(self.told.refused_entry(
                    name,
                    &format!("'{}' is a directory, which it would replace", shown(&at)),
                ));
            }
        }
        Ok(())
    }

    /// The directories the archive needs that are there already: each a
    /// directory, not a link, that the container's user may write.
    async fn existing_dirs(
        &self,
        dir: &str,
        needs: &Needs,
    ) -> Result<BTreeSet<String>, SandboxError> {
        let mut existing = BTreeSet::new();
        for (name, entry) in &needs.dirs {
            let at = format!("{dir}/{name}");
            let stat = archive::path_stat(&self.engine, &self.container, &at)
                .await
                .map_err(|error| self.told.engine(error))?;
            let Some(stat) = stat else { continue };
            if stat.file_mode & MODE_SYMLINK != 0 {
                return Err(self.told.refused_entry(
                    entry,
                    &format!(
                        "would be written through the symbolic link '{}' that is there",
                        shown(&at)
                    ),
                ));
            }
            if stat.file_mode & MODE_DIR == 0 {
                return Err(self.told.refused_entry(
                    entry,
                    &format!("needs '{}' to be a directory, and it is not", shown(&at)),
                ));
            }
            let head = self
                .probe(&at)
                .await?
                .ok_or_else(|| self.told.not_found())?;
            let writable = head.kind == EntryType::Directory
                && self.user.may(head.mode, head.uid, head.gid, WRITE | SEARCH);
            if !writable {
                return Err(self.told.denied(&at));
            }
            existing.insert(name.clone());
        }
        Ok(existing)
    }
}

/// Checks the kept archive, writes the engine's copies and puts them in.
async fn unpack(
    call: &Call,
    stagings: &Stagings,
    path: &str,
    kept: &std::path::Path,
) -> Result<(), SandboxError> {
    let dir = call.writable_dir(path).await?;
    let below = dir
        .strip_prefix(super::super::spec::WORKSPACE)
        .unwrap_or_default();
    let dest: Vec<String> = components(below).into_iter().map(str::to_string).collect();
    let (archive_path, told) = (kept.to_path_buf(), |checked| told_checked(call, checked));
    let needs = tokio::task::spawn_blocking(move || tar_check::check(&archive_path, &dest))
        .await
        .map_err(|error| SandboxError::Internal(format!("the archive's check failed: {error}")))?
        .map_err(told)?;
    let existing = call.existing_dirs(&dir, &needs).await?;
    call.no_dir_replaced(&dir, &needs, &existing).await?;
    let staging = call.begin_staging(stagings, &dir)?;
    let copies = Copies {
        staged: kept.with_extension("staged"),
        placing: kept.with_extension("placing"),
        staging: staging.name.clone(),
    };
    let (from, user) = (kept.to_path_buf(), call.user);
    let (staged, placing) = (copies.staged.clone(), copies.placing.clone());
    let written =
        tokio::task::spawn_blocking(move || tar_check::rewrite(&from, &copies, user, &existing))
            .await;
    let placed = match written {
        Ok(Ok((staged_size, placing_size))) => {
            let data = file_body(staged.clone(), staged_size);
            let placing_body = file_body(placing.clone(), placing_size);
            call.place_staged(staging, data, placing_body).await
        }
        failed => {
            let _ = staging.remove(&call.engine).await;
            match failed {
                Ok(Err(checked)) => Err(told(checked)),
                _ => Err(SandboxError::Internal("the archive's copy failed".into())),
            }
        }
    };
    let _ = tokio::fs::remove_file(&staged).await;
    let _ = tokio::fs::remove_file(&placing).await;
    placed
}

fn told_checked(call: &Call, checked: Checked) -> SandboxError {
    match checked {
        Checked::Refused { name, why } => call.told.refused_entry(&name, &why),
        Checked::Io(error) => SandboxError::InvalidArgument(format!(
            "the archive for '{}' in {} cannot be read as tar: {error}; nothing of it was unpacked",
            call.told.path.escape_debug(),
            call.told.what
        )),
    }
}
