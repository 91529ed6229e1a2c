//! An ensure on the process tier, top to bottom: the fast path (a running
//! runner's report, read from the table under its lock); a paused runner
//! resumed under the sandbox's key lock; then the slow path, in a task of
//! its own, that starts a runner on a spawner thread (see
//! [`runner_start`](super::runner_start)).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use sandboxd_protocol::{EnsureReport, Expectation, ProbeState, SandboxEnv, SandboxError};

use super::{Inner, LocalProcessDriver};
use crate::drivers::differs::{differing_fields, RunsWith, TokenDigest};
use crate::sandbox_key::SandboxKey;

impl LocalProcessDriver {
    /// `ensure`, and `ensure_fenced` with `expect`.
    pub(super) async fn ensure_expecting(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
        expect: Option<Expectation>,
    ) -> Result<EnsureReport, SandboxError> {
        if let Some(report) = self.inner.fast_path(key, env, expect.as_ref()) {
            return report;
        }
        self.inner.refuse_while_stopping()?;
        // Paused (the fast path passes a paused runner by): resumed here,
        // under the key lock, without the slow path's task — a thaw is one
        // write, and a caller that gives up before it leaves nothing half
        // done.
        if self.inner.is_paused(key) {
            let _key_guard = self.inner.key_locks.lock(key).await;
            if let Some(report) = self.inner.resumed_or_running(key, env, expect.as_ref()) {
                return report;
            }
        }
        // Fail closed: no runner starts unless the egress rules are in force.
        self.inner.egress.check()?;
        slow_path(self.inner.clone(), key.clone(), env.clone(), expect).await
    }
}

/// The slow path runs in a task of its own, and the spawn itself on a
/// spawner thread, so a connection's other calls and the runtime's
/// workers never wait on a spawn. A caller that gives up while waiting for
/// the key gives up its place in line and starts nothing; once a spawn has
/// begun it is finished and recorded under the key lock, whoever still
/// waits. The spawner thread answers the caller itself (one thread
/// hand-off fewer than going back through the task, which only holds the
/// key until the runner is recorded).
async fn slow_path(
    inner: Arc<Inner>,
    key: SandboxKey,
    env: SandboxEnv,
    expect: Option<Expectation>,
) -> Result<EnsureReport, SandboxError> {
    let (mut reply, answer) = tokio::sync::oneshot::channel();
    let span = tracing::Span::current();
    tokio::spawn(async move {
        let _key_guard = tokio::select! {
            guard = inner.key_locks.lock(&key) => guard,
            () = reply.closed() => return,
        };
        // Paused or started by a call that held the key before this one:
        // resumed, or reported, not started twice.
        if let Some(report) = inner.resumed_or_running(&key, &env, expect.as_ref()) {
            let _ = reply.send(report);
            return;
        }
        let refused = inner
            .check_expectation(&key, expect.as_ref())
            .and_then(|()| inner.refuse_while_stopping());
        if let Err(refused) = refused {
            let _ = reply.send(Err(refused));
            return;
        }
        let starter = inner.clone();
        // `None` (no spawner thread left) drops `reply` unanswered.
        let _ = inner
            .spawner
            .run(move || {
                let _ = reply.send(span.in_scope(|| starter.start_runner(&key, &env)));
            })
            .await;
    });
    answer.await.unwrap_or_else(|_| {
        Err(SandboxError::Internal(
            "the runner spawn ended without an answer (see the daemon's log)".into(),
        ))
    })
}

impl Inner {
    /// The running runner's report, if there is one, naming what `env`
    /// asks for that it does not run with. Touches nothing but the table.
    fn fast_path(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
        expect: Option<&Expectation>,
    ) -> Option<Result<EnsureReport, SandboxError>> {
        let records = self.records();
        let record = records.get(key)?;
        // A paused runner is resumed first, one being stopped for a limit
        // waits for its end: neither is the fast path.
        let running = record
            .running
            .as_ref()
            .filter(|running| !running.life.is_paused() && running.life.stopping().is_none())?;
        if let Some(Err(conflict)) =
            expect.map(|expect| expect.check(&key.what(), Some((&record.uid, record.generation))))
        {
            return Some(Err(conflict));
        }
        let runs_with = RunsWith {
            task_queue: &record.task_queue,
            caller_class: &record.caller_class,
            token_sha256: Some(TokenDigest::Sha256(&record.token_sha256)),
        };
        Some(Ok(EnsureReport {
            state: ProbeState::Running,
            created: false,
            generation: running.generation,
            pid: Some(running.pid),
            differs: differing_fields(env, &runs_with),
            uid: record.uid.clone(),
        }))
    }

    /// Under `key`'s lock: a paused runner resumed (once `expect` holds),
    /// then the fast path's answer, when a runner runs now.
    fn resumed_or_running(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
        expect: Option<&Expectation>,
    ) -> Option<Result<EnsureReport, SandboxError>> {
        if self.is_paused(key) {
            let resumed = self
                .check_expectation(key, expect)
                .and_then(|()| self.resume_locked(key).map(drop));
            if let Err(error) = resumed {
                return Some(Err(error));
            }
        }
        self.fast_path(key, env, expect)
    }

    /// `unavailable` once the daemon's stop has begun: no runner starts.
    fn refuse_while_stopping(&self) -> Result<(), SandboxError> {
        if self.stopping.load(Ordering::Acquire) {
            return Err(SandboxError::Unavailable(
                "sandboxd is shutting down".into(),
            ));
        }
        Ok(())
    }

    /// True when `key`'s runner is paused.
    fn is_paused(&self, key: &SandboxKey) -> bool {
        self.records()
            .get(key)
            .and_then(|record| record.running.as_ref())
            .is_some_and(|running| running.life.is_paused())
    }

    /// Refuses, with `conflict`, when `key` is another incarnation than
    /// `expect` names.
    fn check_expectation(
        &self,
        key: &SandboxKey,
        expect: Option<&Expectation>,
    ) -> Result<(), SandboxError> {
        let Some(expect) = expect else {
            return Ok(());
        };
        let actual = self.incarnation(key);
        let actual = actual
            .as_ref()
            .map(|(uid, generation)| (uid.as_str(), *generation));
        expect.check(&key.what(), actual)
    }

    /// The uid and generation of `key`'s incarnation, if the daemon has one.
    pub(super) fn incarnation(&self, key: &SandboxKey) -> Option<(String, u64)> {
        let records = self.records();
        records
            .get(key)
            .map(|record| (record.uid.clone(), record.generation))
            .or_else(|| self.catalog.uid_of(&key.base_name).map(|uid| (uid, 0)))
    }
}
