//! Fenced calls: `ensure` and `deprovision` that act only on the
//! incarnation the caller saw (see `sandboxd_protocol::fence`). A mismatch
//! is `SandboxError::Conflict`, and nothing was changed.

use sandboxd_protocol::{
    validate, DeprovisionReport, EnsureReport, Expectation, SandboxEnv, Scope,
};

use crate::client::Resend;
use crate::{ClientError, SandboxdClient};

impl SandboxdClient {
    /// [`SandboxdClient::ensure`], unless the sandbox is not the
    /// incarnation `expect` names. Safe to resend: a second try of one
    /// that succeeded finds the same incarnation running.
    pub async fn ensure_fenced(
        &self,
        scope: Scope,
        id: &str,
        env: &SandboxEnv,
        expect: &Expectation,
    ) -> Result<EnsureReport, ClientError> {
        validate::sandbox_id(crate::calls::id_field(scope), id)?;
        if scope == Scope::Connect {
            return Err(crate::calls::connect_is_not_ensurable().into());
        }
        validate::env(env)?;
        self.call(Resend::Once, |rpc, ctx| {
            let (id, env, expect) = (id.to_string(), env.clone(), expect.clone());
            async move { rpc.ensure_fenced(ctx, scope, id, env, expect).await }
        })
        .await
    }

    /// [`SandboxdClient::deprovision`], unless the sandbox is another
    /// incarnation than `expect` names; one already gone is success (so a
    /// resend after a lost answer is too).
    pub async fn deprovision_fenced(
        &self,
        scope: Scope,
        id: &str,
        keep_workspace: bool,
        expect: &Expectation,
    ) -> Result<DeprovisionReport, ClientError> {
        validate::sandbox_id(crate::calls::id_field(scope), id)?;
        let within = self.deprovision_deadline().await;
        self.call_within(within, Resend::Once, |rpc, ctx| {
            let (id, expect) = (id.to_string(), expect.clone());
            async move {
                rpc.deprovision_fenced(ctx, scope, id, keep_workspace, expect)
                    .await
            }
        })
        .await
    }

    /// [`SandboxdClient::deprovision_connect_sandbox`], fenced.
    pub async fn deprovision_connect_fenced(
        &self,
        sandbox_id: &str,
        expect: &Expectation,
    ) -> Result<DeprovisionReport, ClientError> {
        validate::sandbox_id("sandbox_id", sandbox_id)?;
        let within = self.deprovision_deadline().await;
        self.call_within(within, Resend::Once, |rpc, ctx| {
            let (sandbox_id, expect) = (sandbox_id.to_string(), expect.clone());
            async move {
                rpc.deprovision_connect_fenced(ctx, sandbox_id, expect)
                    .await
            }
        })
        .await
    }
}
