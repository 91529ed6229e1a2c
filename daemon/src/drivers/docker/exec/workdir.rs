//! A command's working directory inside its container: the workspace
//! (`/workspace`) joined with the request's relative directory (already
//! checked to have no `..`), refused when any part of it is a symbolic
//! link, is missing, or is not a directory.
//!
//! The engine resolves the directory in the container's own root, so a
//! link could lead only elsewhere in the container, which the command
//! could reach anyway; a link is still refused, so that `workdir` means
//! beneath the workspace on every tier. Each part is looked at with the
//! engine's path stat (`HEAD /containers/ID/archive`), which does not
//! follow a final link. The sandbox could swap a directory for a link
//! between this look and the start; that gains it nothing it lacked.

use bollard::query_parameters::ContainerArchiveInfoOptionsBuilder;
use sandboxd_protocol::SandboxError;

use super::super::engine::{Engine, READ_TIMEOUT};
use super::super::spec::WORKSPACE;
use crate::sandbox_key::SandboxKey;

/// Go's `os.ModeDir`, in the stat's mode.
const MODE_DIR: u32 = 1 << 31;

/// The directory in the container for `relative` (the workspace for
/// `None`), checked part by part.
pub async fn resolve(
    engine: &Engine,
    key: &SandboxKey,
    container: &str,
    relative: Option<&str>,
) -> Result<String, SandboxError> {
    let Some(relative) = relative.filter(|dir| !dir.is_empty() && *dir != ".") else {
        return Ok(WORKSPACE.to_string());
    };
    let invalid = |why: String| {
        SandboxError::InvalidArgument(format!("workdir '{relative}' in {} {why}", key.what()))
    };
    let mut path = WORKSPACE.to_string();
    for part in relative
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
    {
        path.push('/');
        path.push_str(part);
        let (options, container, at) = (
            ContainerArchiveInfoOptionsBuilder::default()
                .path(&path)
                .build(),
            container.to_string(),
            path.clone(),
        );
        let stat = engine
            .call(READ_TIMEOUT, |docker| async move {
                docker
                    .get_container_archive_info(&container, Some(options))
                    .await
            })
            .await;
        match stat {
            Ok(stat) if !stat.link_target.is_empty() => {
                return Err(invalid(format!(
                    "leads out of the workspace: {at} is a symbolic link (to {})",
                    stat.link_target
                )))
            }
            Ok(stat) if stat.file_mode & MODE_DIR == 0 => {
                return Err(invalid(format!("is not a directory ({at})")))
            }
            Ok(_) => {}
            Err(error) if error.is_not_found() => {
                return Err(invalid(format!("does not exist in the workspace ({at})")))
            }
            Err(error) => {
                return Err(error.into_sandbox_error(&format!(
                    "cannot look at workdir '{relative}' in {}",
                    key.what()
                )))
            }
        }
    }
    Ok(path)
}
