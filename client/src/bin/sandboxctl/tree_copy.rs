//! `sandboxctl cp` of whole directories, as `docker cp` does: the tree
//! travels as a tar stream, built here with the tar crate on the way in
//! and unpacked by the daemon as the sandbox's user; packed by the daemon
//! on the way out and unpacked here. `-` is a tar stream (stdin or
//! stdout) when the other end is a directory.
//!
//! Where a copy lands, as `docker cp`: into an existing directory under
//! the source's own name; to a path that does not exist (its parent must)
//! under that path's name.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use sandboxd_client::{FileType, SandboxdClient, Scope, TarStreamError};

use crate::failure::Failure;

impl From<TarStreamError> for Failure {
    fn from(error: TarStreamError) -> Self {
        match error {
            TarStreamError::Call(error) => Failure::Call(error),
            TarStreamError::Local(error) => Failure::Output(error.to_string()),
        }
    }
}

/// Whether `path` in the sandbox is a directory (`None`: it is not there).
pub async fn sandbox_kind(
    client: &SandboxdClient,
    scope: Scope,
    id: &str,
    path: &str,
) -> Option<FileType> {
    if path.is_empty() {
        return Some(FileType::Dir);
    }
    client
        .stat_file(scope, id, path.trim_end_matches('/'))
        .await
        .ok()
        .map(|stat| stat.file_type)
}

/// The last component of a local path, `.` and `/` resolved.
fn local_name(path: &str) -> Result<String, Failure> {
    let canonical = std::fs::canonicalize(path)
        .map_err(|error| Failure::Usage(format!("cannot read {path}: {error}")))?;
    canonical
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .ok_or_else(|| Failure::Usage(format!("{path} has no name to copy it under")))
}

/// The local directory `from` into `path` in the sandbox; answers the
/// line to print.
pub async fn dir_in(
    client: &SandboxdClient,
    scope: Scope,
    id: &str,
    from: &str,
    path: &str,
) -> Result<String, Failure> {
    let (dir, root) = match sandbox_kind(client, scope, id, path).await {
        Some(FileType::Dir) => (path.trim_end_matches('/').to_string(), local_name(from)?),
        Some(_) => {
            return Err(Failure::Usage(format!(
                "{scope}:{id}:{path} is not a directory: cannot copy the directory {from} onto it"
            )));
        }
        None => {
            let trimmed = path.trim_end_matches('/');
            let (parent, name) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
            (parent.to_string(), name.to_string())
        }
    };
    let (sender, receiver) = mpsc::sync_channel(4);
    let source = PathBuf::from(from);
    let builder = std::thread::spawn(move || {
        let mut out = ChannelWriter {
            sender: sender.clone(),
            piece: Vec::new(),
        };
        let mut builder = tar::Builder::new(&mut out);
        builder.follow_symlinks(false);
        let built = builder
            .append_dir_all(&root, &source)
            .and_then(|()| builder.finish());
        drop(builder);
        let built = built.and_then(|()| out.flush());
        if let Err(error) = built {
            let failed = std::io::Error::new(
                error.kind(),
                format!("cannot read {}: {error}", source.display()),
            );
            let _ = sender.send(Err(failed));
        }
    });
    let reader = ChannelReader {
        receiver,
        piece: Vec::new(),
        at: 0,
    };
    let sent = client.put_tar_from(scope, id, &dir, reader).await;
    let _ = builder.join();
    let sent = sent?;
    Ok(format!(
        "{sent} bytes of tar unpacked into {scope}:{id}:{dir}\n"
    ))
}

/// A tar stream on stdin unpacked into the directory `dir`.
pub async fn stdin_in(
    client: &SandboxdClient,
    scope: Scope,
    id: &str,
    dir: &str,
) -> Result<String, Failure> {
    let dir = dir.trim_end_matches('/');
    let sent = client
        .put_tar_from(scope, id, dir, std::io::stdin())
        .await?;
    Ok(format!(
        "{sent} bytes of tar unpacked into {scope}:{id}:{dir}\n"
    ))
}

/// The directory `path` of the sandbox into the local `to` (`-`: a tar
/// stream on stdout).
pub async fn dir_out(
    client: &SandboxdClient,
    scope: Scope,
    id: &str,
    path: &str,
    to: &str,
) -> Result<(), Failure> {
    let path = path.trim_end_matches('/');
    if to == "-" {
        let mut stdout = std::io::stdout().lock();
        client.get_tar_into(scope, id, path, &mut stdout).await?;
        return Ok(());
    }
    let target = PathBuf::from(to);
    let (unpack_in, rename) = landing(&target, to, &format!("{scope}:{id}:{path}"), path)?;
    let (reader, fetching) = client.get_tar_reader(scope, id, path);
    let dest = unpack_in.clone();
    let unpacker = std::thread::spawn(move || {
        let mut archive = tar::Archive::new(reader);
        archive.set_preserve_permissions(true);
        archive.set_preserve_mtime(true);
        archive.set_overwrite(true);
        let unpacked = archive.unpack(&dest);
        // Read to the end, so the fetching never waits on a full channel.
        let _ = std::io::copy(&mut archive.into_inner(), &mut std::io::sink());
        unpacked
    });
    let fetched = fetching.await;
    let unpacked = unpacker
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the unpacking thread panicked")));
    let placed = fetched.map_err(Failure::from).and_then(|_| {
        unpacked.map_err(|error| cannot_write(to, error))?;
        match &rename {
            Some((from, _)) => {
                std::fs::rename(from, &target).map_err(|error| cannot_write(to, error))
            }
            None => Ok(()),
        }
    });
    if let Some((_, beside)) = rename {
        let _ = std::fs::remove_dir_all(beside);
    }
    placed
}

/// Where the tree from `path` (written `source` in messages) is unpacked
/// for `to`: into `to` itself when it is a directory (made when `path` is
/// the whole workspace), else beside it under the source's name, with the
/// rename that then puts it in place and the directory to remove after.
fn landing(
    target: &Path,
    to: &str,
    source: &str,
    path: &str,
) -> Result<(PathBuf, Option<(PathBuf, PathBuf)>), Failure> {
    match std::fs::metadata(target) {
        Ok(meta) if meta.is_dir() => Ok((target.to_path_buf(), None)),
        Ok(_) => Err(Failure::Usage(format!(
            "{to} is not a directory: cannot copy the directory {source} onto it"
        ))),
        Err(_) if path.is_empty() => {
            std::fs::create_dir(target).map_err(|error| cannot_write(to, error))?;
            Ok((target.to_path_buf(), None))
        }
        Err(_) => {
            // Unpacked beside it under the source's name, then renamed.
            let beside = hidden_beside(target);
            std::fs::create_dir(&beside).map_err(|error| cannot_write(to, error))?;
            let name = path.rsplit('/').next().unwrap_or(path).to_string();
            Ok((beside.clone(), Some((beside.join(name), beside))))
        }
    }
}

fn cannot_write(to: &str, error: std::io::Error) -> Failure {
    Failure::Output(format!("cannot write {to}: {error}"))
}

/// A hidden name beside `target`, for this process.
fn hidden_beside(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.sandboxctl-{}", std::process::id()))
}

/// The tar builder's output, in pieces of up to [`PIECE`] bytes, to the
/// reader on the other side.
struct ChannelWriter {
    sender: mpsc::SyncSender<std::io::Result<Vec<u8>>>,
    piece: Vec<u8>,
}

const PIECE: usize = 256 * 1024;

impl Write for ChannelWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.piece.extend_from_slice(bytes);
        if self.piece.len() >= PIECE {
            self.flush()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.piece.is_empty() {
            return Ok(());
        }
        self.sender
            .send(Ok(std::mem::take(&mut self.piece)))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }
}

/// Reads what a [`ChannelWriter`] wrote; a failure of the builder comes
/// through as a read error, so a half-built archive is never sent whole.
struct ChannelReader {
    receiver: mpsc::Receiver<std::io::Result<Vec<u8>>>,
    piece: Vec<u8>,
    at: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.piece.len() {
            match self.receiver.recv() {
                Ok(piece) => {
                    self.piece = piece?;
                    self.at = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let take = buf.len().min(self.piece.len() - self.at);
        buf[..take].copy_from_slice(&self.piece[self.at..self.at + take]);
        self.at += take;
        Ok(take)
    }
}
