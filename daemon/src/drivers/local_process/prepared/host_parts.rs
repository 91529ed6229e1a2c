//! The host's side of a sandbox, made ahead of demand:
//! its cgroups with the scope's limits written, a uid claimed host-wide,
//! and a workspace directory owned by that uid — what a cold start makes
//! on its caller's time ([`HostMaker::make`], on the pool's background
//! thread). A sandbox that takes one ([`PreparedHost::adopt`]) renames the
//! workspace into place (one `rename`), records the uid as its own, and
//! has its runner cloned straight into the cgroups.
//!
//! Names: each prepared sandbox is `prepared-<n>` until taken. Its
//! cgroups are `sandboxes/prepared-<n>` in every hierarchy and keep that
//! name for the sandbox's life (a cgroup v2 directory cannot be renamed:
//! see `CgroupTree::adopt`; the sandbox's name is written on them as an
//! attribute, see `cgroup::label`); its workspace waits in `<sandboxes>/.prepared/`
//! (a dot-entry: no scan of the workspaces sees it, and a rename from there
//! never crosses a file system); its uid's claim names it until the take,
//! and the sandbox once the ensure has answered (`after_the_answer`).
//!
//! Nothing prepared survives the daemon: an untaken one is undone when
//! dropped (its cgroups removed, its uid and claim given back, its
//! directory removed) at the pool's stop; after a crash the start-up sweep
//! removes every cgroup under `sandboxes/`, the start-up removes what is
//! left in `.prepared/` ([`remove_leftovers`]), and the claims of uids no
//! ledger line names are removed (`UidClaims::stale_own`): a
//! prepared uid is written to the ledger only when a sandbox takes it.
//! Before its take, the one process that runs as a prepared uid is the
//! runner parked in its cgroups (see [`super::parked_runner`]), killed
//! with them (by the start-up sweep too) and waited for before the uid is
//! given back, so no process of one can outlive it.

use std::ffi::CString;
use std::fs::DirBuilder;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::super::cgroup::{kill, CgroupTree};
use super::super::launch::clone_exec::{CgroupPlacement, Privileges};
use super::super::users::identity::RunnerIdentity;
use super::super::users::uid_pool::SandboxUids;
use super::parking::Parked;
use crate::sandbox_key::SandboxKey;

/// The directory under `<sandboxes>` where prepared workspaces wait.
pub const STAGING: &str = ".prepared";

/// What every prepared sandbox's host parts are made from.
pub struct HostMaker {
    pub tree: Arc<CgroupTree>,
    /// Each sandbox's own uid, when each has one.
    pub uids: Option<Arc<SandboxUids>>,
    pub identity: RunnerIdentity,
    /// `<sandboxes>/.prepared`; `None` when workspaces are not prepared
    /// (a project quota is set on each at its start instead).
    pub staging: Option<PathBuf>,
    /// How many never-handed-out uids the pool leaves to cold starts (see
    /// `SandboxUids::assign_prepared`).
    pub uids_kept: u64,
    pub next: AtomicU64,
}

/// One sandbox's host parts, made and not yet taken: undone when dropped.
pub struct PreparedHost {
    maker: Arc<HostMaker>,
    name: String,
    placement: Option<CgroupPlacement>,
    uid: Option<u32>,
    workspace: Option<PathBuf>,
}

/// What a sandbox got from a prepared one.
pub struct Adopted {
    /// Its cgroups, opened for the runner's clone.
    pub placement: CgroupPlacement,
    /// The uid it adopted, new to it (settled as a new uid by the caller).
    pub uid: Option<u32>,
    /// True when its workspace is the prepared one, in place and owned.
    pub workspace_made: bool,
}

impl HostMaker {
    /// Makes one sandbox's host parts. Blocking: a few `mkdir`s and limit
    /// writes, a claim file, a `mkdir` and a `chown`.
    pub fn make(self: &Arc<Self>) -> Result<PreparedHost, String> {
        let name = format!("prepared-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let mut host = PreparedHost {
            maker: self.clone(),
            name,
            placement: None,
            uid: None,
            workspace: None,
        };
        // Each step is undone by dropping `host` when a later one fails.
        host.placement = Some(
            self.tree
                .create(&host.name)
                .map_err(|error| format!("cgroup of a prepared sandbox: {error}"))?,
        );
        if let Some(uids) = &self.uids {
            host.uid = uids
                .assign_prepared(&host.name, self.uids_kept)
                .map_err(|problem| format!("uid of a prepared sandbox: {problem}"))?;
        }
        let owner_known = self.uids.is_none() || host.uid.is_some();
        if let (Some(staging), true) = (&self.staging, owner_known) {
            let workspace = staging.join(&host.name);
            DirBuilder::new()
                .mode(0o700)
                .create(&workspace)
                .map_err(|error| format!("{}: {error}", workspace.display()))?;
            host.workspace = Some(workspace.clone());
            if let Some((uid, gid)) = self.identity.privileges(host.uid).user {
                std::os::unix::fs::lchown(&workspace, Some(uid), Some(gid))
                    .map_err(|error| format!("chown of {}: {error}", workspace.display()))?;
            }
        }
        Ok(host)
    }
}

impl PreparedHost {
    /// Gives these parts to `key`'s sandbox, whose workspace is
    /// `workspace`. A sandbox new to the daemon (no uid yet) takes all of
    /// them: the uid, and the workspace when none is there already (a kept
    /// one stays the sandbox's, and is handed to the uid at the start, as a
    /// cold start would). One that has its uid already (a respawn) takes
    /// the cgroups only; `parked`, parked as the prepared uid, is then of
    /// no use to it and is ended (and waited for) before that uid is given
    /// back. So is a parked gVisor sandbox, which binds the prepared
    /// workspace, when that is not the sandbox's.
    pub fn adopt(
        mut self,
        key: &SandboxKey,
        workspace: &Path,
        parked: &mut Option<Parked>,
    ) -> Adopted {
        let maker = self.maker.clone();
        let has_uid = maker
            .uids
            .as_ref()
            .is_some_and(|uids| uids.uid_of(key).is_some());
        let mut workspace_made = false;
        if let (false, Some(staged)) = (has_uid, self.workspace.as_deref()) {
            match rename_no_replace(staged, workspace) {
                Ok(()) => {
                    self.workspace = None;
                    workspace_made = true;
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => {
                    tracing::warn!(%error, from = %staged.display(), to = %workspace.display(), "cannot move a prepared workspace into place: the sandbox makes its own");
                }
            }
        }
        let adopted_uid = match (&maker.uids, has_uid) {
            (Some(uids), false) => self
                .uid
                .take()
                .and_then(|_| uids.adopt_prepared(&self.name, key)),
            _ => None,
        };
        let other_uid = maker.uids.is_some() && adopted_uid.is_none();
        let other_workspace =
            !workspace_made && parked.as_ref().is_some_and(Parked::binds_its_workspace);
        if other_uid || other_workspace {
            drop(parked.take());
        }
        maker.tree.adopt(&key.base_name, &self.name);
        Adopted {
            placement: self.placement.take().expect("made with its cgroups"),
            uid: adopted_uid,
            workspace_made,
        }
    }

    /// Its name, `prepared-<n>`, until taken.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its workspace, waiting in the staging directory (`None` when
    /// workspaces are not prepared).
    pub fn workspace(&self) -> Option<&Path> {
        self.workspace.as_deref()
    }

    /// A second opening of its cgroups, for the runner parked in them.
    pub fn placement_copy(&self) -> io::Result<CgroupPlacement> {
        self.placement
            .as_ref()
            .expect("made with its cgroups")
            .try_clone()
    }

    /// What a runner of this sandbox gives up and becomes: its uid's.
    pub fn privileges(&self) -> Privileges {
        self.maker.identity.privileges(self.uid)
    }
}

impl Drop for PreparedHost {
    /// Undoes what was made and not taken.
    fn drop(&mut self) {
        if let Some(workspace) = &self.workspace {
            if let Err(error) = std::fs::remove_dir(workspace) {
                tracing::warn!(%error, dir = %workspace.display(), "cannot remove an untaken prepared workspace");
            }
        }
        if let (Some(uids), Some(_)) = (&self.maker.uids, self.uid) {
            uids.release_prepared(&self.name);
        }
        if self.placement.take().is_some() {
            let dirs = self.maker.tree.sandboxes().child(&self.name);
            if let Err(error) = kill::remove(&dirs) {
                tracing::warn!(%error, "cannot remove an untaken prepared cgroup");
            }
        }
    }
}

/// Removes what a daemon that did not stop cleanly left prepared in
/// `staging` (directories no sandbox took: empty, and nobody's). Blocking.
pub fn remove_leftovers(staging: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(staging) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| std::fs::remove_dir_all(entry.path()).is_ok())
        .count()
}

/// `rename(from, to)` that fails with `AlreadyExists` rather than replace
/// an empty directory at `to`.
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    let c = |path: &Path| {
        CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: renameat2 with two C strings that live across the call.
    let result = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
