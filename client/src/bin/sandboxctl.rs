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

// The binary's modules live in `sandboxctl/`; a crate root resolves
// `mod` paths from its own directory, hence the explicit paths.
#[path = "sandboxctl/attach.rs"]
mod attach;
#[path = "sandboxctl/checks.rs"]
mod checks;
#[path = "sandboxctl/cli.rs"]
mod cli;
#[path = "sandboxctl/commands.rs"]
mod commands;
#[path = "sandboxctl/egress.rs"]
mod egress;
#[path = "sandboxctl/events.rs"]
mod events;
#[path = "sandboxctl/exec.rs"]
mod exec;
#[path = "sandboxctl/figures.rs"]
mod figures;
#[path = "sandboxctl/files.rs"]
mod files;
#[path = "sandboxctl/follow_output.rs"]
mod follow_output;
#[path = "sandboxctl/generated.rs"]
mod generated;
#[path = "sandboxctl/kill.rs"]
mod kill;
#[path = "sandboxctl/logs.rs"]
mod logs;
#[path = "sandboxctl/man.rs"]
mod man;
#[path = "sandboxctl/render.rs"]
mod render;
#[path = "sandboxctl/terminal_text.rs"]
mod terminal_text;
#[path = "sandboxctl/time.rs"]
mod time;
#[path = "sandboxctl/token.rs"]
mod token;
#[path = "sandboxctl/top.rs"]
mod top;
#[path = "sandboxctl/tree_copy.rs"]
mod tree_copy;
#[path = "sandboxctl/tty.rs"]
mod tty;
#[path = "sandboxctl/units.rs"]
mod units;
#[path = "sandboxctl/versions.rs"]
mod versions;
#[path = "sandboxctl/view.rs"]
mod view;

use std::io::{self, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use sandboxd_client::egress as egress_posture;
use sandboxd_client::{
    default_socket_path, ClientError, HealthVerdict, SandboxEnv, SandboxdClient, Scope,
};
use serde::Serialize;

use crate::cli::{Cli, Command, ConnectCommand, EgressCommand, EnvArgs};
use crate::egress::EgressCheck;
use crate::time::now_unix_ms;

/// Why a run did not succeed, which decides the exit code.
enum Failure {
    /// The command line or its environment is wrong: exit 2.
    Usage(String),
    /// The call failed: exit 1.
    Call(ClientError),
    /// The answer could not be printed: exit 1.
    Output(String),
    /// `status --check` found the daemon not healthy: print the answer,
    /// exit with this code.
    NotHealthy { text: String, code: u8 },
    /// `exec` or `attach`: the command ended with this (non-zero) shell
    /// code, which becomes sandboxctl's; it already printed what it wrote.
    Exit(u8),
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        Failure::Call(error)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Offline: before the socket is even looked for.
    if let Some(Command::Egress(EgressCommand::Check { posture, addresses })) = &cli.command {
        return egress_check(cli.json, *posture, addresses);
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
fn egress_check(json: bool, posture: egress_posture::Posture, addresses: &[String]) -> ExitCode {
    let check = EgressCheck::judge(posture, addresses);
    let text = match emit(json, &check, render::egress_check) {
        Ok(text) => text,
        Err(Failure::Output(message)) => return fail(1, &message),
        Err(_) => return fail(1, "cannot print the verdicts"),
    };
    let printed = print(&text);
    if printed == ExitCode::SUCCESS && check.any_refused() {
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
    // Generated from the clap definitions; no daemon needed.
    match command {
        Command::Completions { shell } => return Ok(generated::completions(shell)),
        Command::ManPage { name, list } => {
            if list {
                let pages = man::pages().map_err(Failure::Output)?;
                return Ok(pages
                    .iter()
                    .map(|page| format!("{}\n", page.file_name))
                    .collect());
            }
            return man::page(name.as_deref().unwrap_or("sandboxctl")).map_err(Failure::Usage);
        }
        _ => {}
    }
    let socket = match (socket_path(socket), &command) {
        (Ok(socket), _) => socket,
        // The client's own version needs no daemon.
        (Err(Failure::Usage(why)), Command::Version) => {
            return emit(json, &versions::client_only(why), versions::render)
        }
        (Err(failure), _) => return Err(failure),
    };
    checks::arguments(&command)?;
    let connect = || SandboxdClient::connect(&socket);

    match command {
        Command::Completions { .. } | Command::ManPage { .. } => unreachable!("answered above"),
        Command::Version => {
            let versions = versions::ask(&socket).await;
            emit(json, &versions, versions::render)
        }
        Command::Status { check } => {
            let status = match connect().await {
                Ok(client) => client.status().await,
                Err(error) => Err(error),
            };
            let status = match status {
                Ok(status) => status,
                // A script asking for a verdict gets one: the daemon is down.
                Err(error) if check && unreachable(&error) => {
                    let text = emit(
                        json,
                        &serde_json::json!({ "verdict": "unreachable", "reasons": [error.to_string()] }),
                        |_| format!("unreachable: {error}\n"),
                    )?;
                    return Err(Failure::NotHealthy { text, code: 4 });
                }
                Err(error) => return Err(error.into()),
            };
            if !check {
                return emit(json, &status, render::status);
            }
            let text = emit(json, &status.health, render::verdict)?;
            match status.health.verdict {
                HealthVerdict::Healthy => Ok(text),
                HealthVerdict::Degraded => Err(Failure::NotHealthy { text, code: 3 }),
                HealthVerdict::Unhealthy => Err(Failure::NotHealthy { text, code: 4 }),
            }
        }
        Command::List {
            scope,
            no_headers,
            quiet,
            output,
        } => {
            let sandboxes = render::sorted(&connect().await?.list(scope).await?);
            let style = render::ListStyle {
                wide: output.is_some(),
                headers: !no_headers,
                width: terminal_width(),
            };
            emit(json, &sandboxes, |sandboxes| {
                if quiet {
                    render::ids(sandboxes)
                } else {
                    render::list_styled(sandboxes, now_unix_ms(), style)
                }
            })
        }
        Command::Workspaces { scope, output } => {
            let workspaces = connect().await?.workspaces(scope).await?;
            let style = render::ListStyle {
                wide: output.is_some(),
                headers: true,
                width: terminal_width(),
            };
            emit(json, &workspaces, |workspaces| {
                render::workspaces_styled(workspaces, now_unix_ms(), style)
            })
        }
        Command::Probe { scope, id } => {
            let state = connect().await?.probe(scope, &id).await?;
            let answer = serde_json::json!({ "scope": scope, "id": id, "state": state });
            emit(json, &answer, |_| format!("{state}\n"))
        }
        Command::Describe { scope, id } => {
            let info = connect().await?.describe(scope, &id).await?;
            emit(json, &info, |info| render::describe(info, now_unix_ms()))
        }
        Command::Top {
            scope,
            sort,
            once,
            delay,
        } => {
            let client = connect().await?;
            let mut earlier = client.usage(scope).await?;
            loop {
                tokio::time::sleep(delay).await;
                let later = client.usage(scope).await?;
                let rows = top::rows(&earlier, later.clone(), sort);
                earlier = later;
                let text = emit(json, &rows, |rows| {
                    top::render(rows, terminal_width(), sort)
                })?;
                if once {
                    return Ok(text);
                }
                // A screen of its own each refresh, as top does; a pipe
                // gets the tables one after another.
                let clear = if !json && io::IsTerminal::is_terminal(&io::stdout()) {
                    "\x1b[H\x1b[2J"
                } else {
                    ""
                };
                let mut stdout = io::stdout().lock();
                match write!(stdout, "{clear}{text}").and_then(|()| stdout.flush()) {
                    Ok(()) => {}
                    Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
                        return Ok(String::new())
                    }
                    Err(error) => {
                        return Err(Failure::Output(format!("cannot write the output: {error}")))
                    }
                }
            }
        }
        Command::Ensure {
            scope,
            id,
            env,
            fence,
            wait,
        } => {
            let env = sandbox_env(env)?;
            let expect = fence.expectation();
            let client = wait.apply(connect().await?);
            let report = if expect.is_empty() {
                client.ensure(scope, &id, &env).await?
            } else {
                client.ensure_fenced(scope, &id, &env, &expect).await?
            };
            emit(json, &report, |report| render::ensure(scope, &id, report))
        }
        Command::Deprovision {
            scope,
            id,
            keep_workspace,
            fence,
            wait,
        } => {
            let expect = fence.expectation();
            let client = wait.apply(connect().await?);
            let report = if expect.is_empty() {
                client.deprovision(scope, &id, keep_workspace).await?
            } else {
                client
                    .deprovision_fenced(scope, &id, keep_workspace, &expect)
                    .await?
            };
            emit(json, &report, |report| {
                render::deprovision(scope, &id, report, keep_workspace)
            })
        }
        Command::Pause { scope, id, wait } => {
            let report = wait.apply(connect().await?).pause(scope, &id).await?;
            emit(json, &report, |report| {
                render::paused(scope, &id, report, true)
            })
        }
        Command::Resume { scope, id, wait } => {
            let report = wait.apply(connect().await?).resume(scope, &id).await?;
            emit(json, &report, |report| {
                render::paused(scope, &id, report, false)
            })
        }
        Command::Connect(ConnectCommand::Create {
            request_id,
            env,
            wait,
        }) => {
            let env = sandbox_env(env)?;
            let sandbox_id = wait
                .apply(connect().await?)
                .create_connect_sandbox(&request_id, &env)
                .await?;
            let answer = serde_json::json!({ "request_id": request_id, "sandbox_id": sandbox_id });
            emit(json, &answer, |_| format!("{sandbox_id}\n"))
        }
        Command::Events {
            since,
            follow,
            scope,
            id,
        } => {
            let filter = events::Filter { scope, id };
            events::print(&connect().await?, since, follow, json, &filter).await?;
            Ok(String::new())
        }
        Command::Logs {
            scope,
            id,
            tail,
            follow,
            raw,
        } => {
            // Streamed as it arrives rather than returned: it may not end.
            let view = logs::LogView { follow, json, raw };
            logs::print(&connect().await?, scope, &id, tail, view).await?;
            Ok(String::new())
        }
        Command::Exec(args) => exec::run(&connect().await?, args, json).await,
        Command::Commands { scope, id } => {
            commands::print(&connect().await?, scope, &id, json).await
        }
        Command::Cp {
            source,
            destination,
        } => files::copy(&connect().await?, &source, &destination).await,
        Command::Ls { scope, id, path } => {
            files::list(&connect().await?, scope, &id, &path, json).await
        }
        Command::Attach {
            scope,
            id,
            command,
            raw,
        } => attach::follow(&connect().await?, scope, &id, command.command_ref(), raw).await,
        Command::Kill {
            scope,
            id,
            command,
            signal,
        } => {
            let client = connect().await?;
            kill::send(&client, scope, &id, command.command_ref(), signal, json).await
        }
        // `main` answers this before any socket is looked for (its exit
        // code depends on the verdicts); the arm keeps the match total.
        Command::Egress(EgressCommand::Check { posture, addresses }) => {
            let check = EgressCheck::judge(posture, &addresses);
            emit(json, &check, render::egress_check)
        }
        Command::Connect(ConnectCommand::Deprovision {
            sandbox_id,
            fence,
            wait,
        }) => {
            let expect = fence.expectation();
            let client = wait.apply(connect().await?);
            let report = if expect.is_empty() {
                client.deprovision_connect_sandbox(&sandbox_id).await?
            } else {
                client
                    .deprovision_connect_fenced(&sandbox_id, &expect)
                    .await?
            };
            emit(json, &report, |report| {
                render::deprovision(Scope::Connect, &sandbox_id, report, false)
            })
        }
    }
}

/// True when the daemon could not be reached at all (as opposed to
/// answering with an error).
fn unreachable(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::NotRunning { .. }
            | ClientError::SocketPermissionDenied { .. }
            | ClientError::ConnectFailed { .. }
            | ClientError::Transport(_)
            | ClientError::DeadlineExceeded
    )
}

/// The width the narrow `list` fits: `$COLUMNS` when a shell exports it,
/// else the classic 80.
fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|columns| columns.parse::<usize>().ok())
        .filter(|&columns| columns >= 40)
        .unwrap_or(80)
}

/// `--socket`, else the library's default (which reads `SANDBOXD_SOCKET`).
fn socket_path(flag: Option<PathBuf>) -> Result<PathBuf, Failure> {
    match flag {
        Some(path) => Ok(path),
        None => default_socket_path().map_err(|error| Failure::Usage(error.to_string())),
    }
}

/// The environment a runner is started with; the token comes from the
/// variable `--token-env` names, and an unset one is a usage error.
fn sandbox_env(args: EnvArgs) -> Result<SandboxEnv, Failure> {
    Ok(SandboxEnv {
        task_queue: args.task_queue,
        stigmer_token: token::from_env(args.token_env.as_deref()).map_err(Failure::Usage)?,
        caller_class: args.caller_class,
    })
}

/// JSON when asked for, else the human rendering.
fn emit<T: Serialize>(
    json: bool,
    value: &T,
    human: impl FnOnce(&T) -> String,
) -> Result<String, Failure> {
    if !json {
        return Ok(human(value));
    }
    serde_json::to_string_pretty(value)
        .map(|mut text| {
            text.push('\n');
            text
        })
        .map_err(|error| Failure::Output(format!("cannot encode the answer as JSON: {error}")))
}
