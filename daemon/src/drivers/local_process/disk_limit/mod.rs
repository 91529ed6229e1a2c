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
//!
//! The watcher also holds `[limits] disk_inodes` (how many files a
//! workspace may hold; a runner past it is stopped the same way) and the
//! [reserve] of the state directory's file system, whichever mechanism
//! holds the byte limit.

pub mod project_quota;
pub mod reserve;
mod stopping;
mod verdict;
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
    /// Files and directories a workspace may hold; 0 for no limit.
    pub inodes: u64,
    /// `[limits] state_reserve`, unless it is 0.
    pub reserve: Option<reserve::Reserve>,
    /// Told of each runner's start, so the watcher looks at once, at its
    /// shorter tick (see [`watcher::LIMITED_TICK`]), instead of a long
    /// tick later.
    pub runner_started: std::sync::Arc<watcher::StartBell>,
}

impl DiskLimit {
    /// Project quotas if `sandboxes` (the workspaces' directory) is on a
    /// file system that enforces them and sandboxes have their own uids,
    /// else the watcher. Blocking (one `quotactl`).
    pub fn choose(
        limits: &crate::config::LimitsConfig,
        sandboxes: &Path,
        uid_per_sandbox: bool,
    ) -> DiskLimit {
        let bytes = limits.disk;
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
        DiskLimit {
            bytes,
            mechanism,
            inodes: limits.disk_inodes,
            reserve: reserve::Reserve::on(limits.state_reserve, sandboxes),
            runner_started: Default::default(),
        }
    }

    /// The inode limit the watcher holds, if any.
    pub fn watched_inodes(&self) -> Option<u64> {
        (self.inodes > 0).then_some(self.inodes)
    }

    /// Whether the watcher has anything to do.
    pub fn needs_watcher(&self) -> bool {
        self.watched().is_some() || self.watched_inodes().is_some() || self.reserve.is_some()
    }

    /// What `status` adds about the inode limit and the reserve.
    fn also_held(&self) -> String {
        let inodes = match self.inodes {
            0 => "no limit on a workspace's files ([limits] disk_inodes = 0)".to_string(),
            limit => format!("at most {limit} files and directories per workspace, by the watcher"),
        };
        let reserve = match &self.reserve {
            Some(reserve) => format!(
                "{}: below it new sandboxes are refused and writing ones stopped (disk-full)",
                reserve.shown()
            ),
            None => "no state reserve ([limits] state_reserve = 0)".to_string(),
        };
        format!("; {inodes}; {reserve}")
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
        let mut feature = match &self.mechanism {
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
                    "{limit} per workspace by a watcher that measures running workspaces (deleted files held open included) every {}s, sooner while the file system fills (its free space read every {} ms), and stops a runner whose workspace outgrew it (it may overshoot by what it writes in between); not by project quotas: {no_quota}",
                    watcher::INTERVAL.as_secs(),
                    watcher::TICK.as_millis()
                ),
            ),
        };
        feature.detail.push_str(&self.also_held());
        feature
    }
}
