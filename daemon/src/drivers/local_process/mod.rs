//! The `local-process` tier: one supervised child process per sandbox.
//!
//! The child table is the whole state. When a runner exits, its watcher
//! removes it from the table — only if the table still points at that same
//! runner generation — so the next ensure sees `absent` and respawns it:
//! the repair arm, with no stored state. Runners never outlive the daemon:
//! each sandbox is [one cgroup](cgroup) that a runner is cloned into and
//! that teardown kills whole; a clean stop deprovisions them, a crash is
//! covered by `PR_SET_PDEATHSIG` on each leader plus the
//! [group reaper](reaper), which kills the whole `sandboxes/` cgroup tree,
//! and the next start sweeps the [ledger] and every cgroup left under
//! `sandboxes/`. Without a writable cgroup v2 the same steps work on
//! process groups instead (a documented, weaker fallback).

pub mod cgroup;
mod deferred;
mod deprovision;
mod disk_limit;
mod exec;
mod executable;
mod files;
mod isolation;
mod launch;
mod ledger;
mod lifecycle;
mod limit_env;
mod logs;
mod peer_check;
mod pidfd;
mod prepared;
pub mod reaper;

/// Reserves the descriptor band runners' clones use (see
/// [`launch::fd_band`]); the driver says at start what came of it.
pub fn reserve_fd_band() {
    let _ = launch::fd_band::reserve();
}
mod state_dir;
mod stop;
mod teardowns;
mod trash;
mod usage;
mod users;
mod workspaces;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use cgroup::Containment;
use sandboxd_protocol::{
    DeprovisionReport, EgressStatus, EnsureReport, EventKind, ExitInfo, Expectation, LogChunk,
    LogStart, ProbeState, SandboxEnv, SandboxError, SandboxInfo, Scope, WorkspaceInfo,
};

use crate::config::Config;
use crate::drivers::differs::{differing_fields, token_sha256, RunsWith, TokenDigest};
use crate::drivers::key_lock::KeyLocks;
use crate::egress::{self, Egress};
use crate::events::EventHub;
use crate::provisioner::{Driver, SandboxKey};
use crate::unix_time::now_unix_ms;
use launch::spawn::RunnerSettings;
use launch::spawner::Spawner;
use ledger::{Ledger, LedgerRecord};
use reaper::GroupReaper;
use trash::Trash;
use users::identity::RunnerIdentity;
use users::uid_pool::SandboxUids;

/// What the daemon knows of one sandbox. Never holds the token.
struct Record {
    task_queue: String,
    caller_class: String,
    /// SHA-256 of the runner's token, to tell a caller that asks for another
    /// one that it did not take (see [`crate::drivers::differs`]).
    token_sha256: [u8; 32],
    /// How many runners this sandbox has had.
    generation: u64,
    /// The incarnation's uid (kept in the workspace catalog, so it
    /// outlives a daemon restart with the workspace).
    uid: String,
    /// Boxed: most records never hold one, and every record is a slot of
    /// a table sized for thousands.
    last_exit: Option<Box<ExitInfo>>,
    /// The live runner, if any; cleared by its own watcher when it exits.
    running: Option<Running>,
}

impl Record {
    /// Its state as `probe`, `list` and `status` report it: a paused
    /// runner is stopped, and a record without one is absent.
    fn state(&self) -> ProbeState {
        match &self.running {
            Some(running) if running.life.is_paused() => ProbeState::Stopped,
            Some(_) => ProbeState::Running,
            None => ProbeState::Absent,
        }
    }
}

struct Running {
    /// The runner's host pid, as reported.
    pid: u32,
    /// The sandbox's group leader, signalled at a stop: the runner itself,
    /// or its init under `isolation = "full"`.
    leader: u32,
    /// What kept it apart, as it was started (one list shared by all).
    isolation: Arc<[sandboxd_protocol::IsolationFeature]>,
    generation: u64,
    started_at_unix_ms: u64,
    /// Resolve at its leader's exit and once its whole group is gone and
    /// forgotten (oneshots: their one waiter is the deprovision that takes
    /// the record).
    ends: deprovision::EndWaits,
    /// Set when the disk watcher stops it (a disk limit, `disk-full`): its
    /// exit says so.
    disk_stop: Option<sandboxd_protocol::ExitReason>,
    /// Sent its SIGTERM by the daemon's stop, with every other runner at
    /// once (see [`Inner::signal_every_runner`]): its deprovision only
    /// waits.
    signalled_at_stop: bool,
    /// Paused or not, idle or not, being stopped for a limit or not (see
    /// [`lifecycle`]).
    life: lifecycle::RunState,
}

pub struct LocalProcessDriver {
    inner: Arc<Inner>,
}

struct Inner {
    settings: RunnerSettings,
    stop_grace: Duration,
    /// Boxed: the table is sized for thousands, with a slot per sandbox
    /// and room to grow, and a slot is a key and a pointer this way (64
    /// bytes, not 400).
    records: Mutex<HashMap<SandboxKey, Box<Record>>>,
    key_locks: KeyLocks<SandboxKey>,
    ledger: Ledger,
    /// Where deprovisioned workspaces go to be deleted in the background.
    trash: Trash,
    /// Deprovisions that answered and are still tearing down.
    teardowns: teardowns::Teardowns,
    reaper: GroupReaper,
    /// A cgroup per sandbox, or the process-group fallback.
    containment: Containment,
    /// The threads runners are started from (see [`spawner`]).
    spawner: Spawner,
    /// The runners' output files: their size cap and reading them back.
    logs: Arc<logs::RunnerLogs>,
    /// Which sandbox each workspace on disk belongs to (see [`workspaces`]).
    catalog: workspaces::Catalog,
    /// `workspace_ttl`: unused workspaces are removed after it.
    workspace_ttl: Option<Duration>,
    /// `[lifecycle]`: which scopes' runners the idle watcher samples.
    lifecycle: crate::config::LifecycleConfig,
    /// Each sandbox's uid, when each has its own (a root daemon without `run_as`).
    uids: Option<Arc<SandboxUids>>,
    /// The sandboxes prepared ahead of demand (see [`prepared`]), once
    /// their pool has started.
    prepared: std::sync::OnceLock<Arc<prepared::PreparedSandboxes>>,
    /// Why that pool did not start, for `status`.
    pool_not_started: std::sync::OnceLock<String>,
    /// `<sandboxes>/.prepared`, where prepared workspaces wait.
    staging: std::path::PathBuf,
    /// `[limits] disk` and how it is held (see [`disk_limit`]).
    disk_limit: disk_limit::DiskLimit,
    /// The egress posture's rules; an ensure is refused while not in force.
    egress: Arc<Egress>,
    stopping: AtomicBool,
    /// `isolation` as configured, and what every sandbox started now gets.
    isolation_mode: crate::config::IsolationMode,
    isolation: Arc<[sandboxd_protocol::IsolationFeature]>,
    /// Why sandboxes get no namespaces of their own, when `full` asked.
    view_problem: Option<String>,
    /// Set while a stop runs (see [`cgroup::setup::StopRemover`]).
    stop_remover: Mutex<Option<cgroup::setup::StopRemover>>,
    /// Where runner starts, exits and teardowns are announced.
    events: Arc<EventHub>,
    /// `get_tar`'s download sessions (see [`files::Downloads`]).
    tar_downloads: files::Downloads,
    /// Held for the daemon's life: one daemon per state directory.
    _state_lock: nix::fcntl::Flock<std::fs::File>,
}

impl LocalProcessDriver {
    /// Prepares the state directory, sweeps what an earlier instance left,
    /// and starts the group reaper. Runs before the daemon serves.
    pub async fn start(
        config: &Config,
        events: Arc<EventHub>,
    ) -> anyhow::Result<LocalProcessDriver> {
        let identity = RunnerIdentity::resolve(
            config.run_as.as_deref(),
            config.runner_uid_range.as_deref(),
            config.allow_root_runners,
        )?;
        let dirs = state_dir::StateDirs::prepare(&config.state_dir)?;
        let state_lock = state_dir::lock(&config.state_dir)?;
        if let Some((uid, gid)) = identity
            .privileges(identity.uid_range().map(|range| range.first))
            .user
        {
            state_dir::check_reachable(&dirs.sandboxes, uid, gid, &identity.display)?;
        }
        // What runners go back to: the limits before the daemon raised its own.
        isolation::clean_start::remember_startup_limits();
        state_dir::raise_open_file_limit();
        // Before the reaper starts: the daemon may move into a leaf cgroup.
        let containment = cgroup::setup::set_up(config)?;
        let (ledger_dir, sandboxes) = (dirs.ledger.clone(), dirs.sandboxes.clone());
        let tree = containment.tree().cloned();
        let uid_range = identity.uid_range();
        let (killed, vanished, strays, cgroups, ledger, uids) =
            tokio::task::spawn_blocking(move || {
                // Before the sweep, which empties the ledger.
                let recorded_uids = ledger::read_uids(&ledger_dir);
                let cgroups = tree.map_or(0, |tree| cgroup::setup::sweep(&tree));
                let mut vanished = Vec::new();
                let killed = ledger::sweep_telling(&ledger_dir, &mut vanished);
                let strays = workspaces::scan::kill_processes_in(&sandboxes);
                let ledger = Ledger::open(&ledger_dir).with_context(|| {
                    format!("cannot open the spawn ledger in {}", ledger_dir.display())
                });
                let uids = uid_range
                    .map(|range| users::uid_pool::restore(range, recorded_uids, &sandboxes));
                (killed, vanished, strays, cgroups, ledger, uids)
            })
            .await?;
        let ledger = ledger?;
        let uids = match uids {
            Some((pool, restored)) => {
                ledger
                    .restore_uids(restored)
                    .context("cannot write the sandboxes' uids into the spawn ledger")?;
                let claims = users::uid_claims::UidClaims::open(
                    &config.uid_claims_dir,
                    config.instance.display_name(),
                    &config.state_dir,
                )?;
                Some(Arc::new(
                    tokio::task::spawn_blocking(move || SandboxUids::new(pool, claims)).await?,
                ))
            }
            None => None,
        };
        let (limits, sandboxes, uid_per_sandbox) = (
            config.limits.clone(),
            dirs.sandboxes.clone(),
            uids.is_some(),
        );
        let disk_limit = tokio::task::spawn_blocking(move || {
            disk_limit::DiskLimit::choose(&limits, &sandboxes, uid_per_sandbox)
        })
        .await?;
        let (catalog_dir, sandboxes) = (dirs.ledger.clone(), dirs.sandboxes.clone());
        let catalog = tokio::task::spawn_blocking(move || {
            let catalog = workspaces::Catalog::open(&catalog_dir).with_context(|| {
                format!(
                    "cannot open the workspace catalog in {}",
                    catalog_dir.display()
                )
            })?;
            workspaces::reconcile(&catalog, &sandboxes);
            anyhow::Ok(catalog)
        })
        .await??;
        announce_lost(&catalog, &vanished, &events);
        if killed > 0 || strays > 0 || cgroups > 0 {
            tracing::warn!(
                groups = killed,
                strays,
                cgroups,
                "killed runners left by an earlier sandboxd"
            );
        }
        let deferred = Arc::new(deferred::Deferred::start());
        let trash = Trash::new(dirs.trash.clone(), deferred.clone());
        trash.empty_leftovers();
        // What a daemon that did not stop cleanly left prepared: its
        // cgroups went with the sweep above, its uids' claims with the
        // pool's restore (no ledger line names them).
        let staging = dirs.prepared.clone();
        let leftovers =
            tokio::task::spawn_blocking(move || prepared::host_parts::remove_leftovers(&staging))
                .await?;
        if leftovers > 0 {
            tracing::info!(
                leftovers,
                "removed the prepared workspaces an earlier sandboxd left"
            );
        }
        let reaper = GroupReaper::start(
            &state_lock,
            &dirs.sandboxes,
            containment.tree().map(|tree| tree.sandboxes()),
        )?;
        let runner_logs = Arc::new(logs::RunnerLogs::new(
            dirs.logs.clone(),
            dirs.spares.clone(),
            config.runner_log_max_size,
            deferred,
        ));
        let init_binary = Arc::new(
            tokio::task::spawn_blocking(isolation::init_binary::InitBinary::find)
                .await?
                .context("cannot open this daemon's own binary (/proc/self/exe)")?,
        );
        let (view, view_problem) = isolation::set_up_view(config, &dirs.exits, &init_binary).await;
        let per_sandbox_uids = identity.uid_range().is_some();
        let settings = RunnerSettings {
            command: config.runner_command.clone(),
            args: config.runner_args.clone(),
            identity,
            backend_endpoint: config.backend_endpoint.clone(),
            temporal_address: config.temporal_address.clone(),
            inherited_env: launch::spawn::inherited_env(),
            runner_path: config.runner_path.clone().into(),
            extra_env: config.runner_env.clone(),
            limit_env: limit_env::limit_env(
                containment.tree().map(|tree| tree.as_ref()),
                disk_limit.by_quota().or(disk_limit.watched()),
            ),
            filters: Arc::new(
                isolation::kernel_filters::KernelFilters::for_this_host(&config.runner_path)
                    .with_session_keyring_per_uid(per_sandbox_uids),
            ),
            oom_score_adj: config.runner_oom_score_adj,
            sandboxes_dir: dirs.sandboxes,
            logs_dir: dirs.logs,
            cgroups: containment.tree().cloned(),
            disk_quota: disk_limit.by_quota(),
            view,
            init_binary,
        };
        match launch::fd_band::state() {
            Ok(slots) => tracing::debug!(
                slots,
                "runners' clones use a band of low descriptors, not the daemon's whole table"
            ),
            Err(why) => {
                tracing::info!(%why, "runners' clones copy the daemon's descriptor table (each new sandbox costs more the more are running)")
            }
        }
        match settings.resolve_command() {
            Ok(program) => {
                tracing::info!(runner = %program.display(), user = %settings.identity.display, containment = %containment.describe(), "local-process driver ready")
            }
            Err(problem) => {
                tracing::error!("{problem}: every ensure will fail until it is installed")
            }
        }
        // The egress rules match the sandboxes' parent cgroup, which every
        // runner is cloned into a child of; they are loaded here, before the
        // daemon serves, on a cgroup that exists by now (nft resolves it to
        // an id at load). On the process-group fallback no kernel rule can
        // tell a runner's traffic apart, so any posture but `none` fails
        // closed.
        let sandboxes_cgroup = containment.tree().map(|tree| tree.sandboxes().v2.clone());
        let setting = config.egress;
        let egress = Arc::new(
            tokio::task::spawn_blocking(move || {
                Egress::establish(setting, sandboxes_cgroup.as_deref())
            })
            .await?,
        );
        tokio::spawn(egress::keep_verified(Arc::downgrade(&egress)));
        // What every sandbox started from now on gets; `describe` keeps the
        // list each was started with.
        let isolation: Arc<[sandboxd_protocol::IsolationFeature]> =
            isolation::features(&isolation::Facts {
                identity: &settings.identity,
                containment: &containment,
                egress: &egress,
                uid_claims: uids.as_ref().map(|uids| uids.claims_dir()),
                disk_limit: &disk_limit,
                filters: &settings.filters,
                mode: config.isolation,
                view: settings.view.as_deref(),
                view_problem: view_problem.as_deref(),
                init_binary: &settings.init_binary,
            })
            .into();
        let inner = Arc::new(Inner {
            settings,
            stop_grace: config.stop_grace,
            records: Mutex::new(HashMap::new()),
            key_locks: KeyLocks::new(),
            ledger,
            trash,
            teardowns: teardowns::Teardowns::default(),
            reaper,
            containment,
            spawner: Spawner::start()?,
            logs: runner_logs,
            catalog,
            workspace_ttl: config.workspace_ttl,
            lifecycle: config.lifecycle,
            uids,
            prepared: std::sync::OnceLock::new(),
            pool_not_started: std::sync::OnceLock::new(),
            staging: dirs.prepared.clone(),
            disk_limit,
            egress,
            stopping: AtomicBool::new(false),
            isolation_mode: config.isolation,
            isolation,
            view_problem,
            stop_remover: Mutex::new(None),
            events,
            tar_downloads: files::Downloads::default(),
            _state_lock: state_lock,
        });
        inner.start_prepared(&config.pool);
        if let Some(ttl) = config.workspace_ttl {
            tokio::spawn(workspaces::keep_expiring(Arc::downgrade(&inner), ttl));
        }
        if config.lifecycle.any() {
            if inner.containment.tree().is_none() {
                tracing::warn!("[lifecycle] limits are set, but without a cgroup per sandbox a runner's CPU use cannot be read: no runner is ever idle (max_lifetime still applies)");
            }
            tokio::spawn(lifecycle::watcher::keep_watching(
                Arc::downgrade(&inner),
                config.lifecycle,
            ));
        }
        if inner.disk_limit.needs_watcher() {
            tokio::spawn(disk_limit::watcher::keep_watching(Arc::downgrade(&inner)));
        }
        Ok(LocalProcessDriver { inner })
    }
}

impl Inner {
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
            stop::kill_group(leader as i32, nix::sys::signal::Signal::SIGTERM);
        }
        // Held until every signal is out, as before: no record is taken
        // (and its leader reaped) in between.
        drop(records);
    }

    /// Starts the pool of sandboxes prepared ahead (see [`prepared`]), or
    /// keeps why it cannot, for the log and `status`.
    fn start_prepared(&self, sizes: &crate::config::PoolConfig) {
        match self.make_prepared(sizes) {
            Ok(pool) => {
                let _ = self.prepared.set(pool);
            }
            Err(why) => {
                tracing::warn!("no sandboxes are prepared ahead, every sandbox starts cold: {why}");
                let _ = self.pool_not_started.set(why);
            }
        }
    }

    /// The pool, where sandboxes have cgroups and the runner command is
    /// found: host parts under either isolation, views too under
    /// `isolation = "full"`.
    fn make_prepared(
        &self,
        sizes: &crate::config::PoolConfig,
    ) -> Result<Arc<prepared::PreparedSandboxes>, String> {
        let tree = self
            .containment
            .tree()
            .ok_or("no cgroups for the sandboxes")?;
        let program = self
            .settings
            .resolve_command()
            .map_err(|error| format!("the runner command: {error}"))?;
        let drop_bounding_set = self
            .settings
            .identity
            .privileges(None)
            .bounding_set_up_to
            .is_some();
        let view = match &self.settings.view {
            Some(view) => Some(
                view.view_maker(program, drop_bounding_set)
                    .map_err(|error| format!("cannot prepare views: {error}"))?,
            ),
            None => None,
        };
        let total = (sizes.session + sizes.workflow + sizes.connect) as u64;
        let host = prepared::host_parts::HostMaker {
            tree: tree.clone(),
            uids: self.uids.clone(),
            identity: self.settings.identity.clone(),
            // A project quota is set on a workspace at its start.
            staging: self
                .settings
                .disk_quota
                .is_none()
                .then(|| self.staging.clone()),
            // As many again as the pools hold are left to cold starts.
            uids_kept: total * 2,
            next: Default::default(),
        };
        let runner = sizes.park_runners.then(|| {
            Arc::new(prepared::parked_runner::RunnerParker {
                filters: self.settings.filters.clone(),
                oom_score_adj: self.settings.oom_score_adj,
                init_binary: self.settings.init_binary.clone(),
            })
        });
        let maker = prepared::SandboxMaker {
            host: Arc::new(host),
            view,
            runner,
            parking_failed: Default::default(),
            parking_problem: Default::default(),
        };
        Ok(prepared::PreparedSandboxes::start(
            maker,
            self.spawner.background(),
            sizes,
        ))
    }

    fn stop_remover(&self) -> MutexGuard<'_, Option<cgroup::setup::StopRemover>> {
        self.stop_remover
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn records(&self) -> MutexGuard<'_, HashMap<SandboxKey, Box<Record>>> {
        self.records
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

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
    fn incarnation(&self, key: &SandboxKey) -> Option<(String, u64)> {
        let records = self.records();
        records
            .get(key)
            .map(|record| (record.uid.clone(), record.generation))
            .or_else(|| self.catalog.uid_of(&key.base_name).map(|uid| (uid, 0)))
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

    /// Spawns and records a runner. No `.await` from spawn to table insert:
    /// a caller's deadline cannot orphan a runner between the two.
    fn start_runner(
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
        let (ends_tx, ends_rx) = deprovision::end_channels();
        // Found here, outside the table's lock (a stat or two); only where
        // an idle window reads it (at 10,000 runners, 1.4 MB never read).
        let cpu_usage = self
            .containment
            .tree()
            .filter(|_| self.lifecycle.of(key.scope).idle.is_some())
            .and_then(|tree| cgroup::usage::cpu_usage_of(&tree.dirs(&key.base_name)));
        // Outside the table's lock: the catalog appends to its journal.
        let known = self.records().get(key).map(|record| record.uid.clone());
        let (uid, new_incarnation) = known.map_or_else(|| self.uid_for(key), |uid| (uid, false));
        let generation = {
            let mut records = self.records();
            let record = records.entry(key.clone()).or_insert_with(|| {
                Box::new(Record {
                    task_queue: String::new(),
                    caller_class: String::new(),
                    token_sha256: [0; 32],
                    generation: 0,
                    uid: uid.clone(),
                    last_exit: None,
                    running: None,
                })
            });
            record.generation += 1;
            record.task_queue.clone_from(&env.task_queue);
            record.caller_class.clone_from(&env.caller_class);
            record.token_sha256 = token_sha256(&env.stigmer_token);
            record.running = Some(Running {
                pid,
                leader,
                isolation: self.isolation.clone(),
                generation: record.generation,
                started_at_unix_ms: now_unix_ms(),
                ends: ends_rx,
                disk_stop: None,
                signalled_at_stop: false,
                life: lifecycle::RunState::new(self.logs.output_counter(&key.base_name), cpu_usage),
            });
            record.generation
        };
        tracing::info!(scope = %key.scope, id = %key.shown_id(), pid, leader, generation, "runner started");
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

    /// Starts the runner, as its sandbox's own uid when each has one, from
    /// a prepared sandbox when one is ready; the pool refills once the
    /// start is over.
    fn spawn_as_its_uid(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
    ) -> Result<launch::child_exits::RunnerProcess, SandboxError> {
        let pool = self.prepared.get();
        // New to the daemon: no uid of its own yet (a respawn has one).
        let new = self
            .uids
            .as_ref()
            .is_none_or(|uids| uids.uid_of(key).is_none());
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

    /// The cold start: everything made on the caller's time.
    fn spawn_cold(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
    ) -> Result<launch::child_exits::RunnerProcess, SandboxError> {
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
            mut runner,
            host,
            view,
        } = taken;
        let adopted = host.adopt(key, &workspace, &mut runner);
        let parts = launch::spawn::Taken {
            placement: adopted.placement,
            workspace_made: adopted.workspace_made,
            view,
            runner,
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

    /// Removes the prepared cgroup `key` adopted for a start that failed
    /// (gone already when the spawn itself removed it).
    fn forget_adopted_cgroup(&self, key: &SandboxKey) {
        if let Some(tree) = self.containment.tree() {
            if let Err(error) = tree.remove_sandbox(&key.base_name) {
                tracing::warn!(%error, "cannot remove the prepared cgroup of a failed start");
            }
        }
    }

    /// What keeps every sandbox started now apart (the same for each).
    fn isolation_features(&self) -> Vec<sandboxd_protocol::IsolationFeature> {
        isolation::features(&isolation::Facts {
            identity: &self.settings.identity,
            containment: &self.containment,
            egress: &self.egress,
            uid_claims: self.uids.as_ref().map(|uids| uids.claims_dir()),
            disk_limit: &self.disk_limit,
            filters: &self.settings.filters,
            mode: self.isolation_mode,
            view: self.settings.view.as_deref(),
            view_problem: self.view_problem.as_deref(),
            init_binary: &self.settings.init_binary,
        })
    }

    /// Each path the view adds (see `ViewSettings::entries`), the
    /// workspace `workspace` on the host; none without a view.
    fn view_entries(&self, workspace: &std::path::Path) -> Vec<sandboxd_protocol::ViewEntry> {
        let Some(view) = &self.settings.view else {
            return Vec::new();
        };
        let program = self.settings.resolve_command().ok();
        view.settings.entries(program.as_deref(), workspace)
    }

    /// What kept `record`'s runner apart, as it was started; for a stopped
    /// one, what its next runner will get.
    fn isolation_of(&self, record: &Record) -> Vec<sandboxd_protocol::IsolationFeature> {
        match &record.running {
            Some(running) => running.isolation.to_vec(),
            None => self.isolation.to_vec(),
        }
    }

    /// `key`'s facts as `list` gives them: without its isolation features,
    /// as the protocol says (the same for every sandbox of a daemon, and
    /// the largest part of a sandbox's facts: a list of 10,000 that cloned
    /// them held about 30 MB while it was built and sent). `describe` adds
    /// them ([`Inner::isolation_of`]).
    fn info(&self, key: &SandboxKey, record: Option<&Record>) -> SandboxInfo {
        let Some(record) = record else {
            return SandboxInfo::absent(key.scope, &key.id, 0, None);
        };
        let running = record.running.as_ref();
        SandboxInfo {
            name: key.base_name.clone(),
            scope: key.scope,
            id: key.id.clone(),
            state: record.state(),
            pid: running.map(|running| running.pid),
            container_id: None,
            image: None,
            generation: record.generation,
            started_at_unix_ms: running.map(|running| running.started_at_unix_ms),
            restarts: record.generation.saturating_sub(1),
            last_exit: record.last_exit.as_deref().copied(),
            task_queue: record.task_queue.clone(),
            caller_class: record.caller_class.clone(),
            egress: None,
            cluster: None,
            isolation: Vec::new(),
            uid: record.uid.clone(),
            usage: None,
            paused_since_unix_ms: running.and_then(|running| running.life.paused_since_unix_ms()),
            view: Vec::new(),
        }
    }
}

/// Announces the runners an earlier daemon started that were gone when
/// this one looked (see [`ledger::sweep_telling`]): an `exited` event with
/// the reason `lost` for each whose sandbox the workspace catalog names.
/// The generation is 0: this tier keeps no generation across a restart.
fn announce_lost(catalog: &workspaces::Catalog, vanished: &[String], events: &EventHub) {
    for base in vanished {
        let Some(entry) = catalog.with_entry(base, |entry| entry.cloned()) else {
            continue;
        };
        let key = SandboxKey::new(entry.scope, entry.id.clone());
        tracing::warn!(scope = %key.scope, id = %key.id, "the runner ended while no sandboxd watched it: lost");
        events.emit(
            EventKind::Exited,
            &key,
            entry.uid.as_deref().unwrap_or_default(),
            0,
            Some(deprovision::stopped_exit(
                sandboxd_protocol::ExitReason::Lost,
            )),
        );
    }
}

/// What a runner's watcher holds while it waits. Boxed: thousands of
/// watchers wait at once, and each task's future is then a pointer and the
/// wait: a task of 640 bytes became one of 256 and this box of 160.
struct Watched {
    inner: Arc<Inner>,
    key: SandboxKey,
    generation: u64,
    child: launch::child_exits::RunnerProcess,
    ends: deprovision::EndSignals,
}

/// Owns one runner until it exits, then removes it from the table — only if
/// the table still holds this generation (a late exit of a deprovisioned
/// runner must never remove its replacement).
async fn watch_runner(mut watched: Box<Watched>) {
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
    let mut exit = ExitInfo::from_facts(
        status.and_then(|status| status.code()),
        status.and_then(|status| std::os::unix::process::ExitStatusExt::signal(&status)),
        now_unix_ms(),
        false,
    );
    // The leader is gone, so the sandbox is: nothing left in its cgroup (or
    // group) may linger. (Its pid cannot be reused while group members hold
    // the id.)
    match inner.containment.tree() {
        // Stopping: removed by the stop's one remover thread instead (see
        // `cgroup::setup::StopRemover`), or by the stop sweep after it.
        Some(_) if inner.stopping.load(Ordering::Acquire) => {
            if let Some(remover) = inner.stop_remover().as_ref() {
                remover.remove(&key.base_name);
            }
        }
        Some(tree) => cgroup::setup::end_of_run(tree, &key, &mut exit).await,
        None => {
            stop::kill_group(pid as i32, nix::sys::signal::Signal::SIGKILL);
            inner.reaper.untrack(pid as i32);
        }
    }
    // Its last output reaches the file before a respawn can start a pump
    // on the same file, and before a deprovision removes it.
    inner.logs.finish(&key.base_name).await;
    // What the daemon's own watchers decided about this generation.
    let (disk_stop, limit_stop) = inner
        .records()
        .get(&key)
        .and_then(|record| record.running.as_ref())
        .filter(|running| running.generation == generation)
        .map_or((None, None), |running| {
            (running.disk_stop, running.life.stopping())
        });
    if let Some(sandboxd_protocol::ExitReason::DiskLimit { limit_bytes }) = disk_stop {
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
            sandboxd_protocol::ExitReason::OutOfMemory { .. }
                | sandboxd_protocol::ExitReason::DiskLimit { .. }
                | sandboxd_protocol::ExitReason::DiskInodeLimit { .. }
                | sandboxd_protocol::ExitReason::DiskFull
        ) {
            exit.reason = reason;
        }
    }
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
    let exited_uid = {
        let mut records = inner.records();
        let record = records.get_mut(&key);
        match record {
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
    };
    if let Some(uid) = exited_uid {
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

impl LocalProcessDriver {
    async fn ensure_expecting(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
        expect: Option<Expectation>,
    ) -> Result<EnsureReport, SandboxError> {
        if let Some(report) = self.inner.fast_path(key, env, expect.as_ref()) {
            return report;
        }
        if self.inner.stopping.load(Ordering::Acquire) {
            return Err(SandboxError::Unavailable(
                "sandboxd is shutting down".into(),
            ));
        }
        // Paused (the fast path passes a paused runner by): resumed here,
        // under the key lock, without the slow path's task — a thaw is one
        // write, and a caller that gives up before it leaves nothing half
        // done.
        if self.inner.is_paused(key) {
            let _key_guard = self.inner.key_locks.lock(key).await;
            if self.inner.is_paused(key) {
                self.inner.check_expectation(key, expect.as_ref())?;
                self.inner.resume_locked(key)?;
            }
            if let Some(report) = self.inner.fast_path(key, env, expect.as_ref()) {
                return report;
            }
        }
        // Fail closed: no runner starts unless the egress rules are in force.
        self.inner.egress.check()?;
        // The slow path runs in a task of its own, and the spawn itself on a
        // spawner thread, so this connection's other calls and the runtime's
        // workers never wait on a spawn. A caller that gives up while waiting
        // for the key gives up its place in line and starts nothing; once a
        // spawn has begun it is finished and recorded under the key lock,
        // whoever still waits. The spawner thread answers the caller itself
        // (one thread hand-off fewer than going back through the task, which
        // only holds the key until the runner is recorded).
        let (inner, key, env) = (self.inner.clone(), key.clone(), env.clone());
        let (mut reply, answer) = tokio::sync::oneshot::channel();
        let span = tracing::Span::current();
        tokio::spawn(async move {
            let _key_guard = tokio::select! {
                guard = inner.key_locks.lock(&key) => guard,
                () = reply.closed() => return,
            };
            // Paused (the fast path passes a paused runner by): resumed
            // under the key lock, not started twice.
            if inner.is_paused(&key) {
                if let Err(error) = inner.check_expectation(&key, expect.as_ref()) {
                    let _ = reply.send(Err(error));
                    return;
                }
                if let Err(error) = inner.resume_locked(&key) {
                    let _ = reply.send(Err(error));
                    return;
                }
            }
            if let Some(report) = inner.fast_path(&key, &env, expect.as_ref()) {
                let _ = reply.send(report);
                return;
            }
            if let Err(conflict) = inner.check_expectation(&key, expect.as_ref()) {
                let _ = reply.send(Err(conflict));
                return;
            }
            if inner.stopping.load(Ordering::Acquire) {
                let shutting_down = SandboxError::Unavailable("sandboxd is shutting down".into());
                let _ = reply.send(Err(shutting_down));
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

    async fn deprovision_expecting(
        &self,
        key: &SandboxKey,
        keep_workspace: bool,
        expect: Option<Expectation>,
    ) -> Result<DeprovisionReport, SandboxError> {
        // Once SIGTERM is sent, the escalation to SIGKILL and the teardown
        // must happen even if the caller stops waiting.
        deprovision::deprovision(self.inner.clone(), key.clone(), keep_workspace, expect).await
    }
}

#[async_trait]
impl Driver for LocalProcessDriver {
    fn name(&self) -> &'static str {
        "local-process"
    }

    async fn health_verdict(&self) -> sandboxd_protocol::Health {
        let mut health = sandboxd_protocol::Health::healthy();
        match self.inner.settings.resolve_command() {
            Err(problem) => health.add(sandboxd_protocol::HealthVerdict::Unhealthy, problem),
            Ok(program) if !executable::is_executable_file(&program) => health.add(
                sandboxd_protocol::HealthVerdict::Unhealthy,
                format!(
                    "runner command {} is not an executable file: every ensure will fail",
                    program.display()
                ),
            ),
            Ok(_) => {}
        }
        if !self.inner.reaper.is_alive() {
            health.add(
                sandboxd_protocol::HealthVerdict::Unhealthy,
                "the group reaper is dead: runners may outlive a crashed daemon",
            );
        }
        let reserve = self.inner.disk_limit.reserve.clone();
        let short = tokio::task::spawn_blocking(move || reserve?.shortfall()).await;
        if let Ok(Some(short)) = short {
            health.add(
                sandboxd_protocol::HealthVerdict::Degraded,
                format!("{short}: new sandboxes are refused and writing ones stopped"),
            );
        }
        health
    }

    fn origin_of_peer(&self, pid: i32) -> crate::peer_origin::PeerOrigin {
        self.inner.origin_of_peer(pid)
    }

    fn health(&self) -> String {
        let runner = match self.inner.settings.resolve_command() {
            Ok(program) if launch::spawn::is_example_runner(&program) => format!(
                "runner {} (the example runner, for trying sandboxd: not for production)",
                program.display()
            ),
            Ok(program) => format!("runner {}", program.display()),
            Err(problem) => problem,
        };
        let reaper = if self.inner.reaper.is_alive() {
            "group reaper running"
        } else {
            "GROUP REAPER DEAD"
        };
        format!(
            "{runner}; runs as {}; {reaper}",
            self.inner.settings.identity.display
        )
    }

    fn containment(&self) -> String {
        self.inner.containment.describe()
    }

    fn isolation(&self) -> (String, Vec<sandboxd_protocol::IsolationFeature>) {
        let mode = self.inner.isolation_mode.as_str().to_string();
        let mut features = self.inner.isolation_features();
        // Live, so only in `status`: what the pool holds now, or why
        // there is none.
        let views = self.inner.settings.view.is_some();
        let pool = match (self.inner.prepared.get(), self.inner.pool_not_started.get()) {
            (Some(pool), _) => Some(pool.feature()),
            (None, Some(why)) => Some(prepared::not_started(views, why)),
            (None, None) => None,
        };
        if let Some(pool) = pool {
            features.push(pool);
            features.sort_by(|a, b| a.name.cmp(&b.name));
        }
        (mode, features)
    }

    fn view(&self) -> Vec<sandboxd_protocol::ViewEntry> {
        let sandboxes = &self.inner.settings.sandboxes_dir;
        self.inner.view_entries(&sandboxes.join("<sandbox name>"))
    }

    fn pools(&self) -> Vec<sandboxd_protocol::PoolStatus> {
        self.inner
            .prepared
            .get()
            .map_or_else(Vec::new, |pool| pool.pools())
    }

    async fn ensure(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
    ) -> Result<EnsureReport, SandboxError> {
        self.ensure_expecting(key, env, None).await
    }

    /// Checked against the table itself: on the fast path under its lock,
    /// on the slow path under the key lock, before anything is spawned.
    async fn ensure_fenced(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
        expect: &Expectation,
    ) -> Result<EnsureReport, SandboxError> {
        self.ensure_expecting(key, env, Some(expect.clone())).await
    }

    async fn deprovision(
        &self,
        key: &SandboxKey,
        keep_workspace: bool,
    ) -> Result<DeprovisionReport, SandboxError> {
        self.deprovision_expecting(key, keep_workspace, None).await
    }

    async fn deprovision_fenced(
        &self,
        key: &SandboxKey,
        keep_workspace: bool,
        expect: &Expectation,
    ) -> Result<DeprovisionReport, SandboxError> {
        self.deprovision_expecting(key, keep_workspace, Some(expect.clone()))
            .await
    }

    async fn probe(&self, key: &SandboxKey) -> Result<ProbeState, SandboxError> {
        // A process has no stopped state: an exited runner is absent; a
        // paused one is stopped (the seed's three states).
        Ok(self
            .inner
            .records()
            .get(key)
            .map_or(ProbeState::Absent, |record| record.state()))
    }

    async fn describe(&self, key: &SandboxKey) -> Result<SandboxInfo, SandboxError> {
        let records = self.inner.records();
        let record = records.get(key).map(|record| &**record);
        let mut info = self.inner.info(key, record);
        if let Some(record) = record {
            info.isolation = self.inner.isolation_of(record);
            info.view = self.inner.view_entries(&self.inner.settings.workspace(key));
        }
        Ok(info)
    }

    async fn usage(
        &self,
        key: &SandboxKey,
        with_disk: bool,
    ) -> Result<Option<sandboxd_protocol::Usage>, SandboxError> {
        let (inner, key) = (self.inner.clone(), key.clone());
        tokio::task::spawn_blocking(move || inner.usage(&key, with_disk))
            .await
            .map_err(|error| SandboxError::Internal(format!("usage read task failed: {error}")))
    }

    async fn list(&self, scope: Option<Scope>) -> Result<Vec<SandboxInfo>, SandboxError> {
        let records = self.inner.records();
        Ok(records
            .iter()
            .filter(|(key, _)| scope.is_none_or(|scope| key.scope == scope))
            .map(|(key, record)| self.inner.info(key, Some(record)))
            .collect())
    }

    /// Counted from the table, building nothing.
    async fn census(&self) -> Result<crate::census::Census, SandboxError> {
        let mut census = crate::census::Census::default();
        for (key, record) in self.inner.records().iter() {
            census.add(key.scope, record.state());
        }
        Ok(census)
    }

    async fn logs(
        &self,
        key: &SandboxKey,
        start: LogStart,
        max_bytes: u32,
    ) -> Result<LogChunk, SandboxError> {
        let (logs, base) = (self.inner.logs.clone(), key.base_name.clone());
        let read = tokio::task::spawn_blocking(move || logs.read(&base, start, max_bytes))
            .await
            .map_err(|error| SandboxError::Internal(format!("log read task failed: {error}")))?;
        read.map_err(|error| match error {
            logs::LogError::NoOutput(path) => SandboxError::FailedPrecondition(format!(
                "{} '{}' has no output to show ({}): its runner has not run since its workspace was last removed",
                key.scope,
                key.id,
                path.display()
            )),
            other => SandboxError::Internal(format!(
                "cannot read the output of {} '{}': {other}",
                key.scope, key.id
            )),
        })
    }

    async fn workspaces(&self, scope: Option<Scope>) -> Result<Vec<WorkspaceInfo>, SandboxError> {
        self.inner.workspaces(scope).await
    }

    async fn exec(
        &self,
        key: &SandboxKey,
        spec: &crate::started_command::CommandSpec,
    ) -> Result<crate::started_command::StartedCommand, SandboxError> {
        self.inner.exec(key, spec).await
    }

    async fn put_file(
        &self,
        key: &SandboxKey,
        chunk: &sandboxd_protocol::PutChunk,
    ) -> Result<sandboxd_protocol::PutReport, SandboxError> {
        self.inner.put_file(key, chunk).await
    }

    async fn get_file(
        &self,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<sandboxd_protocol::FileChunk, SandboxError> {
        self.inner.get_file(key, path, offset, max).await
    }

    async fn stat_file(
        &self,
        key: &SandboxKey,
        path: &str,
    ) -> Result<sandboxd_protocol::FileStat, SandboxError> {
        self.inner.stat_file(key, path).await
    }

    async fn list_files(
        &self,
        key: &SandboxKey,
        path: &str,
    ) -> Result<sandboxd_protocol::FileList, SandboxError> {
        self.inner.list_files(key, path).await
    }

    async fn remove_file(
        &self,
        key: &SandboxKey,
        path: &str,
        recursive: bool,
    ) -> Result<(), SandboxError> {
        self.inner.remove_file(key, path, recursive).await
    }

    async fn put_tar(
        &self,
        key: &SandboxKey,
        chunk: &sandboxd_protocol::PutChunk,
    ) -> Result<sandboxd_protocol::PutReport, SandboxError> {
        self.inner.put_tar(key, chunk).await
    }

    async fn get_tar(
        &self,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<sandboxd_protocol::FileChunk, SandboxError> {
        self.inner.get_tar(key, path, offset, max).await
    }

    /// None: a command is the daemon's child and ends with it, as the
    /// runners do (its proof says `daemon-stopped`).
    async fn recovered_commands(&self) -> Vec<crate::started_command::RecoveredCommand> {
        Vec::new()
    }

    async fn pause(
        &self,
        key: &SandboxKey,
    ) -> Result<sandboxd_protocol::PauseReport, SandboxError> {
        self.inner.pause(key).await
    }

    async fn resume(
        &self,
        key: &SandboxKey,
    ) -> Result<sandboxd_protocol::PauseReport, SandboxError> {
        self.inner.resume(key).await
    }

    async fn shutdown(&self) {
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
        let stops = keys.iter().map(|key| self.deprovision(key, true));
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
        // The remover has taken the cgroups of the runners gone; the sweep
        // takes the rest, with whatever the records missed in them: one
        // kill of the whole tree, then the removals on this one thread.
        let remover = self.inner.stop_remover().take();
        if let Some(tree) = self.inner.containment.tree().cloned() {
            let _ = tokio::task::spawn_blocking(move || {
                if let Some(remover) = remover {
                    remover.finish();
                }
                cgroup::setup::sweep(&tree);
                tree.remove_empty();
            })
            .await;
        }
        // The rules go only once no runner is left for them to hold.
        if all_stopped {
            let egress = self.inner.egress.clone();
            let _ = tokio::task::spawn_blocking(move || egress.remove()).await;
        }
    }

    fn egress(&self) -> EgressStatus {
        self.inner.egress.status()
    }

    fn serving(&self) {
        // Other daemons' tables, removed only when those daemons are gone:
        // on a blocking thread, every nft call bounded, after serving.
        let egress = self.inner.egress.clone();
        tokio::task::spawn_blocking(move || egress.sweep_others());
    }
}

#[cfg(test)]
mod sizes {
    use super::*;

    /// What each of 10,000 running sandboxes costs the daemon stays small:
    /// a waiting watcher's future holds a pointer and the wait (it was 464
    /// bytes, in a 640-byte task), and a slot of the table is a key and a
    /// pointer.
    #[test]
    fn a_waiting_watcher_and_a_table_slot_are_small() {
        fn future_size<A, F>(_: fn(A) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        assert!(
            future_size(watch_runner) <= 96,
            "{}",
            future_size(watch_runner)
        );
        let slot = std::mem::size_of::<(SandboxKey, Box<Record>)>();
        assert!(slot <= 64, "{slot}");
    }
}
