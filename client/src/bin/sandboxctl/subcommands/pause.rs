//! `sandboxctl pause`: freezes a sandbox's runner where it stands (same
//! pid and generation, memory and workspace kept, no CPU), as `docker
//! pause` does. `resume` (in its own file) thaws it and prints the same
//! line.

use clap::Args;
use sandboxd_client::{PauseReport, SandboxError, Scope};

use super::{Context, Run};
use crate::args::{SandboxArgs, WaitArgs};
use crate::failure::Failure;
use crate::render::{emit, shown};

/// Freeze a sandbox's runner where it stands: same pid and generation,
/// memory and workspace kept, no CPU. `probe` then says stopped,
/// `describe` and `list` paused; `ensure` or `resume` resumes it.
#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
}

impl Run for PauseArgs {
    fn check(&self) -> Result<(), SandboxError> {
        self.sandbox.check()
    }

    async fn run(self, context: &Context) -> Result<String, Failure> {
        let SandboxArgs { scope, id } = self.sandbox;
        let report = self
            .wait
            .apply(context.connect().await?)
            .pause(scope, &id)
            .await?;
        emit(context.json, &report, |report| {
            render(scope, &id, report, true)
        })
    }
}

/// `session abc: paused (generation 2, pid 123)`, or that nothing changed.
pub fn render(scope: Scope, id: &str, report: &PauseReport, pausing: bool) -> String {
    let state = if pausing { "paused" } else { "running" };
    let mut line = format!("{scope} {}: {state}", shown(id));
    if !report.changed {
        line.push_str(" already");
    }
    line.push_str(&format!(" (generation {}", report.generation));
    if let Some(pid) = report.pid {
        line.push_str(&format!(", pid {pid}"));
    }
    line.push_str(")\n");
    line
}
