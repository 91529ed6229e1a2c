//! The command line's values, checked before connecting, in the CLI's own
//! words.
//!
//! The client library checks the same rules again, naming the fields as
//! the wire does (`session_id`, `task_queue`); an admin typed `SESSION_ID`
//! and `--task-queue`, so the command line's errors name those. A value
//! that breaks a rule is a failed call (exit 1), as when the daemon refuses
//! it: the rules are the daemon's, not the command line's syntax.

use sandboxd_client::{ClientError, SandboxError, Scope};
use sandboxd_protocol::{validate, validate_command, validate_files};

use crate::cli::{Command, ConnectCommand, EnvArgs};
use crate::Failure;

/// The name an id goes by on the command line, per scope.
pub fn id_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Session => "SESSION_ID",
        Scope::Workflow => "EXECUTION_ID",
        Scope::Connect => "SANDBOX_ID",
    }
}

/// Checks every id and environment value the command carries.
pub fn arguments(command: &Command) -> Result<(), Failure> {
    let checked = match command {
        Command::Version
        | Command::Completions { .. }
        | Command::ManPage { .. }
        | Command::Status { .. }
        | Command::List { .. }
        | Command::Workspaces { .. }
        | Command::Top { .. }
        | Command::Egress(_) => Ok(()),
        Command::Events { scope, id, .. } => match (scope, id) {
            (Some(scope), Some(id)) => validate::sandbox_id(id_name(*scope), id),
            (None, Some(id)) => validate::sandbox_id("--id", id),
            _ => Ok(()),
        },
        Command::Probe { scope, id }
        | Command::Describe { scope, id }
        | Command::Deprovision { scope, id, .. }
        | Command::Pause { scope, id, .. }
        | Command::Resume { scope, id, .. }
        | Command::Logs { scope, id, .. }
        | Command::Commands { scope, id } => validate::sandbox_id(id_name(*scope), id),
        Command::Exec(args) => validate::sandbox_id(id_name(args.scope), &args.id),
        Command::Ls { scope, id, path } => {
            validate::sandbox_id(id_name(*scope), id).and_then(|()| validate_files::path(path))
        }
        Command::Cp {
            source,
            destination,
        } => [source, destination].into_iter().try_for_each(|end| {
            match crate::files::End::parse(end) {
                crate::files::End::Sandbox { scope, id, path } => {
                    validate::sandbox_id(id_name(scope), &id)
                        .and_then(|()| validate_files::path(&path))
                }
                crate::files::End::Local(_) => Ok(()),
            }
        }),
        Command::Attach {
            scope, id, command, ..
        }
        | Command::Kill {
            scope, id, command, ..
        } => validate::sandbox_id(id_name(*scope), id)
            .and_then(|()| validate_command::command_ref(&command.command_ref())),
        Command::Ensure { scope, id, env, .. } => {
            validate::sandbox_id(id_name(*scope), id).and_then(|()| environment(env))
        }
        Command::Connect(ConnectCommand::Create {
            request_id, env, ..
        }) => validate::sandbox_id("REQUEST_ID", request_id).and_then(|()| environment(env)),
        Command::Connect(ConnectCommand::Deprovision { sandbox_id, .. }) => {
            validate::sandbox_id("SANDBOX_ID", sandbox_id)
        }
    };
    checked.map_err(|error| Failure::Call(ClientError::Sandbox(error)))
}

/// The flags, named as typed; the wire's name follows in parentheses, for
/// whoever compares with the daemon's log.
fn environment(env: &EnvArgs) -> Result<(), SandboxError> {
    validate::task_queue_as("--task-queue (task_queue)", &env.task_queue)?;
    validate::caller_class_as("--caller-class (caller_class)", &env.caller_class)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(command: Command) -> String {
        match arguments(&command) {
            Err(Failure::Call(error)) => error.to_string(),
            _ => panic!("expected a refusal"),
        }
    }

    #[test]
    fn errors_name_what_the_admin_typed() {
        let text = message(Command::Probe {
            scope: Scope::Session,
            id: String::new(),
        });
        assert!(text.contains("SESSION_ID"), "{text}");
        let text = message(Command::Ensure {
            scope: Scope::Workflow,
            id: "wf".into(),
            env: EnvArgs {
                task_queue: "a\u{7}b".into(),
                caller_class: "user".into(),
                token_env: None,
            },
            fence: Default::default(),
            wait: crate::cli::WaitArgs { timeout: None },
        });
        assert!(text.contains("--task-queue"), "{text}");
    }
}
