//! The idle and lifetime watcher: one task for every sandbox.
//!
//! Every [`tick`] it takes the running, unpaused runners of the scopes
//! that have a limit from the table, reads one small file per runner on
//! the blocking pool (its cgroup's CPU time, see
//! [`CpuUsage`](super::super::cgroup::usage::CpuUsage)), and compares it
//! and its pump's output counter with the sample before. A sample saw
//! work when the runner wrote any output, or used at least
//! [`BUSY_SHARE`](crate::drivers::lifecycle::window::BUSY_SHARE)
//! of one core since the sample before (the shared
//! [`IdleWindow`](crate::drivers::lifecycle::IdleWindow)); a runner none of whose samples saw
//! work for the whole `idle` window is idle. `max_lifetime` is checked at
//! the same ticks against the time it has run, paused time not counted.
//! Nothing per sandbox but the state in its record: no task, no thread,
//! no timer.
//!
//! The cost is one `read` of a few hundred bytes per runner per tick; the
//! tick is a quarter of the shortest window configured, between 250 ms and
//! 10 s, so a 30-minute `idle` samples each runner every 10 s (the
//! benchmark measures what that costs with many sandboxes).

use std::sync::{Arc, Weak};
use std::time::Instant;

use sandboxd_protocol::ExitReason;

use super::super::Inner;
use crate::config::{LifecycleConfig, OnIdle};
use crate::drivers::lifecycle::tick;
use crate::sandbox_key::SandboxKey;

/// What the watcher decided for one runner.
enum Verdict {
    Stop(ExitReason),
    Pause,
}

/// Samples every watched runner, tick after tick, until the driver is gone.
pub async fn keep_watching(inner: Weak<Inner>, limits: LifecycleConfig) {
    let tick = tick(&limits);
    loop {
        tokio::time::sleep(tick).await;
        let Some(inner) = inner.upgrade() else { return };
        let now = Instant::now();
        let mut verdicts = Vec::new();
        let mut samples = Vec::new();
        {
            let records = inner.records();
            for (key, record) in records.iter() {
                let scope_limits = limits.of(key.scope);
                let Some(running) = record.running.as_ref() else {
                    continue;
                };
                if !scope_limits.any()
                    || running.life.is_paused()
                    || running.life.stopping.is_some()
                {
                    continue;
                }
                if scope_limits
                    .max_lifetime
                    .is_some_and(|max| running.life.lifetime(now) >= max)
                {
                    verdicts.push((
                        key.clone(),
                        running.generation,
                        Verdict::Stop(ExitReason::Lifetime),
                    ));
                } else if scope_limits.idle.is_some() {
                    samples.push((key.clone(), running.generation, running.life.cpu.clone()));
                }
            }
        }
        let read = tokio::task::spawn_blocking(move || {
            samples
                .into_iter()
                .map(|(key, generation, cpu)| {
                    let usage = cpu.and_then(|cpu| cpu.read_usec());
                    (key, generation, usage)
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let sampled_at = Instant::now();
        {
            let mut records = inner.records();
            for (key, generation, cpu_usec) in read {
                let Some(running) = records
                    .get_mut(&key)
                    .and_then(|record| record.running.as_mut())
                    .filter(|running| running.generation == generation)
                else {
                    continue;
                };
                let Some(idle) = limits.of(key.scope).idle else {
                    continue;
                };
                if judge(&mut running.life, cpu_usec, sampled_at, idle) {
                    let verdict = match limits.of(key.scope).on_idle {
                        OnIdle::Stop => Verdict::Stop(ExitReason::Idle),
                        OnIdle::Pause => Verdict::Pause,
                    };
                    verdicts.push((key, generation, verdict));
                }
            }
        }
        for (key, generation, verdict) in verdicts {
            act(&inner, key, generation, verdict);
        }
    }
}

/// Takes one sample into `life`; true when the runner has now been idle
/// for the whole `idle` window (see [`IdleWindow`](crate::drivers::lifecycle::IdleWindow)).
fn judge(
    life: &mut super::RunState,
    cpu_usec: Option<u64>,
    at: Instant,
    idle: std::time::Duration,
) -> bool {
    // A command running in it is work, whether or not it uses the CPU
    // now (a build waiting on the network, a shell waiting for input).
    if life.has_live_commands() {
        life.window.restart(at);
        return false;
    }
    let output_bytes = life.output_bytes();
    life.window.sample(cpu_usec, output_bytes, at, idle)
}

/// Starts what `verdict` says, in a task of its own (each takes the
/// sandbox's key lock, which an ensure may hold).
fn act(inner: &Arc<Inner>, key: SandboxKey, generation: u64, verdict: Verdict) {
    let inner = inner.clone();
    match verdict {
        Verdict::Stop(reason) => {
            tokio::spawn(inner.stop_for_limit(key, generation, reason));
        }
        Verdict::Pause => {
            tokio::spawn(async move {
                tracing::info!(scope = %key.scope, id = %key.shown_id(), generation, "the runner is idle: pausing it ([lifecycle] on_idle = \"pause\")");
                if let Err(error) = inner.pause_idle(&key, generation).await {
                    tracing::warn!(scope = %key.scope, id = %key.shown_id(), %error, "cannot pause the idle runner");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_runner_s_output_counter_is_its_output() {
        let idle = Duration::from_secs(2);
        let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut life = super::super::RunState::new(Some(counter.clone()), None);
        let start = life.clock.started();
        let second = Duration::from_secs(1);
        assert!(!judge(&mut life, Some(0), start + second, idle));
        counter.store(10, Ordering::Relaxed);
        assert!(
            !judge(&mut life, Some(0), start + 2 * second, idle),
            "output is work"
        );
        assert!(!judge(&mut life, Some(0), start + 3 * second, idle));
        assert!(judge(&mut life, Some(0), start + 4 * second, idle));
        let mut unseen = super::super::RunState::new(None, None);
        let start = unseen.clock.started();
        assert!(
            judge(&mut unseen, Some(0), start + 3 * second, idle),
            "no counter: CPU alone decides"
        );
    }
}
