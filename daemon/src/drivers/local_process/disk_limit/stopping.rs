//! Acting on what the [watcher](super::watcher) found: stopping a runner
//! for its disk use, and refusing to start one while the disk says no.

use std::sync::Arc;

use sandboxd_protocol::{show_bytes, ExitReason, SandboxError};

use super::super::workspaces::disk;
use super::super::workspaces::walk;
use super::super::{stop, Inner};
use super::verdict::{self, Limits, Usage};
use crate::sandbox_key::SandboxKey;

impl Inner {
    /// Stops the runner of `generation` (not a later one) for `reason`:
    /// marked first, so its exit records the reason. `why` adds to the log.
    pub(super) async fn stop_for_disk(
        self: &Arc<Self>,
        key: &SandboxKey,
        generation: u64,
        reason: ExitReason,
        usage: Usage,
        why: String,
    ) {
        let pid = {
            let mut records = self.records();
            let Some(running) = records
                .get_mut(key)
                .and_then(|record| record.running.as_mut())
                .filter(|running| running.generation == generation)
            else {
                return;
            };
            running.disk_stop = Some(reason);
            running.pid
        };
        let what = match reason {
            ExitReason::DiskLimit { .. } => "the workspace outgrew [limits] disk",
            ExitReason::DiskInodeLimit { .. } => "the workspace outgrew [limits] disk_inodes",
            _ => "the state directory's file system is below [limits] state_reserve and this sandbox is writing",
        };
        tracing::warn!(scope = %key.scope, id = %key.shown_id(), pid, usage = %usage.shown(), %reason, %why, "{what}: stopping its runner");
        match self.containment.tree() {
            Some(tree) => {
                let dirs = tree.dirs(&key.base_name);
                let killed =
                    tokio::task::spawn_blocking(move || super::super::cgroup::kill::kill(&dirs))
                        .await;
                if !matches!(killed, Ok(Ok(()))) {
                    tracing::error!(pid, result = ?killed, "cannot kill the runner's cgroup; killing its group");
                    stop::kill_group(pid as i32, nix::sys::signal::Signal::SIGKILL);
                }
            }
            None => stop::kill_group(pid as i32, nix::sys::signal::Signal::SIGKILL),
        }
    }

    /// Refuses to start a runner while the state directory's file system
    /// is below its reserve, or while the workspace of a sandbox last
    /// stopped for a disk limit is still over it. Blocking (a `statvfs`,
    /// and a walk of the workspace only after such a stop).
    pub(in crate::drivers::local_process) fn check_disk_before_start(
        &self,
        key: &SandboxKey,
    ) -> Result<(), SandboxError> {
        if let Some(short) = self.disk_limit.reserve.as_ref().and_then(|r| r.shortfall()) {
            return Err(SandboxError::Unavailable(format!(
                "{short}: no new sandbox starts until space is freed"
            )));
        }
        let last_reason = self
            .records()
            .get(key)
            .and_then(|record| record.last_exit.as_ref())
            .map(|exit| exit.reason);
        let limits = match last_reason {
            Some(ExitReason::DiskLimit { .. }) => Limits {
                bytes: self.disk_limit.watched(),
                inodes: None,
            },
            Some(ExitReason::DiskInodeLimit { .. }) => Limits {
                bytes: None,
                inodes: self.disk_limit.watched_inodes(),
            },
            _ => return Ok(()),
        };
        let workspace = self.settings.workspace(key);
        let usage = Usage {
            tree: match limits.inodes {
                Some(inodes) => walk::measure(&workspace, inodes),
                None => disk::measure(&workspace),
            },
            unlinked_bytes: 0,
        };
        let Some(reason) = verdict::over(usage, limits) else {
            return Ok(());
        };
        let limit = match reason {
            ExitReason::DiskInodeLimit { limit_inodes } => format!("{limit_inodes} files"),
            ExitReason::DiskLimit { limit_bytes } => show_bytes(limit_bytes),
            _ => String::new(),
        };
        Err(SandboxError::FailedPrecondition(format!(
            "the workspace of {} '{}' ({}) holds {}, over the disk limit ({limit}) its runner was stopped for: remove files from it, or deprovision the sandbox",
            key.scope,
            key.id,
            workspace.display(),
            usage.shown(),
        )))
    }
}
