//! `get_tar`'s download sessions: the tar stream of a path is made once
//! per download, by one exec of [`scripts::GET_TAR`] kept open between
//! calls, not once per chunk. Sequential calls read on, holding no more
//! than the exec stream's buffers and one chunk; a call further ahead
//! skips to its offset; one behind starts the stream over and skips to it
//! (`tar` writes an unchanged tree the same way again). The stream's end
//! waits for `tar`'s status: a file it could not read fails the last call,
//! naming it, rather than end an archive that looks whole. A session ends
//! at the stream's end, on a failure, or after [`IDLE`] without a call
//! (its exec is dropped, which ends `tar` in the pod).

use std::time::Duration;

use sandboxd_protocol::files::MAX_FILE_CHUNK;
use sandboxd_protocol::{FileChunk, SandboxError};
use tokio::io::AsyncReadExt;

use super::super::Inner;
use super::run::{Opened, FILE_TIMEOUT};
use super::{script_path, scripts, FileCall, Files};
use crate::drivers::idle_sessions::IdleSessions;
use crate::provisioner::SandboxKey;

/// A session without a call for this long ends.
const IDLE: Duration = Duration::from_secs(60);
/// At most this many sessions at once: a new one past it ends the one
/// unused longest.
const MAX_SESSIONS: usize = 64;

/// The download sessions of a daemon, by pod and path.
pub struct Downloads {
    sessions: IdleSessions<String, Session>,
}

impl Default for Downloads {
    fn default() -> Self {
        Downloads {
            sessions: IdleSessions::new(IDLE, MAX_SESSIONS),
        }
    }
}

/// One stream under way.
#[derive(Default)]
struct Session {
    opened: Option<Opened>,
    /// Bytes of the stream read (handed out or skipped) so far.
    position: u64,
}

impl Files {
    pub async fn get_tar(
        &self,
        inner: &Inner,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError> {
        let call = FileCall::open(inner, key, "read", path).await?;
        let name = format!("{}\0{}", call.place.pod, script_path(path));
        let shared = self.downloads.sessions.session(&name);
        let mut session = shared.state.lock().await;
        let max = max.min(MAX_FILE_CHUNK) as usize;
        let read = tokio::time::timeout(FILE_TIMEOUT, session.read(inner, &call, offset, max))
            .await
            .unwrap_or_else(|_| {
                let why = format!("no chunk within {FILE_TIMEOUT:?}");
                Err(call.told.stream(&why))
            });
        shared.touch();
        let ended = read.as_ref().map_or(true, |(_, ended)| *ended);
        let opened = match ended {
            true => std::mem::take(&mut *session).opened,
            false => None,
        };
        if ended {
            drop(session);
            self.downloads.sessions.forget(&name, &shared);
        }
        let (data, ended) = read?;
        if let Some(opened) = opened {
            call.outcome(&opened.end().await)?;
        }
        Ok(FileChunk {
            offset,
            size: offset + data.len() as u64,
            eof: ended,
            data,
        })
    }
}

impl Session {
    /// Up to `max` bytes of the stream from `offset`, and whether the
    /// stream ended there.
    async fn read(
        &mut self,
        inner: &Inner,
        call: &FileCall,
        offset: u64,
        max: usize,
    ) -> Result<(Vec<u8>, bool), SandboxError> {
        if self.opened.is_none() || offset < self.position {
            let script = scripts::with_prelude(scripts::GET_TAR);
            let args = [script_path(&call.told.path)];
            self.opened = Some(call.open_exec(inner, &script, &args, None).await?);
            self.position = 0;
        }
        let Some(opened) = self.opened.as_mut() else {
            return Err(call.told.stream("its stream is gone"));
        };
        let stream_error = |error: std::io::Error| call.told.stream(&error.to_string());
        if offset > self.position {
            let mut skipping = (&mut opened.stdout).take(offset - self.position);
            let skipped = tokio::io::copy(&mut skipping, &mut tokio::io::sink())
                .await
                .map_err(stream_error)?;
            self.position += skipped;
            if self.position < offset {
                return Err(SandboxError::InvalidArgument(format!(
                    "offset {offset} is past the end of the tar stream of '{}' in {} ({} bytes)",
                    call.told.path.escape_debug(),
                    call.told.what,
                    self.position
                )));
            }
        }
        let mut data = vec![0u8; max];
        let mut filled = 0;
        let mut ended = false;
        while filled < max {
            let count = opened
                .stdout
                .read(&mut data[filled..])
                .await
                .map_err(stream_error)?;
            if count == 0 {
                ended = true;
                break;
            }
            filled += count;
        }
        data.truncate(filled);
        self.position += filled as u64;
        Ok((data, ended))
    }
}
