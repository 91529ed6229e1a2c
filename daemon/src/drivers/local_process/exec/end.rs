//! How a process-tier command ended: its wait status, and what the
//! sandbox's record and cgroup say about a signal that ended it.
//!
//! A command killed because its sandbox ended (a deprovision, a lifecycle
//! stop, its runner gone: the cgroup is killed, or the PID namespace's
//! init dies) or because the daemon is stopping ends on SIGKILL like any
//! other; by the time it is reaped the sandbox's record no longer holds
//! that runner (a deprovision takes the record before it signals), so the
//! record says which. A SIGKILL while the cgroup's OOM kills rose is the
//! OOM killer's.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use sandboxd_protocol::ExitReason;

use super::super::cgroup::command::CommandCgroup;
use super::super::launch::child_exits::RunnerProcess;
use super::super::Inner;
use crate::sandbox_key::SandboxKey;
use crate::started_command::CommandEnd;

pub struct EndWatch {
    pub inner: Weak<Inner>,
    pub key: SandboxKey,
    pub generation: u64,
    pub oom_kills_before: u64,
    /// Set at the reap (see `ProcessControl`).
    pub exited: Arc<AtomicBool>,
    /// Its own cgroup, when it has limits of its own: read for an OOM kill,
    /// then removed, at its end.
    pub own_cgroup: Option<CommandCgroup>,
    /// Counts it as its runner's work until it ends.
    pub _live: LiveCommand,
}

/// One command counted among its runner's live ones, for as long as this
/// lives (the idle watcher reads the count).
pub struct LiveCommand(Arc<AtomicU32>);

impl LiveCommand {
    pub fn new(count: Arc<AtomicU32>) -> LiveCommand {
        count.fetch_add(1, Ordering::AcqRel);
        LiveCommand(count)
    }
}

impl Drop for LiveCommand {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A command's own code and signal, from those of the process waited for.
pub type ExitOf = fn(Option<i32>, Option<i32>) -> (Option<i32>, Option<i32>);

impl EndWatch {
    pub async fn wait(self, process: RunnerProcess) -> CommandEnd {
        self.wait_mapped(process, |code, signal| (code, signal))
            .await
    }

    /// [`EndWatch::wait`] for a command whose waited process is not the
    /// command itself (`runsc exec`, which exits 128 + N for signal N):
    /// `exit_of` tells the command's end from the process's.
    pub async fn wait_mapped(mut self, mut process: RunnerProcess, exit_of: ExitOf) -> CommandEnd {
        let status = process.wait().await;
        self.exited.store(true, Ordering::Release);
        let (own_oom_kills, own_limit) = match self.own_cgroup.take() {
            Some(own) => {
                let read = tokio::task::spawn_blocking(move || {
                    let found = (own.oom_kills(), own.memory_limit);
                    own.remove();
                    found
                });
                read.await.unwrap_or((0, None))
            }
            None => (0, None),
        };
        let Some(status) = status else {
            return CommandEnd::from_status(None, None).because(ExitReason::Lost);
        };
        use std::os::unix::process::ExitStatusExt;
        let (code, signal) = exit_of(status.code(), status.signal());
        let end = CommandEnd::from_status(code, signal);
        // An end by signal, or one nobody could tell, is told apart below.
        if end.signal.is_none() && end.exit_code.is_some() {
            return end;
        }
        if own_oom_kills > 0 && end.signal == Some(libc::SIGKILL) {
            return end.because(ExitReason::OutOfMemory {
                limit_bytes: own_limit,
            });
        }
        match self.inner.upgrade() {
            Some(inner) => end.because(self.signal_reason(&inner, end)),
            None => end.because(ExitReason::DaemonStopped),
        }
    }

    fn signal_reason(&self, inner: &Inner, end: CommandEnd) -> ExitReason {
        if inner.stopping.load(Ordering::Acquire) {
            return ExitReason::DaemonStopped;
        }
        let same_runner = inner
            .records()
            .get(&self.key)
            .and_then(|record| record.running.as_ref())
            .is_some_and(|running| running.generation == self.generation);
        if !same_runner {
            return ExitReason::SandboxEnded;
        }
        let killed = end.signal == Some(libc::SIGKILL);
        if killed && inner.oom_kills(&self.key) > self.oom_kills_before {
            let limit_bytes = inner
                .containment
                .tree()
                .and_then(|tree| tree.memory_limit());
            return ExitReason::OutOfMemory { limit_bytes };
        }
        end.reason
    }
}
