//! A runner's watcher: it owns the runner until it exits, then ends what
//! is left of its sandbox's processes, finishes its output, and records
//! and announces its exit — only if the table still holds that runner's
//! generation (a late exit of a deprovisioned runner must never remove
//! its replacement).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use sandboxd_protocol::{EventKind, ExitInfo, ExitReason};

use super::launch::child_exits::RunnerProcess;
use super::{cgroup, deprovision, now_unix_ms, stop, Inner};
use crate::sandbox_key::SandboxKey;

/// What a runner's watcher holds while it waits. Boxed: thousands of
/// watchers wait at once, and each task's future is then a pointer and the
/// wait: a task of 640 bytes became one of 256 and this box of 160.
pub(super) struct Watched {
    pub(super) inner: Arc<Inner>,
    pub(super) key: SandboxKey,
    pub(super) generation: u64,
    pub(super) child: RunnerProcess,
    pub(super) ends: deprovision::EndSignals,
}

/// Owns one runner until it exits, then removes it from the table — only if
/// the table still holds this generation.
pub(super) async fn watch_runner(mut watched: Box<Watched>) {
    let status = watched.child.wait().await;
    (*watched).exited(status).await;
}

impl Watched {
    /// Tells a deprovision waiting for this exit (it answers now), then
    /// does the rest: [`after_exit`], boxed, so that the waiting future
    /// holds none of it.
    fn exited(
        self,
        status: Option<std::process::ExitStatus>,
    ) -> std::pin::Pin<Box<impl std::future::Future<Output = ()>>> {
        let Watched {
            inner,
            key,
            generation,
            child,
            ends,
        } = self;
        let pid = child.id();
        // A prepared view's holder ends with it, before the exit is told.
        drop(child);
        ends.exited();
        Box::pin(after_exit(inner, key, generation, pid, status, ends))
    }
}

/// What [`watch_runner`] does once the runner has exited.
async fn after_exit(
    inner: Arc<Inner>,
    key: SandboxKey,
    generation: u64,
    pid: u32,
    status: Option<std::process::ExitStatus>,
    ends: deprovision::EndSignals,
) {
    let code = status.and_then(|status| status.code());
    let signal = status.and_then(|status| std::os::unix::process::ExitStatusExt::signal(&status));
    let (code, signal) = inner.settings.launcher.runner_exit(code, signal);
    let mut exit = ExitInfo::from_facts(code, signal, now_unix_ms(), false);
    end_what_is_left(&inner, &key, pid, &mut exit).await;
    inner.settings.launcher.ended(&key.base_name, pid);
    // Its last output reaches the file before a respawn can start a pump
    // on the same file, and before a deprovision removes it.
    inner.logs.finish(&key.base_name).await;
    inner.why_it_ended(&key, generation, &mut exit);
    let stopping = inner.stopping.load(Ordering::Acquire);
    // Before the table says absent: a follower never sees the sandbox gone
    // (or its next generation) without the end of this one recorded. Not
    // in a daemon stop: the ends are kept in memory only, followers are
    // cut off by then, and at 10,000 runners the trips to the blocking
    // pool were a good part of the stop.
    if !stopping {
        let how = format!("generation {generation}: the runner exited ({exit})");
        let (logs, base) = (inner.logs.clone(), key.base_name.clone());
        let _ = tokio::task::spawn_blocking(move || logs.end_generation(&base, how)).await;
    }
    inner.catalog.note_active(&key, now_unix_ms());
    // Forget before clearing the table: once the table says absent, a new
    // ensure may write this sandbox's next ledger record.
    inner.ledger.forget(&key.base_name);
    if let Some(uid) = inner.record_exit(&key, generation, exit) {
        inner
            .events
            .emit(EventKind::Exited, &key, &uid, generation, Some(exit));
    }
    // A stop logs one line for all of them (see `shutdown`).
    if stopping {
        tracing::debug!(scope = %key.scope, id = %key.shown_id(), pid, generation, exit = %exit, "runner exited");
    } else {
        tracing::info!(scope = %key.scope, id = %key.shown_id(), pid, generation, exit = %exit, "runner exited");
    }
    ends.gone();
}

/// The leader is gone, so the sandbox is: nothing left in its cgroup (or
/// group) may linger. (Its pid cannot be reused while group members hold
/// the id.)
async fn end_what_is_left(inner: &Inner, key: &SandboxKey, pid: u32, exit: &mut ExitInfo) {
    match inner.containment.tree() {
        // Stopping: removed by the stop's one remover thread instead (see
        // `cgroup::setup::StopRemover`), or by the stop sweep after it.
        Some(_) if inner.stopping.load(Ordering::Acquire) => {
            if let Some(remover) = inner.stop_remover().as_ref() {
                remover.remove(&key.base_name);
            }
        }
        Some(tree) => cgroup::setup::end_of_run(tree, key, exit).await,
        None => {
            stop::kill_group(pid as i32, nix::sys::signal::Signal::SIGKILL);
            inner.reaper.untrack(pid as i32);
        }
    }
}

impl Inner {
    /// `exit`'s reason, with what the cgroup, the disk watcher and the
    /// lifecycle watcher said about this generation added.
    fn why_it_ended(&self, key: &SandboxKey, generation: u64, exit: &mut ExitInfo) {
        // What the daemon's own watchers decided about this generation.
        let (disk_stop, limit_stop) = self
            .records()
            .get(key)
            .and_then(|record| record.running.as_ref())
            .filter(|running| running.generation == generation)
            .map_or((None, None), |running| {
                (running.disk_stop, running.life.stopping())
            });
        if let Some(ExitReason::DiskLimit { limit_bytes }) = disk_stop {
            exit.disk_limit_bytes = Some(limit_bytes);
        }
        // With what the cgroup and the disk watcher said added.
        exit.derive_reason();
        if let Some(reason) = disk_stop.filter(|_| exit.disk_limit_bytes.is_none()) {
            exit.reason = reason;
        }
        // Stopped by the daemon for a [lifecycle] limit: that is why it ended
        // (unless its memory or disk limit ended it first).
        if let Some(reason) = limit_stop {
            if !matches!(
                exit.reason,
                ExitReason::OutOfMemory { .. }
                    | ExitReason::DiskLimit { .. }
                    | ExitReason::DiskInodeLimit { .. }
                    | ExitReason::DiskFull
            ) {
                exit.reason = reason;
            }
        }
    }

    /// Clears `key`'s runner from the table and keeps its `exit`, if the
    /// table still holds `generation`; its uid then, for the event.
    fn record_exit(&self, key: &SandboxKey, generation: u64, exit: ExitInfo) -> Option<String> {
        let mut records = self.records();
        match records.get_mut(key) {
            Some(record)
                if record
                    .running
                    .as_ref()
                    .is_some_and(|running| running.generation == generation) =>
            {
                record.running = None;
                record.last_exit = Some(Box::new(exit));
                Some(record.uid.clone())
            }
            // Taken by a deprovision (or a daemon stop), which announces it.
            _ => None,
        }
    }
}
