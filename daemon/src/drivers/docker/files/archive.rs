//! The Engine's archive endpoints, as the file calls use them: `GET
//! /containers/ID/archive` read as it streams ([`Download`]), its `HEAD`
//! (the path stat, for where a symbolic link leads), and `PUT` of a tar
//! stream into a directory ([`upload`], and [`discard`], which removes). Every read waits at most
//! [`READ_TIMEOUT`] for the engine's next bytes; an upload at most
//! [`UPLOAD_TIMEOUT`] in all.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bollard::query_parameters::{
    ContainerArchiveInfoOptionsBuilder, DownloadFromContainerOptionsBuilder,
    UploadToContainerOptionsBuilder,
};
use bytes::Bytes;
use futures::{Stream, StreamExt};

use super::super::engine::{CallError, Engine, READ_TIMEOUT};
use super::scan::{Head, Piece, Scanner};

/// How long one upload may take, from its first byte to the engine's answer.
pub const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);

type Body = Pin<Box<dyn Stream<Item = Result<Bytes, bollard::errors::Error>> + Send>>;

/// An archive of one path in a container, as the engine streams it.
pub struct Download {
    engine: Arc<Engine>,
    body: Body,
    scanner: Scanner,
    /// Taken from the engine, not yet scanned.
    pending: Bytes,
    ended: bool,
}

impl Download {
    /// Asks for the archive of `path`; the engine's refusal (404 for a
    /// path that does not exist) is its first answer, so it is read here.
    pub async fn open(
        engine: &Arc<Engine>,
        container: &str,
        path: &str,
    ) -> Result<Download, CallError> {
        let docker = engine.docker().await?;
        let options = DownloadFromContainerOptionsBuilder::default()
            .path(path)
            .build();
        let body: Body = Box::pin(docker.download_from_container(container, Some(options)));
        let mut download = Download {
            engine: engine.clone(),
            body,
            scanner: Scanner::default(),
            pending: Bytes::new(),
            ended: false,
        };
        download.pending = download.fetch().await?.unwrap_or_default();
        Ok(download)
    }

    /// The engine's next bytes; `None` at the end of its answer.
    async fn fetch(&mut self) -> Result<Option<Bytes>, CallError> {
        if self.ended {
            return Ok(None);
        }
        match tokio::time::timeout(READ_TIMEOUT, self.body.next()).await {
            Ok(Some(Ok(bytes))) => Ok(Some(bytes)),
            Ok(Some(Err(error))) => Err(self.engine.classify(error)),
            Ok(None) => {
                self.ended = true;
                Ok(None)
            }
            Err(_) => Err(CallError::Unreachable(format!(
                "the Docker engine at {} sent nothing of an archive within {READ_TIMEOUT:?}",
                self.engine.address()
            ))),
        }
    }

    /// The next header or piece of data; [`Piece::End`] at the archive's end.
    pub async fn piece(&mut self) -> Result<Piece, CallError> {
        loop {
            if let Some(piece) = self.scanner.next(&mut self.pending).map_err(malformed)? {
                return Ok(piece);
            }
            match self.fetch().await? {
                Some(bytes) => self.pending = bytes,
                None => return Err(malformed("the archive ends before its end marker".into())),
            }
        }
    }

    /// The next bytes of the archive as the engine sent them, after
    /// `check` accepted every header in them; `None` after the end marker.
    pub async fn raw<E>(
        &mut self,
        mut check: impl FnMut(&Head) -> Result<(), E>,
    ) -> Result<Option<Bytes>, RawError<E>> {
        let bytes = match std::mem::take(&mut self.pending) {
            bytes if !bytes.is_empty() => bytes,
            _ => match self.fetch().await.map_err(RawError::Call)? {
                Some(bytes) => bytes,
                None => return Ok(None),
            },
        };
        let mut scanned = bytes.clone();
        while let Some(piece) = self
            .scanner
            .next(&mut scanned)
            .map_err(|why| RawError::Call(malformed(why)))?
        {
            match piece {
                Piece::Head(head) => check(&head).map_err(RawError::Refused)?,
                Piece::Data(_) => {}
                Piece::End => break,
            }
        }
        Ok(Some(bytes))
    }
}

/// Why [`Download::raw`] gave no bytes.
pub enum RawError<E> {
    Call(CallError),
    Refused(E),
}

fn malformed(why: String) -> CallError {
    CallError::Malformed(format!("the engine's archive cannot be read: {why}"))
}

/// The first header of the archive of `path`: the path's own entry, its
/// last component not followed; `None` when there is nothing at `path`.
pub async fn probe(
    engine: &Arc<Engine>,
    container: &str,
    path: &str,
) -> Result<Option<Head>, CallError> {
    let mut download = match Download::open(engine, container, path).await {
        Ok(download) => download,
        Err(error) if error.is_not_found() => return Ok(None),
        Err(error) => return Err(error),
    };
    match download.piece().await? {
        Piece::Head(head) => Ok(Some(head)),
        _ => Err(malformed(format!("the archive of {path} has no entry"))),
    }
}

/// The engine's path stat of `path` (its last component not followed;
/// `linkTarget` is where a link fully resolves in the container's root);
/// `None` when there is nothing at `path`.
pub async fn path_stat(
    engine: &Engine,
    container: &str,
    path: &str,
) -> Result<Option<bollard::container::PathStatResponse>, CallError> {
    let options = ContainerArchiveInfoOptionsBuilder::default()
        .path(path)
        .build();
    let container = container.to_string();
    let stat = engine
        .call(READ_TIMEOUT, |docker| async move {
            docker
                .get_container_archive_info(&container, Some(options))
                .await
        })
        .await;
    match stat {
        Ok(stat) => Ok(Some(stat)),
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(error),
    }
}

/// Go's `os.ModeDir` and `os.ModeSymlink`, in the path stat's mode.
pub const MODE_DIR: u32 = 1 << 31;
pub const MODE_SYMLINK: u32 = 1 << 27;

/// Unpacks the tar stream `body` into the directory `dir` of the container.
/// The engine refuses to put a directory where a file is or a file where a
/// directory is (`noOverwriteDirNonDir`), rather than remove what is there.
pub async fn upload(
    engine: &Engine,
    container: &str,
    dir: &str,
    body: impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
) -> Result<(), CallError> {
    put_archive(engine, container, dir, body, true).await
}

/// Unpacks the small archive `body` into `dir`, the engine removing
/// whatever is at each entry's name first, a directory too (see
/// [`super::staging`], which removes a staging directory this way).
pub async fn discard(
    engine: &Engine,
    container: &str,
    dir: &str,
    body: Bytes,
) -> Result<(), CallError> {
    let body = futures::stream::once(async move { Ok(body) });
    put_archive(engine, container, dir, body, false).await
}

async fn put_archive(
    engine: &Engine,
    container: &str,
    dir: &str,
    body: impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
    no_overwrite_dir_non_dir: bool,
) -> Result<(), CallError> {
    let options = UploadToContainerOptionsBuilder::default()
        .path(dir)
        .no_overwrite_dir_non_dir(if no_overwrite_dir_non_dir {
            "true"
        } else {
            "false"
        })
        .build();
    let container = container.to_string();
    engine
        .call(UPLOAD_TIMEOUT, |docker| async move {
            docker
                .upload_to_container(&container, Some(options), bollard::body_try_stream(body))
                .await
        })
        .await
}
