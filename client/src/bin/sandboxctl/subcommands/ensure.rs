//! `sandboxctl ensure`: makes sure a session or workflow sandbox is
//! running, starting (or restarting) its runner when it is not.

use std::fmt::Write as _;

use clap::Args;
use sandboxd_client::{EnsureReport, SandboxError, Scope};
use sandboxd_protocol::validate;

use super::{Context, Run};
use crate::args::{id_name, EnvArgs, FenceArgs, WaitArgs};
use crate::failure::Failure;
use crate::render::{emit, shown};

/// Make sure a session or workflow sandbox is running.
#[derive(Debug, Args)]
pub struct EnsureArgs {
    /// session or workflow (connect sandboxes: `sandboxctl connect create`).
    #[arg(value_parser = ensurable_scope)]
    pub scope: Scope,
    /// The session id or workflow execution id.
    pub id: String,
    #[command(flatten)]
    pub env: EnvArgs,
    #[command(flatten)]
    pub fence: FenceArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
}

impl Run for EnsureArgs {
    fn check(&self) -> Result<(), SandboxError> {
        validate::sandbox_id(id_name(self.scope), &self.id)?;
        self.env.check()
    }

    async fn run(self, context: &Context) -> Result<String, Failure> {
        let EnsureArgs {
            scope,
            id,
            env,
            fence,
            wait,
        } = self;
        let env = env.sandbox_env()?;
        let expect = fence.expectation();
        let client = wait.apply(context.connect().await?);
        let report = if expect.is_empty() {
            client.ensure(scope, &id, &env).await?
        } else {
            client.ensure_fenced(scope, &id, &env, &expect).await?
        };
        emit(context.json, &report, |report| render(scope, &id, report))
    }
}

/// Session or workflow. Connect gets its own message because `ensure` is
/// the wrong verb for it, not merely a wrong word.
fn ensurable_scope(word: &str) -> Result<Scope, String> {
    match word.parse::<Scope>() {
        Ok(Scope::Connect) => Err("connect sandboxes are request-scoped and not idempotent, \
             so they cannot be ensured; use `sandboxctl connect create REQUEST_ID`"
            .to_string()),
        Ok(scope) => Ok(scope),
        Err(_) => Err(format!(
            "unknown scope '{word}' — ensurable scopes: session, workflow"
        )),
    }
}

/// `session abc: running (created, generation 1, pid 123)`.
fn render(scope: Scope, id: &str, report: &EnsureReport) -> String {
    let what = match (report.created, report.generation) {
        (false, _) => "already running",
        (true, 0 | 1) => "created",
        (true, _) => "restarted",
    };
    let mut details = format!("{what}, generation {}", report.generation);
    if let Some(pid) = report.pid {
        let _ = write!(details, ", pid {pid}");
    }
    let mut line = format!("{scope} {}: {} ({details})\n", shown(id), report.state);
    if !report.differs.is_empty() {
        let _ = writeln!(
            line,
            "note: it keeps running with its own {}: the request's differ (deprovision it to start one with the new ones)",
            report.differs.join(", ")
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{parse, Command};
    use clap::error::ErrorKind;
    use sandboxd_client::ProbeState;

    #[test]
    fn ensure_defaults_the_caller_class_to_internal() {
        let cli = parse(&["ensure", "session", "abc", "--task-queue", "session:abc"]).unwrap();
        let Some(Command::Ensure(EnsureArgs { scope, id, env, .. })) = cli.command else {
            panic!("not ensure")
        };
        assert_eq!((scope, id.as_str()), (Scope::Session, "abc"));
        assert_eq!(env.caller_class, "internal");
        assert_eq!(env.token_env, None);
    }

    #[test]
    fn ensure_connect_is_a_usage_error_pointing_at_connect_create() {
        let error = parse(&["ensure", "connect", "r1", "--task-queue", "q"]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ValueValidation);
        assert_eq!(error.exit_code(), 2);
        assert!(
            error.to_string().contains("sandboxctl connect create"),
            "{error}"
        );
    }

    #[test]
    fn ensure_requires_a_task_queue() {
        let error = parse(&["ensure", "workflow", "wf1"]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MissingRequiredArgument);
        assert_eq!(error.exit_code(), 2);
    }

    #[test]
    fn token_env_must_be_a_variable_name() {
        let error = parse(&[
            "ensure",
            "session",
            "a",
            "--task-queue",
            "q",
            "--token-env",
            "A=B",
        ])
        .unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }

    #[test]
    fn errors_name_what_the_admin_typed() {
        let args = EnsureArgs {
            scope: Scope::Workflow,
            id: "wf".into(),
            env: EnvArgs {
                task_queue: "a\u{7}b".into(),
                caller_class: "user".into(),
                token_env: None,
            },
            fence: Default::default(),
            wait: WaitArgs { timeout: None },
        };
        let text = args.check().unwrap_err().to_string();
        assert!(text.contains("--task-queue"), "{text}");
    }

    #[test]
    fn ensure_is_one_line() {
        let report = EnsureReport {
            state: ProbeState::Running,
            created: true,
            generation: 1,
            pid: Some(123),
            differs: Vec::new(),
            uid: String::new(),
        };
        assert_eq!(
            render(Scope::Session, "abc", &report),
            "session abc: running (created, generation 1, pid 123)\n"
        );
        let fast = EnsureReport {
            created: false,
            pid: None,
            ..report
        };
        assert_eq!(
            render(Scope::Workflow, "wf", &fast),
            "workflow wf: running (already running, generation 1)\n"
        );
        let other_queue = EnsureReport {
            differs: vec!["task_queue".into(), "token".into()],
            ..fast
        };
        assert!(
            render(Scope::Workflow, "wf", &other_queue)
                .contains("\nnote: it keeps running with its own task_queue, token: "),
            "{}",
            render(Scope::Workflow, "wf", &other_queue)
        );
    }
}
