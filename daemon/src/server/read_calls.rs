//! The calls that read: `probe`, `describe`, `list`, `status`, `logs`,
//! `workspaces`, `events` and `usage`, as the service's methods call them:
//! authorize → validate → the tier or the daemon's own state → reply.

use sandboxd_protocol::events::{MAX_EVENTS_PER_CALL, MAX_EVENTS_WAIT_MS};
use sandboxd_protocol::{
    DaemonStatus, EventCursor, EventsReply, HealthVerdict, LogChunk, LogStart, ProbeState,
    SandboxCounts, SandboxError, SandboxInfo, SandboxUsage, Scope, WorkspaceInfo, MAX_LOG_CHUNK,
    PROTOCOL_VERSION,
};

use super::service::{id_field, key, ConnectionService};
use crate::access::Call;
use crate::provisioner::SandboxKey;

impl ConnectionService {
    pub(super) async fn probe_call(
        &self,
        scope: Scope,
        id: String,
    ) -> Result<ProbeState, SandboxError> {
        let _timer = self.authorize(Call::Probe)?;
        let key = key(scope, id_field(scope), id)?;
        self.driver().probe(&key).await
    }

    pub(super) async fn describe_call(
        &self,
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

    pub(super) async fn list_call(
        &self,
        scope: Option<Scope>,
    ) -> Result<Vec<SandboxInfo>, SandboxError> {
        let _timer = self.authorize(Call::List)?;
        let mut sandboxes = self.driver().list(scope).await?;
        // One order whatever the tier: by scope, then id (what a person
        // looks for; the name is only a hash).
        sandboxes.sort_by(|a, b| a.scope.cmp(&b.scope).then_with(|| a.id.cmp(&b.id)));
        Ok(sandboxes)
    }

    pub(super) async fn status_call(&self) -> Result<DaemonStatus, SandboxError> {
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

    pub(super) async fn logs_call(
        &self,
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

    pub(super) async fn workspaces_call(
        &self,
        scope: Option<Scope>,
    ) -> Result<Vec<WorkspaceInfo>, SandboxError> {
        let _timer = self.authorize(Call::Workspaces)?;
        let mut workspaces = self.driver().workspaces(scope).await?;
        workspaces.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(workspaces)
    }

    pub(super) async fn events_call(
        &self,
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

    pub(super) async fn usage_call(
        &self,
        scope: Option<Scope>,
    ) -> Result<Vec<SandboxUsage>, SandboxError> {
        let _timer = self.authorize(Call::Usage)?;
        super::usage::of_running(self.driver(), scope).await
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
