//! The idle and lifetime watcher: one task for every sandbox.
//!
//! Every [`tick`] it takes the running, unpaused runners of the scopes
//! that have a limit from the table, reads one small file per runner on
//! the blocking pool (its cgroup's CPU time, see
//! [`CpuUsage`](super::super::cgroup::usage::CpuUsage)), and compares it
//! and its pump's output counter with the sample before. A sample saw
//! work when the runner wrote any output, or used at least [`BUSY_SHARE`]
//! of one core since the sample before; a runner none of whose samples saw
//! work for the whole `idle` window is idle. `max_lifetime` is checked at
//! the same ticks against the time it has run, paused time not counted.
//! Nothing per sandbox but the state in its record: no task, no thread,
//! no timer.
//!
//! The cost is one `read` of a few hundred bytes per runner per tick; the
//! tick is a quarter of the shortest window configured, between 250 ms and
//! 10 s, so a 30-minute `idle` samples each runner every 10 s (the
//! benchmark measures what that costs with many sandboxes).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use sandboxd_protocol::ExitReason;

use super::super::Inner;
use crate::config::{LifecycleConfig, OnIdle};
use crate::provisioner::SandboxKey;

/// The share of one core below which a runner counts as not working: 1 %
/// (10 ms of CPU per second). A runner waiting for work — a long poll on
/// its task queue, a heartbeat, a runtime's timers and garbage collector —
/// uses well under a tenth of that; any real work (a build, a test run, a
/// model call's parsing, even a shell loop that forks `sleep`) uses more
/// than that within a second or two. A runner that computes never looks
/// idle, whatever the control plane does.
pub const BUSY_SHARE: f64 = 0.01;

/// The shortest and longest time between two samples. 10 s at most: a
/// 30-minute window still gets 180 samples, and 10,000 runners cost 1,000
/// reads a second.
const MIN_TICK: Duration = Duration::from_millis(250);
const MAX_TICK: Duration = Duration::from_secs(10);

/// The time between two samples for `limits`: a quarter of the shortest
/// window configured, within [`MIN_TICK`]..=[`MAX_TICK`].
pub fn tick(limits: &LifecycleConfig) -> Duration {
    sandboxd_protocol::Scope::ALL
        .into_iter()
        .flat_map(|scope| {
            let limits = limits.of(scope);
            [limits.idle, limits.max_lifetime]
        })
        .flatten()
        .map(|window| window / 4)
        .min()
        .unwrap_or(MAX_TICK)
        .clamp(MIN_TICK, MAX_TICK)
}

/// True when `cpu_usec` used over `elapsed` is at least [`BUSY_SHARE`].
fn busy(cpu_usec: u64, elapsed: Duration) -> bool {
    cpu_usec as f64 >= elapsed.as_micros() as f64 * BUSY_SHARE
}

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
/// for the whole `idle` window. A CPU time that cannot be read counts as
/// work: a runner is never stopped on what the daemon could not see.
fn judge(life: &mut super::RunState, cpu_usec: Option<u64>, at: Instant, idle: Duration) -> bool {
    let seen = &mut life.seen;
    let output_bytes = seen
        .output
        .as_ref()
        .map_or(seen.output_bytes, |counter| counter.load(Ordering::Relaxed));
    let wrote = output_bytes != seen.output_bytes;
    let computed = match cpu_usec {
        Some(usec) => busy(
            usec.saturating_sub(seen.cpu_usec),
            at.saturating_duration_since(seen.at),
        ),
        None => true,
    };
    seen.output_bytes = output_bytes;
    seen.cpu_usec = cpu_usec.unwrap_or(seen.cpu_usec);
    seen.at = at;
    if wrote || computed {
        seen.busy_at = at;
    }
    at.saturating_duration_since(seen.busy_at) >= idle
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
    use super::*;
    use crate::config::ScopeLimits;

    #[test]
    fn the_tick_is_a_quarter_of_the_shortest_window_within_bounds() {
        let mut limits = LifecycleConfig::default();
        assert_eq!(tick(&limits), MAX_TICK);
        limits.session = ScopeLimits {
            idle: Some(Duration::from_secs(1800)),
            ..ScopeLimits::default()
        };
        assert_eq!(tick(&limits), MAX_TICK);
        limits.session.idle = Some(Duration::from_secs(20));
        assert_eq!(tick(&limits), Duration::from_secs(5));
        limits.connect.max_lifetime = Some(Duration::from_secs(8));
        assert_eq!(tick(&limits), Duration::from_secs(2));
        limits.workflow.idle = Some(Duration::from_secs(1));
        assert_eq!(tick(&limits), MIN_TICK);
    }

    #[test]
    fn work_or_output_restarts_the_window_and_quiet_ends_it() {
        let idle = Duration::from_secs(2);
        let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut life = super::super::RunState::new(Some(counter.clone()), None);
        let start = life.started;
        let second = Duration::from_secs(1);
        // 5 ms in a second: under 1 % of a core.
        assert!(!judge(&mut life, Some(5_000), start + second, idle));
        assert!(judge(&mut life, Some(9_000), start + 2 * second, idle));
        // 20 ms in a second: work.
        assert!(!judge(&mut life, Some(29_000), start + 3 * second, idle));
        assert!(!judge(&mut life, Some(29_000), start + 4 * second, idle));
        counter.store(10, Ordering::Relaxed);
        assert!(
            !judge(&mut life, Some(29_000), start + 5 * second, idle),
            "output is work"
        );
        assert!(!judge(&mut life, Some(29_000), start + 6 * second, idle));
        assert!(judge(&mut life, Some(29_000), start + 7 * second, idle));
        assert!(
            !judge(&mut life, None, start + 8 * second, idle),
            "unread CPU counts as work"
        );
    }
}
