//! Pausing and resuming a sandbox (protocol 8; see
//! [`sandboxd_protocol::lifecycle`]).

use sandboxd_protocol::{validate, PauseReport, Scope};

use crate::calls::id_field;
use crate::client::Resend;
use crate::{ClientError, SandboxdClient};

impl SandboxdClient {
    /// Freezes the sandbox's runner where it stands: same pid and
    /// generation, memory and workspace kept, no CPU. `probe` then says
    /// `stopped`; `describe` says since when it is paused; the next
    /// `ensure` (or [`SandboxdClient::resume`]) resumes it. Idempotent: one
    /// already paused is success with `changed: false`. Needs protocol 8.
    pub async fn pause(&self, scope: Scope, id: &str) -> Result<PauseReport, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        self.call(Resend::Once, |rpc, ctx| {
            let id = id.to_string();
            async move { rpc.pause(ctx, scope, id).await }
        })
        .await
    }

    /// Thaws a paused sandbox's runner (same pid and generation).
    /// Idempotent: one not paused is success with `changed: false`. Needs
    /// protocol 8.
    pub async fn resume(&self, scope: Scope, id: &str) -> Result<PauseReport, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        self.call(Resend::Once, |rpc, ctx| {
            let id = id.to_string();
            async move { rpc.resume(ctx, scope, id).await }
        })
        .await
    }
}
