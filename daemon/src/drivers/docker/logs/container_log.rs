//! One container's log, for one call: the engine asked for entries, and
//! the forward, follow and tail reads built on them.

use std::ops::ControlFlow;

use bollard::query_parameters::LogsOptionsBuilder;
use sandboxd_protocol::{LogChunk, SandboxError};

use super::forward::Forward;
use super::position::{run_cut_ns, Ask, Position};
use super::tail::Tail;
use super::{no_output, RECENT_ENTRIES};
use crate::drivers::docker::containers;
use crate::drivers::docker::engine::CallError;
use crate::drivers::docker::events::short;
use crate::drivers::docker::observed::{Observed, Phase};
use crate::drivers::docker::Inner;
use crate::sandbox_key::SandboxKey;

/// One container's log, for one call.
pub(super) struct Log<'a> {
    pub(super) inner: &'a Inner,
    pub(super) key: &'a SandboxKey,
    pub(super) container: &'a str,
    /// What cursors into this container's log carry.
    pub(super) identity: u32,
}

impl Log<'_> {
    /// Hands the entries asked for to `visit`, in the log's order.
    async fn entries(
        &self,
        ask: Ask,
        visit: impl FnMut(&[u8]) -> ControlFlow<()> + Send,
    ) -> Result<(), SandboxError> {
        let options = LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .timestamps(true);
        let options = match ask {
            Ask::Newest(n) => options.tail(&n.to_string()),
            Ask::Since(secs) => options.since(secs),
        };
        containers::logs(&self.inner.engine, self.container, options.build(), visit)
            .await
            .map_err(|error| self.failed(error))
    }

    /// What comes after `from`.
    pub(super) async fn forward(
        &self,
        from: Position,
        budget: usize,
    ) -> Result<LogChunk, SandboxError> {
        self.forward_until(from, budget, None)
            .await
            .map(|(chunk, _)| chunk)
    }

    /// A follower's read: what comes after `from` in its generation, and
    /// how that generation ended once the chunk reaches its last byte.
    /// Entries stamped from the container's current run on (see
    /// [`run_cut_ns`]) are the next generation's, unless the cursor has
    /// read some of them already.
    pub(super) async fn follow(
        &self,
        from: Position,
        budget: usize,
        observed: &Observed,
    ) -> Result<LogChunk, SandboxError> {
        let (mut chunk, cut) = self
            .forward_until(
                from,
                budget,
                run_cut_ns(observed.started_at_unix_ms, observed.finished_at_unix_ms),
            )
            .await?;
        let generation = self.inner.generation(self.key, Some(observed));
        let recorded = self
            .inner
            .exits
            .last(self.key)
            .map(|recorded| recorded.exit);
        if cut {
            // The cursor's run ended and the container started again.
            let previous = recorded
                .filter(|exit| {
                    observed
                        .started_at_unix_ms
                        .is_some_and(|start| exit.at_unix_ms <= start)
                })
                .map_or_else(
                    || "the runner ended and the sandbox was started again".to_string(),
                    |exit| format!("the runner exited ({exit})"),
                );
            chunk.ended = Some(format!(
                "generation {}: {previous}",
                generation.saturating_sub(1).max(1)
            ));
        } else if chunk.at_end && matches!(observed.phase, Phase::Stopped | Phase::Dead) {
            // Caught up with a run that is over: its output is complete.
            let exit = recorded
                .filter(|exit| {
                    observed
                        .started_at_unix_ms
                        .is_some_and(|start| exit.at_unix_ms >= start)
                })
                .or_else(|| observed.last_exit());
            if let Some(exit) = exit {
                chunk.ended = Some(format!(
                    "generation {generation}: the runner exited ({exit})"
                ));
            }
        }
        Ok(chunk)
    }

    /// What comes after `from`, stopping before the first entry stamped at
    /// or after `cut` when the cursor read only entries before it; true
    /// when it stopped there.
    async fn forward_until(
        &self,
        from: Position,
        budget: usize,
        cut: Option<u64>,
    ) -> Result<(LogChunk, bool), SandboxError> {
        let since = from.since_secs();
        let mut ask = from.first_ask();
        loop {
            let mut reader = Forward::new(from, budget, ask, cut);
            self.entries(ask, |entry| reader.take(entry)).await?;
            let cut = reader.reached_cut;
            match reader.finish().map_err(|message| self.malformed(message))? {
                Some(chunk) => return Ok((chunk, cut)),
                // The newest entries did not hold the whole view.
                None => ask = ask.wider(since),
            }
        }
    }

    /// The last `lines` entries within the budget, and a cursor at the end.
    pub(super) async fn tail(&self, lines: u32, budget: usize) -> Result<LogChunk, SandboxError> {
        let mut ask = Ask::Newest(RECENT_ENTRIES.max(u64::from(lines)));
        loop {
            let mut reader = Tail::new(lines, budget, ask);
            self.entries(ask, |entry| reader.take(entry)).await?;
            let read = reader
                .finish(self.identity)
                .map_err(|message| self.malformed(message))?;
            if let Some((data, next)) = read {
                return Ok(LogChunk {
                    data,
                    next: next.cursor(),
                    gap: false,
                    at_end: true,
                    ended: None,
                });
            }
            // A tail reads all it needs with no `since`.
            ask = ask.wider(0);
        }
    }

    fn failed(&self, error: CallError) -> SandboxError {
        match error {
            error if error.is_not_found() => no_output(
                self.key,
                &format!(
                    "its container {} was removed while its output was read",
                    short(self.container)
                ),
            ),
            // The container's logging driver keeps nothing to read back (`none`).
            CallError::Refused {
                status: 501,
                message,
            } => SandboxError::FailedPrecondition(format!(
                "the engine keeps no output of {} '{}' to read ({}): {message}",
                self.key.scope, self.key.id, self.key.base_name
            )),
            other => other.into_sandbox_error(&format!(
                "cannot read the output of {} '{}' ({})",
                self.key.scope, self.key.id, self.key.base_name
            )),
        }
    }

    fn malformed(&self, message: String) -> SandboxError {
        SandboxError::Internal(format!(
            "cannot read the output of {} '{}' ({}): {message}",
            self.key.scope, self.key.id, self.key.base_name
        ))
    }
}
