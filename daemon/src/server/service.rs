//! The tarpc service: one value per connection, one method per call.
//!
//! Every method reads top to bottom: authorize → validate → build the key →
//! driver → reply. Validation happens before any side effect, so bad input
//! gets a clear error and nothing is created, changed or lost.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use sandboxd_protocol::events::{MAX_EVENTS_PER_CALL, MAX_EVENTS_WAIT_MS};
use sandboxd_protocol::{
    validate, CommandInfo, CommandOutput, CommandRef, DaemonStatus, DeprovisionReport,
    EnsureReport, EventCursor, EventsReply, ExecRequest, ExecStarted, Expectation, HealthVerdict,
    LogChunk, LogStart, OutputRead, PauseReport, ProbeState, RunnerEndpoints, SandboxCounts,
    SandboxEnv, SandboxError, SandboxInfo, SandboxUsage, Sandboxd, Scope, WorkspaceInfo,
    MAX_LOG_CHUNK, PROTOCOL_VERSION,
};
use tarpc::context::Context;

use super::differences::DifferenceLog;
use super::warn_budget::WarnBudget;
use crate::access::{AccessPolicy, Call, Peer};
use crate::drivers::key_lock::KeyLocks;
use crate::events::EventHub;
use crate::metrics::Metrics;
use crate::provisioner::{Driver, SandboxKey};

/// What every connection shares: the driver, the access policy, and the
/// daemon's facts for `status`.
pub struct DaemonState {
    pub driver: Arc<dyn Driver>,
    pub access: AccessPolicy,
    pub started: Instant,
    pub socket_path: PathBuf,
    pub state_dir: PathBuf,
    /// Keeps one peer's refusals and broken frames from flooding the log.
    pub warn_budget: WarnBudget,
    /// Which ensure differences have been logged already.
    pub differences: DifferenceLog,
    /// The event stream the drivers emit into and `events` reads.
    pub events: Arc<EventHub>,
    /// One fenced call per key at a time, so a tier's default
    /// check-then-act cannot race another fenced call of the same key.
    pub fence_locks: KeyLocks<SandboxKey>,
    /// Every sandbox's commands: their output and proofs (see
    /// [`crate::commands`]).
    pub commands: Arc<crate::commands::CommandTable>,
    /// What runners are given as their backend and Temporal addresses.
    pub runner_endpoints: RunnerEndpoints,
    /// What the metrics endpoint serves, when `metrics_listen` is set.
    pub metrics: Option<Arc<Metrics>>,
    /// Where it is served.
    pub metrics_address: Option<std::net::SocketAddr>,
    /// `stop_grace`, for `status`.
    pub stop_grace: std::time::Duration,
}

/// Records one call's latency when dropped: at its answer, or when the
/// server drops it at the caller's deadline. Takes no clock reading at
/// all when no metrics are served.
pub(super) struct CallTimer<'a> {
    running: Option<(&'a Metrics, Call, Instant)>,
}

impl<'a> CallTimer<'a> {
    fn start(metrics: Option<&'a Metrics>, call: Call) -> CallTimer<'a> {
        CallTimer {
            running: metrics.map(|metrics| (metrics, call, Instant::now())),
        }
    }
}

impl Drop for CallTimer<'_> {
    fn drop(&mut self) {
        if let Some((metrics, call, started)) = self.running.take() {
            metrics.call(call, started.elapsed());
        }
    }
}

/// The service as one connection sees it: the shared state, and the peer
/// credentials every call is authorized against.
#[derive(Clone)]
pub struct ConnectionService {
    peer: Peer,
    pub(super) daemon: Arc<DaemonState>,
}

impl ConnectionService {
    pub fn new(peer: Peer, daemon: Arc<DaemonState>) -> Self {
        ConnectionService { peer, daemon }
    }

    /// Every call starts here: a debug line naming it, then the access
    /// check. An allowed call gets a timer that records its latency when
    /// the call ends, however it ends (see [`CallTimer`]).
    pub(super) fn authorize(&self, call: Call) -> Result<CallTimer<'_>, SandboxError> {
        tracing::debug!(call = call.name(), "call");
        let decision = self.daemon.access.decide(&self.peer, call);
        if decision.is_err() && self.daemon.warn_budget.allow(self.peer.uid) {
            tracing::warn!(
                uid = self.peer.uid,
                gid = self.peer.gid,
                pid = self.peer.pid,
                call = call.name(),
                "call refused by the access allow-lists"
            );
        }
        decision.map(|()| CallTimer::start(self.metrics(), call))
    }

    /// The daemon's metrics, when `metrics_listen` serves them.
    fn metrics(&self) -> Option<&Metrics> {
        self.daemon.metrics.as_deref()
    }

    fn driver(&self) -> &dyn Driver {
        self.daemon.driver.as_ref()
    }
}

/// The name a scope's id goes by, in validation messages.
pub(super) fn id_field(scope: Scope) -> &'static str {
    match scope {
        Scope::Session => "session_id",
        Scope::Workflow => "execution_id",
        Scope::Connect => "sandbox_id",
    }
}

/// Validates an id for its scope and builds the key the driver takes.
pub(super) fn key(scope: Scope, field: &str, id: String) -> Result<SandboxKey, SandboxError> {
    validate::sandbox_id(field, &id)?;
    Ok(SandboxKey::new(scope, id))
}

fn log_ensure(
    call: Call,
    key: &SandboxKey,
    result: &Result<EnsureReport, SandboxError>,
    differences: &DifferenceLog,
    metrics: Option<&Metrics>,
) {
    if let Some(metrics) = metrics {
        metrics.ensured(call.name(), result);
    }
    match result {
        Ok(report)
            if !report.differs.is_empty()
                && differences.first_time(&key.base_name, report.generation, &report.differs) =>
        {
            tracing::info!(
                call = call.name(),
                scope = %key.scope,
                id = %key.shown_id(),
                name = %key.base_name,
                generation = report.generation,
                differs = %report.differs.join(","),
                "sandbox already running with other settings than asked; it keeps its own"
            )
        }
        // The fast path is the common case (every execution ensures): keep
        // it out of the info log.
        Ok(report) if !report.created => tracing::debug!(
            call = call.name(),
            scope = %key.scope,
            id = %key.shown_id(),
            generation = report.generation,
            "sandbox already running"
        ),
        Ok(report) => tracing::info!(
            call = call.name(),
            scope = %key.scope,
            id = %key.shown_id(),
            name = %key.base_name,
            created = report.created,
            pid = report.pid,
            generation = report.generation,
            "sandbox ensured"
        ),
        Err(error) => tracing::warn!(
            call = call.name(),
            scope = %key.scope,
            id = %key.shown_id(),
            kind = error.kind(),
            %error,
            "ensure failed"
        ),
    }
}

fn log_deprovision(
    call: Call,
    key: &SandboxKey,
    result: &Result<DeprovisionReport, SandboxError>,
    metrics: Option<&Metrics>,
) {
    if let Some(metrics) = metrics {
        metrics.deprovisioned(call.name(), result);
    }
    match result {
        Ok(report) => tracing::info!(
            call = call.name(),
            scope = %key.scope,
            id = %key.shown_id(),
            name = %key.base_name,
            was_present = report.was_present,
            forced = report.forced,
            "sandbox deprovisioned"
        ),
        Err(error) => tracing::warn!(
            call = call.name(),
            scope = %key.scope,
            id = %key.shown_id(),
            kind = error.kind(),
            %error,
            "deprovision failed"
        ),
    }
}

/// Why a sandbox that is absent has nothing to show.
fn no_such_sandbox(key: &SandboxKey, generation: u64) -> String {
    let why = if generation == 0 {
        "the daemon has no record of it: it was never ensured, or was deprovisioned"
    } else {
        "it is gone: deprovisioned, or its container removed"
    };
    format!(
        "{} '{}' has no output to show ({}): {why}",
        key.scope,
        key.shown_id(),
        key.base_name
    )
}

impl Sandboxd for ConnectionService {
    async fn protocol_version(self, _: Context) -> u32 {
        // Open to every peer (see `access`), so a client of any version can
        // report a mismatch instead of a permission error.
        tracing::debug!(call = Call::ProtocolVersion.name(), "call");
        let _timer = CallTimer::start(self.metrics(), Call::ProtocolVersion);
        PROTOCOL_VERSION
    }

    async fn ensure(
        self,
        _: Context,
        scope: Scope,
        id: String,
        env: SandboxEnv,
    ) -> Result<EnsureReport, SandboxError> {
        let _timer = self.authorize(Call::Ensure)?;
        if scope == Scope::Connect {
            return Err(SandboxError::InvalidArgument(
                "connect sandboxes are created with create_connect, not ensure".to_string(),
            ));
        }
        let key = key(scope, id_field(scope), id)?;
        validate::env(&env)?;
        let result = self.driver().ensure(&key, &env).await;
        log_ensure(
            Call::Ensure,
            &key,
            &result,
            &self.daemon.differences,
            self.metrics(),
        );
        result
    }

    async fn deprovision(
        self,
        _: Context,
        scope: Scope,
        id: String,
        keep_workspace: bool,
    ) -> Result<DeprovisionReport, SandboxError> {
        let _timer = self.authorize(Call::Deprovision)?;
        let key = key(scope, id_field(scope), id)?;
        let result = self.driver().deprovision(&key, keep_workspace).await;
        self.daemon.differences.forget(&key.base_name);
        log_deprovision(Call::Deprovision, &key, &result, self.metrics());
        result
    }

    async fn create_connect(
        self,
        _: Context,
        request_id: String,
        env: SandboxEnv,
    ) -> Result<String, SandboxError> {
        let _timer = self.authorize(Call::CreateConnect)?;
        let key = key(Scope::Connect, "request_id", request_id)?;
        validate::env(&env)?;
        let report = self.driver().ensure(&key, &env).await;
        match &report {
            // Not idempotent: the request's sandbox must be a new one.
            Ok(existing) if !existing.created => {
                tracing::warn!(
                    call = Call::CreateConnect.name(),
                    id = %key.shown_id(),
                    name = %key.base_name,
                    pid = existing.pid,
                    generation = existing.generation,
                    "refused: the request's connect sandbox already exists"
                );
                let refused = SandboxError::FailedPrecondition(format!(
                    "connect sandbox for request '{}' already exists ({})",
                    key.id, key.base_name
                ));
                if let Some(metrics) = self.metrics() {
                    metrics.ensured(Call::CreateConnect.name(), &Err(refused.clone()));
                }
                Err(refused)
            }
            _ => {
                log_ensure(
                    Call::CreateConnect,
                    &key,
                    &report,
                    &self.daemon.differences,
                    self.metrics(),
                );
                report.map(|_| key.id)
            }
        }
    }

    async fn deprovision_connect(
        self,
        _: Context,
        sandbox_id: String,
    ) -> Result<DeprovisionReport, SandboxError> {
        let _timer = self.authorize(Call::DeprovisionConnect)?;
        let key = key(Scope::Connect, "sandbox_id", sandbox_id)?;
        let result = self.driver().deprovision(&key, false).await;
        self.daemon.differences.forget(&key.base_name);
        log_deprovision(Call::DeprovisionConnect, &key, &result, self.metrics());
        result
    }

    async fn probe(self, _: Context, scope: Scope, id: String) -> Result<ProbeState, SandboxError> {
        let _timer = self.authorize(Call::Probe)?;
        let key = key(scope, id_field(scope), id)?;
        self.driver().probe(&key).await
    }

    async fn describe(
        self,
        _: Context,
        scope: Scope,
        id: String,
    ) -> Result<SandboxInfo, SandboxError> {
        let _timer = self.authorize(Call::Describe)?;
        let key = key(scope, id_field(scope), id)?;
        let mut info = self.driver().describe(&key).await?;
        info.egress = Some(self.daemon.driver.egress());
        if info.state == ProbeState::Running {
            info.usage = super::usage::figures(self.driver(), &key, true).await;
        }
        Ok(info)
    }

    async fn list(
        self,
        _: Context,
        scope: Option<Scope>,
    ) -> Result<Vec<SandboxInfo>, SandboxError> {
        let _timer = self.authorize(Call::List)?;
        let mut sandboxes = self.driver().list(scope).await?;
        // One order whatever the tier: by scope, then id (what a person
        // looks for; the name is only a hash).
        sandboxes.sort_by(|a, b| a.scope.cmp(&b.scope).then_with(|| a.id.cmp(&b.id)));
        Ok(sandboxes)
    }

    async fn status(self, _: Context) -> Result<DaemonStatus, SandboxError> {
        let _timer = self.authorize(Call::Status)?;
        let daemon = &self.daemon;
        let mut driver_health = daemon.driver.health();
        let mut health = self.driver().health_verdict().await;
        // The daemon's own facts are worth having exactly when the runtime
        // is down: a failed count is reported in the health line instead.
        let counts = match self.driver().census().await {
            Ok(census) => census.counts(),
            Err(error) => {
                driver_health.push_str(&format!("; cannot count sandboxes: {error}"));
                health.add(
                    HealthVerdict::Unhealthy,
                    format!("cannot list the sandboxes: {error}"),
                );
                SandboxCounts::default()
            }
        };
        // A posture that is configured but not in force refuses every
        // ensure (fail closed): that is a daemon that cannot serve.
        let egress = daemon.driver.egress();
        if egress.posture != "none" && !egress.enforced {
            health.add(
                HealthVerdict::Unhealthy,
                format!(
                    "egress posture '{}' is not in force, so every ensure is refused: {}",
                    egress.posture, egress.mechanism
                ),
            );
        }
        let (isolation_mode, isolation) = daemon.driver.isolation();
        Ok(DaemonStatus {
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol_version: PROTOCOL_VERSION,
            driver: daemon.driver.name().to_string(),
            driver_health,
            uptime_secs: daemon.started.elapsed().as_secs(),
            counts,
            socket_path: daemon.socket_path.display().to_string(),
            state_dir: daemon.state_dir.display().to_string(),
            containment: daemon.driver.containment(),
            health,
            egress,
            isolation_mode,
            isolation,
            runner_endpoints: daemon.runner_endpoints.clone(),
            metrics: daemon
                .metrics_address
                .map(|address| format!("http://{address}/metrics")),
            pools: daemon.driver.pools(),
            stop_grace_ms: u64::try_from(daemon.stop_grace.as_millis()).unwrap_or(u64::MAX),
            view: daemon.driver.view(),
        })
    }

    async fn logs(
        self,
        _: Context,
        scope: Scope,
        id: String,
        start: LogStart,
        max_bytes: u32,
    ) -> Result<LogChunk, SandboxError> {
        let _timer = self.authorize(Call::Logs)?;
        let key = key(scope, id_field(scope), id)?;
        if max_bytes == 0 {
            return Err(SandboxError::InvalidArgument(
                "max_bytes must be at least 1".to_string(),
            ));
        }
        // More than one frame can carry is never asked of the driver.
        let max_bytes = max_bytes.min(MAX_LOG_CHUNK);
        match self.driver().logs(&key, start, max_bytes).await {
            // No output: say "no such sandbox" when there is none at all,
            // so a follower can tell "gone" from "nothing yet".
            Err(SandboxError::FailedPrecondition(message)) => {
                Err(match self.driver().describe(&key).await {
                    Ok(info) if info.state == ProbeState::Absent => {
                        SandboxError::NotFound(no_such_sandbox(&key, info.generation))
                    }
                    _ => SandboxError::FailedPrecondition(message),
                })
            }
            other => other,
        }
    }

    async fn workspaces(
        self,
        _: Context,
        scope: Option<Scope>,
    ) -> Result<Vec<WorkspaceInfo>, SandboxError> {
        let _timer = self.authorize(Call::Workspaces)?;
        let mut workspaces = self.driver().workspaces(scope).await?;
        workspaces.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(workspaces)
    }

    async fn ensure_fenced(
        self,
        _: Context,
        scope: Scope,
        id: String,
        env: SandboxEnv,
        expect: Expectation,
    ) -> Result<EnsureReport, SandboxError> {
        let _timer = self.authorize(Call::EnsureFenced)?;
        if scope == Scope::Connect {
            return Err(SandboxError::InvalidArgument(
                "connect sandboxes are created with create_connect, not ensure".to_string(),
            ));
        }
        let key = key(scope, id_field(scope), id)?;
        validate::env(&env)?;
        validate_expectation(&expect)?;
        let _fence = self.daemon.fence_locks.lock(&key).await;
        let result = self.driver().ensure_fenced(&key, &env, &expect).await;
        log_ensure(
            Call::EnsureFenced,
            &key,
            &result,
            &self.daemon.differences,
            self.metrics(),
        );
        result
    }

    async fn deprovision_fenced(
        self,
        _: Context,
        scope: Scope,
        id: String,
        keep_workspace: bool,
        expect: Expectation,
    ) -> Result<DeprovisionReport, SandboxError> {
        let _timer = self.authorize(Call::DeprovisionFenced)?;
        let key = key(scope, id_field(scope), id)?;
        validate_expectation(&expect)?;
        self.fenced_deprovision(Call::DeprovisionFenced, key, keep_workspace, expect)
            .await
    }

    async fn deprovision_connect_fenced(
        self,
        _: Context,
        sandbox_id: String,
        expect: Expectation,
    ) -> Result<DeprovisionReport, SandboxError> {
        let _timer = self.authorize(Call::DeprovisionConnectFenced)?;
        let key = key(Scope::Connect, "sandbox_id", sandbox_id)?;
        validate_expectation(&expect)?;
        self.fenced_deprovision(Call::DeprovisionConnectFenced, key, false, expect)
            .await
    }

    async fn events(
        self,
        _: Context,
        since: Option<EventCursor>,
        max: u32,
        wait_ms: u32,
    ) -> Result<EventsReply, SandboxError> {
        let _timer = self.authorize(Call::Events)?;
        if max == 0 {
            return Err(SandboxError::InvalidArgument(
                "max must be at least 1 event".to_string(),
            ));
        }
        let max = max.min(MAX_EVENTS_PER_CALL) as usize;
        let wait = std::time::Duration::from_millis(u64::from(wait_ms.min(MAX_EVENTS_WAIT_MS)));
        Ok(self
            .daemon
            .events
            .wait_read(since.as_ref(), max, wait)
            .await)
    }

    async fn usage(
        self,
        _: Context,
        scope: Option<Scope>,
    ) -> Result<Vec<SandboxUsage>, SandboxError> {
        let _timer = self.authorize(Call::Usage)?;
        super::usage::of_running(self.driver(), scope).await
    }

    async fn pause(
        self,
        _: Context,
        scope: Scope,
        id: String,
    ) -> Result<PauseReport, SandboxError> {
        self.pause_or_resume(Call::Pause, scope, id).await
    }

    async fn resume(
        self,
        _: Context,
        scope: Scope,
        id: String,
    ) -> Result<PauseReport, SandboxError> {
        self.pause_or_resume(Call::Resume, scope, id).await
    }

    async fn exec(
        self,
        _: Context,
        scope: Scope,
        id: String,
        request: ExecRequest,
    ) -> Result<ExecStarted, SandboxError> {
        self.exec_call(scope, id, request).await
    }

    async fn command_output(
        self,
        _: Context,
        scope: Scope,
        id: String,
        command: CommandRef,
        read: OutputRead,
    ) -> Result<CommandOutput, SandboxError> {
        self.command_output_call(scope, id, command, read).await
    }

    async fn command_wait(
        self,
        _: Context,
        scope: Scope,
        id: String,
        command: CommandRef,
        wait_ms: u32,
    ) -> Result<CommandInfo, SandboxError> {
        self.command_wait_call(scope, id, command, wait_ms).await
    }

    async fn command_input(
        self,
        _: Context,
        scope: Scope,
        id: String,
        command: CommandRef,
        data: sandboxd_protocol::ByteBuf,
        close: bool,
    ) -> Result<(), SandboxError> {
        self.command_input_call(scope, id, command, data.into_vec(), close)
            .await
    }

    async fn command_signal(
        self,
        _: Context,
        scope: Scope,
        id: String,
        command: CommandRef,
        signal: i32,
    ) -> Result<(), SandboxError> {
        self.command_signal_call(scope, id, command, signal).await
    }

    async fn command_resize(
        self,
        _: Context,
        scope: Scope,
        id: String,
        command: CommandRef,
        rows: u16,
        cols: u16,
    ) -> Result<(), SandboxError> {
        self.command_resize_call(scope, id, command, rows, cols)
            .await
    }

    async fn commands(
        self,
        _: Context,
        scope: Scope,
        id: String,
    ) -> Result<Vec<CommandInfo>, SandboxError> {
        self.commands_call(scope, id).await
    }

    async fn put_file(
        self,
        _: Context,
        scope: Scope,
        id: String,
        chunk: sandboxd_protocol::PutChunk,
    ) -> Result<sandboxd_protocol::PutReport, SandboxError> {
        self.put_file_call(scope, id, chunk).await
    }

    async fn get_file(
        self,
        _: Context,
        scope: Scope,
        id: String,
        path: String,
        offset: u64,
        max: u32,
    ) -> Result<sandboxd_protocol::FileChunk, SandboxError> {
        self.get_file_call(scope, id, path, offset, max).await
    }

    async fn stat_file(
        self,
        _: Context,
        scope: Scope,
        id: String,
        path: String,
    ) -> Result<sandboxd_protocol::FileStat, SandboxError> {
        self.stat_file_call(scope, id, path).await
    }

    async fn list_files(
        self,
        _: Context,
        scope: Scope,
        id: String,
        path: String,
    ) -> Result<sandboxd_protocol::FileList, SandboxError> {
        self.list_files_call(scope, id, path).await
    }

    async fn remove_file(
        self,
        _: Context,
        scope: Scope,
        id: String,
        path: String,
        recursive: bool,
    ) -> Result<(), SandboxError> {
        self.remove_file_call(scope, id, path, recursive).await
    }

    async fn put_tar(
        self,
        _: Context,
        scope: Scope,
        id: String,
        chunk: sandboxd_protocol::PutChunk,
    ) -> Result<sandboxd_protocol::PutReport, SandboxError> {
        self.put_tar_call(scope, id, chunk).await
    }

    async fn get_tar(
        self,
        _: Context,
        scope: Scope,
        id: String,
        path: String,
        offset: u64,
        max: u32,
    ) -> Result<sandboxd_protocol::FileChunk, SandboxError> {
        self.get_tar_call(scope, id, path, offset, max).await
    }
}

impl ConnectionService {
    /// `pause` or `resume` (`call`): the same checks, the driver's answer
    /// and one log line.
    async fn pause_or_resume(
        &self,
        call: Call,
        scope: Scope,
        id: String,
    ) -> Result<PauseReport, SandboxError> {
        let _timer = self.authorize(call)?;
        let key = key(scope, id_field(scope), id)?;
        let result = if call == Call::Pause {
            self.driver().pause(&key).await
        } else {
            self.driver().resume(&key).await
        };
        log_pause(call, &key, &result);
        result
    }
}

/// One line per pause or resume, as for the other mutating calls.
fn log_pause(call: Call, key: &SandboxKey, result: &Result<PauseReport, SandboxError>) {
    match result {
        Ok(report) => tracing::info!(
            call = call.name(),
            scope = %key.scope,
            id = %key.shown_id(),
            name = %key.base_name,
            changed = report.changed,
            generation = report.generation,
            "sandbox {}",
            if call == Call::Pause { "paused" } else { "resumed" }
        ),
        Err(error) => tracing::warn!(
            call = call.name(),
            scope = %key.scope,
            id = %key.shown_id(),
            kind = error.kind(),
            %error,
            "{} failed",
            call.name()
        ),
    }
}

impl ConnectionService {
    async fn fenced_deprovision(
        &self,
        call: Call,
        key: SandboxKey,
        keep_workspace: bool,
        expect: Expectation,
    ) -> Result<DeprovisionReport, SandboxError> {
        let _fence = self.daemon.fence_locks.lock(&key).await;
        let result = self
            .driver()
            .deprovision_fenced(&key, keep_workspace, &expect)
            .await;
        if result.is_ok() {
            self.daemon.differences.forget(&key.base_name);
        }
        log_deprovision(call, &key, &result, self.metrics());
        result
    }
}

/// An expected uid is 32 hex digits (what the daemon hands out): anything
/// else could never match, and is a caller's mistake to name.
fn validate_expectation(expect: &Expectation) -> Result<(), SandboxError> {
    match &expect.uid {
        Some(uid) if uid.len() != 32 || !uid.bytes().all(|byte| byte.is_ascii_hexdigit()) => {
            Err(SandboxError::InvalidArgument(format!(
                "expected uid '{}' is not a sandbox uid (32 hex digits, as describe and ensure report it)",
                sandboxd_protocol::Shown(uid)
            )))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use tarpc::context;

    use super::*;
    use crate::config::AccessConfig;
    use crate::server::testing::{daemon_state, env, FakeDriver};

    const ROOT: Peer = Peer {
        uid: 0,
        gid: 0,
        pid: Some(1),
    };
    const READER: Peer = Peer {
        uid: 1002,
        gid: 1002,
        pid: Some(2),
    };
    const STRANGER: Peer = Peer {
        uid: 1234,
        gid: 1234,
        pid: Some(3),
    };

    fn service(peer: Peer) -> (ConnectionService, Arc<FakeDriver>) {
        let driver = Arc::new(FakeDriver::default());
        let lists = AccessConfig {
            read_uids: vec![READER.uid],
            ..AccessConfig::default()
        };
        (
            ConnectionService::new(peer, daemon_state(driver.clone(), lists)),
            driver,
        )
    }

    fn invalid(result: Result<impl std::fmt::Debug, SandboxError>) -> String {
        match result {
            Err(SandboxError::InvalidArgument(message)) => message,
            other => panic!("expected invalid argument, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn ensure_validates_before_touching_the_driver() {
        let (service, driver) = service(ROOT);
        let ctx = context::current();
        let message = invalid(
            service
                .clone()
                .ensure(ctx, Scope::Session, String::new(), env())
                .await,
        );
        assert!(message.contains("session_id"), "{message}");
        let message = invalid(
            service
                .clone()
                .ensure(ctx, Scope::Workflow, "a\0b".into(), env())
                .await,
        );
        assert!(message.contains("execution_id"), "{message}");
        let bad_env = SandboxEnv {
            caller_class: "Not Valid".into(),
            ..env()
        };
        let message = invalid(
            service
                .clone()
                .ensure(ctx, Scope::Session, "ses_1".into(), bad_env)
                .await,
        );
        assert!(message.contains("caller_class"), "{message}");
        let message = invalid(
            service
                .clone()
                .ensure(ctx, Scope::Connect, "mcp_1".into(), env())
                .await,
        );
        assert!(message.contains("create_connect"), "{message}");
        assert_eq!(
            driver.calls(),
            Vec::<String>::new(),
            "no side effect on bad input"
        );

        let report = service
            .ensure(ctx, Scope::Session, "ses_1".into(), env())
            .await
            .unwrap();
        assert!(report.created);
        assert_eq!(driver.calls(), ["ensure session ses_1"]);
    }

    #[tokio::test]
    async fn create_connect_is_not_idempotent() {
        let (service, driver) = service(ROOT);
        let ctx = context::current();
        let message = invalid(
            service
                .clone()
                .create_connect(ctx, String::new(), env())
                .await,
        );
        assert!(message.contains("request_id"), "{message}");
        let id = service
            .clone()
            .create_connect(ctx, "req-1".into(), env())
            .await
            .unwrap();
        assert_eq!(id, "req-1");
        match service
            .clone()
            .create_connect(ctx, "req-1".into(), env())
            .await
        {
            Err(SandboxError::FailedPrecondition(message)) => {
                assert!(
                    message.starts_with(
                        "connect sandbox for request 'req-1' already exists (sbx-mcp-"
                    ),
                    "{message}"
                );
            }
            other => panic!("expected failed precondition, got {other:?}"),
        }
        let report = service
            .clone()
            .deprovision_connect(ctx, "req-1".into())
            .await
            .unwrap();
        assert!(report.was_present);
        let message = invalid(service.deprovision_connect(ctx, "x\ny".into()).await);
        assert!(message.contains("sandbox_id"), "{message}");
        assert_eq!(
            driver.calls(),
            [
                "ensure connect req-1",
                "ensure connect req-1",
                "deprovision connect req-1"
            ]
        );
    }

    #[tokio::test]
    async fn access_is_checked_before_anything_else() {
        let ctx = context::current();
        let (stranger, driver) = service(STRANGER);
        assert_eq!(
            stranger.clone().protocol_version(ctx).await,
            PROTOCOL_VERSION
        );
        let denied = stranger
            .clone()
            .ensure(ctx, Scope::Session, String::new(), env())
            .await;
        assert!(
            matches!(denied, Err(SandboxError::PermissionDenied(_))),
            "{denied:?}"
        );
        let denied = stranger.list(ctx, None).await;
        assert!(
            matches!(denied, Err(SandboxError::PermissionDenied(_))),
            "{denied:?}"
        );
        assert!(driver.calls().is_empty());

        let (reader, driver) = service(READER);
        assert_eq!(
            reader
                .clone()
                .probe(ctx, Scope::Session, "ses_1".into())
                .await,
            Ok(ProbeState::Absent)
        );
        let denied = reader
            .deprovision(ctx, Scope::Session, "ses_1".into(), false)
            .await;
        assert!(
            matches!(denied, Err(SandboxError::PermissionDenied(_))),
            "{denied:?}"
        );
        assert_eq!(driver.calls(), ["probe session ses_1"]);
    }

    #[tokio::test]
    async fn status_reports_the_daemon_and_its_counts() {
        let (service, _driver) = service(ROOT);
        let ctx = context::current();
        service
            .clone()
            .ensure(ctx, Scope::Session, "ses_1".into(), env())
            .await
            .unwrap();
        service
            .clone()
            .ensure(ctx, Scope::Workflow, "wfx_1".into(), env())
            .await
            .unwrap();
        let status = service.status(ctx).await.unwrap();
        assert_eq!(status.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(status.protocol_version, PROTOCOL_VERSION);
        assert_eq!(status.driver, "fake");
        assert_eq!(status.driver_health, "always fine");
        assert_eq!(status.socket_path, "/run/test/sandboxd.sock");
        assert_eq!(status.state_dir, "/var/lib/test");
        assert_eq!(
            status.counts,
            SandboxCounts {
                session: 1,
                workflow: 1,
                connect: 0,
                running: 2,
                stopped: 0
            }
        );
    }

    #[tokio::test]
    async fn logs_are_validated_authorized_and_bounded_before_the_driver() {
        let ctx = context::current();
        let (root, driver) = service(ROOT);
        let message = invalid(
            root.clone()
                .logs(ctx, Scope::Workflow, String::new(), LogStart::Beginning, 10)
                .await,
        );
        assert!(message.contains("execution_id"), "{message}");
        let message = invalid(
            root.clone()
                .logs(ctx, Scope::Session, "s".into(), LogStart::Beginning, 0)
                .await,
        );
        assert!(message.contains("max_bytes"), "{message}");
        // The driver is never asked for more than one frame carries.
        let chunk = root
            .logs(
                ctx,
                Scope::Session,
                "s".into(),
                LogStart::Tail { lines: 5 },
                u32::MAX,
            )
            .await
            .unwrap();
        assert_eq!(chunk.data.len(), MAX_LOG_CHUNK as usize);
        assert_eq!(
            driver.calls(),
            [format!("logs {MAX_LOG_CHUNK} session s")],
            "invalid calls never reach the driver"
        );
        // Runner output may hold secrets: readers may not see it.
        let (reader, _driver) = service(READER);
        let denied = reader
            .logs(ctx, Scope::Session, "s".into(), LogStart::Beginning, 10)
            .await;
        assert!(
            matches!(denied, Err(SandboxError::PermissionDenied(_))),
            "{denied:?}"
        );
    }

    #[test]
    fn id_fields_follow_the_scope() {
        assert_eq!(id_field(Scope::Session), "session_id");
        assert_eq!(id_field(Scope::Workflow), "execution_id");
        assert_eq!(id_field(Scope::Connect), "sandbox_id");
    }
}
