//! The command line, as clap parses it.
//!
//! Everything that is wrong with the command line itself is caught here, so
//! it exits 2 (clap's usage-error code) before any connection is made. The
//! token is deliberately not an argument: argv is world-readable in `/proc`
//! and lands in shell history, so only the *name* of an environment
//! variable holding it is accepted.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use sandboxd_client::egress::Posture;
use sandboxd_client::Scope;

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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the client's and the daemon's versions and protocol versions.
    Version,

    /// Print a shell completion script (systemd/install.sh installs them).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },

    /// Print a man page, in roff (systemd/install.sh installs them all).
    #[command(hide = true)]
    ManPage {
        /// The page: `sandboxctl` (the default) or `sandboxctl-<subcommand>`.
        name: Option<String>,
        /// Print the file name of every page instead, one a line.
        #[arg(long, conflicts_with = "name")]
        list: bool,
    },

    /// Show the daemon's version, driver, health, uptime and sandbox counts.
    Status {
        /// Print only the health verdict, and exit 0 when healthy, 3 when
        /// degraded, 4 when unhealthy (1 when the daemon cannot be asked).
        #[arg(long)]
        check: bool,
    },

    /// List the sandboxes the daemon owns, by scope and then id.
    List {
        /// Only sandboxes of this scope.
        #[arg(long, value_name = "SCOPE", value_parser = any_scope())]
        scope: Option<Scope>,
        /// Leave the header line out.
        #[arg(long)]
        no_headers: bool,
        /// Print only the ids, one a line.
        #[arg(long, short = 'q')]
        quiet: bool,
        /// `wide`: every column, and ids in full [default: the columns that
        /// fit the terminal ($COLUMNS, else 80), long ids cut with …].
        #[arg(long, short = 'o', value_name = "FORMAT", value_parser = ["wide"])]
        output: Option<String>,
    },

    /// List every workspace kept on the daemon's disk (process tier),
    /// running or not, with its sandbox id, size, last use and when
    /// `workspace_ttl` removes it. Remove a stopped sandbox's workspace with
    /// `sandboxctl deprovision SCOPE ID`.
    Workspaces {
        /// Only workspaces of this scope.
        #[arg(long, value_name = "SCOPE", value_parser = any_scope())]
        scope: Option<Scope>,
        /// `wide`: every column (the base NAME too), and ids in full
        /// [default: the columns that fit the terminal ($COLUMNS, else 80)].
        #[arg(long, short = 'o', value_name = "FORMAT", value_parser = ["wide"])]
        output: Option<String>,
    },

    /// Print a sandbox's live state: absent, stopped or running.
    Probe {
        /// session, workflow or connect.
        #[arg(value_parser = any_scope())]
        scope: Scope,
        /// The session id, execution id or connect sandbox id.
        id: String,
    },

    /// Print one sandbox's facts.
    Describe {
        /// session, workflow or connect.
        #[arg(value_parser = any_scope())]
        scope: Scope,
        /// The session id, execution id or connect sandbox id.
        id: String,
    },

    /// Show the running sandboxes' CPU, memory and tasks, refreshed every
    /// --delay (like systemd-cgtop and docker stats), largest first.
    Top {
        /// Only sandboxes of this scope.
        #[arg(long, value_name = "SCOPE", value_parser = any_scope())]
        scope: Option<Scope>,
        /// Order by CPU share (between two samples) or by memory.
        #[arg(long, value_enum, default_value = "cpu")]
        sort: crate::top::SortBy,
        /// Print one table (two samples --delay apart, for the CPU share)
        /// and exit; with --json, one JSON array.
        #[arg(long)]
        once: bool,
        /// Seconds between samples.
        #[arg(long, short = 'd', value_name = "SECONDS", default_value = "1", value_parser = delay)]
        delay: std::time::Duration,
    },

    /// Make sure a session or workflow sandbox is running.
    Ensure {
        /// session or workflow (connect sandboxes: `sandboxctl connect create`).
        #[arg(value_parser = ensurable_scope)]
        scope: Scope,
        /// The session id or workflow execution id.
        id: String,
        #[command(flatten)]
        env: EnvArgs,
        #[command(flatten)]
        fence: FenceArgs,
        #[command(flatten)]
        wait: WaitArgs,
    },

    /// Tear a sandbox down (a missing one is success).
    Deprovision {
        /// session, workflow or connect.
        #[arg(value_parser = any_scope())]
        scope: Scope,
        /// The session id, execution id or connect sandbox id.
        id: String,
        /// Keep the sandbox's workspace on disk, for debugging.
        #[arg(long)]
        keep_workspace: bool,
        #[command(flatten)]
        fence: FenceArgs,
        #[command(flatten)]
        wait: WaitArgs,
    },

    /// Freeze a sandbox's runner where it stands: same pid and generation,
    /// memory and workspace kept, no CPU. `probe` then says stopped,
    /// `describe` and `list` paused; `ensure` or `resume` resumes it.
    Pause {
        /// session, workflow or connect.
        #[arg(value_parser = any_scope())]
        scope: Scope,
        /// The session id, execution id or connect sandbox id.
        id: String,
        #[command(flatten)]
        wait: WaitArgs,
    },

    /// Resume a paused sandbox's runner (same pid and generation).
    Resume {
        /// session, workflow or connect.
        #[arg(value_parser = any_scope())]
        scope: Scope,
        /// The session id, execution id or connect sandbox id.
        id: String,
        #[command(flatten)]
        wait: WaitArgs,
    },

    /// Request-scoped connect sandboxes.
    #[command(subcommand)]
    Connect(ConnectCommand),

    /// Print a sandbox's output (its runner's stdout and stderr).
    Logs {
        /// session, workflow or connect.
        #[arg(value_parser = any_scope())]
        scope: Scope,
        /// The session id, execution id or connect sandbox id.
        id: String,
        /// Only the last N lines [default: everything still kept].
        #[arg(long, value_name = "N")]
        tail: Option<u32>,
        /// Keep printing new output as it is written, until interrupted.
        #[arg(long, short = 'f')]
        follow: bool,
        /// Print the runner's bytes as they are even on a terminal
        /// [default: control characters escaped on a terminal; pipes always
        /// get the bytes].
        #[arg(long)]
        raw: bool,
    },

    /// The egress postures' address table, offline (no daemon needed).
    #[command(subcommand)]
    Egress(EgressCommand),

    /// Print what happened to sandboxes (created, started, exited with its
    /// reason, deprovisioned, adopted, changed, paused, resumed), one line
    /// per event, oldest first.
    /// Exits at the newest event unless --follow.
    Events {
        /// Only the events after this cursor (printed with --json) [default:
        /// from the oldest the daemon keeps]. A cursor from before a daemon
        /// restart, or older than the daemon keeps, is refused as expired.
        #[arg(long, value_name = "CURSOR")]
        since: Option<sandboxd_client::EventCursor>,
        /// Keep printing events as they happen, until interrupted.
        #[arg(long, short = 'f')]
        follow: bool,
        /// Only events of this scope.
        #[arg(long, value_name = "SCOPE", value_parser = any_scope())]
        scope: Option<Scope>,
        /// Only events of this sandbox id.
        #[arg(long, value_name = "ID")]
        id: Option<String>,
    },

    /// Run a command in a running sandbox, with its isolation (as `docker
    /// exec`): its stdout and stderr streamed to sandboxctl's, and its exit
    /// code sandboxctl's (128+N for signal N, 124 at --timeout).
    Exec(crate::exec::ExecArgs),

    /// List a sandbox's commands: running ones and the ended ones whose
    /// proof the daemon still keeps, oldest first.
    Commands {
        /// session, workflow or connect.
        #[arg(value_parser = any_scope())]
        scope: Scope,
        /// The session id, execution id or connect sandbox id.
        id: String,
    },

    /// Copy a file or a directory into or out of a sandbox's workspace,
    /// as the sandbox's user: `cp ./file session:ses_42:sub/file`, `cp
    /// ./dir session:ses_42:sub` (a directory, as a tar stream), `cp
    /// session:ses_42:sub/dir ./out`, `cp session:ses_42:out.txt -` (a
    /// file's bytes to stdout), `cp session:ses_42:dir -` and `cp -
    /// session:ses_42:dir` (a tar stream on stdout or stdin, as docker cp
    /// has it). A path in a sandbox is SCOPE:ID:PATH, relative to its
    /// workspace; a directory copied into an existing directory lands
    /// under its own name, to a new path under that path's name.
    Cp {
        /// A local file or directory (or - for stdin: a tar stream when
        /// the destination is a directory), or SCOPE:ID:PATH.
        source: String,
        /// SCOPE:ID:PATH (a directory there takes the source's name), or a
        /// local path (or - for stdout: a tar stream of a directory).
        destination: String,
    },

    /// List a directory of a sandbox's workspace (the workspace itself
    /// without PATH): name, type, size, mode and when it was modified.
    Ls {
        /// session, workflow or connect.
        #[arg(value_parser = any_scope())]
        scope: Scope,
        /// The session id, execution id or connect sandbox id.
        id: String,
        /// Relative to the workspace.
        #[arg(default_value = "")]
        path: String,
    },

    /// Print a command's output from the first byte still kept, follow it
    /// to the command's end, and exit with its code. Interrupting it leaves
    /// the command running.
    #[command(
        override_usage = "sandboxctl attach [OPTIONS] <SCOPE> <ID> <COMMAND_ID | --tag <TAG>>"
    )]
    Attach {
        /// session, workflow or connect.
        #[arg(value_parser = any_scope())]
        scope: Scope,
        /// The session id, execution id or connect sandbox id.
        id: String,
        #[command(flatten)]
        command: CommandArgs,
        /// Print its bytes as they are even on a terminal [default: control
        /// characters escaped on a terminal; pipes always get the bytes].
        #[arg(long)]
        raw: bool,
    },

    /// Send a signal to a command (its process group) and print its id.
    #[command(
        override_usage = "sandboxctl kill [OPTIONS] <SCOPE> <ID> <COMMAND_ID | --tag <TAG>>"
    )]
    Kill {
        /// session, workflow or connect.
        #[arg(value_parser = any_scope())]
        scope: Scope,
        /// The session id, execution id or connect sandbox id.
        id: String,
        #[command(flatten)]
        command: CommandArgs,
        /// A name (TERM, SIGKILL, HUP) or a number (9).
        #[arg(long, short = 's', value_name = "SIGNAL", default_value = "TERM",
              value_parser = crate::kill::signal_number)]
        signal: i32,
    },
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
    pub fn command_ref(&self) -> sandboxd_client::CommandRef {
        match (&self.command_id, &self.tag) {
            (Some(id), _) => sandboxd_client::CommandRef::Id(id.clone()),
            (None, Some(tag)) => sandboxd_client::CommandRef::Tag(tag.clone()),
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
    pub fn expectation(&self) -> sandboxd_client::Expectation {
        sandboxd_client::Expectation {
            uid: self.expect_uid.clone(),
            generation: self.expect_generation,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum EgressCommand {
    /// Say whether a posture lets a sandbox dial each address, and why not.
    /// Exits 0 when every address is allowed and 1 when any is refused
    /// (like `diff`), so scripts can test it.
    Check {
        /// The posture to judge by: relaxed refuses only link-local (cloud
        /// metadata); strict also loopback, private and unspecified.
        #[arg(long, value_name = "POSTURE", default_value = "relaxed", value_parser = posture())]
        posture: Posture,
        /// IP addresses (IPv4, IPv6, `[::1]`, `fe80::1%eth0`). Host names
        /// are not resolved: they are refused as unrecognized.
        #[arg(value_name = "ADDRESS", required = true)]
        addresses: Vec<String>,
    },
}

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
    pub fn apply(
        &self,
        client: sandboxd_client::SandboxdClient,
    ) -> sandboxd_client::SandboxdClient {
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

const SCOPE_WORDS: [&str; 3] = ["session", "workflow", "connect"];

/// Any of the three scopes, listed in `--help` and in the error.
pub fn any_scope() -> impl TypedValueParser<Value = Scope> {
    PossibleValuesParser::new(SCOPE_WORDS).try_map(|word: String| word.parse::<Scope>())
}

/// `relaxed` or `strict`, listed in `--help` and in the error.
fn posture() -> impl TypedValueParser<Value = Posture> {
    PossibleValuesParser::new(Posture::ALL.map(Posture::as_str))
        .try_map(|word: String| word.parse::<Posture>())
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

/// A name `std::env` can look up: non-empty, no `=` and no NUL.
fn env_var_name(name: &str) -> Result<String, String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err("must be an environment variable name (non-empty, no '=' or NUL)".to_string());
    }
    Ok(name.to_string())
}

/// `--delay`: seconds, at least 0.1 (a sample costs the daemon a read of
/// every running sandbox's counters).
fn delay(text: &str) -> Result<std::time::Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if !(0.1..=3600.0).contains(&seconds) {
        return Err(format!("{seconds} s is out of range (0.1 to 3600)"));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("sandboxctl").chain(args.iter().copied()))
    }

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
        assert!(matches!(
            cli.command,
            Some(Command::List {
                scope: Some(Scope::Workflow),
                ..
            })
        ));
    }

    #[test]
    fn ensure_defaults_the_caller_class_to_internal() {
        let cli = parse(&["ensure", "session", "abc", "--task-queue", "session:abc"]).unwrap();
        let Command::Ensure { scope, id, env, .. } = cli.command.unwrap() else {
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

    #[test]
    fn ensure_requires_a_task_queue() {
        let error = parse(&["ensure", "workflow", "wf1"]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MissingRequiredArgument);
        assert_eq!(error.exit_code(), 2);
    }

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
    fn logs_takes_tail_and_follow() {
        let cli = parse(&["logs", "workflow", "wf-1", "--tail", "20", "-f"]).unwrap();
        assert!(matches!(
            cli.command.unwrap(),
            Command::Logs {
                scope: Scope::Workflow,
                tail: Some(20),
                follow: true,
                raw: false,
                ..
            }
        ));
        let cli = parse(&["logs", "session", "s", "--raw"]).unwrap();
        assert!(matches!(
            cli.command.unwrap(),
            Command::Logs { raw: true, .. }
        ));
        let cli = parse(&["logs", "session", "s"]).unwrap();
        assert!(matches!(
            cli.command.unwrap(),
            Command::Logs {
                tail: None,
                follow: false,
                ..
            }
        ));
        let error = parse(&["logs", "session", "s", "--tail", "-1"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }

    #[test]
    fn egress_check_takes_a_posture_and_addresses() {
        let cli = parse(&["egress", "check", "--posture", "strict", "::1", "10.0.0.1"]).unwrap();
        let Some(Command::Egress(EgressCommand::Check { posture, addresses })) = cli.command else {
            panic!("not egress check")
        };
        assert_eq!(posture, Posture::Strict);
        assert_eq!(addresses, ["::1", "10.0.0.1"]);

        let cli = parse(&["egress", "check", "169.254.169.254"]).unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::Egress(EgressCommand::Check {
                posture: Posture::Relaxed,
                ..
            }))
        ));

        let error = parse(&["egress", "check"]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MissingRequiredArgument);
        let error = parse(&["egress", "check", "--posture", "none", "::1"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("relaxed, strict"), "{error}");
    }

    #[test]
    fn exec_takes_everything_after_the_sandbox_as_the_command() {
        let cli = parse(&["exec", "-it", "session", "s", "--", "ls", "-l", "--json"]).unwrap();
        assert!(!cli.json);
        let Some(Command::Exec(args)) = cli.command else {
            panic!("not exec")
        };
        assert!(args.interactive && args.tty && !args.detach);
        assert_eq!(args.argv, ["ls", "-l", "--json"]);
        let cli = parse(&[
            "exec",
            "--cpu",
            "1.5",
            "--memory",
            "512m",
            "--timeout",
            "2m",
            "-e",
            "A=b=c",
            "session",
            "s",
            "make",
            "-j4",
        ])
        .unwrap();
        let Some(Command::Exec(args)) = cli.command else {
            panic!("not exec")
        };
        assert_eq!(args.argv, ["make", "-j4"]);
        assert_eq!((args.cpu, args.memory), (Some(1500), Some(512 << 20)));
        assert_eq!(args.timeout, Some(std::time::Duration::from_secs(120)));
        assert_eq!(args.env, [("A".to_string(), "b=c".to_string())]);
        for bad in [
            &["exec", "session", "s"][..],
            &["exec", "-d", "-i", "session", "s", "true"],
        ] {
            assert_eq!(parse(bad).unwrap_err().exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn attach_and_kill_name_one_command_by_id_or_tag() {
        let cli = parse(&["kill", "session", "s", "--tag", "build", "-s", "KILL"]).unwrap();
        let Some(Command::Kill {
            command, signal, ..
        }) = cli.command
        else {
            panic!("not kill")
        };
        assert_eq!(
            command.command_ref(),
            sandboxd_client::CommandRef::Tag("build".into())
        );
        assert_eq!(signal, 9);
        let cli = parse(&["attach", "session", "s", "abc"]).unwrap();
        let Some(Command::Attach { command, raw, .. }) = cli.command else {
            panic!("not attach")
        };
        assert_eq!(
            command.command_ref(),
            sandboxd_client::CommandRef::Id("abc".into())
        );
        assert!(!raw);
        assert!(parse(&["attach", "session", "s"]).is_err());
        assert!(parse(&["kill", "session", "s", "abc", "--tag", "t"]).is_err());
    }

    #[test]
    fn deprovision_takes_keep_workspace() {
        let cli = parse(&["deprovision", "connect", "sbx", "--keep-workspace"]).unwrap();
        assert!(matches!(
            cli.command.unwrap(),
            Command::Deprovision {
                scope: Scope::Connect,
                keep_workspace: true,
                ..
            }
        ));
    }
}
