//! The process tier's live figures of one running sandbox: its cgroup's
//! counters (see [`cgroup::usage`](super::cgroup::usage)), its limits, its
//! uid, and (for `describe`) its workspace's size.

use sandboxd_protocol::Usage;

use super::workspaces::disk;
use super::{now_unix_ms, Inner};
use crate::sandbox_key::SandboxKey;

impl Inner {
    /// The figures of `key`'s runner, `None` when it is not running or no
    /// cgroup contains it (the process-group fallback counts nothing).
    /// `with_disk` measures the workspace too (a walk of its tree, which
    /// `describe` can afford and a `top` refreshing every second over many
    /// sandboxes should not). Blocking: run it on the blocking pool.
    pub(super) fn usage(&self, key: &SandboxKey, with_disk: bool) -> Option<Usage> {
        let running = self
            .records()
            .get(key)
            .is_some_and(|record| record.running.is_some());
        if !running {
            return None;
        }
        let tree = self.containment.tree()?;
        let dirs = tree.figure_dirs(&key.base_name);
        let figures = dirs.read();
        let disk_limit = (self.disk_limit.bytes > 0).then_some(self.disk_limit.bytes);
        Some(Usage {
            sampled_at_unix_ms: now_unix_ms(),
            memory_bytes: figures.memory_bytes,
            memory_peak_bytes: figures.memory_peak_bytes,
            memory_limit_bytes: tree.memory_limit(),
            tasks: figures.tasks,
            tasks_limit: tree.pids_limit(),
            cpu_usec: figures.cpu_usec,
            forks_refused: figures.forks_refused,
            oom_kills: figures.oom_kills,
            workspace_bytes: with_disk.then(|| disk::measure(&self.settings.workspace(key)).bytes),
            disk_limit_bytes: disk_limit,
            unix_uid: self.uids.as_ref().and_then(|uids| uids.uid_of(key)),
            cgroup: Some(dirs.v2.display().to_string()),
        })
    }
}
