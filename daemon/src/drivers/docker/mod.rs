//! The `docker` tier: one container per sandbox, through the Engine API.
//!
//! The engine is the state. A sandbox's container is found by its name
//! (the base name) and proven ours by its labels, so nothing needs to be
//! remembered across restarts: containers outlive the daemon, and a new
//! daemon serves them as they are (it re-adopts them by listing the
//! managed-by label). Only two things live beside the engine: the count of
//! runners per sandbox ([generation]) and the last exits seen on the
//! engine's event stream ([events]).
//!
//! Rooms: `engine` (the connection and getting it back), `spec` (what a
//! container looks like), `observed` (what inspect says, in our terms),
//! `containers` (the engine calls), `ensure` (the state machine),
//! `teardown` (stop and remove), `events` (exits and the reconnect loop),
//! `reaper` (leaked connect sandboxes), `generation` (runner counts),
//! `logs` (runner output, from the engine's log of the container),
//! `lifecycle` and `cpu_source` (idle and lifetime limits), `pause`,
//! `exec` (commands in a running sandbox), `files` (files in and out,
//! through the engine's archive endpoints), `seccomp_profile` (the
//! daemon's own profile on every container), `engine_support` (what
//! the engine can hold a container to: seccomp, a root file system size)
//! and `runtime` (`[docker] runtime`, such as gVisor's `runsc`).

mod containers;
mod cpu_source;
mod departed;
mod egress_network;
mod engine;
mod engine_support;
mod ensure;
mod events;
mod exec;
mod files;
mod generation;
mod health;
mod lifecycle;
mod logs;
mod network_watch;
mod observed;
mod pause;
mod reaper;
mod runtime;
mod seccomp_profile;
pub(crate) mod spec;
mod teardown;
mod usage;

use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use async_trait::async_trait;
use futures::StreamExt;
use sandboxd_protocol::{
    DeprovisionReport, EgressStatus, EnsureReport, EventKind, Expectation, LogChunk, LogStart,
    ProbeState, SandboxEnv, SandboxError, SandboxInfo, Scope,
};
use tokio::task::JoinHandle;

use crate::config::{Config, DEFAULT_DOCKER_HOST};
use crate::drivers::differs::{differing_fields, RunsWith, TokenDigest};
use crate::drivers::key_lock::KeyLocks;
use crate::drivers::run_to_completion;
use crate::egress::{Egress, EgressSetting};
use crate::events::EventHub;
use crate::provisioner::{Driver, SandboxKey};
use engine::{CallError, Engine, READ_TIMEOUT};
use events::Exits;
use generation::Generations;
use observed::{key_of, Lookup, Observed};
use reaper::ReaperSettings;
use spec::RunnerSpec;

/// How many containers `list` inspects at once.
const LIST_CONCURRENCY: usize = 8;

pub struct DockerDriver {
    inner: Arc<Inner>,
    /// The events watcher and the reaper; stopped with the driver.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The egress posture's rules on the daemon's own network; an ensure
    /// is refused while they are not in force (SPEC §9, fail closed).
    egress: Arc<Egress>,
    /// True when runners join [`egress_network::network`] (the default
    /// network, on every posture).
    own_network: bool,
    /// What the last ensure found of that network's inter-container
    /// communication; `None` before the first.
    icc: Mutex<Option<egress_network::Icc>>,
    /// Whether that check still holds (see [`network_watch`]).
    network_checked: Arc<network_watch::Checked>,
    /// The instance network's holder lock (see [`crate::holders`]), held
    /// shared for the daemon's life: the last daemon of the instance to
    /// stop removes the network, and no other's sweep takes it meanwhile.
    network_holder: Mutex<Option<crate::holders::Held>>,
}

/// What every operation shares.
struct Inner {
    engine: Arc<Engine>,
    spec: RunnerSpec,
    stop_grace: std::time::Duration,
    generations: Arc<Generations>,
    /// The records of live commands, for the next daemon to follow.
    command_records: Arc<exec::record::CommandRecords>,
    exits: Arc<Exits>,
    key_locks: KeyLocks<SandboxKey>,
    /// Where starts, exits, teardowns and adoptions are announced.
    events: Arc<EventHub>,
    /// When each paused container was paused (see [`pause`]).
    paused_since: pause::PausedSince,
    /// Removed containers' last output, for their followers.
    departed: departed::DepartedLogs,
    /// The runs the idle and lifetime watcher follows (see [`lifecycle`]).
    watch: lifecycle::Watch,
    /// What the engine can hold a container to (see [`engine_support`]).
    support: engine_support::Learned,
    /// Uploads kept until their last chunk (see [`files`]).
    files: files::Files,
    /// Set at shutdown: no command starts, and every command followed
    /// ends `daemon-stopped` (it goes on in its container, see [`exec`]).
    commands_stop: tokio::sync::watch::Sender<bool>,
}

impl Inner {
    /// The sandbox's current generation: the larger of what was handed out
    /// (the file) and what created its container (the label).
    fn generation(&self, key: &SandboxKey, observed: Option<&Observed>) -> u64 {
        self.generations
            .read(key)
            .max(observed.map_or(0, Observed::created_generation))
    }

    /// Hands out the next generation for a start of an existing container,
    /// recording it before the start it counts (the container's label
    /// cannot change, so the file is the only record).
    fn next_generation(&self, key: &SandboxKey, observed: &Observed) -> u64 {
        let next = self.generation(key, Some(observed)) + 1;
        self.record_generation(key, next);
        next
    }

    fn record_generation(&self, key: &SandboxKey, generation: u64) {
        if let Err(error) = self.generations.record(key, generation) {
            tracing::warn!(scope = %key.scope, id = %key.shown_id(), generation, %error, "cannot record the generation");
        }
    }

    async fn inspect(&self, key: &SandboxKey) -> Result<Lookup, SandboxError> {
        containers::inspect(&self.engine, key)
            .await
            .map_err(|error| {
                error.into_sandbox_error(&format!(
                    "cannot inspect the container of {} '{}' ({})",
                    key.scope, key.id, key.base_name
                ))
            })
    }

    /// describe's answer from one inspect; the last exit falls back to the
    /// event stream's when the engine no longer has it, and is the event
    /// stream's when both tell of the same exit (it knows why the daemon
    /// stopped it: deprovision, idle, lifetime).
    fn info(&self, key: &SandboxKey, lookup: &Lookup) -> SandboxInfo {
        let recorded = self.exits.last(key).map(|recorded| recorded.exit);
        match lookup {
            Lookup::Ours(observed) => {
                let mut info = observed.info(key, self.generation(key, Some(observed)));
                info.last_exit = match (info.last_exit, recorded) {
                    (Some(seen), Some(recorded)) if same_exit(&seen, &recorded) => Some(recorded),
                    (seen, recorded) => seen.or(recorded),
                };
                info.paused_since_unix_ms = self.paused_since.of(observed);
                info
            }
            Lookup::Absent | Lookup::Foreign { .. } => {
                let generation = self.generation(key, None);
                SandboxInfo::absent(key.scope, &key.id, generation, recorded)
            }
        }
    }
}

/// How far apart the engine's `FinishedAt` and its `die` event's time
/// may be for one exit.
const SAME_EXIT_WITHIN_MS: u64 = 2000;

/// True when `seen` (inspect's) and `recorded` (the `die` event's) tell
/// of the same exit: the same code, at about the same time.
fn same_exit(seen: &sandboxd_protocol::ExitInfo, recorded: &sandboxd_protocol::ExitInfo) -> bool {
    seen.code == recorded.code
        && seen.at_unix_ms.abs_diff(recorded.at_unix_ms) <= SAME_EXIT_WITHIN_MS
}

impl DockerDriver {
    /// Checks the configuration, makes first contact with the engine (the
    /// daemon starts whether or not it answers), and starts the events
    /// watcher and the connect reaper.
    pub async fn start(config: &Config, events: Arc<EventHub>) -> anyhow::Result<DockerDriver> {
        let mut spec = RunnerSpec::from_config(config).map_err(anyhow::Error::msg)?;
        let host = config
            .docker
            .host
            .clone()
            .unwrap_or_else(|| DEFAULT_DOCKER_HOST.to_string());
        let engine = Arc::new(Engine::new(&host).map_err(anyhow::Error::msg)?);
        let support = engine_support::Learned::default();
        // Before anything is made on the host: a runtime the engine lacks
        // would fail every ensure.
        check_runtime(&engine, &support, spec.runtime.as_deref()).await?;
        // The default network is replaced by the daemon's own, on every
        // posture: its containers cannot reach each other there, and under
        // a posture its bridge is what the rules hold. Any other network
        // is the operator's, and holds neither.
        let own_network = spec.network == "bridge";
        if own_network {
            spec.network = egress_network::network();
        }
        // Before the table or the network is touched: see network_holder.
        let network_holder = if own_network {
            egress_network::hold()
        } else {
            None
        };
        let setting = config.egress;
        let egress = Arc::new(if own_network && setting != EgressSetting::Unrestricted {
            // Kept on a clean stop: containers outlive the daemon.
            tokio::task::spawn_blocking(move || {
                Egress::establish_for_bridge(setting, &egress_network::bridge())
            })
            .await?
        } else {
            // `none` leaves the network's rules alone: containers an earlier
            // daemon started on it under a posture stay held to it.
            Egress::not_installed(
                setting,
                format!(
                    "[docker] network '{}' is not the daemon's own; postures are enforced on the default ('bridge'), which runners then leave for {}",
                    spec.network,
                    egress_network::network()
                ),
            )
        });
        let generations =
            Arc::new(Generations::prepare(&config.state_dir).with_context(|| {
                format!("cannot prepare {}/docker", config.state_dir.display())
            })?);
        let command_records = Arc::new(
            exec::record::CommandRecords::prepare(&config.state_dir).with_context(|| {
                format!(
                    "cannot prepare {}/docker/commands",
                    config.state_dir.display()
                )
            })?,
        );
        let inner = Arc::new(Inner {
            engine,
            spec,
            stop_grace: config.stop_grace,
            generations,
            command_records,
            exits: Arc::new(Exits::default()),
            key_locks: KeyLocks::new(),
            events,
            paused_since: pause::PausedSince::default(),
            departed: departed::DepartedLogs::default(),
            watch: lifecycle::Watch::default(),
            commands_stop: tokio::sync::watch::Sender::new(false),
            support,
            files: files::Files::prepare(&config.state_dir).with_context(|| {
                format!(
                    "cannot prepare {}/docker/uploads and downloads",
                    config.state_dir.display()
                )
            })?,
        });
        first_contact(&inner).await;
        inner.files.remove_left_stagings(inner.engine.clone());
        let reaper = ReaperSettings {
            ttl: config
                .docker
                .connect_ttl
                .unwrap_or(crate::config::DEFAULT_CONNECT_TTL),
            creation_grace: config.docker.connect_creation_grace,
        };
        let mut tasks = vec![
            tokio::spawn(events::watch(
                inner.engine.clone(),
                inner.exits.clone(),
                inner.events.clone(),
                inner.generations.clone(),
            )),
            tokio::spawn(reaper::run(inner.clone(), reaper)),
        ];
        tasks.push(tokio::spawn(crate::egress::keep_verified(Arc::downgrade(
            &egress,
        ))));
        if config.lifecycle.any() {
            tasks.push(tokio::spawn(lifecycle::keep_watching(
                Arc::downgrade(&inner),
                config.lifecycle,
            )));
        }
        let network_checked = Arc::new(network_watch::Checked::default());
        if own_network {
            tasks.push(tokio::spawn(network_watch::watch(
                inner.engine.clone(),
                network_checked.clone(),
            )));
        }
        Ok(DockerDriver {
            inner,
            tasks: Mutex::new(tasks),
            egress,
            own_network,
            icc: Mutex::new(None),
            network_checked,
            network_holder: Mutex::new(network_holder),
        })
    }

    /// A deprovision, checked against `expect` (when given) under the key
    /// lock, on the container as the engine shows it. Once SIGTERM is
    /// sent, the escalation to SIGKILL and the removal must happen even if
    /// the caller stops waiting.
    async fn deprovision_expecting(
        &self,
        key: &SandboxKey,
        keep_workspace: bool,
        expect: Option<Expectation>,
    ) -> Result<DeprovisionReport, SandboxError> {
        let (inner, key) = (self.inner.clone(), key.clone());
        run_to_completion("deprovision", async move {
            let _guard = inner.key_locks.lock(&key).await;
            teardown::deprovision(&inner, &key, keep_workspace, expect.as_ref()).await
        })
        .await
    }
}

/// An adopted container found not running: its runner ended while no
/// daemon followed the engine's events, so its exit is announced now,
/// after `adopted`, with the reason the engine kept (`State.ExitCode`,
/// `State.OOMKilled`) — or none, for one never started.
async fn announce_ended_meanwhile(inner: &Inner, key: &SandboxKey, uid: &str, generation: u64) {
    match containers::inspect(&inner.engine, key).await {
        Ok(observed::Lookup::Ours(observed)) => {
            if let Some(exit) = observed.last_exit() {
                inner
                    .events
                    .emit(EventKind::Exited, key, uid, generation, Some(exit));
            }
        }
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(scope = %key.scope, id = %key.id, %error, "cannot inspect an adopted container")
        }
    }
}

/// Fails when `[docker] runtime` (`wanted`) is not among the engine's
/// runtimes, naming those it has. An engine that does not answer now is
/// not checked (the daemon serves either way, as at first contact): its
/// create then refuses an unknown runtime by name.
async fn check_runtime(
    engine: &Engine,
    support: &engine_support::Learned,
    wanted: Option<&str>,
) -> anyhow::Result<()> {
    let Some(wanted) = wanted else {
        return Ok(());
    };
    match support.learn(engine).await {
        Ok(known) => {
            known.runtimes.check(wanted).map_err(anyhow::Error::msg)?;
            if let Some(warning) = known.runtimes.warning(Some(wanted)) {
                tracing::warn!("{warning}");
            }
            tracing::info!(runtime = %wanted, engine = %engine.address(), "[docker] runtime is the engine's: every runner container runs under it");
        }
        Err(error) => {
            tracing::warn!(runtime = %wanted, engine = %engine.address(), %error, "cannot read the engine's runtimes: [docker] runtime is not checked; a create under a runtime the engine lacks fails")
        }
    }
    Ok(())
}

/// Logs what the engine looks like at start: reachable or not, the runner
/// image present or not, and the containers an earlier daemon left (which
/// this one now serves). Never fails: the daemon serves either way.
async fn first_contact(inner: &Inner) {
    let engine = &inner.engine;
    let image = inner.spec.image.clone();
    match engine
        .call(READ_TIMEOUT, |docker| async move {
            docker.inspect_image(&image).await
        })
        .await
    {
        Ok(_) => {}
        Err(error) if error.is_not_found() => tracing::error!(
            image = %inner.spec.image,
            engine = %engine.address(),
            "the runner image is not on the engine: every ensure will fail until it is loaded there (sandboxd never pulls)"
        ),
        Err(error @ CallError::Unreachable(_)) => {
            tracing::warn!(engine = %engine.address(), %error, "serving anyway: calls fail as unavailable until the engine answers; reconnecting in the background");
            return;
        }
        Err(error) => {
            tracing::warn!(image = %inner.spec.image, %error, "cannot inspect the runner image")
        }
    }
    match inner.support.learn(engine).await {
        Ok(support) => engine_support::announce(support, inner.spec.disk),
        Err(error) => {
            tracing::warn!(%error, "cannot read the engine's info: the disk limit is looked at again before the first create")
        }
    }
    match containers::list(engine, None).await {
        Ok(listed) => {
            for summary in &listed {
                let labels = summary.labels.clone().unwrap_or_default();
                let names = summary.names.as_deref().unwrap_or_default();
                if let Some(key) = key_of(&labels, names) {
                    let uid = labels.get(spec::LABEL_UID).map_or("", String::as_str);
                    let generation = labels
                        .get(spec::LABEL_GENERATION)
                        .and_then(|value| value.parse().ok())
                        .unwrap_or(0);
                    inner
                        .events
                        .emit(EventKind::Adopted, &key, uid, generation, None);
                    let running =
                        summary.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING);
                    if !running {
                        announce_ended_meanwhile(inner, &key, uid, generation).await;
                    }
                }
            }
            let running = listed
                .iter()
                .filter(|summary| {
                    summary.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING)
                })
                .count();
            tracing::info!(
                engine = %engine.address(),
                image = %inner.spec.image,
                containers = listed.len(),
                running,
                "docker driver ready; re-adopted the sandboxes' containers found on the engine"
            );
        }
        Err(error) => {
            tracing::warn!(engine = %engine.address(), %error, "cannot list the sandboxes' containers")
        }
    }
}

#[async_trait]
impl Driver for DockerDriver {
    fn name(&self) -> &'static str {
        "docker"
    }

    async fn health_verdict(&self) -> sandboxd_protocol::Health {
        health::check(&self.inner).await
    }

    fn health(&self) -> String {
        format!(
            "{}; runner image {}",
            self.inner.engine.health(),
            self.inner.spec.image
        )
    }

    async fn ensure(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
    ) -> Result<EnsureReport, SandboxError> {
        // The fast path: one read, no lock, no write.
        let lookup = self.inner.inspect(key).await?;
        if let Lookup::Ours(observed) = &lookup {
            if observed.phase == observed::Phase::Running {
                let generation = self.inner.generation(key, Some(observed));
                let runs_with = RunsWith {
                    task_queue: observed.task_queue(),
                    caller_class: observed.caller_class(),
                    token_sha256: observed.token_digest().map(TokenDigest::Hex),
                };
                return Ok(EnsureReport {
                    state: ProbeState::Running,
                    created: false,
                    generation,
                    pid: None,
                    differs: differing_fields(env, &runs_with),
                    uid: observed.uid().to_string(),
                });
            }
        }
        // Fail closed: no container starts unless the egress rules are in
        // force, and then only on the network they hold.
        self.egress.check()?;
        // Checked again only after a change to it (see `network_watch`):
        // not an engine call per new container.
        if self.own_network && !self.network_checked.trusted() {
            let epoch = self.network_checked.epoch();
            let icc = egress_network::ensure(&self.inner.engine).await?;
            if icc == egress_network::Icc::Off {
                self.network_checked.trust(epoch);
            }
            *self.icc.lock().unwrap_or_else(|poison| poison.into_inner()) = Some(icc);
        }
        // In a task of its own: a caller that stops waiting must not leave
        // a container created but never started, or a generation recorded
        // for a start that was never made.
        let (inner, key, env) = (self.inner.clone(), key.clone(), env.clone());
        let ensured = run_to_completion("ensure", async move {
            let _guard = inner.key_locks.lock(&key).await;
            ensure::ensure(&inner, &key, &env, lookup).await
        })
        .await;
        if ensured.is_err() && self.own_network {
            // Perhaps the network is what failed it: look again next time.
            self.network_checked.forget();
        }
        ensured
    }

    fn egress(&self) -> EgressStatus {
        self.egress.status()
    }

    fn isolation(&self) -> (String, Vec<sandboxd_protocol::IsolationFeature>) {
        use sandboxd_protocol::IsolationFeature;
        let known = self.inner.support.known();
        let wanted = self.inner.spec.runtime.as_deref();
        let runtime = runtime::feature(known.map(|support| &support.runtimes), wanted);
        let network = if !self.own_network {
            IsolationFeature::not_in_force(
                "network",
                format!(
                    "runners join [docker] network '{}', which is not the daemon's own: whether its containers reach each other is that network's setting",
                    self.inner.spec.network
                ),
            )
        } else {
            let icc = self.icc.lock().unwrap_or_else(|poison| poison.into_inner());
            let described = icc.as_ref().map_or_else(
                || Err(format!(
                    "not checked yet: the network {} is made (or remade) without inter-container communication on the first ensure",
                    egress_network::network()
                )),
                egress_network::Icc::describe,
            );
            match described {
                Ok(how) => IsolationFeature::in_force("network", how),
                Err(why) => IsolationFeature::not_in_force("network", why),
            }
        };
        let seccomp = match known.and_then(|support| support.runtimes.seccomp_ignored(wanted)) {
            Some(why) => IsolationFeature::not_in_force("seccomp", why),
            None => engine_support::seccomp_feature(known),
        };
        let disk = engine_support::disk_feature(known, self.inner.spec.disk);
        (
            "the runtime's own".to_string(),
            vec![network, runtime, seccomp, disk],
        )
    }

    async fn deprovision(
        &self,
        key: &SandboxKey,
        keep_workspace: bool,
    ) -> Result<DeprovisionReport, SandboxError> {
        self.deprovision_expecting(key, keep_workspace, None).await
    }

    /// Checked under the key lock, on the container as the engine shows it.
    async fn deprovision_fenced(
        &self,
        key: &SandboxKey,
        keep_workspace: bool,
        expect: &Expectation,
    ) -> Result<DeprovisionReport, SandboxError> {
        self.deprovision_expecting(key, keep_workspace, Some(expect.clone()))
            .await
    }

    /// An exec of the sandbox's container (see [`exec`]).
    async fn exec(
        &self,
        key: &SandboxKey,
        spec: &crate::started_command::CommandSpec,
    ) -> Result<crate::started_command::StartedCommand, SandboxError> {
        self.inner.exec(key, spec).await
    }

    /// The file calls, through the Engine's archive endpoints (see [`files`]).
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

    /// The commands an earlier daemon started and left running in their
    /// containers (their records in `<state_dir>/docker/commands`).
    async fn recovered_commands(&self) -> Vec<crate::started_command::RecoveredCommand> {
        self.inner.recovered_commands().await
    }

    async fn workspaces(
        &self,
        _scope: Option<Scope>,
    ) -> Result<Vec<sandboxd_protocol::WorkspaceInfo>, SandboxError> {
        Err(crate::provisioner::no_host_workspaces("docker"))
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

    async fn probe(&self, key: &SandboxKey) -> Result<ProbeState, SandboxError> {
        Ok(self.inner.inspect(key).await?.probe_state())
    }

    async fn describe(&self, key: &SandboxKey) -> Result<SandboxInfo, SandboxError> {
        let lookup = self.inner.inspect(key).await?;
        let mut info = self.inner.info(key, &lookup);
        if let Lookup::Ours(observed) = &lookup {
            // The container's own, which may predate the configured one.
            let runtime = observed
                .runtime
                .as_deref()
                .unwrap_or("not said by the engine");
            info.isolation
                .push(sandboxd_protocol::IsolationFeature::in_force(
                    "runtime",
                    format!("the container runs under the engine's runtime '{runtime}'"),
                ));
        }
        Ok(info)
    }

    async fn usage(
        &self,
        key: &SandboxKey,
        _with_disk: bool,
    ) -> Result<Option<sandboxd_protocol::Usage>, SandboxError> {
        let Lookup::Ours(observed) = self.inner.inspect(key).await? else {
            return Ok(None);
        };
        if observed.phase != observed::Phase::Running {
            return Ok(None);
        }
        let spec = &self.inner.spec;
        usage::read(
            &self.inner.engine,
            &observed.id,
            spec.memory,
            spec.pids_limit,
        )
        .await
        .map_err(|error| {
            error.into_sandbox_error(&format!(
                "cannot read the figures of {} '{}' ({})",
                key.scope, key.id, key.base_name
            ))
        })
    }

    async fn list(&self, scope: Option<Scope>) -> Result<Vec<SandboxInfo>, SandboxError> {
        let listed = containers::list(&self.inner.engine, scope)
            .await
            .map_err(|error| error.into_sandbox_error("cannot list the sandboxes' containers"))?;
        let keys: Vec<SandboxKey> = listed
            .iter()
            .filter_map(|summary| {
                key_of(
                    &summary.labels.clone().unwrap_or_default(),
                    summary.names.as_deref().unwrap_or_default(),
                )
            })
            .collect();
        let inner = &self.inner;
        let looked: Vec<Result<(SandboxKey, Lookup), SandboxError>> = futures::stream::iter(keys)
            .map(|key| async move { inner.inspect(&key).await.map(|lookup| (key, lookup)) })
            .buffer_unordered(LIST_CONCURRENCY)
            .collect()
            .await;
        let mut infos = Vec::with_capacity(looked.len());
        for result in looked {
            let (key, lookup) = result?;
            // Removed since the listing: not a sandbox any more.
            if matches!(lookup, Lookup::Ours(_)) {
                infos.push(inner.info(&key, &lookup));
            }
        }
        Ok(infos)
    }

    async fn logs(
        &self,
        key: &SandboxKey,
        start: LogStart,
        max_bytes: u32,
    ) -> Result<LogChunk, SandboxError> {
        logs::read(&self.inner, key, start, max_bytes).await
    }

    fn serving(&self) {
        // Other daemons' leftovers, removed only when those daemons are
        // gone: in the background, every call bounded, after serving.
        let egress = self.egress.clone();
        let engine = self.inner.engine.clone();
        let own_network = self.own_network;
        tokio::spawn(async move {
            let _ = tokio::task::spawn_blocking(move || egress.sweep_others()).await;
            if own_network {
                egress_network::sweep_gone_instances(&engine).await;
            }
        });
    }

    async fn shutdown(&self) {
        self.inner.commands_stop.send_replace(true);
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .drain(..)
        {
            task.abort();
        }
        // The egress table and the network serve this instance's
        // containers, which outlive the daemon: they stay while any is
        // left, and go with the last; and they serve every live daemon of
        // the instance: only the last to stop removes them.
        let holder = self
            .network_holder
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        match self.list(None).await {
            Ok(sandboxes) if sandboxes.is_empty() => {
                if holder.as_ref().is_some_and(|holder| !holder.claim_last()) {
                    tracing::info!(
                        network = %egress_network::network(),
                        instance = crate::instance::Instance::current().display_name(),
                        "keeping the egress table and the sandboxes' network: another live sandboxd of this instance holds them"
                    );
                } else {
                    let egress = self.egress.clone();
                    let _ = tokio::task::spawn_blocking(move || egress.remove()).await;
                    if self.own_network {
                        egress_network::remove_at_stop(&self.inner.engine).await;
                    }
                    if let Some(holder) = holder {
                        holder.release();
                    }
                }
            }
            Ok(sandboxes) => tracing::info!(
                containers = sandboxes.len(),
                network = %egress_network::network(),
                "keeping the egress table and the sandboxes' network for the containers left running"
            ),
            Err(error) => tracing::warn!(
                "cannot list the containers, so the egress table and the network are kept: {error}"
            ),
        }
        tracing::info!(engine = %self.inner.engine.address(), "leaving the containers running: the next sandboxd re-adopts them");
    }
}
