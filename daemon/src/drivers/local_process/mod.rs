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
//!
//! This file is the driver and the [`Driver`] calls, each handed to the
//! file that does it. An ensure reads downward from here: [`ensure`] (the
//! fast path, a paused runner resumed, the slow path under the key lock)
//! → [`runner_start`] (on a spawner thread: the runner spawned and put in
//! the table) → `launch` (its settings, then `launch::spawn`,
//! `launch::in_view` and the clone in `launch::clone_exec`) → the kernel;
//! [`watch`] takes each runner's exit. [`startup`] builds the driver,
//! [`shutdown`] stops every runner with the daemon.

pub mod cgroup;
mod deferred;
mod deprovision;
mod disk_limit;
mod ensure;
mod exec;
mod executable;
mod files;
mod gvisor;
mod info;
mod isolation;
mod launch;
mod launcher;
mod ledger;
mod lifecycle;
mod limit_env;
mod logs;
mod peer_check;
mod pidfd;
mod prepared;
pub mod reaper;
mod record;
mod runner_start;
mod shutdown;
mod startup;

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
mod watch;
mod workspaces;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use cgroup::Containment;
use sandboxd_protocol::{
    DeprovisionReport, EgressStatus, EnsureReport, Expectation, LogChunk, LogStart, ProbeState,
    SandboxEnv, SandboxError, SandboxInfo, Scope, WorkspaceInfo,
};

use crate::drivers::key_lock::KeyLocks;
use crate::egress::Egress;
use crate::events::EventHub;
use crate::provisioner::{Driver, SandboxKey};
use crate::unix_time::now_unix_ms;
use launch::spawn::RunnerSettings;
use launch::spawner::Spawner;
use ledger::Ledger;
use reaper::GroupReaper;
use record::{Record, Running};
use trash::Trash;
use users::uid_pool::SandboxUids;

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
    /// `put_tar`'s upload sessions (see [`files::Uploads`]).
    tar_uploads: files::Uploads,
    /// Held for the daemon's life: one daemon per state directory.
    _state_lock: nix::fcntl::Flock<std::fs::File>,
}

impl Inner {
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
    /// found: host parts under every isolation, views too under
    /// `isolation = "full"`, and parked runners (under gVisor, parked
    /// `runsc run`s) unless `park_runners = false`.
    fn make_prepared(
        &self,
        sizes: &crate::config::PoolConfig,
    ) -> Result<Arc<prepared::PreparedSandboxes>, String> {
        let launcher = &self.settings.launcher;
        launcher.check_pool(self.settings.disk_quota.is_some())?;
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
        let settings = &self.settings;
        let parker = sizes.park_runners.then(|| {
            launcher.parker(
                program.clone(),
                &settings.init_binary,
                &settings.filters,
                settings.oom_score_adj,
            )
        });
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
        let maker = prepared::SandboxMaker {
            host: Arc::new(host),
            view,
            parker,
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
}

impl LocalProcessDriver {
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
        self.stop_every_runner().await;
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
    use super::watch::watch_runner;
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
