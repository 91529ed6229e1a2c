//! `sandboxctl`: the admin CLI for sandboxd.
//!
//! Exit codes: 0 success, 1 the call failed (message on stderr), 2 the
//! command line is wrong (clap's usage errors, and a `--token-env` variable
//! that is unset); `status --check` exits 3 when the daemon is degraded and
//! 4 when it is unhealthy or unreachable (it prints `unreachable: …`), as
//! `systemctl is-active` tells by its code.
//! `exec` and `attach` exit with the command's own code (`CommandProof::
//! shell_code`: 128 + N for signal N, 124 at its timeout), as `docker exec`
//! does, so a script runs them as it would the command.
//! `egress check` asks no daemon and exits like `diff`: 0
//! when every address is allowed, 1 when any is refused, 2 on usage. Usage problems are all found before connecting, so a
//! typo never depends on whether the daemon happens to be up.
//!
//! Each subcommand is one file in `sandboxctl/subcommands/`: its
//! arguments, its call and its rendering. This file only dispatches.

// The binary's modules live in `sandboxctl/`; a crate root resolves
// `mod` paths from its own directory, hence the explicit paths.
#[path = "sandboxctl/args.rs"]
mod args;
#[path = "sandboxctl/cli.rs"]
mod cli;
#[path = "sandboxctl/failure.rs"]
mod failure;
#[path = "sandboxctl/figures.rs"]
mod figures;
#[path = "sandboxctl/follow_output.rs"]
mod follow_output;
#[path = "sandboxctl/render.rs"]
mod render;
#[path = "sandboxctl/subcommands/mod.rs"]
mod subcommands;
#[path = "sandboxctl/terminal_text.rs"]
mod terminal_text;
#[path = "sandboxctl/time.rs"]
mod time;
#[path = "sandboxctl/token.rs"]
mod token;
#[path = "sandboxctl/tree_copy.rs"]
mod tree_copy;
#[path = "sandboxctl/tty.rs"]
mod tty;
#[path = "sandboxctl/units.rs"]
mod units;
#[path = "sandboxctl/view.rs"]
mod view;

use std::io::{self, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use sandboxd_client::default_socket_path;

use crate::cli::{Cli, Command};
use crate::failure::Failure;
use crate::subcommands::egress::EgressCommand;
use crate::subcommands::{call, version, Context};

fn main() -> ExitCode {
    let cli = cli::parse_args();
    // Offline: before the socket is even looked for.
    if let Some(Command::Egress(command)) = &cli.command {
        return egress_check(command, cli.json);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(1, &format!("cannot start the async runtime: {error}")),
    };
    match runtime.block_on(run(cli)) {
        Ok(text) => print(&text),
        Err(Failure::Usage(message)) => fail(2, &message),
        Err(Failure::Call(error)) => fail(1, &error.to_string()),
        Err(Failure::Output(message)) => fail(1, &message),
        Err(Failure::Exit(code)) => ExitCode::from(code),
        Err(Failure::NotHealthy { text, code }) => match print(&text) {
            ExitCode::SUCCESS => ExitCode::from(code),
            failed => failed,
        },
    }
}

/// `egress check`: prints every verdict, then exits 1 if any was a refusal.
fn egress_check(command: &EgressCommand, json: bool) -> ExitCode {
    let (text, any_refused) = match command.answer(json) {
        Ok(answer) => answer,
        Err(Failure::Output(message)) => return fail(1, &message),
        Err(_) => return fail(1, "cannot print the verdicts"),
    };
    let printed = print(&text);
    if printed == ExitCode::SUCCESS && any_refused {
        ExitCode::from(1)
    } else {
        printed
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("sandboxctl: {message}");
    ExitCode::from(code)
}

/// Writes the answer; a closed pipe (`sandboxctl list | head`) is not an error.
fn print(text: &str) -> ExitCode {
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => fail(1, &format!("cannot write the output: {error}")),
    }
}

/// Runs the subcommand: the ones that need no daemon first, then the
/// others with the socket found (each checks its values before connecting).
async fn run(cli: Cli) -> Result<String, Failure> {
    let Cli {
        version,
        socket,
        json,
        command,
    } = cli;
    let command = match command {
        Some(command) if !version => command,
        _ => Command::Version,
    };
    match command {
        // Generated from the clap definitions; no daemon needed.
        Command::Completions(args) => return Ok(args.script(cli::full_command())),
        Command::ManPage(args) => return args.answer(cli::full_command()),
        // `main` answers this before any socket is looked for (its exit
        // code depends on the verdicts); the arm keeps the match total.
        Command::Egress(command) => return command.answer(json).map(|(text, _)| text),
        // The client's own version needs no daemon.
        Command::Version => return version::answer(socket_path(socket), json).await,
        _ => {}
    }
    let context = Context {
        socket: socket_path(socket)?,
        json,
    };
    match command {
        Command::Completions(_) | Command::ManPage(_) | Command::Egress(_) | Command::Version => {
            unreachable!("answered above")
        }
        Command::Status(args) => call(args, &context).await,
        Command::List(args) => call(args, &context).await,
        Command::Workspaces(args) => call(args, &context).await,
        Command::Probe(args) => call(args, &context).await,
        Command::Describe(args) => call(args, &context).await,
        Command::Top(args) => call(args, &context).await,
        Command::Ensure(args) => call(args, &context).await,
        Command::Deprovision(args) => call(args, &context).await,
        Command::Pause(args) => call(args, &context).await,
        Command::Resume(args) => call(args, &context).await,
        Command::Connect(command) => call(command, &context).await,
        Command::Logs(args) => call(args, &context).await,
        Command::Events(args) => call(args, &context).await,
        Command::Exec(args) => call(args, &context).await,
        Command::Commands(args) => call(args, &context).await,
        Command::Cp(args) => call(args, &context).await,
        Command::Ls(args) => call(args, &context).await,
        Command::Attach(args) => call(args, &context).await,
        Command::Kill(args) => call(args, &context).await,
    }
}

/// `--socket`, else the library's default (which reads `SANDBOXD_SOCKET`).
fn socket_path(flag: Option<PathBuf>) -> Result<PathBuf, Failure> {
    match flag {
        Some(path) => Ok(path),
        None => default_socket_path().map_err(|error| Failure::Usage(error.to_string())),
    }
}
