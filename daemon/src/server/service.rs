//! The tarpc service: one value per connection, one method per call.
//!
//! Each method hands its call to the `…_call` of its group: the sandboxes'
//! making and removing (`sandbox_calls`), the reads (`read_calls`), the
//! commands (`command_calls`) and the files (`file_calls`). Every one of
//! those reads top to bottom: authorize → validate → build the key →
//! driver → reply. Validation happens before any side effect, so bad input
//! gets a clear error and nothing is created, changed or lost.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use sandboxd_protocol::{
    validate, CommandInfo, CommandOutput, CommandRef, DaemonStatus, DeprovisionReport,
    EnsureReport, EventCursor, EventsReply, ExecRequest, ExecStarted, Expectation, LogChunk,
    LogStart, OutputRead, PauseReport, ProbeState, RunnerEndpoints, SandboxEnv, SandboxError,
    SandboxInfo, SandboxUsage, Sandboxd, Scope, WorkspaceInfo, PROTOCOL_VERSION,
};
use tarpc::context::Context;

use super::chunk_turns::ChunkTurns;
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
    /// The order of this connection's file chunks.
    pub(super) turns: Arc<ChunkTurns>,
}

impl ConnectionService {
    pub fn new(peer: Peer, daemon: Arc<DaemonState>) -> Self {
        ConnectionService {
            peer,
            daemon,
            turns: Arc::default(),
        }
    }

    /// Every call starts here: a debug line naming it, then the access
    /// check. An allowed call gets a timer that records its latency when
    /// the call ends, however it ends (see [`CallTimer`]).
    pub(super) fn authorize(&self, call: Call) -> Result<CallTimer<'_>, SandboxError> {
        tracing::debug!(call = call.name(), "call");
        crate::memory_trim::DAEMON.note_call();
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
    pub(super) fn metrics(&self) -> Option<&Metrics> {
        self.daemon.metrics.as_deref()
    }

    pub(super) fn driver(&self) -> &dyn Driver {
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
        self.ensure_call(scope, id, env).await
    }

    async fn deprovision(
        self,
        _: Context,
        scope: Scope,
        id: String,
        keep_workspace: bool,
    ) -> Result<DeprovisionReport, SandboxError> {
        self.deprovision_call(scope, id, keep_workspace).await
    }

    async fn create_connect(
        self,
        _: Context,
        request_id: String,
        env: SandboxEnv,
    ) -> Result<String, SandboxError> {
        self.create_connect_call(request_id, env).await
    }

    async fn deprovision_connect(
        self,
        _: Context,
        sandbox_id: String,
    ) -> Result<DeprovisionReport, SandboxError> {
        self.deprovision_connect_call(sandbox_id).await
    }

    async fn probe(self, _: Context, scope: Scope, id: String) -> Result<ProbeState, SandboxError> {
        self.probe_call(scope, id).await
    }

    async fn describe(
        self,
        _: Context,
        scope: Scope,
        id: String,
    ) -> Result<SandboxInfo, SandboxError> {
        self.describe_call(scope, id).await
    }

    async fn list(
        self,
        _: Context,
        scope: Option<Scope>,
    ) -> Result<Vec<SandboxInfo>, SandboxError> {
        self.list_call(scope).await
    }

    async fn status(self, _: Context) -> Result<DaemonStatus, SandboxError> {
        self.status_call().await
    }

    async fn logs(
        self,
        _: Context,
        scope: Scope,
        id: String,
        start: LogStart,
        max_bytes: u32,
    ) -> Result<LogChunk, SandboxError> {
        self.logs_call(scope, id, start, max_bytes).await
    }

    async fn workspaces(
        self,
        _: Context,
        scope: Option<Scope>,
    ) -> Result<Vec<WorkspaceInfo>, SandboxError> {
        self.workspaces_call(scope).await
    }

    async fn ensure_fenced(
        self,
        _: Context,
        scope: Scope,
        id: String,
        env: SandboxEnv,
        expect: Expectation,
    ) -> Result<EnsureReport, SandboxError> {
        self.ensure_fenced_call(scope, id, env, expect).await
    }

    async fn deprovision_fenced(
        self,
        _: Context,
        scope: Scope,
        id: String,
        keep_workspace: bool,
        expect: Expectation,
    ) -> Result<DeprovisionReport, SandboxError> {
        self.deprovision_fenced_call(scope, id, keep_workspace, expect)
            .await
    }

    async fn deprovision_connect_fenced(
        self,
        _: Context,
        sandbox_id: String,
        expect: Expectation,
    ) -> Result<DeprovisionReport, SandboxError> {
        self.deprovision_connect_fenced_call(sandbox_id, expect)
            .await
    }

    async fn events(
        self,
        _: Context,
        since: Option<EventCursor>,
        max: u32,
        wait_ms: u32,
    ) -> Result<EventsReply, SandboxError> {
        self.events_call(since, max, wait_ms).await
    }

    async fn usage(
        self,
        _: Context,
        scope: Option<Scope>,
    ) -> Result<Vec<SandboxUsage>, SandboxError> {
        self.usage_call(scope).await
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

#[cfg(test)]
mod tests {
    use sandboxd_protocol::{SandboxCounts, MAX_LOG_CHUNK};
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
