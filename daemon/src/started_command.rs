//! The seam between a tier that starts a command in a sandbox and the one
//! store that keeps every command's output and proof (see
//! [`crate::commands`]).
//!
//! A tier starts the process with its sandbox's isolation and hands back
//! what the store needs and nothing else: the pid, the process's streams,
//! a way to signal and resize it, and a future that resolves once, with
//! how it ended as only the tier can tell (a sandbox that ended, an OOM
//! kill, the daemon stopping). Timeouts, output bounds, proofs and events
//! are the store's, the same for every tier.

use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use sandboxd_protocol::{CommandLimits, ExitReason, Expectation, PtySize, SandboxError};
use tokio::io::{AsyncRead, AsyncWrite};

/// What a tier is asked to start, validated already.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// The command's id, made by the store before the start, so a tier
    /// that keeps a record of it (to find it again after a restart of the
    /// daemon) can name it.
    pub id: String,
    pub tag: Option<String>,
    pub timeout_ms: Option<u64>,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Relative to the workspace, without `..` (checked); the tier still
    /// resolves it beneath the workspace, so a symlink cannot lead out.
    pub workdir: Option<String>,
    pub stdin: bool,
    pub pty: Option<PtySize>,
    pub limits: CommandLimits,
    pub expect: Expectation,
}

/// A byte stream out of a started command.
pub type OutputReader = Pin<Box<dyn AsyncRead + Send>>;
/// A started command's stdin (or its terminal's input).
pub type InputWriter = Pin<Box<dyn AsyncWrite + Send>>;

/// A command a tier has started.
pub struct StartedCommand {
    /// Its pid as its tier sees it: the host's on the process and docker
    /// tiers, the pod's on kubernetes (there is no host pid to give).
    pub pid: u32,
    /// The sandbox incarnation it runs in.
    pub uid: String,
    pub generation: u64,
    /// Its stdout (its terminal's output, with a PTY).
    pub stdout: OutputReader,
    /// Its stderr; `None` with a PTY (one stream).
    pub stderr: Option<OutputReader>,
    /// Its stdin, when asked to keep it open (its terminal, with a PTY).
    pub stdin: Option<InputWriter>,
    pub control: Box<dyn CommandControl>,
    /// Resolves once, when the process has ended.
    pub end: Pin<Box<dyn Future<Output = CommandEnd> + Send>>,
}

/// A command a tier found still its own when the daemon started: begun
/// by an earlier daemon, still running (or ended while no daemon looked),
/// and followed again from now on. Its output before now is not kept.
pub struct RecoveredCommand {
    pub id: String,
    pub key: crate::sandbox_key::SandboxKey,
    pub tag: Option<String>,
    pub argv: Vec<String>,
    pub pty: bool,
    pub started_at_unix_ms: u64,
    pub timeout_ms: Option<u64>,
    /// Its control and its end; its streams read nothing.
    pub command: StartedCommand,
}

/// How a started command ended, as its tier saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandEnd {
    pub reason: ExitReason,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

impl CommandEnd {
    /// An end the wait status alone explains: a code or a signal.
    pub fn from_status(exit_code: Option<i32>, signal: Option<i32>) -> CommandEnd {
        let reason = match (signal, exit_code) {
            (Some(signal), _) => ExitReason::Signaled { signal },
            (None, Some(code)) => ExitReason::Exited { code },
            (None, None) => ExitReason::Unknown,
        };
        CommandEnd {
            reason,
            exit_code,
            signal,
        }
    }

    /// The same end, for this reason instead (the tier knows better).
    pub fn because(self, reason: ExitReason) -> CommandEnd {
        CommandEnd { reason, ..self }
    }
}

/// The refusal of a command in a sandbox that is not running (`what`
/// names it, as `SandboxKey::what` does): a command never starts its
/// sandbox.
pub fn not_running(what: &str, why: &str) -> SandboxError {
    SandboxError::FailedPrecondition(format!(
        "cannot run a command in {what}: {why} (a command never starts its sandbox: ensure it first)"
    ))
}

/// The refusal of a command in a paused sandbox.
pub fn paused(what: &str) -> SandboxError {
    SandboxError::FailedPrecondition(format!(
        "cannot run a command in {what}: it is paused (resume it first; a command started now would be frozen with it)"
    ))
}

/// What can be done to a running command.
#[async_trait]
pub trait CommandControl: Send + Sync {
    /// Sends `signal` to the command and everything in its process group.
    async fn signal(&self, signal: i32) -> Result<(), SandboxError>;

    /// Resizes its terminal; a command without one is a failed precondition.
    async fn resize(&self, size: PtySize) -> Result<(), SandboxError>;
}
