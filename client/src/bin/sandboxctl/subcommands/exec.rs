//! `sandboxctl exec`: runs a command in a running sandbox with `docker
//! exec` and `kubectl exec` habits.
//!
//! In the foreground it streams the command's stdout and stderr to its
//! own, forwards its stdin with `-i` (its end closes the command's), and
//! exits with the command's code (128 + N for signal N, 124 at its
//! timeout), so a script can run it as it would the command itself. With
//! `-t` the command gets a terminal of this terminal's size, kept in step
//! on every SIGWINCH, and sandboxctl's own terminal is raw while it runs
//! (restored on every way out). SIGINT, SIGTERM and SIGHUP sent to
//! sandboxctl are passed on to the command rather than leaving it running
//! unseen. `--detach` starts it, prints its id and exits 0.

use std::io::{self, IsTerminal as _, Read as _};
use std::time::Duration;

use clap::Args;
use sandboxd_client::{
    CommandLimits, CommandProof, ExecHandle, ExecRequest, PtySize, SandboxError,
};
use tokio::signal::unix::{signal, Signal, SignalKind};

use super::{Context, Run};
use crate::args::SandboxArgs;
use crate::failure::Failure;
use crate::follow_output;
use crate::render::emit;
use crate::tty::{self, RawMode};

/// The terminal size given when sandboxctl's own has none to copy.
const DEFAULT_SIZE: PtySize = PtySize { rows: 24, cols: 80 };

/// Run a command in a running sandbox, with its isolation (as `docker
/// exec`): its stdout and stderr streamed to sandboxctl's, and its exit
/// code sandboxctl's (128+N for signal N, 124 at --timeout).
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Forward sandboxctl's stdin to the command's (its end of file closes
    /// the command's stdin). Without it the command's stdin is /dev/null.
    #[arg(long, short = 'i')]
    pub interactive: bool,
    /// Give the command a terminal (stdin, stdout and stderr, one stream)
    /// the size of this one; with -i this terminal is put in raw mode while
    /// it runs and $TERM is passed on.
    #[arg(long, short = 't')]
    pub tty: bool,
    /// Start it, print its id and exit 0 (see `commands`, `attach`, `kill`).
    #[arg(long, short = 'd', conflicts_with = "interactive")]
    pub detach: bool,
    /// A name to find it by (`attach --tag`); a tag a live command has is
    /// refused, so a retried start never runs it twice.
    #[arg(long, value_name = "TAG")]
    pub tag: Option<String>,
    /// Kill it after this long (300ms, 30s, 5m, 1h30m); it then ends
    /// timed-out and sandboxctl exits 124.
    #[arg(long, value_name = "DURATION", value_parser = crate::time::parse_duration)]
    pub timeout: Option<Duration>,
    /// CPUs for this command alone (1.5: one and a half).
    #[arg(long, value_name = "CPUS", value_parser = crate::units::cpu_millis)]
    pub cpu: Option<u32>,
    /// Memory for this command alone (512m, 2g).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size_bytes)]
    pub memory: Option<u64>,
    /// Set an environment variable in it (repeatable).
    #[arg(long, short = 'e', value_name = "NAME=VALUE", value_parser = env_pair)]
    pub env: Vec<(String, String)>,
    /// Its working directory, relative to the workspace [default: the
    /// workspace].
    #[arg(long, short = 'w', value_name = "DIR")]
    pub workdir: Option<String>,
    /// Print its bytes as they are even on a terminal [default: control
    /// characters escaped on a terminal; pipes always get the bytes].
    #[arg(long)]
    pub raw: bool,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// The program and its arguments (after `--` when they start with `-`).
    #[arg(
        value_name = "COMMAND",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub argv: Vec<String>,
}

/// `NAME=VALUE`.
fn env_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("'{text}' is not NAME=VALUE")),
    }
}

impl ExecArgs {
    /// The request, with `size` for a terminal.
    fn request(&self, size: Option<PtySize>) -> ExecRequest {
        let mut env = self.env.clone();
        let term = std::env::var("TERM").ok().filter(|term| !term.is_empty());
        if let Some(term) = term.filter(|_| self.tty) {
            if !env.iter().any(|(name, _)| name == "TERM") {
                env.push(("TERM".to_string(), term));
            }
        }
        ExecRequest {
            argv: self.argv.clone(),
            env,
            workdir: self.workdir.clone(),
            stdin: self.interactive,
            pty: size,
            timeout_ms: self
                .timeout
                .map(|timeout| u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            tag: self.tag.clone(),
            limits: CommandLimits {
                cpu_millis: self.cpu,
                memory_bytes: self.memory,
            },
            expect: Default::default(),
        }
    }
}

impl Run for ExecArgs {
    fn check(&self) -> Result<(), SandboxError> {
        self.sandbox.check()
    }

    /// Runs the command as the flags say; answers what to print (the id
    /// when detached) or sandboxctl's exit.
    async fn run(self, context: &Context) -> Result<String, Failure> {
        let client = context.connect().await?;
        let SandboxArgs { scope, id } = &self.sandbox;
        let size = self.tty.then(|| tty::window_size().unwrap_or(DEFAULT_SIZE));
        let request = self.request(size);
        if self.detach {
            let started = client.exec(*scope, id, &request).await?;
            return emit(context.json, &started, |started| {
                format!("{}\n", started.command_id)
            });
        }
        let handle = client.exec_handle(*scope, id, &request).await?;
        let raw_mode = if self.tty && self.interactive && io::stdin().is_terminal() {
            match RawMode::enter() {
                Ok(mode) => Some(mode),
                Err(error) => {
                    eprintln!("sandboxctl: cannot put this terminal in raw mode: {error}");
                    None
                }
            }
        } else {
            None
        };
        let proof = foreground(&handle, &self).await;
        drop(raw_mode);
        follow_output::ended(&handle, &proof?)
    }
}

/// Prints the output to its end while stdin, window changes and signals
/// are passed on; neither of those ends it, only the command's end does.
async fn foreground(handle: &ExecHandle, args: &ExecArgs) -> Result<CommandProof, Failure> {
    let input = async {
        if args.interactive {
            forward_stdin(handle).await;
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        proof = follow_output::print_both(handle, args.raw || args.tty) => proof,
        () = input => unreachable!("pending never completes"),
        () = relay_signals(handle, args.tty) => unreachable!("relaying never ends"),
    }
}

/// Copies stdin to the command's until end of file, then closes it. A
/// command that ended or closed its stdin first only stops the copy.
async fn forward_stdin(handle: &ExecHandle) {
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    // A thread of its own: a read of stdin cannot be cancelled, and a
    // detached thread never holds up sandboxctl's exit when the command
    // ends while it waits for a key.
    std::thread::spawn(move || {
        let mut stdin = io::stdin().lock();
        let mut buffer = vec![0; 64 * 1024];
        loop {
            match stdin.read(&mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(read) => {
                    if sender.blocking_send(buffer[..read].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    while let Some(data) = receiver.recv().await {
        if let Err(error) = handle.write_stdin(&data).await {
            return stdin_stopped(&error);
        }
    }
    if let Err(error) = handle.close_stdin().await {
        stdin_stopped(&error);
    }
}

fn stdin_stopped(error: &sandboxd_client::ClientError) {
    use sandboxd_client::{ClientError, SandboxError};
    if !matches!(
        error,
        ClientError::Sandbox(SandboxError::FailedPrecondition(_))
    ) {
        eprintln!("sandboxctl: stdin is no longer forwarded: {error}");
    }
}

/// Passes SIGINT, SIGTERM and SIGHUP on to the command, and with a
/// terminal every window size change. Never ends.
async fn relay_signals(handle: &ExecHandle, tty: bool) {
    let mut interrupt = listen(SignalKind::interrupt());
    let mut terminate = listen(SignalKind::terminate());
    let mut hangup = listen(SignalKind::hangup());
    let mut resized = listen(SignalKind::window_change()).filter(|_| tty);
    loop {
        let number = tokio::select! {
            () = caught(&mut interrupt) => libc::SIGINT,
            () = caught(&mut terminate) => libc::SIGTERM,
            () = caught(&mut hangup) => libc::SIGHUP,
            () = caught(&mut resized) => {
                if let Some(size) = tty::window_size() {
                    if let Err(error) = handle.resize(size.rows, size.cols).await {
                        eprintln!("sandboxctl: cannot resize the command's terminal: {error}");
                    }
                }
                continue;
            }
        };
        if let Err(error) = handle.signal(number).await {
            eprintln!("sandboxctl: cannot pass signal {number} on to the command: {error}");
        }
    }
}

fn listen(kind: SignalKind) -> Option<Signal> {
    signal(kind)
        .inspect_err(|error| eprintln!("sandboxctl: cannot catch a signal to pass on: {error}"))
        .ok()
}

/// The next delivery of `signal`; never, for one not listened to.
async fn caught(signal: &mut Option<Signal>) {
    if let Some(signal) = signal {
        if signal.recv().await.is_some() {
            return;
        }
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use crate::cli::{parse, Command};

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
}
