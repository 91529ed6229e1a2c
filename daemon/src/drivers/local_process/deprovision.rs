//! Deprovision: the answer goes at the kill, the teardown follows.
//!
//! The caller waits only for the stop itself: SIGTERM and the runner's
//! leader exiting on it, or, once the grace has passed, the kill of its
//! whole cgroup being sent (see [`super::stop`]). What comes after —
//! waiting until the cgroup holds no process (`populated 0`), removing it,
//! draining the output, moving the workspace and output files to the
//! trash, releasing the uid, the events — happens in the same task after
//! the answer, in that order, and still under the sandbox's key lock. So a
//! new ensure of the same id waits for all of it: it never starts while a
//! process of the old generation (of the same uid) is left, nor next to
//! the old workspace. A clean stop waits for every teardown under way
//! ([`super::teardowns`]); a daemon killed in the middle of one leaves
//! what its next start sweeps (cgroups, ledger, trash), and a workspace not
//! yet moved stays on disk, listed, as a kept one is.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sandboxd_protocol::{
    DeprovisionReport, EventKind, ExitInfo, ExitReason, Expectation, SandboxError,
};
use tokio::sync::{oneshot, Notify};

use super::{disk_limit, now_unix_ms, stop, trash, Inner, Running};
use crate::sandbox_key::SandboxKey;

/// How long, past the stop, the runner's watcher may take to report its
/// cgroup emptied and removed (it waits up to 30 s for the emptying).
const GONE_WAIT: Duration = Duration::from_secs(60);

/// The two moments of a runner's end, as its watcher reports them: its
/// leader has exited (a deprovision answers then), and all of it is gone
/// and forgotten (the teardown goes on then). One small shared state, not
/// two channels: every running sandbox holds one (64 bytes against 160;
/// 1 MB less at 10,000).
struct RunnerEnd {
    stage: AtomicU8,
    changed: Notify,
}

const EXITED: u8 = 1;
const GONE: u8 = 2;

impl RunnerEnd {
    fn reach(&self, stage: u8) {
        self.stage.fetch_max(stage, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    async fn reached(&self, stage: u8) {
        loop {
            // Registered before looking, so a report in between still wakes it.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.stage.load(Ordering::Acquire) >= stage {
                return;
            }
            changed.await;
        }
    }
}

/// The watcher's side. Dropped, it reports the runner gone (and so
/// exited): a watcher that ends early never leaves a deprovision waiting.
pub struct EndSignals(Arc<RunnerEnd>);

impl EndSignals {
    /// The leader has exited.
    pub fn exited(&self) {
        self.0.reach(EXITED);
    }

    /// All of it is gone and forgotten.
    pub fn gone(self) {}
}

impl Drop for EndSignals {
    fn drop(&mut self) {
        self.0.reach(GONE);
    }
}

/// What a deprovision awaits of a running runner.
pub struct EndWaits(Arc<RunnerEnd>);

impl EndWaits {
    /// Until its leader has exited.
    pub async fn exited(&self) {
        self.0.reached(EXITED).await;
    }

    /// Until all of it is gone and forgotten.
    pub async fn gone(&self) {
        self.0.reached(GONE).await;
    }
}

pub fn end_channels() -> (EndSignals, EndWaits) {
    let end = Arc::new(RunnerEnd {
        stage: AtomicU8::new(0),
        changed: Notify::new(),
    });
    (EndSignals(end.clone()), EndWaits(end))
}

/// What is left to do once the answer has gone.
struct Teardown {
    keep_workspace: bool,
    daemon_stop: bool,
    /// The incarnation's uid and generation, when the table had a record.
    incarnation: Option<(String, u64)>,
    /// The running runner's end, when there was one.
    gone: Option<EndWaits>,
    report: DeprovisionReport,
}

/// Deprovisions `key` in a task of its own, which answers at the kill and
/// then tears down (see the module doc); it runs to its end whether or not
/// the caller still waits.
pub async fn deprovision(
    inner: Arc<Inner>,
    key: SandboxKey,
    keep_workspace: bool,
    expect: Option<Expectation>,
) -> Result<DeprovisionReport, SandboxError> {
    let (reply, answer) = oneshot::channel();
    let pending = inner.teardowns.begin();
    tokio::spawn(async move {
        let _pending = pending;
        let _key_guard = inner.key_locks.lock(&key).await;
        match inner
            .stop_for_deprovision(&key, keep_workspace, expect.as_ref())
            .await
        {
            Ok(teardown) => {
                let _ = reply.send(Ok(teardown.report));
                inner.tear_down(&key, teardown).await;
            }
            Err(error) => {
                let _ = reply.send(Err(error));
            }
        }
    });
    answer.await.unwrap_or_else(|_| {
        Err(SandboxError::Internal(
            "the deprovision task ended without an answer (see the daemon's log)".into(),
        ))
    })
}

impl Inner {
    /// Takes the record and stops its runner; the caller holds the key lock.
    async fn stop_for_deprovision(
        &self,
        key: &SandboxKey,
        keep_workspace: bool,
        expect: Option<&Expectation>,
    ) -> Result<Teardown, SandboxError> {
        // Checked under the key lock: no ensure can make a new incarnation
        // between the check and the teardown. Absent is success.
        if let Some(expect) = expect {
            if let Some((uid, generation)) = self.incarnation(key) {
                expect.check(&key.what(), Some((&uid, generation)))?;
            }
        }
        let record = self.records().remove(key);
        // A daemon stop keeps the incarnation (its workspace and uid) for
        // the next start; a deprovision ends it.
        let daemon_stop = self.stopping.load(Ordering::Acquire);
        let incarnation = record
            .as_ref()
            .map(|record| (record.uid.clone(), record.generation));
        // Only without a record does the workspace say whether it was
        // there: one stat, inline (a trip through the blocking pool costs
        // more), and none on the way to a running runner's SIGTERM.
        let was_present =
            record.is_some() || std::fs::exists(self.settings.workspace(key)).unwrap_or(false);
        let (forced, gone) = match record.and_then(|record| record.running) {
            Some(Running {
                leader,
                ends,
                life,
                signalled_at_stop,
                ..
            }) => {
                // A frozen runner takes no SIGTERM.
                self.thaw_for_stop(key, &life);
                let stopping = stop::Stopping {
                    signalled: signalled_at_stop,
                    grace: self.stop_grace,
                };
                // Its cgroup is looked up only if the grace runs out.
                let cgroup = self
                    .containment
                    .tree()
                    .map(|tree| (tree, key.base_name.as_str()));
                let terminate = || self.settings.launcher.terminate(leader as i32);
                let forced =
                    stop::stop_runner(key, leader, ends.exited(), stopping, cgroup, terminate)
                        .await;
                (forced, Some(ends))
            }
            None => (false, None),
        };
        Ok(Teardown {
            keep_workspace,
            daemon_stop,
            incarnation,
            gone,
            report: DeprovisionReport {
                was_present,
                forced,
            },
        })
    }

    /// What follows the answer, in order; the caller holds the key lock.
    async fn tear_down(&self, key: &SandboxKey, teardown: Teardown) {
        let Teardown {
            keep_workspace,
            daemon_stop,
            incarnation,
            gone,
            report,
        } = teardown;
        let stopped = gone.is_some();
        if let Some(gone) = gone {
            if tokio::time::timeout(GONE_WAIT, gone.gone()).await.is_err() {
                // Its uid and workspace stay with it: a later deprovision
                // (or the next start's sweep) takes them.
                tracing::error!(scope = %key.scope, id = %key.shown_id(), "the stopped runner's processes were not gone {GONE_WAIT:?} after the stop; its workspace and uid are kept");
                return;
            }
        }
        if !daemon_stop {
            self.catalog.set_uid(&key.base_name, None);
        }
        if !keep_workspace {
            if let Err(error) = self.remove_workspace(key).await {
                tracing::error!(scope = %key.scope, id = %key.shown_id(), %error, "cannot remove a deprovisioned sandbox's workspace");
            }
        }
        if let Some((uid, generation)) = incarnation {
            if stopped {
                let reason = if daemon_stop {
                    ExitReason::DaemonStopped
                } else {
                    ExitReason::Deprovisioned
                };
                let exit = stopped_exit(reason);
                self.events
                    .emit(EventKind::Exited, key, &uid, generation, Some(exit));
            }
            if !daemon_stop {
                self.events
                    .emit(EventKind::Deprovisioned, key, &uid, generation, None);
            }
        }
        // A daemon stop's are one line (see `shutdown`).
        if report.was_present && daemon_stop {
            tracing::debug!(scope = %key.scope, id = %key.shown_id(), forced = report.forced, keep_workspace, "sandbox stopped");
        } else if report.was_present {
            tracing::info!(scope = %key.scope, id = %key.shown_id(), forced = report.forced, keep_workspace, "sandbox deprovisioned");
        }
    }

    /// Moves the workspace, then the output files, into the [trash] — a
    /// rename each — and has them deleted in the background. A workspace
    /// that cannot be moved is deleted in place, and a failure there is
    /// reported with the output files kept. Then the sandbox's uid is
    /// released.
    pub(super) async fn remove_workspace(&self, key: &SandboxKey) -> Result<(), SandboxError> {
        let base = &key.base_name;
        let workspace = self.settings.workspace(key);
        let mut moved = Vec::new();
        match self.trash.take(&workspace, base, "workspace") {
            Ok(entry) => moved.extend(entry),
            Err(error) => {
                tracing::debug!(workspace = %workspace.display(), %error, "cannot move the workspace to the trash; deleting it in place");
                delete_in_place(workspace).await?;
            }
        }
        self.logs
            .remove(base, |file, what| match self.trash.take(file, base, what) {
                Ok(entry) => moved.extend(entry),
                // Deleted now: a later deletion could hit the next runner's file.
                Err(_) => trash::delete(file),
            });
        self.trash.empty_later(moved);
        self.catalog.forget(base);
        // Its workspace is gone, so its uid may go to another sandbox once
        // no process of it is left (the pool checks at reuse).
        if let Some(uids) = &self.uids {
            if let (Some(_), Some(uid)) = (self.disk_limit.by_quota(), uids.uid_of(key)) {
                if let Err(error) =
                    disk_limit::project_quota::clear(&self.settings.sandboxes_dir, uid)
                {
                    tracing::warn!(uid, %error, "cannot lift the project quota of a removed workspace");
                }
            }
            uids.release(key, &self.ledger);
        }
        Ok(())
    }
}

/// The exit of a runner the daemon stopped itself (a deprovision, a daemon
/// stop): its own status went to the watcher, so only the reason is known.
pub(super) fn stopped_exit(reason: ExitReason) -> ExitInfo {
    ExitInfo {
        reason,
        ..ExitInfo::from_facts(None, None, now_unix_ms(), false)
    }
}

/// Deletes a workspace where it is, on the blocking pool (it can be a
/// large tree); a workspace already gone is fine.
async fn delete_in_place(workspace: PathBuf) -> Result<(), SandboxError> {
    let removed = tokio::task::spawn_blocking(move || {
        trash::remove(&workspace).map_err(|error| {
            SandboxError::Internal(format!(
                "cannot remove workspace {}: {error}",
                workspace.display()
            ))
        })
    })
    .await;
    removed.unwrap_or_else(|error| {
        Err(SandboxError::Internal(format!(
            "workspace removal task failed: {error}"
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_runners_end_is_awaited_in_its_two_moments() {
        use futures::FutureExt as _;
        let (signals, waits) = end_channels();
        let (checked, check) = oneshot::channel();
        let deprovision = tokio::spawn(async move {
            waits.exited().await;
            // The deprovision answers at the exit; its teardown waits on.
            let gone_early = waits.gone().now_or_never().is_some();
            let _ = checked.send(());
            waits.gone().await;
            gone_early
        });
        signals.exited();
        check.await.unwrap();
        signals.gone();
        assert!(!deprovision.await.unwrap(), "gone before it was reported");
        // Reported before anyone waits: the waits return at once.
        let (signals, waits) = end_channels();
        signals.exited();
        assert!(waits.exited().now_or_never().is_some());
        assert!(waits.gone().now_or_never().is_none());
        // A watcher that ends early leaves nobody waiting.
        drop(signals);
        assert!(waits.gone().now_or_never().is_some());
        // Every running sandbox holds one, with the Arc's two counts.
        let held = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<RunnerEnd>();
        assert!(held <= 64, "{held}");
    }
}
