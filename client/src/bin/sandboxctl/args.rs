//! The arguments several subcommands share (which sandbox, which command,
//! a fence, a deadline, a runner's environment) and the parsers of their
//! values. Each subcommand's own arguments live in its file under
//! `subcommands/`.
//!
//! The token is deliberately not an argument: argv is world-readable in
//! `/proc` and lands in shell history, so only the *name* of an
//! environment variable holding it is accepted.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use sandboxd_client::{CommandRef, Expectation, SandboxEnv, SandboxError, SandboxdClient, Scope};
use sandboxd_protocol::validate;

use crate::failure::Failure;

// Which sandbox: SCOPE and ID, the first two positionals of most
// subcommands. (No doc comment: clap would take it for a command's about.)
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// session, workflow or connect.
    #[arg(value_parser = any_scope())]
    pub scope: Scope,
    /// The session id, execution id or connect sandbox id.
    pub id: String,
}

impl SandboxArgs {
    /// The id, named as the admin typed it (`SESSION_ID`, …).
    pub fn check(&self) -> Result<(), SandboxError> {
        validate::sandbox_id(id_name(self.scope), &self.id)
    }
}

/// The name an id goes by on the command line, per scope. The client
/// library checks the same rules again, naming the fields as the wire does
/// (`session_id`); an admin typed `SESSION_ID`, so the command line's
/// errors name that.
pub fn id_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Session => "SESSION_ID",
        Scope::Workflow => "EXECUTION_ID",
        Scope::Connect => "SANDBOX_ID",
    }
}

/// Which command: by id, or by tag.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct CommandArgs {
    /// The command's id, as `exec --detach` and `commands` print it.
    #[arg(value_name = "COMMAND_ID")]
    pub command_id: Option<String>,
    /// The live command with this tag, else the latest that had it.
    #[arg(long, value_name = "TAG")]
    pub tag: Option<String>,
}

impl CommandArgs {
    pub fn command_ref(&self) -> CommandRef {
        match (&self.command_id, &self.tag) {
            (Some(id), _) => CommandRef::Id(id.clone()),
            (None, Some(tag)) => CommandRef::Tag(tag.clone()),
            (None, None) => unreachable!("clap requires one of them"),
        }
    }
}

/// A fenced call: act only on the incarnation the caller saw.
#[derive(Debug, Args, Default)]
pub struct FenceArgs {
    /// Refuse (conflict, nothing changed) unless the sandbox's uid is UID
    /// (as `describe` and `ensure --json` print it).
    #[arg(long, value_name = "UID")]
    pub expect_uid: Option<String>,
    /// Refuse (conflict, nothing changed) unless the sandbox's generation is N.
    #[arg(long, value_name = "N")]
    pub expect_generation: Option<u64>,
}

impl FenceArgs {
    pub fn expectation(&self) -> Expectation {
        Expectation {
            uid: self.expect_uid.clone(),
            generation: self.expect_generation,
        }
    }
}

/// How long a call that starts or stops a runner may wait for the daemon.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Give up on the daemon's answer after this long (300ms, 30s, 5m; at
    /// most 10m) [default: 10s; a deprovision waits at least the daemon's
    /// stop grace and 5s more, as a runner may take that long to stop].
    #[arg(long, value_name = "DURATION", value_parser = crate::time::parse_duration)]
    pub timeout: Option<std::time::Duration>,
}

impl WaitArgs {
    /// `client` with this deadline, when one was given.
    pub fn apply(&self, client: SandboxdClient) -> SandboxdClient {
        match self.timeout {
            Some(timeout) => client.with_deadline(timeout),
            None => client,
        }
    }
}

/// What the runner is started with.
#[derive(Debug, Args)]
pub struct EnvArgs {
    /// The task queue the runner polls (e.g. session:ID or wfexec:ID).
    #[arg(long, value_name = "QUEUE")]
    pub task_queue: String,

    /// The class of caller provisioning it (user, machine, runner, internal, …).
    #[arg(long, value_name = "CLASS", default_value = "internal")]
    pub caller_class: String,

    /// The environment variable holding the runner's token (the token is
    /// never taken from the command line). Without it the runner gets none.
    #[arg(long, value_name = "VAR", value_parser = env_var_name)]
    pub token_env: Option<String>,
}

impl EnvArgs {
    /// The flags, named as typed; the wire's name follows in parentheses,
    /// for whoever compares with the daemon's log.
    pub fn check(&self) -> Result<(), SandboxError> {
        validate::task_queue_as("--task-queue (task_queue)", &self.task_queue)?;
        validate::caller_class_as("--caller-class (caller_class)", &self.caller_class)
    }

    /// The environment a runner is started with; the token comes from the
    /// variable `--token-env` names, and an unset one is a usage error.
    pub fn sandbox_env(self) -> Result<SandboxEnv, Failure> {
        Ok(SandboxEnv {
            task_queue: self.task_queue,
            stigmer_token: crate::token::from_env(self.token_env.as_deref())
                .map_err(Failure::Usage)?,
            caller_class: self.caller_class,
        })
    }
}

const SCOPE_WORDS: [&str; 3] = ["session", "workflow", "connect"];

/// Any of the three scopes, listed in `--help` and in the error.
pub fn any_scope() -> impl TypedValueParser<Value = Scope> {
    PossibleValuesParser::new(SCOPE_WORDS).try_map(|word: String| word.parse::<Scope>())
}

/// A name `std::env` can look up: non-empty, no `=` and no NUL.
fn env_var_name(name: &str) -> Result<String, String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err("must be an environment variable name (non-empty, no '=' or NUL)".to_string());
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_error_names_the_id_as_the_admin_typed_it() {
        let sandbox = SandboxArgs {
            scope: Scope::Session,
            id: String::new(),
        };
        let text = sandbox.check().unwrap_err().to_string();
        assert!(text.contains("SESSION_ID"), "{text}");
    }
}
