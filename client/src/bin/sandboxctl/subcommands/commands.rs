//! `sandboxctl commands`: a sandbox's commands, running ones and the
//! proofs the daemon still keeps, oldest first, as a table (the style of
//! `list`) or as JSON.

use clap::Args;
use sandboxd_client::{CommandInfo, SandboxError, Shown};

use super::{Context, Run};
use crate::args::SandboxArgs;
use crate::failure::Failure;
use crate::render::{emit, table};
use crate::time::{ago, now_unix_ms};

/// List a sandbox's commands: running ones and the ended ones whose
/// proof the daemon still keeps, oldest first.
#[derive(Debug, Args)]
pub struct CommandsArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

impl Run for CommandsArgs {
    fn check(&self) -> Result<(), SandboxError> {
        self.sandbox.check()
    }

    async fn run(self, context: &Context) -> Result<String, Failure> {
        let SandboxArgs { scope, id } = self.sandbox;
        let commands = context.connect().await?.commands(scope, &id).await?;
        emit(context.json, &commands, |commands| {
            render(commands, now_unix_ms())
        })
    }
}

/// ID, TAG, PID, STATE, STARTED and EXIT (how it ended), one a row.
fn render(commands: &[CommandInfo], now_unix_ms: u64) -> String {
    let header = ["ID", "TAG", "PID", "STATE", "STARTED", "EXIT"].map(str::to_string);
    let rows = commands.iter().map(|command| {
        [
            command.command_id.clone(),
            command
                .tag
                .as_deref()
                .map_or_else(|| "-".to_string(), |tag| Shown(tag).to_string()),
            command.pid.to_string(),
            command.state.as_str().to_string(),
            ago(command.started_at_unix_ms, now_unix_ms),
            command
                .proof
                .as_ref()
                .map_or_else(|| "-".to_string(), |proof| proof.reason.to_string()),
        ]
    });
    table(std::iter::once(header).chain(rows).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_client::{CommandProof, CommandState, ExitReason, StreamFigures};

    const NOW: u64 = 1_714_566_896_000;

    fn info(id: char, tag: Option<&str>, proof: Option<CommandProof>) -> CommandInfo {
        CommandInfo {
            command_id: id.to_string().repeat(32),
            tag: tag.map(str::to_string),
            argv: vec!["sleep".into(), "60".into()],
            pid: 4242,
            state: if proof.is_some() {
                CommandState::Ended
            } else {
                CommandState::Running
            },
            started_at_unix_ms: NOW - 65_000,
            pty: false,
            stdin_open: false,
            uid: "0".repeat(32),
            generation: 1,
            proof,
        }
    }

    #[test]
    fn a_row_per_command_with_how_it_ended() {
        let proof = CommandProof {
            reason: ExitReason::TimedOut { limit_ms: 300 },
            exit_code: None,
            signal: Some(9),
            started_at_unix_ms: NOW - 65_000,
            ended_at_unix_ms: NOW,
            stdout: StreamFigures::default(),
            stderr: StreamFigures::default(),
        };
        let text = render(
            &[info('a', Some("build"), None), info('b', None, Some(proof))],
            NOW,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("ID ") && lines[0].ends_with("EXIT"),
            "{text}"
        );
        assert!(
            lines[1].starts_with(&"a".repeat(32)) && lines[1].contains("build"),
            "{text}"
        );
        assert!(lines[1].contains("running") && lines[1].contains("1m 5s ago"));
        assert!(lines[1].ends_with('-'), "{text}");
        assert!(lines[2].ends_with("timed-out (after 300 ms)"), "{text}");
    }
}
