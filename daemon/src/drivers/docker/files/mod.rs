//! Files in and out of a docker-tier sandbox's workspace (see
//! [`sandboxd_protocol::files`]), through the Engine's archive endpoints:
//! `GET /containers/ID/archive` out, `PUT` in, its `HEAD` for where a link
//! leads. The engine does the work as root, so the daemon holds it to what
//! the container's user could do: paths resolve inside `/workspace` only
//! ([`resolve`]), what is read is checked against the user's permissions
//! by the archive's headers ([`user`]), and what is written is owned by
//! the user with its setuid, setgid and sticky bits dropped.
//!
//! Rooms: `archive` (the engine calls), `scan` (tar read as it streams),
//! `resolve` (paths, link by link), `user` (the permission check), `told`
//! (the refusals' words), `upload_partials` (uploads kept on the host until their
//! last chunk), `put` (`put_file`), `put_tar` (with `tar_check`, the
//! archive's check and the engine's copy of it), `get_file`, `get_tar`,
//! `read` (`stat_file`, `list_files`), `remove`, `spool` (downloads
//! copied to the host once, read by offset), `staging` (puts unpacked
//! aside, then linked into place).

mod archive;
mod get_file;
mod get_tar;
mod put;
mod put_tar;
mod read;
mod remove;
mod resolve;
mod scan;
mod spool;
mod staging;
mod tar_check;
mod told;
mod user;

use std::path::Path;
use std::sync::Arc;

use sandboxd_protocol::SandboxError;

use super::engine::Engine;
use super::observed::{Lookup, Phase};
use super::Inner;
use crate::drivers::upload_partials::Partials;
use crate::instance::Instance;
use crate::provisioner::SandboxKey;
use told::Told;
use user::ContainerUser;

/// What the file calls keep beside the engine.
pub struct Files {
    partials: Partials,
    spools: spool::Spools,
    stagings: staging::Stagings,
}

impl Files {
    /// `<state_dir>/docker/uploads`, `downloads` and `staging`, created
    /// 0700 if missing.
    pub fn prepare(state_dir: &Path) -> std::io::Result<Files> {
        Ok(Files {
            partials: Partials::prepare(&state_dir.join("docker").join("uploads"))?,
            spools: spool::Spools::prepare(state_dir)?,
            stagings: staging::Stagings::prepare(state_dir)?,
        })
    }

    /// Removes, in the background, the puts' stagings an earlier daemon
    /// left in containers (see [`staging`]).
    pub fn remove_left_stagings(&self, engine: Arc<Engine>) {
        let left = self.stagings.left();
        if !left.is_empty() {
            tokio::spawn(staging::remove_left(engine, left));
        }
    }

    /// Ends the downloads of `container`, which is being removed.
    pub fn forget_container(&self, container: &str) {
        self.spools.forget_container(container);
    }
}

/// One file call on one container: where, as whom, and how it is told.
pub struct Call {
    engine: Arc<Engine>,
    container: String,
    /// The container's name: what a staging's record names.
    name: String,
    user: ContainerUser,
    running: bool,
    told: Told,
}

impl Inner {
    /// The sandbox's container, as a file call works on it: ours, and not
    /// on its way out. A stopped container's files move too (the engine's
    /// archive calls need no running process); removing one needs a run.
    pub(super) async fn file_call(
        &self,
        key: &SandboxKey,
        verb: &'static str,
        path: &str,
    ) -> Result<Call, SandboxError> {
        let told = Told {
            verb,
            path: path.to_string(),
            what: key.what(),
        };
        let observed = match self.inspect(key).await? {
            Lookup::Ours(observed) => observed,
            Lookup::Absent | Lookup::Foreign { .. } => {
                return Err(SandboxError::FailedPrecondition(format!(
                    "{} has no container on the engine: ensure it first",
                    told.what
                )))
            }
        };
        if matches!(observed.phase, Phase::Dead | Phase::Removing) {
            return Err(SandboxError::FailedPrecondition(format!(
                "the container of {} is {}: ensure it first",
                told.what,
                observed.phase.as_str()
            )));
        }
        let user = ContainerUser::parse(&observed.user).map_err(|why| {
            SandboxError::FailedPrecondition(format!("cannot {verb} files in {}: {why}", told.what))
        })?;
        Ok(Call {
            engine: self.engine.clone(),
            container: observed.id.clone(),
            name: Instance::current().object_name(&key.base_name),
            user,
            running: observed.phase == Phase::Running,
            told,
        })
    }
}
