//! The tarpc service: one value per connection, one method per call.
//!
//! Every method reads top to bottom: authorize → validate → build the key →
//! driver → reply. Validation happens before any side effect, so bad input
//! gets a clear error and nothing is created, changed or lost.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use sandboxd_protocol::{
    validate, DaemonStatus, DeprovisionReport, EnsureReport, ProbeState, SandboxCounts,
    SandboxEnv, SandboxError, SandboxInfo, Sandboxd, Scope, PROTOCOL_VERSION,
};
use tarpc::context::Context;

use crate::access::{AccessPolicy, Call, Peer};
use crate::provisioner::{Driver, SandboxKey};

/// What every connection shares: the driver, the access policy, and the
/// daemon's facts for `status`.
pub struct DaemonState {
    pub driver: Arc<dyn Driver>,
    pub access: AccessPolicy,
    pub started: Instant,
    pub socket_path: PathBuf,
    pub state_dir: PathBuf,
}

/// The service as one connection sees it: the shared state, and the peer
/// credentials every call is authorized against.
#[derive(Clone)]
pub struct ConnectionService {
    peer: Peer,
    daemon: Arc<DaemonState>,
}

impl ConnectionService {
    pub fn new(peer: Peer, daemon: Arc<DaemonState>) -> Self {
        ConnectionService { peer, daemon }
    }

    fn authorize(&self, call: Call) -> Result<(), SandboxError> {
        self.daemon.access.authorize(&self.peer, call)
    }

    fn driver(&self) -> &dyn Driver {
        self.daemon.driver.as_ref()
    }
}

/// The name a scope's id goes by, in validation messages.
fn id_field(scope: Scope) -> &'static str {
    match scope {
        Scope::Session => "session_id",
        Scope::Workflow => "execution_id",
        Scope::Connect => "sandbox_id",
    }
}

/// Validates an id for its scope and builds the key the driver takes.
fn key(scope: Scope, field: &str, id: String) -> Result<SandboxKey, SandboxError> {
    validate::sandbox_id(field, &id)?;
    Ok(SandboxKey::new(scope, id))
}

fn log_ensure(call: Call, key: &SandboxKey, result: &Result<EnsureReport, SandboxError>) {
    match result {
        Ok(report) => tracing::info!(
            call = call.name(),
            scope = %key.scope,
            id = %key.id,
            name = %key.base_name,
            created = report.created,
            pid = report.pid,
            generation = report.generation,
            "sandbox ensured"
        ),
        Err(error) => tracing::warn!(
            call = call.name(),
            scope = %key.scope,
            id = %key.id,
            kind = error.kind(),
            %error,
            "ensure failed"
        ),
    }
}

fn log_deprovision(call: Call, key: &SandboxKey, result: &Result<DeprovisionReport, SandboxError>) {
    match result {
        Ok(report) => tracing::info!(
            call = call.name(),
            scope = %key.scope,
            id = %key.id,
            name = %key.base_name,
            was_present = report.was_present,
            forced = report.forced,
            "sandbox deprovisioned"
        ),
        Err(error) => tracing::warn!(
            call = call.name(),
            scope = %key.scope,
            id = %key.id,
            kind = error.kind(),
            %error,
            "deprovision failed"
        ),
    }
}

/// Sandbox counts by scope and by state.
fn count(sandboxes: &[SandboxInfo]) -> SandboxCounts {
    let mut counts = SandboxCounts::default();
    for sandbox in sandboxes {
        match sandbox.scope {
            Scope::Session => counts.session += 1,
            Scope::Workflow => counts.workflow += 1,
            Scope::Connect => counts.connect += 1,
        }
        match sandbox.state {
            ProbeState::Running => counts.running += 1,
            ProbeState::Stopped => counts.stopped += 1,
            ProbeState::Absent => {}
        }
    }
    counts
}

impl Sandboxd for ConnectionService {
    async fn protocol_version(self, _: Context) -> u32 {
        PROTOCOL_VERSION
    }

    async fn ensure(
        self,
        _: Context,
        scope: Scope,
        id: String,
        env: SandboxEnv,
    ) -> Result<EnsureReport, SandboxError> {
        self.authorize(Call::Ensure)?;
        if scope == Scope::Connect {
            return Err(SandboxError::InvalidArgument(
                "connect sandboxes are created with create_connect, not ensure".to_string(),
            ));
        }
        let key = key(scope, id_field(scope), id)?;
        validate::env(&env)?;
        let result = self.driver().ensure(&key, &env).await;
        log_ensure(Call::Ensure, &key, &result);
        result
    }

    async fn deprovision(
        self,
        _: Context,
        scope: Scope,
        id: String,
        keep_workspace: bool,
    ) -> Result<DeprovisionReport, SandboxError> {
        self.authorize(Call::Deprovision)?;
        let key = key(scope, id_field(scope), id)?;
        let result = self.driver().deprovision(&key, keep_workspace).await;
        log_deprovision(Call::Deprovision, &key, &result);
        result
    }

    async fn create_connect(
        self,
        _: Context,
        request_id: String,
        env: SandboxEnv,
    ) -> Result<String, SandboxError> {
        self.authorize(Call::CreateConnect)?;
        let key = key(Scope::Connect, "request_id", request_id)?;
        validate::env(&env)?;
        let result = self.driver().ensure(&key, &env).await;
        log_ensure(Call::CreateConnect, &key, &result);
        if !result?.created {
            return Err(SandboxError::FailedPrecondition(format!(
                "connect sandbox for request '{}' already exists ({})",
                key.id, key.base_name
            )));
        }
        Ok(key.id)
    }

    async fn deprovision_connect(
        self,
        _: Context,
        sandbox_id: String,
    ) -> Result<DeprovisionReport, SandboxError> {
        self.authorize(Call::DeprovisionConnect)?;
        let key = key(Scope::Connect, "sandbox_id", sandbox_id)?;
        let result = self.driver().deprovision(&key, false).await;
        log_deprovision(Call::DeprovisionConnect, &key, &result);
        result
    }

    async fn probe(self, _: Context, scope: Scope, id: String) -> Result<ProbeState, SandboxError> {
        self.authorize(Call::Probe)?;
        let key = key(scope, id_field(scope), id)?;
        self.driver().probe(&key).await
    }

    async fn describe(
        self,
        _: Context,
        scope: Scope,
        id: String,
    ) -> Result<SandboxInfo, SandboxError> {
        self.authorize(Call::Describe)?;
        let key = key(scope, id_field(scope), id)?;
        self.driver().describe(&key).await
    }

    async fn list(self, _: Context, scope: Option<Scope>) -> Result<Vec<SandboxInfo>, SandboxError> {
        self.authorize(Call::List)?;
        self.driver().list(scope).await
    }

    async fn status(self, _: Context) -> Result<DaemonStatus, SandboxError> {
        self.authorize(Call::Status)?;
        let sandboxes = self.driver().list(None).await?;
        let daemon = &self.daemon;
        Ok(DaemonStatus {
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol_version: PROTOCOL_VERSION,
            driver: daemon.driver.name().to_string(),
            driver_health: daemon.driver.health(),
            uptime_secs: daemon.started.elapsed().as_secs(),
            counts: count(&sandboxes),
            socket_path: daemon.socket_path.display().to_string(),
            state_dir: daemon.state_dir.display().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(scope: Scope, state: ProbeState) -> SandboxInfo {
        SandboxInfo {
            name: "sbx-ses-000000000000".to_string(),
            scope,
            id: "x".to_string(),
            state,
            pid: None,
            container_id: None,
            generation: 1,
            started_at_unix_ms: None,
            restarts: 0,
            last_exit: None,
            task_queue: "q".to_string(),
            caller_class: "user".to_string(),
        }
    }

    #[test]
    fn counts_by_scope_and_state() {
        let counts = count(&[
            info(Scope::Session, ProbeState::Running),
            info(Scope::Session, ProbeState::Stopped),
            info(Scope::Workflow, ProbeState::Running),
            info(Scope::Connect, ProbeState::Absent),
        ]);
        assert_eq!(
            counts,
            SandboxCounts { session: 2, workflow: 1, connect: 1, running: 2, stopped: 1 }
        );
    }

    #[test]
    fn id_fields_follow_the_scope() {
        assert_eq!(id_field(Scope::Session), "session_id");
        assert_eq!(id_field(Scope::Workflow), "execution_id");
        assert_eq!(id_field(Scope::Connect), "sandbox_id");
    }
}
