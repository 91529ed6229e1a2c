//! `sandboxctl probe`: a sandbox's live state in one word (absent,
//! stopped or running), for scripts.

use clap::Args;
use sandboxd_client::SandboxError;

use super::{Context, Run};
use crate::args::SandboxArgs;
use crate::failure::Failure;
use crate::render::emit;

/// Print a sandbox's live state: absent, stopped or running.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

impl Run for ProbeArgs {
    fn check(&self) -> Result<(), SandboxError> {
        self.sandbox.check()
    }

    async fn run(self, context: &Context) -> Result<String, Failure> {
        let SandboxArgs { scope, id } = self.sandbox;
        let state = context.connect().await?.probe(scope, &id).await?;
        let answer = serde_json::json!({ "scope": scope, "id": id, "state": state });
        emit(context.json, &answer, |_| format!("{state}\n"))
    }
}
