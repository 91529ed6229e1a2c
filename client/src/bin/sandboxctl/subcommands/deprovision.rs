//! `sandboxctl deprovision`: tears a sandbox down, a missing one being
//! success, optionally keeping its workspace on disk.

use clap::Args;
use sandboxd_client::{DeprovisionReport, SandboxError, Scope};

use super::{Context, Run};
use crate::args::{FenceArgs, SandboxArgs, WaitArgs};
use crate::failure::Failure;
use crate::render::{emit, shown};

/// Tear a sandbox down (a missing one is success).
#[derive(Debug, Args)]
pub struct DeprovisionArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Keep the sandbox's workspace on disk, for debugging.
    #[arg(long)]
    pub keep_workspace: bool,
    #[command(flatten)]
    pub fence: FenceArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
}

impl Run for DeprovisionArgs {
    fn check(&self) -> Result<(), SandboxError> {
        self.sandbox.check()
    }

    async fn run(self, context: &Context) -> Result<String, Failure> {
        let SandboxArgs { scope, id } = self.sandbox;
        let keep = self.keep_workspace;
        let expect = self.fence.expectation();
        let client = self.wait.apply(context.connect().await?);
        let report = if expect.is_empty() {
            client.deprovision(scope, &id, keep).await?
        } else {
            client.deprovision_fenced(scope, &id, keep, &expect).await?
        };
        emit(context.json, &report, |report| {
            render(scope, &id, report, keep)
        })
    }
}

/// `session abc: deprovisioned` and its variants.
pub fn render(scope: Scope, id: &str, report: &DeprovisionReport, keep_workspace: bool) -> String {
    let mut line = format!("{scope} {}: ", shown(id));
    if !report.was_present {
        line.push_str("not present, nothing to do");
    } else {
        line.push_str("deprovisioned");
        if report.forced {
            line.push_str(" (killed: the runner ignored SIGTERM for the whole grace period)");
        }
        if keep_workspace {
            line.push_str("; workspace kept");
        }
    }
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{parse, Command};

    #[test]
    fn deprovision_takes_keep_workspace() {
        let cli = parse(&["deprovision", "connect", "sbx", "--keep-workspace"]).unwrap();
        let Some(Command::Deprovision(args)) = cli.command else {
            panic!("not deprovision")
        };
        assert_eq!(args.sandbox.scope, Scope::Connect);
        assert!(args.keep_workspace);
    }

    #[test]
    fn deprovision_says_what_happened() {
        let gone = DeprovisionReport {
            was_present: true,
            forced: true,
        };
        assert_eq!(
            render(Scope::Connect, "x", &gone, true),
            "connect x: deprovisioned (killed: the runner ignored SIGTERM for the whole grace \
             period); workspace kept\n"
        );
        let missing = DeprovisionReport {
            was_present: false,
            forced: false,
        };
        assert_eq!(
            render(Scope::Session, "y", &missing, false),
            "session y: not present, nothing to do\n"
        );
    }
}
