//! Pause and resume on the docker tier: the Engine's own pause and
//! unpause (the cgroup freezer under the container), so the container
//! keeps its processes, memory and volume. The engine does not say since
//! when a container is paused, so the daemon remembers when it paused one
//! (or first saw one paused, when another client did); a restart of the
//! daemon forgets it, and `describe` then says since when it was first
//! seen paused again.

use std::collections::HashMap;
use std::sync::Mutex;

use sandboxd_protocol::{EventKind, PauseReport, SandboxError};

use super::containers;
use super::observed::{Lookup, Observed, Phase};
use super::Inner;
use crate::sandbox_key::SandboxKey;
use crate::unix_time::now_unix_ms;

/// When each paused container was paused, in milliseconds since the Unix
/// epoch, by its container id.
#[derive(Default)]
pub struct PausedSince(Mutex<HashMap<String, u64>>);

impl PausedSince {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.0.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// Since when `observed` is paused, `None` when it is not.
    pub fn of(&self, observed: &Observed) -> Option<u64> {
        let mut map = self.map();
        if observed.phase != Phase::Paused {
            map.remove(&observed.id);
            return None;
        }
        Some(*map.entry(observed.id.clone()).or_insert_with(now_unix_ms))
    }

    fn paused(&self, container: &str) -> u64 {
        let now = now_unix_ms();
        self.map().insert(container.to_string(), now);
        now
    }

    fn resumed(&self, container: &str) {
        self.map().remove(container);
    }
}

impl Inner {
    /// The container of `key` that pause or resume acts on, or why none.
    async fn pausable(&self, key: &SandboxKey) -> Result<Observed, SandboxError> {
        match self.inspect(key).await? {
            Lookup::Ours(observed) if matches!(observed.phase, Phase::Running | Phase::Paused) => {
                Ok(observed)
            }
            _ => Err(SandboxError::FailedPrecondition(format!(
                "{} has no running runner to pause or resume (ensure starts one)",
                key.what()
            ))),
        }
    }

    fn report(
        &self,
        key: &SandboxKey,
        observed: &Observed,
        changed: bool,
        since: Option<u64>,
    ) -> PauseReport {
        PauseReport {
            changed,
            generation: self.generation(key, Some(observed)),
            pid: None,
            paused_since_unix_ms: since,
        }
    }

    /// Pauses `key`'s container; one already paused is success.
    pub(super) async fn pause(&self, key: &SandboxKey) -> Result<PauseReport, SandboxError> {
        let _guard = self.key_locks.lock(key).await;
        let observed = self.pausable(key).await?;
        if observed.phase == Phase::Paused {
            let since = self.paused_since.of(&observed);
            return Ok(self.report(key, &observed, false, since));
        }
        self.pause_observed(key, &observed).await
    }

    /// Pauses `observed`, running, the caller holding the key lock: the
    /// pause recorded (its lifetime clock stops) and announced.
    pub(super) async fn pause_observed(
        &self,
        key: &SandboxKey,
        observed: &Observed,
    ) -> Result<PauseReport, SandboxError> {
        containers::pause(&self.engine, &observed.id)
            .await
            .map_err(|error| {
                error.into_sandbox_error(&format!("cannot pause the container of {}", key.what()))
            })?;
        let since = self.paused_since.paused(&observed.id);
        self.watch.paused(&observed.id, since);
        let report = self.report(key, observed, true, Some(since));
        tracing::info!(scope = %key.scope, id = %key.shown_id(), generation = report.generation, "container paused");
        self.events.emit(
            EventKind::Paused,
            key,
            observed.uid(),
            report.generation,
            None,
        );
        Ok(report)
    }

    /// Unpauses `key`'s container; one not paused is success.
    pub(super) async fn resume(&self, key: &SandboxKey) -> Result<PauseReport, SandboxError> {
        let _guard = self.key_locks.lock(key).await;
        let observed = self.pausable(key).await?;
        if observed.phase == Phase::Running {
            return Ok(self.report(key, &observed, false, None));
        }
        containers::unpause(&self.engine, &observed.id)
            .await
            .map_err(|error| {
                error.into_sandbox_error(&format!("cannot resume the container of {}", key.what()))
            })?;
        let report = self.report(key, &observed, true, None);
        self.resumed(key, &observed, report.generation);
        Ok(report)
    }

    /// `observed` was unpaused (by `resume` or an `ensure`): forgotten and
    /// announced.
    pub(super) fn resumed(&self, key: &SandboxKey, observed: &Observed, generation: u64) {
        self.paused_since.resumed(&observed.id);
        self.watch.resumed(&observed.id);
        self.events
            .emit(EventKind::Resumed, key, observed.uid(), generation, None);
    }
}
