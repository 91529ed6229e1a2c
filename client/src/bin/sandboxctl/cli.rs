//! The command line, as clap parses it: the global flags and the list of
//! subcommands. Each subcommand's arguments live in its file under
//! `subcommands/`; the ones several share in `args`.
//!
//! Everything that is wrong with the command line itself is caught by
//! clap, so it exits 2 (clap's usage-error code) before any connection is
//! made.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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

/// Declares the subcommands twice from the one list: [`Command`], whose
/// subcommands clap builds only when one is used (`defer`: building all of
/// them was most of sandboxctl's own start-up work), and `EveryCommand`,
/// built whole, for what describes them all (help, completions, man
/// pages; see [`full_command`]).
macro_rules! subcommands {
    ($($(#[$attr:meta])* $variant:ident $(($args:ty))?,)*) => {
        #[derive(Debug, Subcommand)]
        #[command(defer = true)]
        pub enum Command {
            $($(#[$attr])* $variant $(($args))?,)*
        }

        #[derive(Debug, Subcommand)]
        enum EveryCommand {
            $($(#[$attr])* $variant $(($args))?,)*
        }
    };
}

// The subcommands, in the order `--help` lists them. Each one's `--help`
// text is its arguments' doc comment, in its own file. (No doc comment
// here: clap would take it for the top command's about.)
subcommands! {
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

/// The whole command line with every subcommand built as if none were
/// deferred: the same help, completions and man pages, in the same order.
pub fn full_command() -> clap::Command {
    let every = EveryCommand::augment_subcommands(clap::Command::new("sandboxctl"));
    let mut command = Cli::command();
    for subcommand in every.get_subcommands() {
        command = command.mut_subcommand(subcommand.get_name(), |_| subcommand.clone());
    }
    command
}

/// The process's command line, parsed as `Cli::parse` does it: a usage
/// error exits 2, `--help` prints and exits 0.
pub fn parse_args() -> Cli {
    let args: Vec<OsString> = std::env::args_os().collect();
    // Help lists each subcommand with its one-line description, which a
    // deferred subcommand only has once built.
    let mut command = if lists_subcommands(&args) {
        full_command()
    } else {
        Cli::command()
    };
    let mut matches = command
        .try_get_matches_from_mut(args)
        .unwrap_or_else(|error| error.exit());
    let cli = Cli::from_arg_matches_mut(&mut matches)
        .unwrap_or_else(|error| error.format(&mut command).exit());
    // Freeing clap's tree is work a one-shot command can leave to its exit.
    std::mem::forget((command, matches));
    cli
}

/// True when `args` may ask for help: no arguments at all (the top help),
/// `help`, `--help` or a cluster of short flags with `h` in it.
fn lists_subcommands(args: &[OsString]) -> bool {
    args.len() <= 1
        || args[1..].iter().any(|arg| {
            let arg = arg.to_string_lossy();
            arg == "help"
                || arg == "--help"
                || (arg.starts_with('-') && !arg.starts_with("--") && arg.contains('h'))
        })
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
    fn help_is_asked_for_by_any_of_its_spellings() {
        let asks = |args: &[&str]| {
            let args: Vec<OsString> = std::iter::once("sandboxctl")
                .chain(args.iter().copied())
                .map(OsString::from)
                .collect();
            lists_subcommands(&args)
        };
        assert!(asks(&[]));
        assert!(asks(&["help"]));
        assert!(asks(&["--help"]));
        assert!(asks(&["-h"]));
        assert!(asks(&["list", "-Vh"]));
        assert!(!asks(&["probe", "session", "ses_1"]));
        assert!(!asks(&["list", "--socket", "/tmp/h.sock"]));
    }

    #[test]
    fn the_top_help_describes_every_subcommand() {
        let help = full_command().render_help().to_string();
        for (name, about) in [
            ("probe", "Print a sandbox's live state"),
            (
                "ensure",
                "Make sure a session or workflow sandbox is running",
            ),
        ] {
            let line = help
                .lines()
                .find(|line| line.trim_start().starts_with(name));
            assert!(line.is_some_and(|line| line.contains(about)), "{help}");
        }
        assert!(!help.contains("man-page"), "{help}");
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
