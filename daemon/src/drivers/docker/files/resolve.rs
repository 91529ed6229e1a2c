//! Paths of the workspace resolved to paths in the container, component
//! by component.
//!
//! The engine resolves a path's symbolic links in the scope of the
//! container's root, not of the workspace: a link the sandbox planted
//! (`ws/etc -> /etc`) would lead an archive call, done as root, to the
//! container's own `/etc`. So each component is looked at first (the
//! first header of its archive: its type, mode and owner), a link is
//! followed only where the engine's path stat says it fully resolves
//! (`linkTarget`) inside `/workspace`, and every directory on the way must
//! let the container's user search it. What the call then names is a path
//! with no link left in it.
//!
//! What this cannot close: the sandbox may swap a directory for a link
//! between these looks and the call itself (the engine has no call that
//! refuses to follow one), which a runner racing its own file calls could
//! win; the process tier's `openat2(RESOLVE_BENEATH)` has no such window.

use tar::EntryType;

use sandboxd_protocol::SandboxError;

use super::super::spec::WORKSPACE;
use super::archive;
use super::scan::Head;
use super::told::inside;
use super::user::SEARCH;
use super::Call;

/// The components of a checked relative path, without empty ones and `.`.
pub fn components(path: &str) -> Vec<&str> {
    path.split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect()
}

impl Call {
    /// The first header of the archive of `at`; `None` when nothing is there.
    pub async fn probe(&self, at: &str) -> Result<Option<Head>, SandboxError> {
        archive::probe(&self.engine, &self.container, at)
            .await
            .map_err(|error| self.told.engine(error))
    }

    /// The directory `parents` (components below the workspace) name,
    /// every link on the way followed inside the workspace and every
    /// directory searchable by the container's user: its path in the
    /// container and its header.
    pub async fn directory(&self, parents: &[&str]) -> Result<(String, Head), SandboxError> {
        let mut dir = WORKSPACE.to_string();
        let mut head = self.probe(&dir).await?.ok_or_else(|| {
            SandboxError::Unavailable(format!(
                "the container of {} has no {WORKSPACE}",
                self.told.what
            ))
        })?;
        self.searchable(&dir, &head)?;
        for part in parents {
            (dir, head) = self.follow(&dir, part).await?;
            self.searchable(&dir, &head)?;
        }
        Ok((dir, head))
    }

    fn searchable(&self, at: &str, head: &Head) -> Result<(), SandboxError> {
        if head.kind != EntryType::Directory {
            return Err(self.told.not_dir());
        }
        if !self.user.may(head.mode, head.uid, head.gid, SEARCH) {
            return Err(self.told.denied(at));
        }
        Ok(())
    }

    /// `dir/name`, or where it leads when it is a link that stays in the
    /// workspace: its path in the container and its header.
    pub async fn follow(&self, dir: &str, name: &str) -> Result<(String, Head), SandboxError> {
        let at = format!("{dir}/{name}");
        let head = self
            .probe(&at)
            .await?
            .ok_or_else(|| self.told.not_found())?;
        if head.kind != EntryType::Symlink {
            return Ok((at, head));
        }
        let target = archive::path_stat(&self.engine, &self.container, &at)
            .await
            .map_err(|error| self.told.engine(error))?
            .map(|stat| stat.link_target)
            .filter(|target| !target.is_empty())
            .ok_or_else(|| self.told.not_found())?;
        if !inside(&target) {
            return Err(self.told.leads_out(&at, &target));
        }
        let head = self
            .probe(&target)
            .await?
            .ok_or_else(|| self.told.not_found())?;
        // Fully resolved, so a link here was planted since: not followed.
        if head.kind == EntryType::Symlink {
            return Err(self.told.leads_out(&at, &target));
        }
        Ok((target, head))
    }
}
