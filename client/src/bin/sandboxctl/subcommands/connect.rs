//! `sandboxctl connect create` and `connect deprovision`: request-scoped
//! connect sandboxes. Unlike `ensure`, a create is not idempotent: each
//! makes a new sandbox and prints its id, which the deprovision then names.

use clap::Subcommand;
use sandboxd_client::{SandboxError, Scope};
use sandboxd_protocol::validate;

use super::{deprovision, Context, Run};
use crate::args::{EnvArgs, FenceArgs, WaitArgs};
use crate::failure::Failure;
use crate::render::emit;

// `connect`'s subcommands. (No doc comment: clap would take it for
// `connect`'s about, which `cli::Command` gives.)
#[derive(Debug, Subcommand)]
pub enum ConnectCommand {
    /// Create the request's connect sandbox and print its sandbox id.
    Create {
        /// The connect request's id.
        request_id: String,
        #[command(flatten)]
        env: EnvArgs,
        #[command(flatten)]
        wait: WaitArgs,
    },

    /// Tear a connect sandbox down (a missing one is success).
    Deprovision {
        /// The sandbox id `connect create` printed.
        sandbox_id: String,
        #[command(flatten)]
        fence: FenceArgs,
        #[command(flatten)]
        wait: WaitArgs,
    },
}

impl Run for ConnectCommand {
    fn check(&self) -> Result<(), SandboxError> {
        match self {
            ConnectCommand::Create {
                request_id, env, ..
            } => {
                validate::sandbox_id("REQUEST_ID", request_id)?;
                env.check()
            }
            ConnectCommand::Deprovision { sandbox_id, .. } => {
                validate::sandbox_id("SANDBOX_ID", sandbox_id)
            }
        }
    }

    async fn run(self, context: &Context) -> Result<String, Failure> {
        match self {
            ConnectCommand::Create {
                request_id,
                env,
                wait,
            } => {
                let env = env.sandbox_env()?;
                let sandbox_id = wait
                    .apply(context.connect().await?)
                    .create_connect_sandbox(&request_id, &env)
                    .await?;
                let answer =
                    serde_json::json!({ "request_id": request_id, "sandbox_id": sandbox_id });
                emit(context.json, &answer, |_| format!("{sandbox_id}\n"))
            }
            ConnectCommand::Deprovision {
                sandbox_id,
                fence,
                wait,
            } => {
                let expect = fence.expectation();
                let client = wait.apply(context.connect().await?);
                let report = if expect.is_empty() {
                    client.deprovision_connect_sandbox(&sandbox_id).await?
                } else {
                    client
                        .deprovision_connect_fenced(&sandbox_id, &expect)
                        .await?
                };
                emit(context.json, &report, |report| {
                    deprovision::render(Scope::Connect, &sandbox_id, report, false)
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{parse, Command};

    #[test]
    fn connect_subcommands_parse() {
        let cli = parse(&[
            "connect",
            "create",
            "req-1",
            "--task-queue",
            "q",
            "--caller-class",
            "user",
            "--token-env",
            "MY_TOKEN",
        ])
        .unwrap();
        let Command::Connect(ConnectCommand::Create {
            request_id, env, ..
        }) = cli.command.unwrap()
        else {
            panic!("not connect create")
        };
        assert_eq!(request_id, "req-1");
        assert_eq!(env.caller_class, "user");
        assert_eq!(env.token_env.as_deref(), Some("MY_TOKEN"));

        let cli = parse(&["connect", "deprovision", "sbx-1"]).unwrap();
        assert!(matches!(
            cli.command.unwrap(),
            Command::Connect(ConnectCommand::Deprovision { sandbox_id, .. }) if sandbox_id == "sbx-1"
        ));
    }
}
