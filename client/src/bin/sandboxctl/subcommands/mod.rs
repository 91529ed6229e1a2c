//! One file per subcommand: its arguments (the clap struct, whose doc
//! comment is its `--help` and its man page), its call through the client
//! library, and the rendering of the answer. `cli::Command` lists them;
//! `run` in `sandboxctl.rs` dispatches to them.

pub mod attach;
pub mod commands;
pub mod completions;
pub mod connect;
pub mod cp;
pub mod deprovision;
pub mod describe;
pub mod egress;
pub mod ensure;
pub mod events;
pub mod exec;
pub mod kill;
pub mod list;
pub mod logs;
pub mod ls;
pub mod man_page;
pub mod pause;
pub mod probe;
pub mod resume;
pub mod status;
pub mod top;
pub mod version;
pub mod workspaces;

use std::path::PathBuf;

use sandboxd_client::{ClientError, SandboxError, SandboxdClient};

use crate::failure::Failure;

/// What every subcommand that asks the daemon is given.
pub struct Context {
    /// The daemon's socket (`--socket`, else the default).
    pub socket: PathBuf,
    /// `--json`: machine-readable output instead of text.
    pub json: bool,
}

impl Context {
    pub async fn connect(&self) -> Result<SandboxdClient, ClientError> {
        SandboxdClient::connect(&self.socket).await
    }
}

/// A subcommand that asks the daemon.
pub trait Run {
    /// Checks the command line's values before connecting, in the CLI's
    /// own words (`SESSION_ID`, `--task-queue`), so a typo never depends on
    /// whether the daemon happens to be up. A value that breaks a rule is a
    /// failed call (exit 1), as when the daemon refuses it: the rules are
    /// the daemon's, not the command line's syntax.
    fn check(&self) -> Result<(), SandboxError> {
        Ok(())
    }

    /// Makes the call and answers the text to print (empty when the
    /// subcommand streamed its output itself).
    async fn run(self, context: &Context) -> Result<String, Failure>;
}

/// Checks `args`, then runs it.
pub async fn call(args: impl Run, context: &Context) -> Result<String, Failure> {
    args.check()
        .map_err(|error| Failure::Call(ClientError::Sandbox(error)))?;
    args.run(context).await
}
