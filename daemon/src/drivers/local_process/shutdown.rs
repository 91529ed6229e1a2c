//! The daemon's stop on the process tier: every runner signalled at once
//! and deprovisioned (workspaces kept), their teardowns awaited, then the
//! cgroups swept and the egress rules removed.

use std::sync::atomic::Ordering;

use super::{cgroup, deprovision, Inner, LocalProcessDriver};
use crate::sandbox_key::SandboxKey;

impl LocalProcessDriver {
    /// The driver's `shutdown`.
    pub(super) async fn stop_every_runner(&self) {
        if let Some(tree) = self.inner.containment.tree() {
            match cgroup::setup::StopRemover::start(tree.clone()) {
                Ok(remover) => *self.inner.stop_remover() = Some(remover),
                Err(error) => {
                    tracing::warn!(%error, "cannot start the cgroup remover: the stop sweep removes every cgroup")
                }
            }
        }
        self.inner.stopping.store(true, Ordering::Release);
        if let Some(pool) = self.inner.prepared.get() {
            // Undone on a blocking thread: a few removals each.
            let pool = pool.clone();
            let _ = tokio::task::spawn_blocking(move || pool.stop()).await;
        }
        let keys: Vec<SandboxKey> = self.inner.records().keys().cloned().collect();
        tracing::info!(sandboxes = keys.len(), "stopping every process-tier runner");
        self.inner.signal_every_runner();
        // Workspaces are kept: a session ensured again after a restart finds its files.
        let stops = keys
            .iter()
            .map(|key| deprovision::deprovision(self.inner.clone(), key.clone(), true, None));
        let mut all_stopped = true;
        for (key, result) in keys.iter().zip(futures::future::join_all(stops).await) {
            if let Err(error) = result {
                all_stopped = false;
                tracing::error!(scope = %key.scope, id = %key.shown_id(), %error, "runner did not stop cleanly");
            }
        }
        // Each answered at its runner's exit; their cgroups, events and
        // (for deprovisions made before the stop) workspaces come after.
        self.inner.teardowns.idle().await;
        // What starts left for after their answers (the claims of adopted
        // uids): done before the daemon is, so no claim outlives it
        // naming a prepared sandbox.
        self.inner.spawner.settle().await;
        tracing::info!(
            sandboxes = keys.len(),
            all_stopped,
            "every process-tier runner is stopped"
        );
        self.inner.sweep_cgroups_after_stop().await;
        // The rules go only once no runner is left for them to hold.
        if all_stopped {
            let egress = self.inner.egress.clone();
            let _ = tokio::task::spawn_blocking(move || egress.remove()).await;
        }
    }
}

impl Inner {
    /// The remover has taken the cgroups of the runners gone; the sweep
    /// takes the rest, with whatever the records missed in them: one kill
    /// of the whole tree, then the removals on this one thread.
    async fn sweep_cgroups_after_stop(&self) {
        let remover = self.stop_remover().take();
        if let Some(tree) = self.containment.tree().cloned() {
            let _ = tokio::task::spawn_blocking(move || {
                if let Some(remover) = remover {
                    remover.finish();
                }
                cgroup::setup::sweep(&tree);
                tree.remove_empty();
            })
            .await;
        }
    }

    /// At the daemon's stop, sends every running runner its SIGTERM in one
    /// loop, as the raw baseline's stop does. Sent by each runner's
    /// deprovision instead, the last of 10,000 went out 1.1-1.7 s after
    /// the first, each behind the work of the stops before it and the
    /// exits they caused. A paused runner is left to its deprovision,
    /// which thaws it before its SIGTERM (frozen, it would not act on it).
    ///
    /// In the order the runners started, as the raw baseline's stop does,
    /// not the table's: the runners then exit, are reaped and have their
    /// cgroups removed roughly in the order the kernel made them, and that
    /// order costs the kernel much less. Stopping 5,000 runners in four
    /// cgroup hierarchies each, the removals took 0.7-1.3 s in start order
    /// against 1.7-2.5 s in a random one, and the kernel's whole CPU time
    /// for the stop 1.5-3.2 s against 3.7-5.2 s (BENCHMARKS.md, "The stop
    /// in start order").
    fn signal_every_runner(&self) {
        let mut records = self.records();
        let mut leaders: Vec<(u64, u32)> = records
            .values_mut()
            .filter_map(|record| record.running.as_mut())
            .filter(|running| !running.life.is_paused())
            .map(|running| {
                running.signalled_at_stop = true;
                (running.started_at_unix_ms, running.leader)
            })
            .collect();
        // Ties within a millisecond go by pid, which counts up as they start.
        leaders.sort_unstable();
        for (_, leader) in leaders {
            self.settings.launcher.terminate(leader as i32);
        }
        // Held until every signal is out, as before: no record is taken
        // (and its leader reaped) in between.
        drop(records);
    }
}
