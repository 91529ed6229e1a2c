//! `[limits] disk`: how much a process-tier workspace may hold, and which
//! mechanism holds it there.
//!
//! Chosen once at start, for every sandbox alike:
//! - [project quotas](project_quota), where the state directory's file
//!   system enforces them and each sandbox has a uid of its own (the
//!   project id): a write past the limit fails with `EDQUOT`, and the
//!   runner goes on;
//! - otherwise the [watcher]: every running workspace is measured now and
//!   then, and a runner whose workspace outgrew the limit is stopped
//!   (`stopped: disk limit (10 GiB)` in `describe` and the daemon's log).
//!   Its workspace is kept, so the operator can look; the next ensure
//!   starts it again only once the workspace is back under the limit, and
//!   otherwise fails naming its size.

pub mod project_quota;
pub mod watcher;

use std::path::Path;

use sandboxd_protocol::{show_bytes, IsolationFeature};

/// How the limit is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mechanism {
    /// `[limits] disk = 0`.
    Unlimited,
    /// By the file system.
    ProjectQuota,
    /// By the watcher; the reason project quotas are not used.
    Watcher { no_quota: String },
}

/// The limit and its mechanism.
#[derive(Debug, Clone)]
pub struct DiskLimit {
    /// Bytes; 0 for none.
    pub bytes: u64,
    pub mechanism: Mechanism,
}

impl DiskLimit {
    /// Project quotas if `sandboxes` (the workspaces' directory) is on a
    /// file system that enforces them and sandboxes have their own uids,
    /// else the watcher. Blocking (one `quotactl`).
    pub fn choose(bytes: u64, sandboxes: &Path, uid_per_sandbox: bool) -> DiskLimit {
        let mechanism = if bytes == 0 {
            Mechanism::Unlimited
        } else if !uid_per_sandbox {
            Mechanism::Watcher {
                no_quota: "sandboxes have no uid of their own to be a project id (run_as, or a daemon that is not root)".to_string(),
            }
        } else {
            match project_quota::enforced_on(sandboxes) {
                Ok(()) => Mechanism::ProjectQuota,
                Err(no_quota) => Mechanism::Watcher { no_quota },
            }
        };
        match &mechanism {
            Mechanism::Watcher { no_quota } => {
                tracing::info!(limit = %show_bytes(bytes), reason = %no_quota, "the disk limit is held by a watcher, not by project quotas")
            }
            Mechanism::ProjectQuota => {
                tracing::info!(limit = %show_bytes(bytes), "the disk limit is held by project quotas")
            }
            Mechanism::Unlimited => {}
        }
        DiskLimit { bytes, mechanism }
    }

    /// The limit the watcher holds, if it is the mechanism.
    pub fn watched(&self) -> Option<u64> {
        matches!(self.mechanism, Mechanism::Watcher { .. }).then_some(self.bytes)
    }

    /// The limit project quotas hold, if they are the mechanism.
    pub fn by_quota(&self) -> Option<u64> {
        (self.mechanism == Mechanism::ProjectQuota).then_some(self.bytes)
    }

    /// What `status` and `describe` say.
    pub fn feature(&self) -> IsolationFeature {
        let limit = show_bytes(self.bytes);
        match &self.mechanism {
            Mechanism::Unlimited => {
                IsolationFeature::not_in_force("disk-limit", "[limits] disk = 0: workspaces have no size limit")
            }
            Mechanism::ProjectQuota => IsolationFeature::in_force(
                "disk-limit",
                format!("{limit} per workspace by project quota (project id = the sandbox's uid): a write past it fails with EDQUOT"),
            ),
            Mechanism::Watcher { no_quota } => IsolationFeature::in_force(
                "disk-limit",
                format!(
                    "{limit} per workspace by a watcher that measures running workspaces every {}s or more and stops a runner whose workspace outgrew it (it may overshoot in between); not by project quotas: {no_quota}",
                    watcher::INTERVAL.as_secs()
                ),
            ),
        }
    }
}
