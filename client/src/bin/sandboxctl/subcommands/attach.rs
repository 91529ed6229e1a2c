//! `sandboxctl attach`: a command's output from the first byte the daemon
//! still keeps, followed to its end, and the command's exit code as
//! sandboxctl's, as if it had been run in the foreground. It only watches:
//! interrupting it leaves the command running (`sandboxctl kill` stops
//! it).

use clap::Args;
use sandboxd_client::SandboxError;
use sandboxd_protocol::validate_command;

use super::{Context, Run};
use crate::args::{CommandArgs, SandboxArgs};
use crate::failure::Failure;
use crate::follow_output;

/// Print a command's output from the first byte still kept, follow it
/// to the command's end, and exit with its code. Interrupting it leaves
/// the command running.
#[derive(Debug, Args)]
#[command(override_usage = "sandboxctl attach [OPTIONS] <SCOPE> <ID> <COMMAND_ID | --tag <TAG>>")]
pub struct AttachArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub command: CommandArgs,
    /// Print its bytes as they are even on a terminal [default: control
    /// characters escaped on a terminal; pipes always get the bytes].
    #[arg(long)]
    pub raw: bool,
}

impl Run for AttachArgs {
    fn check(&self) -> Result<(), SandboxError> {
        self.sandbox.check()?;
        validate_command::command_ref(&self.command.command_ref())
    }

    async fn run(self, context: &Context) -> Result<String, Failure> {
        let SandboxArgs { scope, id } = &self.sandbox;
        let client = context.connect().await?;
        let handle = client
            .attach(*scope, id, self.command.command_ref())
            .await?;
        let proof = follow_output::print_both(&handle, self.raw).await?;
        follow_output::ended(&handle, &proof)
    }
}
