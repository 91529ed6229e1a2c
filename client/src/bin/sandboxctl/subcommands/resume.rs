//! `sandboxctl resume`: thaws a paused sandbox's runner (same pid and
//! generation), as `docker unpause` does.

use clap::Args;
use sandboxd_client::SandboxError;

use super::{pause, Context, Run};
use crate::args::{SandboxArgs, WaitArgs};
use crate::failure::Failure;
use crate::render::emit;

/// Resume a paused sandbox's runner (same pid and generation).
#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
}

impl Run for ResumeArgs {
    fn check(&self) -> Result<(), SandboxError> {
        self.sandbox.check()
    }

    async fn run(self, context: &Context) -> Result<String, Failure> {
        let SandboxArgs { scope, id } = self.sandbox;
        let report = self
            .wait
            .apply(context.connect().await?)
            .resume(scope, &id)
            .await?;
        emit(context.json, &report, |report| {
            pause::render(scope, &id, report, false)
        })
    }
}
