//! A runner's start, on a spawner thread under its sandbox's key lock:
//! its disk checked, the runner spawned (cold, or from a prepared
//! sandbox), tracked by the reaper and the ledger, put in the table, its
//! start announced and its exit watched ([`watch`](super::watch)).

use std::sync::Arc;

use sandboxd_protocol::{EnsureReport, EventKind, ProbeState, SandboxEnv, SandboxError};

use super::launch::child_exits::RunnerProcess;
use super::ledger::LedgerRecord;
use super::record::{Record, Running};
use super::watch::{watch_runner, Watched};
use super::{cgroup, deprovision, launch, lifecycle, now_unix_ms, prepared, users, Inner};
use crate::drivers::differs::token_sha256;
use crate::sandbox_key::SandboxKey;

impl Inner {
    /// Spawns and records a runner. No `.await` from spawn to table insert:
    /// a caller's deadline cannot orphan a runner between the two.
    pub(super) fn start_runner(
        self: &Arc<Self>,
        key: &SandboxKey,
        env: &SandboxEnv,
    ) -> Result<EnsureReport, SandboxError> {
        self.check_disk_before_start(key)?;
        // Before the workspace is touched: it is never on disk unnamed.
        self.catalog.note_active(key, now_unix_ms());
        let child = self.spawn_as_its_uid(key, env).inspect_err(|error| {
            tracing::error!(scope = %key.scope, id = %key.shown_id(), %error, "runner failed to start");
        })?;
        self.track(key, &child);
        let (ends_tx, ends_rx) = deprovision::end_channels();
        // Outside the table's lock: the catalog appends to its journal.
        let known = self.records().get(key).map(|record| record.uid.clone());
        let (uid, new_incarnation) = known.map_or_else(|| self.uid_for(key), |uid| (uid, false));
        let running = self.running(key, &child, ends_rx);
        let generation = self.record(key, env, &uid, running);
        let pid = child.runner_pid();
        self.announce_after_the_answer(key, pid, child.id(), generation);
        if new_incarnation {
            self.events
                .emit(EventKind::Created, key, &uid, generation, None);
        }
        self.events
            .emit(EventKind::Started, key, &uid, generation, None);
        tokio::spawn(watch_runner(Box::new(Watched {
            inner: self.clone(),
            key: key.clone(),
            generation,
            child,
            ends: ends_tx,
        })));
        Ok(EnsureReport {
            state: ProbeState::Running,
            created: true,
            generation,
            pid: Some(pid),
            differs: Vec::new(),
            uid,
        })
    }

    /// What nobody waits for, done once the caller has its answer: the
    /// start's log line, the disk watcher's wake-up, and the sandbox's name
    /// on its cgroup (a `setxattr` per hierarchy, see [`cgroup::label`]).
    /// Done before it, they held the spawner thread (a prepared runner's
    /// exec waits for that thread, see `sandboxd_init::parked_runner`) and
    /// woke a thread on the other CPU while the runner and the answer
    /// needed both.
    fn announce_after_the_answer(&self, key: &SandboxKey, pid: u32, leader: u32, generation: u64) {
        let span = tracing::Span::current();
        let key = key.clone();
        let bell = self.disk_limit.runner_started.clone();
        let tree = self.containment.tree().cloned();
        launch::spawner::after_the_answer(move || {
            span.in_scope(|| tracing::info!(scope = %key.scope, id = %key.shown_id(), pid, leader, generation, "runner started"));
            bell.ring();
            let Some(tree) = tree else {
                return;
            };
            let sandbox = format!("{}/{}", key.scope, key.id);
            if let Err(error) = tree.label(&key.base_name, &sandbox) {
                tracing::debug!(%error, cgroup = %tree.cgroup_name(&key.base_name), "cannot write the sandbox's name on its cgroup");
            }
        });
    }

    /// The runner's leader tracked by the group reaper and in the ledger,
    /// with its start time, so a later daemon can tell it is still ours.
    fn track(&self, key: &SandboxKey, child: &RunnerProcess) {
        let (leader, pid) = (child.id(), child.runner_pid());
        let start_time = child
            .start_time()
            .or_else(|| launch::proc_stat::read(leader as i32).map(|stat| stat.start_time))
            .unwrap_or(0);
        self.reaper.track(leader as i32);
        if let Err(error) = self.ledger.record(
            &key.base_name,
            LedgerRecord {
                pid: leader as i32,
                start_time,
            },
        ) {
            tracing::warn!(%error, pid, leader, "cannot record the runner in the ledger");
        }
    }

    /// The table's entry for the started `child` (its generation is set
    /// when it is recorded).
    fn running(
        &self,
        key: &SandboxKey,
        child: &RunnerProcess,
        ends: deprovision::EndWaits,
    ) -> Running {
        // Found here, outside the table's lock (a stat or two); only where
        // an idle window reads it (at 10,000 runners, 1.4 MB never read).
        let cpu_usage = self
            .containment
            .tree()
            .filter(|_| self.lifecycle.of(key.scope).idle.is_some())
            .and_then(|tree| cgroup::usage::cpu_usage_of(&tree.dirs(&key.base_name)));
        Running {
            pid: child.runner_pid(),
            leader: child.id(),
            isolation: self.isolation.clone(),
            generation: 0,
            started_at_unix_ms: 0,
            ends,
            disk_stop: None,
            signalled_at_stop: false,
            life: lifecycle::RunState::new(self.logs.output_counter(&key.base_name), cpu_usage),
        }
    }

    /// Puts `running` in `key`'s record (made, as `uid`'s, if there is
    /// none) with what `env` asked for, under the next generation, which
    /// it returns.
    fn record(&self, key: &SandboxKey, env: &SandboxEnv, uid: &str, mut running: Running) -> u64 {
        let mut records = self.records();
        let record = records.entry(key.clone()).or_insert_with(|| {
            Box::new(Record {
                task_queue: String::new(),
                caller_class: String::new(),
                token_sha256: [0; 32],
                generation: 0,
                uid: uid.to_string(),
                last_exit: None,
                running: None,
            })
        });
        record.generation += 1;
        record.task_queue.clone_from(&env.task_queue);
        record.caller_class.clone_from(&env.caller_class);
        record.token_sha256 = token_sha256(&env.stigmer_token);
        running.generation = record.generation;
        running.started_at_unix_ms = now_unix_ms();
        record.running = Some(running);
        record.generation
    }

    /// The uid a new record of `key` gets: the one its kept workspace
    /// carries from before a daemon restart, else a new one (and whether
    /// it is new: a new incarnation).
    fn uid_for(&self, key: &SandboxKey) -> (String, bool) {
        match self.catalog.uid_of(&key.base_name) {
            Some(uid) => (uid, false),
            None => {
                let uid = crate::incarnation::new_uid();
                self.catalog.set_uid(&key.base_name, Some(&uid));
                (uid, true)
            }
        }
    }

    /// Starts the runner, as its sandbox's own uid when each has one, from
    /// a prepared sandbox when one is ready; the pool refills once the
    /// start is over.
    fn spawn_as_its_uid(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
    ) -> Result<RunnerProcess, SandboxError> {
        let pool = self.prepared.get();
        // New to the daemon: no uid of its own yet (a respawn has one),
        // and a workspace the launcher's parked runners fit (under gVisor
        // none on disk yet: a parked sandbox has the prepared one bound).
        let new = self
            .uids
            .as_ref()
            .is_none_or(|uids| uids.uid_of(key).is_none())
            && self
                .settings
                .launcher
                .may_take_parked(|| self.settings.workspace(key));
        let taken = match (pool, self.settings.resolve_command()) {
            (Some(pool), Ok(program)) => pool.take(key.scope, &program, new),
            _ => None,
        };
        let spawned = match (pool, taken) {
            (Some(pool), Some(taken)) => self.spawn_prepared(key, env, pool, taken),
            _ => self.spawn_cold(key, env),
        };
        if let Some(pool) = pool {
            pool.refill_after_a_start();
        }
        spawned
    }

    /// The warm start, from `taken`: its cgroups are the sandbox's, and
    /// for a sandbox new to the daemon its uid and workspace too.
    fn spawn_prepared(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
        pool: &prepared::PreparedSandboxes,
        taken: prepared::Prepared,
    ) -> Result<launch::child_exits::RunnerProcess, SandboxError> {
        let workspace = self.settings.workspace(key);
        let prepared::Prepared {
            mut parked,
            host,
            view,
        } = taken;
        let adopted = host.adopt(key, &workspace, &mut parked);
        let parts = launch::spawn::Taken {
            placement: adopted.placement,
            workspace_made: adopted.workspace_made,
            view,
            parked,
            pool,
        };
        let assignment = match (&self.uids, adopted.uid) {
            (Some(_), Some(uid)) => Some(users::uid_pool::Assignment::New(uid)),
            (Some(uids), None) => match uids.assign(key) {
                Ok(assignment) => Some(assignment),
                Err(error) => {
                    self.forget_adopted_cgroup(key);
                    return Err(error);
                }
            },
            (None, _) => None,
        };
        let spawned = self.settings.spawn(
            key,
            env,
            &self.logs,
            self.spawner.exits(),
            assignment.map(users::uid_pool::Assignment::uid),
            Some(parts),
        );
        if let (Some(uids), Some(uid)) = (&self.uids, adopted.uid) {
            // Its host-wide claim still names the prepared sandbox. The
            // rename is a write and a rename in the claims directory (0.5
            // ms on the bench's ext4), which nobody waits for: it is done
            // once the caller has its answer (see `claim_adopted` for a
            // sandbox deprovisioned before then).
            let (uids, key) = (uids.clone(), key.clone());
            launch::spawner::after_the_answer(move || uids.claim_adopted(uid, &key));
        }
        if spawned.is_err() {
            self.forget_adopted_cgroup(key);
        }
        if let (Some(uids), Some(users::uid_pool::Assignment::New(uid))) = (&self.uids, assignment)
        {
            uids.settle_new(key, uid, spawned.is_ok(), &workspace, &self.ledger);
        }
        spawned
    }

    /// Removes the cgroup `key` took over from a prepared sandbox for a
    /// start that failed (gone already when the spawn itself removed it).
    fn forget_adopted_cgroup(&self, key: &SandboxKey) {
        if let Some(tree) = self.containment.tree() {
            if let Err(error) = tree.remove_sandbox(&key.base_name) {
                tracing::warn!(%error, "cannot remove the prepared cgroup of a failed start");
            }
        }
    }

    /// The cold start: everything made on the caller's time.
    fn spawn_cold(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
    ) -> Result<RunnerProcess, SandboxError> {
        let Some(uids) = &self.uids else {
            return self
                .settings
                .spawn(key, env, &self.logs, self.spawner.exits(), None, None);
        };
        let assignment = uids.assign(key)?;
        let spawned = self.settings.spawn(
            key,
            env,
            &self.logs,
            self.spawner.exits(),
            Some(assignment.uid()),
            None,
        );
        if let users::uid_pool::Assignment::New(uid) = assignment {
            let workspace = self.settings.workspace(key);
            uids.settle_new(key, uid, spawned.is_ok(), &workspace, &self.ledger);
        }
        spawned
    }
}
