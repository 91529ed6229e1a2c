//! `put_file` and `put_tar`: chunks kept on the daemon's host
//! ([`crate::drivers::upload_partials`]); after the last one, one exec of
//! [`scripts::PUT_FILE`] or [`scripts::PUT_TAR`] fed the file, or the
//! archive's checked copy ([`super::archive`]), on its stdin. The sandbox's
//! pod is looked for at the first chunk (a sandbox that does not run fails
//! at once) and at the last.

use std::path::{Path, PathBuf};

use sandboxd_protocol::files::PERMISSION_BITS;
use sandboxd_protocol::{PutChunk, PutReport, SandboxError};

use super::super::Inner;
use super::archive::{self, Checked};
use super::{script_path, scripts, FileCall, Files};
use crate::drivers::upload_partials::{Kept, Refused};
use crate::provisioner::SandboxKey;

/// What a script that places an upload writes on stdout: nothing.
const NO_OUTPUT: usize = 4096;

impl Files {
    pub async fn put_file(
        &self,
        inner: &Inner,
        key: &SandboxKey,
        chunk: &PutChunk,
    ) -> Result<PutReport, SandboxError> {
        let (call, kept) = match self.keep(inner, key, "file", "write", chunk).await? {
            Keeping::More(report) => return Ok(report),
            Keeping::Last(call, kept) => (call, kept),
        };
        let path = script_path(&chunk.path);
        if path == "." {
            let _ = tokio::fs::remove_file(&kept.file).await;
            return Err(call.told.workspace_itself());
        }
        let args = [
            path,
            format!("{:o}", chunk.mode & PERMISSION_BITS),
            kept.size.to_string(),
        ];
        let input = Some((kept.file.clone(), kept.size));
        let ran = call
            .run(
                inner,
                &scripts::with_prelude(scripts::PUT_FILE),
                &args,
                input,
                NO_OUTPUT,
            )
            .await;
        let _ = tokio::fs::remove_file(&kept.file).await;
        call.outcome(&ran?.1)?;
        Ok(PutReport {
            received: kept.size,
            complete: true,
        })
    }

    pub async fn put_tar(
        &self,
        inner: &Inner,
        key: &SandboxKey,
        chunk: &PutChunk,
    ) -> Result<PutReport, SandboxError> {
        let (call, kept) = match self.keep(inner, key, "tar", "unpack into", chunk).await? {
            Keeping::More(report) => return Ok(report),
            Keeping::Last(call, kept) => (call, kept),
        };
        let copy = kept.file.with_extension("pod");
        let placed = unpack(inner, &call, &chunk.path, &kept.file, &copy).await;
        let _ = tokio::fs::remove_file(&kept.file).await;
        let _ = tokio::fs::remove_file(&copy).await;
        placed?;
        Ok(PutReport {
            received: kept.size,
            complete: true,
        })
    }

    /// Keeps `chunk`; after the last one, the call that places the upload.
    async fn keep(
        &self,
        inner: &Inner,
        key: &SandboxKey,
        kind: &str,
        verb: &'static str,
        chunk: &PutChunk,
    ) -> Result<Keeping, SandboxError> {
        let call = match chunk.offset == 0 || chunk.last {
            true => Some(FileCall::open(inner, key, verb, &chunk.path).await?),
            false => None,
        };
        let told = super::told::Told {
            verb,
            path: chunk.path.clone(),
            what: key.what(),
        };
        let file = self.partials.file(&key.base_name, kind, &chunk.path);
        let (partials, owned) = (self.partials.clone(), chunk.clone());
        let kept = tokio::task::spawn_blocking(move || partials.keep(file, &owned, 0))
            .await
            .map_err(|error| SandboxError::Internal(format!("an upload's writer failed: {error}")))?
            .map_err(|refused| match refused {
                Refused::Io(error) => told.host(error),
                Refused::NoUpload => told.no_upload(),
                Refused::Resume(held) => told.resume(held),
                Refused::OverLimit => told.host(std::io::Error::other("over its limit")),
            })?;
        match (chunk.last, call) {
            (true, Some(call)) => Ok(Keeping::Last(call, kept)),
            _ => Ok(Keeping::More(PutReport {
                received: kept.size,
                complete: false,
            })),
        }
    }
}

/// An upload after one chunk: more to come, or whole.
enum Keeping {
    More(PutReport),
    Last(FileCall, Kept),
}

/// Checks the kept archive, writes the pod's copy and unpacks it.
async fn unpack(
    inner: &Inner,
    call: &FileCall,
    path: &str,
    kept: &Path,
    copy: &Path,
) -> Result<(), SandboxError> {
    let dest = script_path(path);
    let depth = dest.split('/').filter(|part| *part != ".").count();
    let (from, to): (PathBuf, PathBuf) = (kept.to_path_buf(), copy.to_path_buf());
    let size = tokio::task::spawn_blocking(move || archive::check_and_copy(&from, &to, depth))
        .await
        .map_err(|error| SandboxError::Internal(format!("the archive's check failed: {error}")))?
        .map_err(|checked| match checked {
            Checked::Refused { name, why } => call.told.refused_entry(&name, &why),
            Checked::Corrupt(why) => call.told.corrupt(&why),
            Checked::Io(error) => call.told.host(error),
        })?;
    let args = [dest, size.to_string()];
    let input = Some((copy.to_path_buf(), size));
    let script = scripts::with_prelude(scripts::PUT_TAR);
    let (_, ended) = call.run(inner, &script, &args, input, NO_OUTPUT).await?;
    call.outcome(&ended)
}
