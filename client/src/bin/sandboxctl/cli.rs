//! The command line, as clap parses it: the global flags and the list of
//! subcommands. Each subcommand's arguments live in its file under
//! `subcommands/`; the ones several share in `args`.
//!
//! Everything that is wrong with the command line itself is caught by
//! clap, so it exits 2 (clap's usage-error code) before any connection is
//! made.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::subcommands::{
    attach, commands, completions, connect, cp, deprovision, describe, egress, ensure, events,
    exec, kill, list, logs, ls, man_page, pause, probe, resume, status, top, workspaces,
};

/// Admin CLI for sandboxd, the daemon that owns agent-runner sandboxes.
#[derive(Debug, Parser)]
#[command(name = "sandboxctl", arg_required_else_help = true)]
pub struct Cli {
    /// Print the client's and the daemon's versions (as `sandboxctl version`).
    #[arg(long, short = 'V')]
    pub version: bool,

    /// The daemon's socket [default: $SANDBOXD_SOCKET, else /run/stigmer/sandboxd.sock
    /// as root, else $XDG_RUNTIME_DIR/stigmer/sandboxd.sock]
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Option<Command>,
}

// The subcommands, in the order `--help` lists them. Each one's `--help`
// text is its arguments' doc comment, in its own file. (No doc comment
// here: clap would take it for the top command's about.)
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the client's and the daemon's versions and protocol versions.
    Version,
    Completions(completions::CompletionsArgs),
    ManPage(man_page::ManPageArgs),
    Status(status::StatusArgs),
    List(list::ListArgs),
    Workspaces(workspaces::WorkspacesArgs),
    Probe(probe::ProbeArgs),
    Describe(describe::DescribeArgs),
    Top(top::TopArgs),
    Ensure(ensure::EnsureArgs),
    Deprovision(deprovision::DeprovisionArgs),
    Pause(pause::PauseArgs),
    Resume(resume::ResumeArgs),
    /// Request-scoped connect sandboxes.
    #[command(subcommand)]
    Connect(connect::ConnectCommand),
    Logs(logs::LogsArgs),
    /// The egress postures' address table, offline (no daemon needed).
    #[command(subcommand)]
    Egress(egress::EgressCommand),
    Events(events::EventsArgs),
    Exec(exec::ExecArgs),
    Commands(commands::CommandsArgs),
    Cp(cp::CpArgs),
    Ls(ls::LsArgs),
    Attach(attach::AttachArgs),
    Kill(kill::KillArgs),
}

/// The subcommand `args` (after `sandboxctl`) parse to.
#[cfg(test)]
pub fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("sandboxctl").chain(args.iter().copied()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use sandboxd_client::Scope;

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli = parse(&[
            "list",
            "--json",
            "--socket",
            "/tmp/s.sock",
            "--scope",
            "workflow",
        ])
        .unwrap();
        assert!(cli.json);
        assert_eq!(cli.socket, Some(PathBuf::from("/tmp/s.sock")));
        let Some(Command::List(args)) = cli.command else {
            panic!("not list")
        };
        assert_eq!(args.scope, Some(Scope::Workflow));
    }

    #[test]
    fn unknown_scopes_are_usage_errors() {
        for args in [
            &["probe", "sessions", "abc"][..],
            &["deprovision", "pod", "abc"][..],
            &["list", "--scope", "x"][..],
            &["ensure", "x", "abc", "--task-queue", "q"][..],
        ] {
            let error = parse(args).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{args:?}");
        }
    }
}
