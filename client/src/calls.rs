//! The calls, typed and named after the seed's `SandboxProvisioner`.
//!
//! Every input is checked with `sandboxd_protocol::validate` before it is
//! sent, so a bad id fails fast with exactly the error the daemon would
//! give, naming the same field, without a round trip. The seed-named
//! methods are thin wrappers over the general ones; they exist so control
//! plane code reads like the contract it implements.

use sandboxd_protocol::{
    validate, DaemonStatus, DeprovisionReport, EnsureReport, LogChunk, LogStart, ProbeState,
    SandboxEnv, SandboxError, SandboxInfo, Scope, WorkspaceInfo,
};

use crate::client::Resend;
use crate::{ClientError, SandboxdClient};

/// The field name general (scope, id) calls report in validation errors:
/// the one the daemon uses for that scope, so both ends say the same.
pub(crate) fn id_field(scope: Scope) -> &'static str {
    match scope {
        Scope::Session => "session_id",
        Scope::Workflow => "execution_id",
        Scope::Connect => "sandbox_id",
    }
}

impl SandboxdClient {
    /// Ensures the session's sandbox is running: absent → provision,
    /// stopped → start, running → fast path with no side effect.
    pub async fn ensure_session_sandbox(
        &self,
        session_id: &str,
        env: &SandboxEnv,
    ) -> Result<EnsureReport, ClientError> {
        validate::sandbox_id("session_id", session_id)?;
        self.ensure_checked(Scope::Session, session_id, env).await
    }

    /// Tears the session's sandbox down; a missing one is success.
    pub async fn deprovision_session_sandbox(
        &self,
        session_id: &str,
    ) -> Result<DeprovisionReport, ClientError> {
        validate::sandbox_id("session_id", session_id)?;
        self.deprovision_checked(Scope::Session, session_id, false)
            .await
    }

    /// Ensures the workflow execution's sandbox is running (same state
    /// machine as sessions; it lives as long as the execution).
    pub async fn ensure_workflow_sandbox(
        &self,
        execution_id: &str,
        env: &SandboxEnv,
    ) -> Result<EnsureReport, ClientError> {
        validate::sandbox_id("execution_id", execution_id)?;
        self.ensure_checked(Scope::Workflow, execution_id, env)
            .await
    }

    /// Tears the execution's sandbox down; a missing one is success.
    pub async fn deprovision_workflow_sandbox(
        &self,
        execution_id: &str,
    ) -> Result<DeprovisionReport, ClientError> {
        validate::sandbox_id("execution_id", execution_id)?;
        self.deprovision_checked(Scope::Workflow, execution_id, false)
            .await
    }

    /// Creates the request's connect sandbox and returns the sandbox id to
    /// deprovision it by (in a `finally`). NOT idempotent: it fails when the
    /// request's sandbox already exists, and it is never re-sent after a
    /// broken connection, since the lost attempt may have created it.
    pub async fn create_connect_sandbox(
        &self,
        request_id: &str,
        env: &SandboxEnv,
    ) -> Result<String, ClientError> {
        validate::sandbox_id("request_id", request_id)?;
        validate::env(env)?;
        self.call(Resend::Never, |rpc, ctx| {
            let (request_id, env) = (request_id.to_string(), env.clone());
            async move { rpc.create_connect(ctx, request_id, env).await }
        })
        .await
    }

    /// Tears a connect sandbox down; a missing one is success.
    pub async fn deprovision_connect_sandbox(
        &self,
        sandbox_id: &str,
    ) -> Result<DeprovisionReport, ClientError> {
        validate::sandbox_id("sandbox_id", sandbox_id)?;
        let within = self.deprovision_deadline().await;
        self.call_within(within, Resend::Once, |rpc, ctx| {
            let sandbox_id = sandbox_id.to_string();
            async move { rpc.deprovision_connect(ctx, sandbox_id).await }
        })
        .await
    }

    /// The sandbox's live state, read from the runtime by the daemon.
    pub async fn probe(&self, scope: Scope, id: &str) -> Result<ProbeState, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        self.call(Resend::Once, |rpc, ctx| {
            let id = id.to_string();
            async move { rpc.probe(ctx, scope, id).await }
        })
        .await
    }

    /// One sandbox's facts (never the token). An unknown sandbox is
    /// reported `absent`, not as an error.
    pub async fn describe(&self, scope: Scope, id: &str) -> Result<SandboxInfo, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        self.call(Resend::Once, |rpc, ctx| {
            let id = id.to_string();
            async move { rpc.describe(ctx, scope, id).await }
        })
        .await
    }

    /// Every sandbox the daemon's driver owns, optionally of one scope.
    pub async fn list(&self, scope: Option<Scope>) -> Result<Vec<SandboxInfo>, ClientError> {
        self.call(Resend::Once, |rpc, ctx| async move {
            rpc.list(ctx, scope).await
        })
        .await
    }

    /// The live figures (memory, tasks, CPU time, …) of every running
    /// sandbox, optionally of one scope, read at once: what `sandboxctl
    /// top` samples. Needs protocol 8.
    pub async fn usage(
        &self,
        scope: Option<Scope>,
    ) -> Result<Vec<sandboxd_protocol::SandboxUsage>, ClientError> {
        self.call(Resend::Once, |rpc, ctx| async move {
            rpc.usage(ctx, scope).await
        })
        .await
    }

    /// Every workspace the daemon keeps on its disk (process tier),
    /// optionally of one scope; remove a stopped sandbox's with
    /// [`SandboxdClient::deprovision`]. Needs protocol 3.
    pub async fn workspaces(
        &self,
        scope: Option<Scope>,
    ) -> Result<Vec<WorkspaceInfo>, ClientError> {
        self.call(Resend::Once, |rpc, ctx| async move {
            rpc.workspaces(ctx, scope).await
        })
        .await
    }

    /// Facts about the daemon.
    pub async fn status(&self) -> Result<DaemonStatus, ClientError> {
        self.call(
            Resend::Once,
            |rpc, ctx| async move { rpc.status(ctx).await },
        )
        .await
    }

    /// A bounded piece of a sandbox's output: at most `max_bytes` (the
    /// daemon caps it at [`crate::MAX_LOG_CHUNK`]) from `start`. To read on,
    /// or to follow, pass each chunk's `next` back as [`LogStart::After`]
    /// until `at_end`; the daemon carries the cursor across rotations and
    /// flags output lost to them as a `gap`.
    pub async fn logs(
        &self,
        scope: Scope,
        id: &str,
        start: LogStart,
        max_bytes: u32,
    ) -> Result<LogChunk, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        self.call(Resend::Once, |rpc, ctx| {
            let id = id.to_string();
            async move { rpc.logs(ctx, scope, id, start, max_bytes).await }
        })
        .await
    }

    /// Ensures a session or workflow sandbox. Connect sandboxes are
    /// request-scoped and not idempotent, so they are rejected here: use
    /// [`SandboxdClient::create_connect_sandbox`].
    pub async fn ensure(
        &self,
        scope: Scope,
        id: &str,
        env: &SandboxEnv,
    ) -> Result<EnsureReport, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        self.ensure_checked(scope, id, env).await
    }

    /// Tears any sandbox down; a missing one is success. `keep_workspace`
    /// leaves its workspace on disk for debugging.
    pub async fn deprovision(
        &self,
        scope: Scope,
        id: &str,
        keep_workspace: bool,
    ) -> Result<DeprovisionReport, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        self.deprovision_checked(scope, id, keep_workspace).await
    }

    async fn ensure_checked(
        &self,
        scope: Scope,
        id: &str,
        env: &SandboxEnv,
    ) -> Result<EnsureReport, ClientError> {
        if scope == Scope::Connect {
            return Err(connect_is_not_ensurable().into());
        }
        validate::env(env)?;
        self.call(Resend::Once, |rpc, ctx| {
            let (id, env) = (id.to_string(), env.clone());
            async move { rpc.ensure(ctx, scope, id, env).await }
        })
        .await
    }

    async fn deprovision_checked(
        &self,
        scope: Scope,
        id: &str,
        keep_workspace: bool,
    ) -> Result<DeprovisionReport, ClientError> {
        let within = self.deprovision_deadline().await;
        self.call_within(within, Resend::Once, |rpc, ctx| {
            let id = id.to_string();
            async move { rpc.deprovision(ctx, scope, id, keep_workspace).await }
        })
        .await
    }
}

pub(crate) fn connect_is_not_ensurable() -> SandboxError {
    SandboxError::InvalidArgument(
        "scope connect cannot be ensured: connect sandboxes are request-scoped and not \
         idempotent; use create_connect"
            .to_string(),
    )
}
