//! The disk limit where the file system cannot hold it: every running
//! workspace is measured (the allocated blocks of its tree, as
//! `workspaces` sizes it), and a runner whose workspace outgrew the limit
//! is stopped — its whole cgroup (or group) killed, as the kernel's OOM
//! killer would — with the limit recorded as the reason of its exit.
//!
//! A pass is one thread walking the workspaces one after another, on the
//! blocking pool. Passes start every [`INTERVAL`], or four times as long as
//! the last pass took if that is longer, so the watcher never takes more
//! than a fifth of one core however many sandboxes run (a thousand
//! workspaces of a thousand files each is about a million `lstat`s, a
//! second or two). A workspace of more entries than a walk visits
//! ([`MAX_ENTRIES_SIZED`]) counts as over the limit: its size cannot be
//! told, and a runner could otherwise hide a large file behind a million
//! empty ones.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use sandboxd_protocol::{show_bytes, SandboxError};

use super::super::workspaces::disk::{self, Measured, MAX_ENTRIES_SIZED};
use super::super::{stop, Inner};
use crate::provisioner::SandboxKey;

/// The shortest time between two passes.
pub const INTERVAL: Duration = Duration::from_secs(5);

/// True when `measured` is over `limit` (or could not be told).
fn over(measured: Measured, limit: u64) -> bool {
    !measured.complete || measured.bytes > limit
}

/// How `measured` reads in a message.
fn shown(measured: Measured) -> String {
    if measured.complete {
        show_bytes(measured.bytes)
    } else {
        format!(
            "more than {MAX_ENTRIES_SIZED} entries and at least {}",
            show_bytes(measured.bytes)
        )
    }
}

/// Measures every running workspace against `limit`, pass after pass,
/// until the driver is gone.
pub async fn keep_watching(inner: Weak<Inner>, limit: u64) {
    let mut pause = INTERVAL;
    loop {
        tokio::time::sleep(pause).await;
        let Some(inner) = inner.upgrade() else { return };
        let running: Vec<(SandboxKey, u64, PathBuf)> = inner
            .records()
            .iter()
            .filter_map(|(key, record)| {
                let running = record.running.as_ref()?;
                Some((
                    key.clone(),
                    running.generation,
                    inner.settings.workspace(key),
                ))
            })
            .collect();
        let started = Instant::now();
        let measured = tokio::task::spawn_blocking(move || {
            running
                .into_iter()
                .map(|(key, generation, workspace)| (key, generation, disk::measure(&workspace)))
                .filter(|(_, _, measured)| over(*measured, limit))
                .collect::<Vec<_>>()
        })
        .await;
        pause = INTERVAL.max(started.elapsed() * 4);
        for (key, generation, measured) in measured.unwrap_or_default() {
            inner
                .stop_over_disk_limit(&key, generation, measured, limit)
                .await;
        }
    }
}

impl Inner {
    /// Stops the runner of `generation` (not a later one) for outgrowing
    /// the disk limit: marked first, so its exit records the reason.
    async fn stop_over_disk_limit(
        self: &Arc<Self>,
        key: &SandboxKey,
        generation: u64,
        measured: Measured,
        limit: u64,
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
            running.over_disk_limit = true;
            running.pid
        };
        tracing::warn!(scope = %key.scope, id = %key.shown_id(), pid, size = %shown(measured), limit = %show_bytes(limit), "the workspace outgrew [limits] disk: stopping its runner");
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

    /// Refuses to start the runner of a sandbox last stopped for its disk
    /// limit while its workspace is still over it. Blocking (a walk of the
    /// workspace, only after such a stop).
    pub(in crate::drivers::local_process) fn check_back_under_disk_limit(
        &self,
        key: &SandboxKey,
    ) -> Result<(), SandboxError> {
        let Some(limit) = self.disk_limit.watched() else {
            return Ok(());
        };
        let stopped_for_it = self
            .records()
            .get(key)
            .and_then(|record| record.last_exit.as_ref())
            .is_some_and(|exit| exit.disk_limit_bytes.is_some());
        if !stopped_for_it {
            return Ok(());
        }
        let workspace = self.settings.workspace(key);
        let measured = disk::measure(&workspace);
        if over(measured, limit) {
            return Err(SandboxError::FailedPrecondition(format!(
                "the workspace of {} '{}' ({}) holds {}, over the disk limit ({}) its runner was stopped for: remove files from it, or deprovision the sandbox",
                key.scope,
                key.id,
                workspace.display(),
                shown(measured),
                show_bytes(limit)
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_too_large_to_walk_counts_as_over() {
        let small = Measured {
            bytes: 10,
            complete: true,
        };
        assert!(!over(small, 10));
        assert!(over(Measured { bytes: 11, ..small }, 10));
        let unwalked = Measured {
            bytes: 0,
            complete: false,
        };
        assert!(over(unwalked, 10));
        assert!(shown(unwalked).contains("more than 1000000 entries"));
    }
}
