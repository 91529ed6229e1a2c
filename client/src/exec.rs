//! A started command as one handle, and `run_command`, the call a control
//! plane makes to run one to its end.
//!
//! The raw calls ([`crate::commands`]) name a command on every call and
//! read its output one bounded piece at a time. A caller almost always
//! wants the same few things of them: follow a stream to its end, feed
//! stdin, signal, resize, and get the proof. [`ExecHandle`] does those
//! against the command's id, so once it is made a later command that takes
//! the same tag is never confused with this one.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{BoxStream, Stream, StreamExt as _};
use sandboxd_protocol::commands::{MAX_COMMAND_CHUNK, MAX_COMMAND_INPUT, MAX_COMMAND_WAIT_MS};
use sandboxd_protocol::{
    CommandProof, CommandRef, ExecRequest, ExitReason, Expectation, OutputStream, Scope,
};

use crate::{ClientError, SandboxdClient};

/// How long one long-poll of a follower or `wait` waits at the daemon: the
/// longest it allows, so an idle command costs one call a minute.
const POLL_WAIT: Duration = Duration::from_millis(MAX_COMMAND_WAIT_MS as u64);

/// One command, started by [`SandboxdClient::exec_handle`] or found by
/// [`SandboxdClient::attach`]. Cheap to clone; dropping it leaves the
/// command running (it belongs to its sandbox, not to this handle).
#[derive(Clone)]
pub struct ExecHandle {
    client: SandboxdClient,
    scope: Scope,
    id: String,
    command_id: String,
    pid: u32,
}

/// What a follower yields, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputEvent {
    /// The stream's bytes from `offset` on (never empty).
    Bytes { offset: u64, data: Vec<u8> },
    /// `count` bytes before `offset` were dropped by the daemon's bounded
    /// store before this follower read them: a gap a reader must not
    /// paper over.
    Dropped { offset: u64, count: u64 },
    /// The command has ended and the stream holds nothing more: its proof.
    /// The last item.
    Ended(CommandProof),
}

impl SandboxdClient {
    /// Starts `request` in the sandbox and answers with a handle on it.
    /// Like [`SandboxdClient::exec`], never re-sent: retry with the same
    /// tag and [`SandboxdClient::attach`] by it to find the command.
    pub async fn exec_handle(
        &self,
        scope: Scope,
        id: &str,
        request: &ExecRequest,
    ) -> Result<ExecHandle, ClientError> {
        let started = self.exec(scope, id, request).await?;
        Ok(ExecHandle {
            client: self.clone(),
            scope,
            id: id.to_string(),
            command_id: started.command_id,
            pid: started.pid,
        })
    }

    /// A handle on a command already started, running or ended (as long as
    /// the daemon keeps its proof). A tag is resolved to the id of the
    /// command that has it now, once.
    pub async fn attach(
        &self,
        scope: Scope,
        id: &str,
        command: CommandRef,
    ) -> Result<ExecHandle, ClientError> {
        let info = self
            .command_wait(scope, id, &command, Duration::ZERO)
            .await?;
        Ok(ExecHandle {
            client: self.clone(),
            scope,
            id: id.to_string(),
            command_id: info.command_id,
            pid: info.pid,
        })
    }
}

impl ExecHandle {
    /// The command's id (32 hex digits).
    pub fn command_id(&self) -> &str {
        &self.command_id
    }

    /// The command's host pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    fn command(&self) -> CommandRef {
        CommandRef::Id(self.command_id.clone())
    }

    /// Follows stdout from its first byte still kept to the command's end.
    pub fn stdout(&self) -> OutputFollower {
        self.follow(OutputStream::Stdout, 0)
    }

    /// Follows stderr from its first byte still kept to the command's end
    /// (a command with a terminal writes none: its output is all stdout).
    pub fn stderr(&self) -> OutputFollower {
        self.follow(OutputStream::Stderr, 0)
    }

    /// Follows `stream` from `offset` (where an earlier follower stopped,
    /// after an error) to the command's end.
    pub fn follow(&self, stream: OutputStream, offset: u64) -> OutputFollower {
        let state = Follow {
            handle: self.clone(),
            stream,
            offset,
            done: false,
        };
        let inner = futures::stream::unfold(state, |mut state| async move {
            if state.done {
                return None;
            }
            let items = state.next_items().await;
            Some((futures::stream::iter(items), state))
        })
        .flatten()
        .boxed();
        OutputFollower { inner }
    }

    /// Writes `data` to the command's stdin (in pieces the daemon takes in
    /// one call each). The command must have been started with stdin open.
    pub async fn write_stdin(&self, data: &[u8]) -> Result<(), ClientError> {
        for piece in data.chunks(MAX_COMMAND_INPUT) {
            self.client
                .command_input(self.scope, &self.id, &self.command(), piece, false)
                .await?;
        }
        Ok(())
    }

    /// Closes the command's stdin: it reads end of file.
    pub async fn close_stdin(&self) -> Result<(), ClientError> {
        self.client
            .command_input(self.scope, &self.id, &self.command(), &[], true)
            .await
    }

    /// Sends `signal` (a number, as `libc::SIGTERM`) to the command's
    /// process group.
    pub async fn signal(&self, signal: i32) -> Result<(), ClientError> {
        self.client
            .command_signal(self.scope, &self.id, &self.command(), signal)
            .await
    }

    /// Resizes the command's terminal (it gets `SIGWINCH`).
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<(), ClientError> {
        self.client
            .command_resize(self.scope, &self.id, &self.command(), rows, cols)
            .await
    }

    /// Waits for the command's end, however long it takes, and answers
    /// its proof.
    pub async fn wait(&self) -> Result<CommandProof, ClientError> {
        loop {
            let info = self
                .client
                .command_wait(self.scope, &self.id, &self.command(), POLL_WAIT)
                .await?;
            if let Some(proof) = info.proof {
                return Ok(proof);
            }
        }
    }
}

/// The state of one follower between long-polls.
struct Follow {
    handle: ExecHandle,
    stream: OutputStream,
    offset: u64,
    done: bool,
}

impl Follow {
    /// What one long-poll brings: a gap, bytes, the end, or an error
    /// (after which the follower ends: make a new one from the offset of
    /// the last bytes seen to go on).
    async fn next_items(&mut self) -> Vec<Result<OutputEvent, ClientError>> {
        let handle = &self.handle;
        let read = handle
            .client
            .command_output(
                handle.scope,
                &handle.id,
                &handle.command(),
                self.stream,
                self.offset,
                MAX_COMMAND_CHUNK,
                POLL_WAIT,
            )
            .await;
        let chunk = match read {
            Ok(chunk) => chunk,
            Err(error) => {
                self.done = true;
                return vec![Err(error)];
            }
        };
        let mut items = Vec::new();
        if chunk.dropped > 0 {
            items.push(Ok(OutputEvent::Dropped {
                offset: chunk.start,
                count: chunk.dropped,
            }));
        }
        if !chunk.data.is_empty() {
            items.push(Ok(OutputEvent::Bytes {
                offset: chunk.start,
                data: chunk.data,
            }));
        }
        self.offset = chunk.next;
        if let Some(proof) = chunk.proof {
            self.done = true;
            items.push(Ok(OutputEvent::Ended(proof)));
        }
        items
    }
}

/// One stream of a command, read by long-poll until its end: a
/// [`Stream`] of [`OutputEvent`]s that ends after [`OutputEvent::Ended`]
/// (or after an error).
pub struct OutputFollower {
    inner: BoxStream<'static, Result<OutputEvent, ClientError>>,
}

impl Stream for OutputFollower {
    type Item = Result<OutputEvent, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

/// How `run_command` runs a command.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Killed and settled `timed-out` after this long.
    pub timeout: Option<Duration>,
    /// Refused with `conflict`, nothing started, unless the sandbox is
    /// this incarnation.
    pub expect: Expectation,
    /// Added to the runner's environment.
    pub env: Vec<(String, String)>,
    /// Relative to the workspace.
    pub workdir: Option<String>,
    /// Written to its stdin, which is then closed; `None`: `/dev/null`.
    pub stdin: Option<Vec<u8>>,
}

/// How a command run by `run_command` ended, and all it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// The outcome's short name: `exited`, `signaled`, `timed-out`, …
    pub outcome: String,
    /// Its exit code, when it exited by itself.
    pub exit_code: Option<i32>,
    pub reason: ExitReason,
    /// Its output as still kept: bytes the daemon's store dropped before
    /// they were read are missing here and counted in
    /// `proof.stdout.dropped` / `proof.stderr.dropped`.
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub proof: CommandProof,
}

impl SandboxdClient {
    /// Runs `argv` in the sandbox to its end: feeds `stdin`, collects both
    /// streams, and answers the outcome with its proof, the way a control
    /// plane settles a retained process. An end of any kind (a timeout, a
    /// signal, the sandbox going away) is an outcome, not an error; errors
    /// are calls that failed.
    pub async fn run_command(
        &self,
        scope: Scope,
        id: &str,
        argv: Vec<String>,
        options: RunOptions,
    ) -> Result<RunOutcome, ClientError> {
        let timeout_ms = options.timeout.map(|timeout| {
            u64::try_from(timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1)
        });
        let request = ExecRequest {
            argv,
            env: options.env,
            workdir: options.workdir,
            stdin: options.stdin.is_some(),
            timeout_ms,
            expect: options.expect,
            ..ExecRequest::default()
        };
        let handle = self.exec_handle(scope, id, &request).await?;
        let feed = async {
            match &options.stdin {
                Some(data) => feed_stdin(&handle, data).await,
                None => Ok(()),
            }
        };
        let (fed, stdout, stderr) =
            futures::join!(feed, collect(handle.stdout()), collect(handle.stderr()));
        fed?;
        let ((stdout, proof), (stderr, _)) = (stdout?, stderr?);
        Ok(RunOutcome {
            outcome: proof.reason.as_str().to_string(),
            exit_code: proof.exit_code,
            reason: proof.reason,
            stdout,
            stderr,
            proof,
        })
    }
}

/// Writes `data` and closes stdin. A command that ended (or closed its
/// stdin) before reading it all is not a failed run: its proof says how it
/// ended, as a shell pipeline's writer is not what decides its status.
async fn feed_stdin(handle: &ExecHandle, data: &[u8]) -> Result<(), ClientError> {
    let fed = match handle.write_stdin(data).await {
        Ok(()) => handle.close_stdin().await,
        Err(error) => Err(error),
    };
    match fed {
        Err(ClientError::Sandbox(sandboxd_protocol::SandboxError::FailedPrecondition(_))) => Ok(()),
        other => other,
    }
}

/// A whole stream and the proof that ends it.
async fn collect(mut follower: OutputFollower) -> Result<(Vec<u8>, CommandProof), ClientError> {
    let mut data = Vec::new();
    while let Some(event) = follower.next().await {
        match event? {
            OutputEvent::Bytes { data: bytes, .. } => data.extend_from_slice(&bytes),
            OutputEvent::Dropped { .. } => {}
            OutputEvent::Ended(proof) => return Ok((data, proof)),
        }
    }
    Err(ClientError::Transport(
        "a command's output ended without its proof".to_string(),
    ))
}
