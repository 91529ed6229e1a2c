//! No workspace is ever invisible: every workspace directory on disk is
//! either listed (`workspaces`, with its sandbox's id, scope, size and last
//! use) and removable by id (`deprovision` of a stopped sandbox removes its
//! kept workspace), or removed once unused for `workspace_ttl`.
//!
//! The [catalog] records each sandbox's id beside its hashed base name the
//! moment a runner is about to start, so a workspace left by a SIGKILL or a
//! crash still has a name after the restart. A directory no record names
//! (left by a sandboxd from before the catalog) is still listed, by its base
//! name and scope, and the TTL still removes it.
//!
//! A workspace's last use is the latest of: its runner's last start or end
//! (the catalog), its output file's last write, and — for a directory no
//! record names — its own modification time. A running sandbox never
//! expires. The sweep runs at start (before anything can be ensured the
//! startup sweep has killed every leftover runner) and then every tenth of
//! the TTL, at least every second and at most every hour.

mod catalog;
pub mod disk;
pub mod held_open;
pub mod owner;
pub mod scan;
pub mod walk;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use sandboxd_protocol::{SandboxError, Scope, WorkspaceInfo};

use super::{now_unix_ms, Inner};
use crate::sandbox_key::SandboxKey;
pub use catalog::Catalog;
use catalog::CatalogEntry;
use disk::OnDisk;

/// How often the TTL is checked: a tenth of it, within [1 s, 1 h].
fn sweep_interval(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_secs(1), Duration::from_secs(3600))
}

/// Forgets catalog entries whose workspace is gone (removed by hand, say).
/// Blocking; call at start, before anything can be ensured.
pub fn reconcile(catalog: &Catalog, sandboxes: &std::path::Path) {
    for base in catalog.entries().into_keys() {
        if !sandboxes.join(&base).exists() {
            catalog.forget(&base);
        }
    }
}

/// Checks the TTL now and then every [`sweep_interval`], until the driver
/// is gone.
pub async fn keep_expiring(inner: Weak<Inner>, ttl: Duration) {
    let mut ticks = tokio::time::interval(sweep_interval(ttl));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let removed = inner.expire_workspaces(ttl).await;
        if removed > 0 {
            tracing::info!(removed, ttl = ?ttl, "removed workspaces unused for longer than workspace_ttl");
        }
    }
}

/// One workspace found on disk, with what the catalog says of it.
struct Found {
    on_disk: OnDisk,
    entry: Option<CatalogEntry>,
    last_used_ms: u64,
}

impl Inner {
    fn running_bases(&self) -> HashSet<String> {
        self.records()
            .iter()
            .filter(|(_, record)| record.running.is_some())
            .map(|(key, _)| key.base_name.clone())
            .collect()
    }

    fn output_file(&self, base: &str) -> PathBuf {
        super::logs::file_path(&self.settings.logs_dir, base)
    }

    /// Every workspace on disk with its catalog entry and last use. Blocking.
    fn found_workspaces(&self) -> Vec<Found> {
        let entries = self.catalog.entries();
        disk::workspaces_in(&self.settings.sandboxes_dir)
            .into_iter()
            .map(|on_disk| {
                let entry = entries.get(&on_disk.base).cloned();
                let output = disk::file_modified_ms(&self.output_file(&on_disk.base));
                let own = entry.is_none().then_some(on_disk.modified_ms);
                let last_used_ms = [entry.as_ref().map(|e| e.last_active_ms), output, own]
                    .into_iter()
                    .flatten()
                    .max()
                    .unwrap_or(0);
                Found {
                    on_disk,
                    entry,
                    last_used_ms,
                }
            })
            .collect()
    }

    /// What `workspaces` answers.
    pub(super) async fn workspaces(
        self: &Arc<Self>,
        scope: Option<Scope>,
    ) -> Result<Vec<WorkspaceInfo>, SandboxError> {
        let running = self.running_bases();
        let inner = self.clone();
        let listed = tokio::task::spawn_blocking(move || {
            let ttl_ms = inner.workspace_ttl.map(|ttl| ttl.as_millis() as u64);
            inner
                .found_workspaces()
                .into_iter()
                .map(|found| {
                    let base = &found.on_disk.base;
                    let running = running.contains(base);
                    let output = inner.output_file(base);
                    let rotated = PathBuf::from(format!("{}.1", output.display()));
                    let size_bytes = disk::bytes_on_disk(&inner.settings.sandboxes_dir.join(base))
                        + disk::bytes_on_disk(&output)
                        + disk::bytes_on_disk(&rotated);
                    let last = (found.last_used_ms > 0).then_some(found.last_used_ms);
                    WorkspaceInfo {
                        name: base.clone(),
                        scope: found
                            .entry
                            .as_ref()
                            .map_or(found.on_disk.scope, |e| e.scope),
                        id: found.entry.as_ref().map(|entry| entry.id.clone()),
                        size_bytes,
                        last_run_unix_ms: last,
                        running,
                        expires_at_unix_ms: ttl_ms
                            .filter(|_| !running)
                            .map(|ttl| found.last_used_ms.saturating_add(ttl)),
                        host_path: inner
                            .settings
                            .sandboxes_dir
                            .join(base)
                            .display()
                            .to_string(),
                    }
                })
                .filter(|info| scope.is_none_or(|scope| info.scope == scope))
                .collect()
        })
        .await;
        listed.map_err(|error| {
            SandboxError::Internal(format!("workspace listing task failed: {error}"))
        })
    }

    /// Removes every workspace (and its output files) unused for longer
    /// than `ttl` whose sandbox is not running. Returns how many.
    async fn expire_workspaces(self: &Arc<Self>, ttl: Duration) -> usize {
        let ttl_ms = ttl.as_millis() as u64;
        let inner = self.clone();
        let Ok(found) = tokio::task::spawn_blocking(move || inner.found_workspaces()).await else {
            return 0;
        };
        let mut removed = 0;
        for found in found {
            if found.last_used_ms.saturating_add(ttl_ms) > now_unix_ms() {
                continue;
            }
            let expired = match found.entry {
                Some(entry) => self.expire_known(entry, ttl_ms).await,
                None => self.expire_nameless(&found.on_disk).await,
            };
            removed += usize::from(expired);
        }
        removed
    }

    /// Removes an expired workspace whose sandbox the catalog names, under
    /// its key lock, unless it ran meanwhile.
    async fn expire_known(&self, entry: CatalogEntry, ttl_ms: u64) -> bool {
        let key = SandboxKey::new(entry.scope, entry.id);
        let _key_guard = self.key_locks.lock(&key).await;
        let running = self
            .records()
            .get(&key)
            .is_some_and(|record| record.running.is_some());
        let still_unused = self.catalog.with_entry(&key.base_name, |entry| {
            entry.is_some_and(|entry| entry.last_active_ms.saturating_add(ttl_ms) <= now_unix_ms())
        });
        if running || !still_unused {
            return false;
        }
        self.records().remove(&key);
        match self.remove_workspace(&key).await {
            Ok(()) => {
                tracing::info!(scope = %key.scope, id = %key.id, name = %key.base_name, "removed a workspace unused for longer than workspace_ttl");
                true
            }
            Err(error) => {
                tracing::warn!(scope = %key.scope, id = %key.id, %error, "cannot remove an expired workspace");
                false
            }
        }
    }

    /// Removes an expired workspace no catalog entry names. Moved to the
    /// trash under the catalog's lock, so an ensure of its sandbox (which
    /// records it in the catalog before it touches the directory) either
    /// comes first and keeps it, or finds it gone and starts afresh.
    async fn expire_nameless(&self, on_disk: &OnDisk) -> bool {
        let base = &on_disk.base;
        let workspace = self.settings.sandboxes_dir.join(base);
        let taken = self.catalog.with_entry(base, |entry| match entry {
            Some(_) => None,
            None => Some(self.trash.take(&workspace, base, "workspace")),
        });
        let mut moved = match taken {
            None => return false,
            Some(Ok(entry)) => Vec::from_iter(entry),
            Some(Err(error)) => {
                tracing::warn!(workspace = %workspace.display(), %error, "cannot remove an expired workspace");
                return false;
            }
        };
        self.logs
            .remove(base, |file, what| match self.trash.take(file, base, what) {
                Ok(entry) => moved.extend(entry),
                Err(_) => super::trash::delete(file),
            });
        self.trash.empty_later(moved);
        tracing::info!(name = %base, scope = %on_disk.scope, "removed a workspace no record names, unused for longer than workspace_ttl");
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_runs_every_tenth_of_the_ttl_within_bounds() {
        assert_eq!(
            sweep_interval(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
        assert_eq!(
            sweep_interval(Duration::from_secs(600)),
            Duration::from_secs(60)
        );
        assert_eq!(
            sweep_interval(Duration::from_secs(7 * 86_400)),
            Duration::from_secs(3600)
        );
    }
}
