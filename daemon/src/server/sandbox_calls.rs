//! The calls that make, remove, pause and resume sandboxes (`ensure`,
//! `deprovision`, `create_connect` and their fenced forms), as the
//! service's methods call them: authorize → validate → the tier → one log
//! line and the metrics → reply.

use sandboxd_protocol::{
    validate, DeprovisionReport, EnsureReport, Expectation, PauseReport, SandboxEnv, SandboxError,
    Scope,
};

use super::differences::DifferenceLog;
use super::service::{id_field, key, ConnectionService};
use crate::access::Call;
use crate::metrics::Metrics;
use crate::provisioner::SandboxKey;

impl ConnectionService {
    pub(super) async fn ensure_call(
        &self,
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

    pub(super) async fn deprovision_call(
        &self,
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

    pub(super) async fn create_connect_call(
        &self,
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
                report.map(|_| key.id.clone())
            }
        }
    }

    pub(super) async fn deprovision_connect_call(
        &self,
        sandbox_id: String,
    ) -> Result<DeprovisionReport, SandboxError> {
        let _timer = self.authorize(Call::DeprovisionConnect)?;
        let key = key(Scope::Connect, "sandbox_id", sandbox_id)?;
        let result = self.driver().deprovision(&key, false).await;
        self.daemon.differences.forget(&key.base_name);
        log_deprovision(Call::DeprovisionConnect, &key, &result, self.metrics());
        result
    }

    pub(super) async fn ensure_fenced_call(
        &self,
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

    pub(super) async fn deprovision_fenced_call(
        &self,
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

    pub(super) async fn deprovision_connect_fenced_call(
        &self,
        sandbox_id: String,
        expect: Expectation,
    ) -> Result<DeprovisionReport, SandboxError> {
        let _timer = self.authorize(Call::DeprovisionConnectFenced)?;
        let key = key(Scope::Connect, "sandbox_id", sandbox_id)?;
        validate_expectation(&expect)?;
        self.fenced_deprovision(Call::DeprovisionConnectFenced, key, false, expect)
            .await
    }
}

impl ConnectionService {
    /// `pause` or `resume` (`call`): the same checks, the driver's answer
    /// and one log line.
    pub(super) async fn pause_or_resume(
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

/// One line per ensure (the fast path at debug), and the metrics.
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

/// The metrics, and one line per deprovision. A sandbox that was there
/// gets its info line from its tier, once the teardown is done (on the
/// process tier after the answer, where this line cost the answer 10–20
/// µs of formatting and writing); here it is debug. One that was not gets
/// its info line here, as no tier logs it.
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
        Ok(report) if report.was_present => tracing::debug!(
            call = call.name(),
            scope = %key.scope,
            id = %key.shown_id(),
            name = %key.base_name,
            forced = report.forced,
            "sandbox deprovisioned"
        ),
        Ok(_) => tracing::info!(
            call = call.name(),
            scope = %key.scope,
            id = %key.shown_id(),
            name = %key.base_name,
            "nothing to deprovision: no such sandbox"
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
