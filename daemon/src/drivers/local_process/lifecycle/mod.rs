//! Idle and lifetime limits, pause and resume, on the process tier.
//!
//! Each running runner carries a [`RunState`]: when it started, how long it
//! has been paused, what the [idle watcher](watcher) last saw of its CPU
//! use and output, and why the daemon is stopping it, when it is. A pause
//! freezes the sandbox's cgroup (see [`cgroup::freeze`](super::cgroup::freeze)):
//! same pid, same generation, memory and workspace kept, no CPU. `probe`
//! then says `stopped`, `describe` and `list` since when it is paused; the
//! next `ensure` thaws it on the fast path. Paused time does not count
//! toward `max_lifetime`, and a paused runner is never idle-stopped.
//!
//! A stop for idleness or lifetime is a deprovision that keeps the record
//! and the workspace (`--keep-workspace`): SIGTERM, the grace, the kill
//! of its cgroup; its exit says `idle` or `lifetime` in `describe`, the
//! log's end line and the `exited` event, and the next `ensure` starts it
//! again, as after a crash.

pub mod watcher;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd_protocol::{EventKind, ExitReason, PauseReport, SandboxError};

use super::cgroup::freeze::{Freezer, Frozen, FREEZE_TIMEOUT};
use super::cgroup::usage::CpuUsage;
use super::{now_unix_ms, stop, Inner};
use crate::drivers::lifecycle::{IdleWindow, LifeClock};
use crate::sandbox_key::SandboxKey;

/// How often the stop of an idle or too old runner looks whether it is
/// gone yet (a rare event; the deprovision path has channels for it, which
/// its record keeps for a deprovision to take).
const GONE_POLL: Duration = Duration::from_millis(20);
/// How long past the kill such a stop waits for the runner to be gone.
const GONE_WAIT: Duration = Duration::from_secs(60);

/// A running runner's lifecycle facts.
pub struct RunState {
    /// How long it has run, and its pauses.
    clock: LifeClock,
    /// Set when the daemon is stopping it for a limit: its exit's reason.
    stopping: Option<ExitReason>,
    /// Where its CPU time is read (found once, at its start: the watcher's
    /// tick then costs one open and read per runner, no lookup). Only
    /// under an idle window, the one reader.
    cpu: Option<Arc<CpuUsage>>,
    /// Bytes its pump had taken from its pipe (see
    /// `RunnerLogs::output_counter`); `None`: no counter to read.
    output: Option<Arc<AtomicU64>>,
    /// What the idle watcher saw.
    window: IdleWindow,
    /// While paused: its cgroup's freezer file, open, for the resume.
    frozen: Option<Frozen>,
    /// How many commands run beside it (see `exec`): work the idle
    /// watcher counts. Made at the first command.
    live_commands: Option<Arc<AtomicU32>>,
}

impl RunState {
    /// A runner started now, its CPU use counted from 0 (its cgroup is
    /// new) and its output from `output`.
    pub fn new(output: Option<Arc<AtomicU64>>, cpu: Option<CpuUsage>) -> RunState {
        let now = Instant::now();
        let output_bytes = output
            .as_ref()
            .map_or(0, |counter| counter.load(Ordering::Relaxed));
        RunState {
            cpu: cpu.map(Arc::new),
            clock: LifeClock::started_at(now),
            stopping: None,
            output,
            window: IdleWindow::starting(now, Some(0), Some(output_bytes)),
            frozen: None,
            live_commands: None,
        }
    }

    /// The count of commands running beside it, made on first use.
    pub fn live_commands(&mut self) -> Arc<AtomicU32> {
        self.live_commands
            .get_or_insert_with(|| Arc::new(AtomicU32::new(0)))
            .clone()
    }

    /// True while a command runs beside it.
    fn has_live_commands(&self) -> bool {
        self.live_commands
            .as_ref()
            .is_some_and(|live| live.load(Ordering::Acquire) > 0)
    }

    /// Since when it is paused, in milliseconds since the Unix epoch.
    pub fn paused_since_unix_ms(&self) -> Option<u64> {
        self.clock.paused_since_unix_ms()
    }

    pub fn is_paused(&self) -> bool {
        self.clock.is_paused()
    }

    /// Why the daemon is stopping it, when it is.
    pub fn stopping(&self) -> Option<ExitReason> {
        self.stopping
    }

    /// How long it has run, paused time not counted.
    fn lifetime(&self, now: Instant) -> Duration {
        self.clock.lifetime(now)
    }

    /// The output its pump has taken so far (a runner without a counter
    /// keeps the count it started with: its output is not seen).
    fn output_bytes(&self) -> Option<u64> {
        self.output
            .as_ref()
            .map(|counter| counter.load(Ordering::Relaxed))
            .or(Some(0))
    }

    /// Paused now, by the freeze that gave `frozen`.
    fn mark_paused(&mut self, frozen: Frozen) {
        self.clock.mark_paused(now_unix_ms());
        self.frozen = Some(frozen);
    }

    /// Resumed now: the pause is added to the total, and the idle window
    /// starts again (a runner just resumed has had no chance to work).
    fn mark_resumed(&mut self) {
        self.clock.mark_resumed();
        self.window.restart(Instant::now());
        self.frozen = None;
    }
}

/// What to do about a runner, in the sandbox's key lock.
impl Inner {
    /// The freezer of `key`'s cgroup, or why there is none.
    fn freezer(&self, key: &SandboxKey) -> Result<Freezer, SandboxError> {
        let tree = self.containment.tree().ok_or_else(|| {
            SandboxError::FailedPrecondition(
                "pausing needs a cgroup per sandbox, and this daemon runs on the process-group fallback"
                    .into(),
            )
        })?;
        Freezer::of(&tree.dirs(&key.base_name)).ok_or_else(|| {
            SandboxError::FailedPrecondition(format!(
                "{} cannot be paused: its cgroup has no cgroup.freeze and there is no v1 freezer",
                key.what()
            ))
        })
    }

    /// The report of `key`'s running runner; a failed precondition when
    /// there is none (or it is being stopped).
    fn running_report(&self, key: &SandboxKey, changed: bool) -> Result<PauseReport, SandboxError> {
        let records = self.records();
        let running = records
            .get(key)
            .and_then(|record| record.running.as_ref())
            .ok_or_else(|| {
                SandboxError::FailedPrecondition(format!(
                    "{} has no running runner to pause or resume (ensure starts one)",
                    key.what()
                ))
            })?;
        if let Some(reason) = running.life.stopping {
            return Err(SandboxError::FailedPrecondition(format!(
                "{} is being stopped ({reason})",
                key.what()
            )));
        }
        Ok(PauseReport {
            changed,
            generation: running.generation,
            pid: Some(running.pid),
            paused_since_unix_ms: running.life.paused_since_unix_ms(),
        })
    }

    /// Pauses `key`'s runner: its cgroup frozen, the pause recorded and
    /// announced. Takes the key lock.
    pub(super) async fn pause(
        self: &Arc<Self>,
        key: &SandboxKey,
    ) -> Result<PauseReport, SandboxError> {
        let _key_guard = self.key_locks.lock(key).await;
        self.pause_locked(key).await
    }

    /// [`Inner::pause`], the caller holding the key lock.
    async fn pause_locked(self: &Arc<Self>, key: &SandboxKey) -> Result<PauseReport, SandboxError> {
        let report = self.running_report(key, false)?;
        if report.paused_since_unix_ms.is_some() {
            return Ok(report);
        }
        let freezer = self.freezer(key)?;
        let frozen = tokio::task::spawn_blocking(move || freezer.freeze(FREEZE_TIMEOUT))
            .await
            .map_err(|error| SandboxError::Internal(format!("the freeze task failed: {error}")))?;
        let frozen = frozen.map_err(|error| {
            SandboxError::Internal(format!("cannot pause {}: {error}", key.what()))
        })?;
        let uid = {
            let mut records = self.records();
            let Some(record) = records.get_mut(key) else {
                return Err(SandboxError::Internal(format!(
                    "{} vanished while pausing",
                    key.what()
                )));
            };
            if let Some(running) = record.running.as_mut() {
                running.life.mark_paused(frozen);
            }
            record.uid.clone()
        };
        let report = self.running_report(key, true)?;
        tracing::info!(scope = %key.scope, id = %key.shown_id(), pid = report.pid, generation = report.generation, "runner paused");
        self.events
            .emit(EventKind::Paused, key, &uid, report.generation, None);
        Ok(report)
    }

    /// Resumes `key`'s paused runner. Takes the key lock.
    pub(super) async fn resume(&self, key: &SandboxKey) -> Result<PauseReport, SandboxError> {
        let _key_guard = self.key_locks.lock(key).await;
        self.resume_locked(key)
    }

    /// Thaws `key`'s runner when paused (one write: in force at once), the
    /// caller holding the key lock.
    pub(super) fn resume_locked(&self, key: &SandboxKey) -> Result<PauseReport, SandboxError> {
        let report = self.running_report(key, false)?;
        // Paused exactly while its pause's freezer file is kept; cloned out
        // of the record, so the thaw's write is made outside the lock.
        let Some(frozen) = self
            .records()
            .get(key)
            .and_then(|record| record.running.as_ref())
            .and_then(|running| running.life.frozen.clone())
        else {
            return Ok(report);
        };
        frozen.thaw().map_err(|error| {
            SandboxError::Internal(format!("cannot resume {}: {error}", key.what()))
        })?;
        let uid = {
            let mut records = self.records();
            let record = records.get_mut(key);
            let uid = record
                .as_ref()
                .map(|record| record.uid.clone())
                .unwrap_or_default();
            if let Some(running) = record.and_then(|record| record.running.as_mut()) {
                running.life.mark_resumed();
            }
            uid
        };
        let report = self.running_report(key, true)?;
        tracing::info!(scope = %key.scope, id = %key.shown_id(), pid = report.pid, generation = report.generation, "runner resumed");
        self.events
            .emit(EventKind::Resumed, key, &uid, report.generation, None);
        Ok(report)
    }

    /// Thaws a paused runner that is about to be stopped (a frozen process
    /// takes no signal); the caller holds the key lock and has taken the
    /// record. Nothing to do for one not paused.
    pub(super) fn thaw_for_stop(&self, key: &SandboxKey, life: &RunState) {
        let Some(frozen) = &life.frozen else {
            return;
        };
        if let Err(error) = frozen.thaw() {
            tracing::warn!(scope = %key.scope, id = %key.shown_id(), %error, "cannot thaw a paused runner before its stop; the cgroup kill takes it");
        }
    }

    /// Stops the runner of `generation` (not a later one) for `reason`
    /// (idle or lifetime), keeping its record and workspace: marked first,
    /// so its exit says why; SIGTERM, then after the grace the kill of its
    /// cgroup. Holds the key lock until it is gone, so the next ensure
    /// starts a new runner rather than finding this one on its way out.
    pub(super) async fn stop_for_limit(
        self: Arc<Self>,
        key: SandboxKey,
        generation: u64,
        reason: ExitReason,
    ) {
        let _key_guard = self.key_locks.lock(&key).await;
        let leader = {
            let mut records = self.records();
            let Some(running) = records
                .get_mut(&key)
                .and_then(|record| record.running.as_mut())
                .filter(|running| {
                    running.generation == generation && running.life.stopping.is_none()
                })
            else {
                return;
            };
            // Paused since the watcher looked: a paused runner is never
            // idle-stopped, and its lifetime clock is stopped.
            if running.life.is_paused() {
                return;
            }
            running.life.stopping = Some(reason);
            running.leader
        };
        tracing::info!(scope = %key.scope, id = %key.shown_id(), generation, reason = reason.as_str(), "stopping the runner for its [lifecycle] limit; its workspace is kept");
        let still_running = |inner: &Inner| {
            inner
                .records()
                .get(&key)
                .and_then(|record| record.running.as_ref())
                .is_some_and(|running| running.generation == generation)
        };
        self.settings.launcher.terminate(leader as i32);
        if !self.wait_gone(&still_running, self.stop_grace).await {
            tracing::warn!(scope = %key.scope, id = %key.shown_id(), leader, grace = ?self.stop_grace, "runner ignored SIGTERM; killing its cgroup");
            match self.containment.tree() {
                Some(tree) => {
                    let dirs = tree.dirs(&key.base_name);
                    let killed =
                        tokio::task::spawn_blocking(move || super::cgroup::kill::kill(&dirs)).await;
                    if !matches!(killed, Ok(Ok(()))) {
                        stop::kill_group(leader as i32, nix::sys::signal::Signal::SIGKILL);
                    }
                }
                None => stop::kill_group(leader as i32, nix::sys::signal::Signal::SIGKILL),
            }
            if !self.wait_gone(&still_running, GONE_WAIT).await {
                tracing::error!(scope = %key.scope, id = %key.shown_id(), "the runner stopped for its limit was not gone {GONE_WAIT:?} after the kill");
            }
        }
    }

    /// Waits until `still_running` is false, or `timeout` passed (false).
    async fn wait_gone(
        &self,
        still_running: &(dyn Fn(&Inner) -> bool + Sync),
        timeout: Duration,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        while still_running(self) {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(GONE_POLL).await;
        }
        true
    }
}

impl Inner {
    /// Pauses the runner of `generation` for idleness (`on_idle = "pause"`),
    /// unless it has been replaced, paused or resumed since it was judged.
    pub(super) async fn pause_idle(
        self: &Arc<Self>,
        key: &SandboxKey,
        generation: u64,
    ) -> Result<(), SandboxError> {
        let _key_guard = self.key_locks.lock(key).await;
        let same = self
            .records()
            .get(key)
            .and_then(|record| record.running.as_ref())
            .is_some_and(|running| running.generation == generation && !running.life.is_paused());
        if same {
            self.pause_locked(key).await?;
        }
        Ok(())
    }
}
