//! Idle and lifetime limits on the docker tier: one watcher task for
//! every container, deciding as the process tier does (the shared
//! [`IdleWindow`] and [`LifeClock`], the same threshold and tick).
//!
//! Every tick costs one `list` of the instance's containers (running or
//! paused, which also shows pauses made from outside), then per watched
//! container one read of its cgroup's CPU time and one `stat` of its log
//! file: the engine's json-file (or local) log grows with every line the
//! runner writes, so its size is the output counter. What is read where
//! is found once per run, from one `inspect`: the cgroup file (see
//! [`cpu_source`](super::cpu_source)), else the Engine's one-shot stats;
//! the log file (`LogPath`), else the stamp of the log's newest entry
//! through the Engine. Each fallback is said in the log the first time.
//!
//! A container's lifetime runs from its start (`State.StartedAt`), its
//! pauses not counted: those the daemon makes are counted from the moment
//! it makes them; one made from outside from the tick that sees it.
//!
//! `stop` stops the container (SIGTERM, the grace, SIGKILL) and keeps it
//! and its workspace volume: the next `ensure` starts it again as after a
//! crash. Its `die` event is announced with the reason `idle` or
//! `lifetime`, which `describe` and the log's end line show. `pause` is the
//! Engine's pause; a paused container is never idle-stopped.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bollard::models::ContainerSummaryStateEnum;
use bollard::query_parameters::LogsOptionsBuilder;
use futures::StreamExt;
use sandboxd_protocol::ExitReason;

use super::observed::{key_of, unix_ms, Lookup, Observed, Phase};
use super::{containers, cpu_source, teardown, usage, Inner};
use crate::config::{LifecycleConfig, OnIdle};
use crate::drivers::cgroup_files::CpuUsage;
use crate::drivers::lifecycle::{tick, IdleWindow, LifeClock};
use crate::sandbox_key::SandboxKey;
use crate::unix_time::now_unix_ms;

/// How many engine calls (inspects of new runs, fallback reads) one tick
/// makes at once.
const ENGINE_CONCURRENCY: usize = 8;

/// Where one run's CPU time is read.
#[derive(Clone)]
enum Cpu {
    File(Arc<CpuUsage>),
    /// The Engine's one-shot stats.
    Engine,
}

/// Where one run's output is counted.
#[derive(Clone)]
enum Output {
    /// The size of the engine's log file.
    File(Arc<PathBuf>),
    /// The stamp of the newest log entry, through the Engine.
    Engine,
}

/// One watched run of a container.
struct Watched {
    key: SandboxKey,
    clock: LifeClock,
    window: IdleWindow,
    cpu: Cpu,
    output: Output,
    /// A stop or pause for a limit is under way.
    acting: bool,
}

/// Every watched run, by container id.
#[derive(Default)]
pub struct Watch {
    runs: Mutex<HashMap<String, Watched>>,
    /// The fallbacks already said in the log.
    said_cpu_fallback: AtomicBool,
    said_output_fallback: AtomicBool,
}

impl Watch {
    fn runs(&self) -> MutexGuard<'_, HashMap<String, Watched>> {
        self.runs
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// `container` was paused by the daemon: its lifetime clock stops now.
    pub fn paused(&self, container: &str, unix_ms: u64) {
        if let Some(run) = self.runs().get_mut(container) {
            run.clock.mark_paused(unix_ms);
        }
    }

    /// `container` was resumed: the clock goes on, the idle window starts
    /// again (a runner just resumed has had no chance to work).
    pub fn resumed(&self, container: &str) {
        if let Some(run) = self.runs().get_mut(container) {
            run.clock.mark_resumed();
            run.window.restart(Instant::now());
        }
    }

    /// `container` was (re)started or stopped: its run is over; the next
    /// tick watches the new one from its start.
    pub fn forget(&self, container: &str) {
        self.runs().remove(container);
    }
}

/// What the watcher decided for one run.
enum Verdict {
    Stop(ExitReason),
    Pause,
}

/// One sample to take: which run, and where its counts are.
struct ToSample {
    container: String,
    cpu: Cpu,
    output: Output,
}

/// Watches every container of the scopes with a limit, tick after tick,
/// until the driver is gone.
pub async fn keep_watching(inner: Weak<Inner>, limits: LifecycleConfig) {
    let tick = tick(&limits);
    loop {
        tokio::time::sleep(tick).await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(error) = watch_once(&inner, &limits).await {
            tracing::debug!(%error, "the idle watcher cannot list the containers this tick");
        }
    }
}

/// One tick: the list, new runs taken in, pauses seen, lifetimes checked,
/// samples taken and judged, verdicts acted on.
async fn watch_once(inner: &Arc<Inner>, limits: &LifecycleConfig) -> Result<(), String> {
    let listed = containers::list(&inner.engine, None)
        .await
        .map_err(|error| error.to_string())?;
    // Running or paused containers of the scopes with a limit.
    let mut live: HashMap<String, (SandboxKey, bool)> = HashMap::new();
    for summary in &listed {
        let labels = summary.labels.clone().unwrap_or_default();
        let names = summary.names.as_deref().unwrap_or_default();
        let (Some(key), Some(id)) = (key_of(&labels, names), summary.id.clone()) else {
            continue;
        };
        if !limits.of(key.scope).any() {
            continue;
        }
        match summary.state {
            Some(ContainerSummaryStateEnum::RUNNING) => live.insert(id, (key, false)),
            Some(ContainerSummaryStateEnum::PAUSED) => live.insert(id, (key, true)),
            _ => None,
        };
    }
    let new: Vec<SandboxKey> = {
        let mut runs = inner.watch.runs();
        runs.retain(|id, _| live.contains_key(id));
        live.iter()
            .filter(|(id, _)| !runs.contains_key(*id))
            .map(|(_, (key, _))| key.clone())
            .collect()
    };
    take_in(inner, new).await;

    let now = Instant::now();
    let mut verdicts = Vec::new();
    let mut samples = Vec::new();
    {
        let mut runs = inner.watch.runs();
        for (id, run) in runs.iter_mut() {
            let Some((_, paused)) = live.get(id) else {
                continue;
            };
            // Pauses and resumes made from outside, seen now.
            if *paused {
                run.clock.mark_paused(now_unix_ms());
                continue;
            }
            if run.clock.mark_resumed() {
                run.window.restart(now);
            }
            if run.acting {
                continue;
            }
            let scope_limits = limits.of(run.key.scope);
            if scope_limits
                .max_lifetime
                .is_some_and(|max| run.clock.lifetime(now) >= max)
            {
                run.acting = true;
                verdicts.push((
                    run.key.clone(),
                    id.clone(),
                    Verdict::Stop(ExitReason::Lifetime),
                ));
            } else if scope_limits.idle.is_some() {
                samples.push(ToSample {
                    container: id.clone(),
                    cpu: run.cpu.clone(),
                    output: run.output.clone(),
                });
            }
        }
    }
    let read = read_samples(inner, samples).await;
    let sampled_at = Instant::now();
    {
        let mut runs = inner.watch.runs();
        for (container, cpu_usec, output) in read {
            let Some(run) = runs.get_mut(&container) else {
                continue;
            };
            let scope_limits = limits.of(run.key.scope);
            let Some(idle) = scope_limits.idle else {
                continue;
            };
            if run.acting || run.clock.is_paused() {
                continue;
            }
            if run.window.sample(cpu_usec, output, sampled_at, idle) {
                run.acting = true;
                let verdict = match scope_limits.on_idle {
                    OnIdle::Stop => Verdict::Stop(ExitReason::Idle),
                    OnIdle::Pause => Verdict::Pause,
                };
                verdicts.push((run.key.clone(), container, verdict));
            }
        }
    }
    for (key, container, verdict) in verdicts {
        act(inner, key, container, verdict);
    }
    Ok(())
}

/// Starts watching the running or paused containers of `keys`, seen for
/// the first time (or started again): one inspect each, for its start,
/// its init's pid and its log file.
async fn take_in(inner: &Arc<Inner>, keys: Vec<SandboxKey>) {
    let inspected: Vec<(SandboxKey, Observed)> = futures::stream::iter(keys)
        .map(|key| async move {
            match inner.inspect(&key).await {
                Ok(Lookup::Ours(observed))
                    if matches!(observed.phase, Phase::Running | Phase::Paused) =>
                {
                    Some((key, observed))
                }
                _ => None,
            }
        })
        .buffer_unordered(ENGINE_CONCURRENCY)
        .filter_map(|found| async move { found })
        .collect()
        .await;
    let found = tokio::task::spawn_blocking(move || {
        inspected
            .into_iter()
            .map(|(key, observed)| {
                let cpu = cpu_source::find(&observed.id, observed.pid);
                (key, observed, cpu)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let now = Instant::now();
    let now_ms = now_unix_ms();
    for (key, observed, cpu) in found {
        // Its lifetime so far, by the engine's clock of its start.
        let ran = observed
            .started_at_unix_ms
            .map_or(Duration::ZERO, |started| {
                Duration::from_millis(now_ms.saturating_sub(started))
            });
        let started = now.checked_sub(ran).unwrap_or(now);
        let cpu = match cpu {
            Some(file) => {
                tracing::debug!(scope = %key.scope, id = %key.shown_id(), file = ?file, "the idle watcher reads this container's CPU time from its cgroup");
                Cpu::File(Arc::new(file))
            }
            None => {
                if !inner.watch.said_cpu_fallback.swap(true, Ordering::Relaxed) {
                    tracing::info!(scope = %key.scope, id = %key.shown_id(), container = %super::events::short(&observed.id), "the idle watcher found no cgroup file of this container (an engine elsewhere, or another pid namespace): reading its CPU time from the Engine's stats, one call per tick (said once; others may follow)");
                }
                Cpu::Engine
            }
        };
        let output = match observed.log_path.as_deref().map(PathBuf::from) {
            Some(path) if std::fs::metadata(&path).is_ok() => Output::File(Arc::new(path)),
            _ => {
                if !inner
                    .watch
                    .said_output_fallback
                    .swap(true, Ordering::Relaxed)
                {
                    tracing::info!(scope = %key.scope, id = %key.shown_id(), log_path = observed.log_path.as_deref(), "the idle watcher cannot read this container's log file (another log driver, or an engine elsewhere): its output is seen through the Engine's log, one call per tick (said once; others may follow)");
                }
                Output::Engine
            }
        };
        let window = IdleWindow::starting(now, None, None);
        let mut clock = LifeClock::started_at(started);
        // Paused before it was taken in: since the daemon paused it (or
        // first saw it paused).
        if let Some(since) = inner.paused_since.of(&observed) {
            clock.mark_paused_since(since, now_ms);
        }
        inner
            .watch
            .runs()
            .entry(observed.id.clone())
            .or_insert(Watched {
                key,
                clock,
                window,
                cpu,
                output,
                acting: false,
            });
    }
}

impl ToSample {
    /// What its files say, `None` for a count the Engine must give.
    /// Blocking (a small read and a `stat`).
    fn read_files(&self) -> (Option<u64>, Option<u64>) {
        let cpu = match &self.cpu {
            Cpu::File(file) => file.read_usec(),
            Cpu::Engine => None,
        };
        let output = match &self.output {
            Output::File(path) => std::fs::metadata(path.as_ref()).ok().map(|meta| meta.len()),
            Output::Engine => None,
        };
        (cpu, output)
    }
}

/// Reads each sample's CPU time and output count: every file in one go on
/// the blocking pool, then what only the Engine can say, a few at a time.
async fn read_samples(
    inner: &Arc<Inner>,
    samples: Vec<ToSample>,
) -> Vec<(String, Option<u64>, Option<u64>)> {
    let from_files = tokio::task::spawn_blocking(move || {
        samples
            .into_iter()
            .map(|sample| {
                let counts = sample.read_files();
                (sample, counts)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    futures::stream::iter(from_files)
        .map(|(sample, (cpu, output))| async move {
            let cpu = match sample.cpu {
                Cpu::File(_) => cpu,
                Cpu::Engine => usage::read(&inner.engine, &sample.container, 0, 0)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|usage| usage.cpu_usec),
            };
            let output = match sample.output {
                Output::File(_) => output,
                Output::Engine => newest_entry_stamp(inner, &sample.container).await,
            };
            (sample.container, cpu, output)
        })
        .buffer_unordered(ENGINE_CONCURRENCY)
        .collect()
        .await
}

/// The stamp (ms since the epoch) of the container's newest log entry,
/// 0 when it has none: it changes when the runner writes.
async fn newest_entry_stamp(inner: &Inner, container: &str) -> Option<u64> {
    let options = LogsOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .timestamps(true)
        .tail("1")
        .build();
    let mut stamp = 0;
    containers::logs(&inner.engine, container, options, |entry| {
        let text = String::from_utf8_lossy(entry);
        stamp = text
            .split_whitespace()
            .next()
            .and_then(unix_ms)
            .unwrap_or(stamp);
        ControlFlow::Break(())
    })
    .await
    .ok()?;
    Some(stamp)
}

/// Starts what `verdict` says, in a task of its own (each takes the
/// sandbox's key lock, which an ensure may hold).
fn act(inner: &Arc<Inner>, key: SandboxKey, container: String, verdict: Verdict) {
    let inner = inner.clone();
    tokio::spawn(async move {
        let done = match verdict {
            Verdict::Stop(reason) => inner.stop_for_limit(&key, &container, reason).await,
            Verdict::Pause => {
                tracing::info!(scope = %key.scope, id = %key.shown_id(), "the runner is idle: pausing its container ([lifecycle] on_idle = \"pause\")");
                inner.pause_idle(&key, &container).await
            }
        };
        if let Err(error) = done {
            tracing::warn!(scope = %key.scope, id = %key.shown_id(), %error, "cannot act on the [lifecycle] limit; looking again at the next tick");
        }
        if let Some(run) = inner.watch.runs().get_mut(&container) {
            run.acting = false;
        }
    });
}

impl Inner {
    /// The container `container` of `key`, running, under the key lock's
    /// look; `None` when it was replaced, stopped or paused since it was
    /// judged.
    async fn still_running(
        &self,
        key: &SandboxKey,
        container: &str,
    ) -> Result<Option<Observed>, sandboxd_protocol::SandboxError> {
        Ok(match self.inspect(key).await? {
            Lookup::Ours(observed)
                if observed.id == container && observed.phase == Phase::Running =>
            {
                Some(observed)
            }
            _ => None,
        })
    }

    /// Stops `key`'s container `container` for `reason` (idle or
    /// lifetime), keeping it and its workspace volume; its exit says why.
    async fn stop_for_limit(
        &self,
        key: &SandboxKey,
        container: &str,
        reason: ExitReason,
    ) -> Result<(), sandboxd_protocol::SandboxError> {
        let _guard = self.key_locks.lock(key).await;
        let Some(observed) = self.still_running(key, container).await? else {
            self.watch.forget(container);
            return Ok(());
        };
        tracing::info!(scope = %key.scope, id = %key.shown_id(), container = %super::events::short(container), reason = reason.as_str(), "stopping the runner for its [lifecycle] limit; its container and workspace are kept");
        self.exits.stopping_for(container, reason);
        teardown::stop(&self.engine, key, &observed, self.stop_grace).await?;
        self.watch.forget(container);
        Ok(())
    }

    /// Pauses `key`'s container `container` for idleness, unless it was
    /// replaced, stopped or paused since it was judged.
    async fn pause_idle(
        &self,
        key: &SandboxKey,
        container: &str,
    ) -> Result<(), sandboxd_protocol::SandboxError> {
        let _guard = self.key_locks.lock(key).await;
        if let Some(observed) = self.still_running(key, container).await? {
            self.pause_observed(key, &observed).await?;
        }
        Ok(())
    }
}
