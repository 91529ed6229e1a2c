//! `sandboxctl cp`: files in and out of a sandbox's workspace, one file
//! at a time, in chunks of at most 1 MiB; whole directories go as tar
//! streams ([`crate::tree_copy`]).
//!
//! A path in a sandbox is written `SCOPE:ID:PATH` (`session:ses_42:out.txt`),
//! PATH relative to its workspace; anything else is a local path, `-`
//! standing for stdin or stdout: a file's bytes when the other end is a
//! file, a tar stream when it is a directory (as `docker cp` has it).

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;

use clap::Args;
use sandboxd_client::{FileType, SandboxError, SandboxdClient, Scope, TarStreamError};
use sandboxd_protocol::{validate, validate_files};

use super::{Context, Run};
use crate::args::id_name;
use crate::failure::Failure;
use crate::tree_copy;

/// Copy a file or a directory into or out of a sandbox's workspace,
/// as the sandbox's user: `cp ./file session:ses_42:sub/file`, `cp
/// ./dir session:ses_42:sub` (a directory, as a tar stream), `cp
/// session:ses_42:sub/dir ./out`, `cp session:ses_42:out.txt -` (a
/// file's bytes to stdout), `cp session:ses_42:dir -` and `cp -
/// session:ses_42:dir` (a tar stream on stdout or stdin, as docker cp
/// has it). A path in a sandbox is SCOPE:ID:PATH, relative to its
/// workspace; a directory copied into an existing directory lands
/// under its own name, to a new path under that path's name.
#[derive(Debug, Args)]
pub struct CpArgs {
    /// A local file or directory (or - for stdin: a tar stream when
    /// the destination is a directory), or SCOPE:ID:PATH.
    pub source: String,
    /// SCOPE:ID:PATH (a directory there takes the source's name), or a
    /// local path (or - for stdout: a tar stream of a directory).
    pub destination: String,
}

impl Run for CpArgs {
    /// The sandbox end's id and path.
    fn check(&self) -> Result<(), SandboxError> {
        [&self.source, &self.destination]
            .into_iter()
            .try_for_each(|end| match End::parse(end) {
                End::Sandbox { scope, id, path } => validate::sandbox_id(id_name(scope), &id)
                    .and_then(|()| validate_files::path(&path)),
                End::Local(_) => Ok(()),
            })
    }

    async fn run(self, context: &Context) -> Result<String, Failure> {
        copy(&context.connect().await?, &self.source, &self.destination).await
    }
}

/// One end of a copy.
#[derive(Debug, PartialEq, Eq)]
enum End {
    Local(String),
    Sandbox {
        scope: Scope,
        id: String,
        path: String,
    },
}

impl End {
    /// `SCOPE:ID:PATH` when it starts with a scope's name, else local.
    fn parse(text: &str) -> End {
        let mut parts = text.splitn(3, ':');
        let (Some(scope), Some(id), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            return End::Local(text.to_string());
        };
        match scope.parse::<Scope>() {
            Ok(scope) if !id.is_empty() => End::Sandbox {
                scope,
                id: id.to_string(),
                path: path.to_string(),
            },
            _ => End::Local(text.to_string()),
        }
    }
}

/// `sandboxctl cp SRC DST`: one end local, the other in a sandbox.
async fn copy(client: &SandboxdClient, source: &str, destination: &str) -> Result<String, Failure> {
    match (End::parse(source), End::parse(destination)) {
        (End::Local(from), End::Sandbox { scope, id, path }) => {
            if from == "-" && names_dir(client, scope, &id, &path).await {
                return tree_copy::stdin_in(client, scope, &id, &path).await;
            }
            if from != "-" && std::fs::symlink_metadata(&from).is_ok_and(|meta| meta.is_dir()) {
                return tree_copy::dir_in(client, scope, &id, &from, &path).await;
            }
            let path = into_dir(client, scope, &id, &path, &from).await?;
            let sent = upload(client, scope, &id, &path, &from).await?;
            Ok(format!("{sent} bytes to {scope}:{id}:{path}\n"))
        }
        (End::Sandbox { scope, id, path }, End::Local(to)) => {
            if tree_copy::sandbox_kind(client, scope, &id, &path).await == Some(FileType::Dir) {
                tree_copy::dir_out(client, scope, &id, &path, &to).await?;
                return Ok(String::new());
            }
            download(client, scope, &id, &path, &to).await?;
            Ok(String::new())
        }
        (End::Local(_), End::Local(_)) => Err(Failure::Usage(
            "cp copies in or out of a sandbox: write one end as SCOPE:ID:PATH (session:ses_42:out.txt)".into(),
        )),
        (End::Sandbox { .. }, End::Sandbox { .. }) => Err(Failure::Usage(
            "cp copies between this host and a sandbox: one end must be a local path (or -)"
                .into(),
        )),
    }
}

/// Whether `path` in the sandbox names a directory: empty, ending in
/// `/`, or one there.
async fn names_dir(client: &SandboxdClient, scope: Scope, id: &str, path: &str) -> bool {
    path.ends_with('/')
        || tree_copy::sandbox_kind(client, scope, id, path).await == Some(FileType::Dir)
}

/// `path` itself, or the source's name inside it when it names a
/// directory (empty, ending in `/`, or a directory in the sandbox).
async fn into_dir(
    client: &SandboxdClient,
    scope: Scope,
    id: &str,
    path: &str,
    from: &str,
) -> Result<String, Failure> {
    let is_dir = path.is_empty()
        || path.ends_with('/')
        || client
            .stat_file(scope, id, path)
            .await
            .is_ok_and(|stat| stat.file_type == FileType::Dir);
    if !is_dir {
        return Ok(path.to_string());
    }
    let name = std::path::Path::new(from)
        .file_name()
        .filter(|_| from != "-")
        .ok_or_else(|| {
            Failure::Usage(format!(
                "'{path}' is a directory: name the file to write from stdin"
            ))
        })?;
    let dir = path.trim_end_matches('/');
    let name = name.to_string_lossy();
    Ok(if dir.is_empty() {
        name.into_owned()
    } else {
        format!("{dir}/{name}")
    })
}

/// Sends `from` (a file, or stdin for `-`) chunk by chunk, a few in
/// flight at once; answers the bytes sent.
async fn upload(
    client: &SandboxdClient,
    scope: Scope,
    id: &str,
    path: &str,
    from: &str,
) -> Result<u64, Failure> {
    let cannot = |error: std::io::Error| Failure::Usage(format!("cannot read {from}: {error}"));
    let (reader, mode): (Box<dyn Read + Send>, u32) = if from == "-" {
        (Box::new(std::io::stdin()), 0o644)
    } else {
        let file = std::fs::File::open(from).map_err(cannot)?;
        let mode = file.metadata().map_err(cannot)?.permissions().mode() & 0o777;
        (Box::new(file), mode)
    };
    match client.put_file_from(scope, id, path, mode, reader).await {
        Err(TarStreamError::Local(error)) => Err(cannot(error)),
        sent => Ok(sent?),
    }
}

/// Fetches `path` chunk by chunk (a few in flight at once) into `to` (a file, or stdout for `-`).
async fn download(
    client: &SandboxdClient,
    scope: Scope,
    id: &str,
    path: &str,
    to: &str,
) -> Result<(), Failure> {
    let cannot = |error: std::io::Error| Failure::Output(format!("cannot write {to}: {error}"));
    let mut writer: Box<dyn Write> = if to == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        let mut target = std::path::PathBuf::from(to);
        if target.is_dir() {
            let name = std::path::Path::new(path).file_name().unwrap_or_default();
            target.push(name);
        }
        Box::new(std::fs::File::create(&target).map_err(cannot)?)
    };
    match client.get_file_into(scope, id, path, &mut writer).await {
        Err(TarStreamError::Local(error)) => Err(cannot(error)),
        fetched => fetched.map(drop).map_err(Failure::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_end_starts_with_a_scope() {
        assert_eq!(
            End::parse("session:ses_42:sub/file"),
            End::Sandbox {
                scope: Scope::Session,
                id: "ses_42".into(),
                path: "sub/file".into()
            }
        );
        assert_eq!(End::parse("./a:b:c"), End::Local("./a:b:c".into()));
        assert_eq!(End::parse("-"), End::Local("-".into()));
        assert_eq!(End::parse("session::x"), End::Local("session::x".into()));
    }
}
