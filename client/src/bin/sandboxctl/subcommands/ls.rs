//! `sandboxctl ls`: a directory of a sandbox's workspace, one entry a
//! row (name, type, size, mode, when it was modified), as `ls -l` would.

use clap::Args;
use sandboxd_client::{FileList, SandboxError};
use sandboxd_protocol::validate_files;

use super::{Context, Run};
use crate::args::SandboxArgs;
use crate::failure::Failure;
use crate::render::{emit, table};
use crate::time::{ago, now_unix_ms};

/// List a directory of a sandbox's workspace (the workspace itself
/// without PATH): name, type, size, mode and when it was modified.
#[derive(Debug, Args)]
pub struct LsArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Relative to the workspace.
    #[arg(default_value = "")]
    pub path: String,
}

impl Run for LsArgs {
    fn check(&self) -> Result<(), SandboxError> {
        self.sandbox.check()?;
        validate_files::path(&self.path)
    }

    async fn run(self, context: &Context) -> Result<String, Failure> {
        let SandboxArgs { scope, id } = &self.sandbox;
        let client = context.connect().await?;
        let listed = client.list_files(*scope, id, &self.path).await?;
        emit(context.json, &listed, |listed| {
            render(listed, now_unix_ms())
        })
    }
}

/// NAME, TYPE, SIZE, MODE and MODIFIED, one a row.
fn render(listed: &FileList, now_unix_ms: u64) -> String {
    let header = ["NAME", "TYPE", "SIZE", "MODE", "MODIFIED"].map(str::to_string);
    let rows = listed.entries.iter().map(|entry| {
        [
            entry.name.escape_debug().to_string(),
            entry.file_type.as_str().to_string(),
            entry.size.to_string(),
            format!("{:04o}", entry.mode),
            ago(entry.mtime_unix_ms, now_unix_ms),
        ]
    });
    let mut text = table(std::iter::once(header).chain(rows).collect());
    if listed.truncated {
        text.push_str("(more entries not shown)\n");
    }
    text
}
