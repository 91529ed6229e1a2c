//! The sandbox's uid named inside gVisor, as in `full`'s view: the
//! daemon's copies of `/etc/passwd` and `/etc/group` with a line for the
//! uid (and its gid), bound read-only over the host's in the bundle (see
//! `isolation::passwd_entry`), so `whoami`, `id -un` and
//! `getpwuid(getuid())` answer inside, for the runner and its commands.

use std::path::Path;

use super::super::isolation::mounts::MountPlan;
use super::super::isolation::passwd_entry;
use super::super::launch::clone_exec::Privileges;
use super::Gvisor;

impl Gvisor {
    /// `plan` with the copies for `privileges`' user bound, its home
    /// `home`; `plan` as it is when the host's files name the user
    /// already, or when the copies cannot be written (a full state
    /// directory: the sandbox still starts, its uid unnamed, and the log
    /// says why).
    pub fn with_identity(
        &self,
        plan: MountPlan,
        privileges: &Privileges,
        home: &Path,
    ) -> MountPlan {
        let Some((uid, gid)) = privileges.user else {
            return plan;
        };
        match passwd_entry::write_for(&self.identities, uid, gid, home) {
            Ok(Some(files)) => plan.with_identity(&files),
            Ok(None) => plan,
            Err(error) => {
                tracing::warn!(uid, %error, "cannot write a gVisor sandbox's /etc/passwd: its uid has no entry inside");
                plan
            }
        }
    }
}
