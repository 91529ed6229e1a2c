//! Commands in a running sandbox: what `exec` starts, how its output is
//! read back, and the terminal proof every command is settled with.
//!
//! A command runs with exactly its sandbox's isolation, whatever the tier.
//! Its output is kept by the daemon in a bounded store per stream, so a
//! caller can disconnect, come back by id or tag, and read everything still
//! kept, in order, from any offset. Every command ends with one
//! [`CommandProof`]: how it ended, when, and what it wrote. That proof is
//! what a control plane stores against the command (the routing seed's
//! retained-process settlement), so it is given exactly once per command
//! and never changes.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{ExitReason, Expectation};

/// The most bytes one `command_output` call returns (the request frame's
/// bound keeps a chunk under a few MiB).
pub const MAX_COMMAND_CHUNK: u32 = 1024 * 1024;
/// The longest one `command_output` or `command_wait` call waits.
pub const MAX_COMMAND_WAIT_MS: u32 = 60_000;
/// The most arguments a command may have.
pub const MAX_COMMAND_ARGS: usize = 4096;
/// The most bytes of argv and environment together.
pub const MAX_COMMAND_ARGV_ENV_BYTES: usize = crate::wire::MAX_REQUEST_DATA;
/// The most bytes one `command_input` call writes.
pub const MAX_COMMAND_INPUT: usize = crate::wire::MAX_REQUEST_DATA;
/// The longest tag, in bytes.
pub const MAX_TAG_LEN: usize = 128;

/// A terminal's size, for a command given a PTY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    pub rows: u16,
    pub cols: u16,
}

/// Limits for one command alone, inside its sandbox's (never above them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandLimits {
    /// CPU quota in thousandths of a CPU (1500: one and a half CPUs).
    pub cpu_millis: Option<u32>,
    /// Memory limit in bytes.
    pub memory_bytes: Option<u64>,
}

impl CommandLimits {
    pub fn is_empty(&self) -> bool {
        self.cpu_millis.is_none() && self.memory_bytes.is_none()
    }
}

/// What `exec` starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRequest {
    /// The program and its arguments; the program is looked up in the
    /// runner's `PATH` when it has no `/`.
    pub argv: Vec<String>,
    /// Added to the runner's contract variables (its `PATH`, `HOME`,
    /// `WORKSPACE_ROOT_DIR`, …), never the runner's token.
    pub env: Vec<(String, String)>,
    /// Relative to the workspace (the workspace itself when `None`); never
    /// outside it.
    pub workdir: Option<String>,
    /// True: stdin stays open for `command_input`; false: `/dev/null`.
    pub stdin: bool,
    /// A terminal of this size as stdin, stdout and stderr (one stream).
    pub pty: Option<PtySize>,
    /// Killed, and settled `timed-out`, this long after its start.
    pub timeout_ms: Option<u64>,
    /// A name unique among the sandbox's live commands, to find it by (and
    /// to retry a start with: a tag in use is refused, so a command is
    /// never started twice for one request).
    pub tag: Option<String>,
    /// Limits for this command alone.
    pub limits: CommandLimits,
    /// Refused with `conflict`, nothing started, unless the sandbox is
    /// this incarnation.
    pub expect: Expectation,
}

/// What `exec` answers, at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecStarted {
    /// 128 random bits in hex, never reused.
    pub command_id: String,
    /// Its host pid.
    pub pid: u32,
    /// The sandbox's incarnation it runs in.
    pub uid: String,
    pub generation: u64,
}

/// Which command: by id, or by the tag of a live (or the latest) one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CommandRef {
    Id(String),
    Tag(String),
}

impl fmt::Display for CommandRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandRef::Id(id) => write!(f, "command {id}"),
            CommandRef::Tag(tag) => write!(f, "command tagged '{tag}'"),
        }
    }
}

/// One of a command's output streams. A command with a PTY writes only
/// `Stdout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl OutputStream {
    pub fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// Which bytes of a command's output to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputRead {
    pub stream: OutputStream,
    /// The stream offset to read from (0: the first byte written).
    pub offset: u64,
    /// At most this many bytes (clamped to [`MAX_COMMAND_CHUNK`]).
    pub max_bytes: u32,
    /// How long to wait when there is nothing at `offset` yet and the
    /// command has not ended (clamped to [`MAX_COMMAND_WAIT_MS`]).
    pub wait_ms: u32,
}

/// A bounded piece of one stream, from an offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandOutput {
    /// The bytes, as written (not necessarily UTF-8). Encoded as one run of
    /// bytes, not a sequence of numbers (the same bytes on the wire, but a
    /// copy instead of a call per byte: 1 GiB of output crosses in MiB
    /// chunks).
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// The stream offset of `data`'s first byte: above the offset asked
    /// for when the bytes in between were dropped (the store was full).
    pub start: u64,
    /// Where the next read continues.
    pub next: u64,
    /// Bytes lost between the offset asked for and `start`.
    pub dropped: u64,
    /// Set once the command has ended and `data` reaches the last byte
    /// the stream will ever hold: a follower stops there.
    pub proof: Option<CommandProof>,
}

/// What a stream carried over a command's life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamFigures {
    /// Bytes the command wrote.
    pub written: u64,
    /// Bytes dropped from the store before anyone read them (counted
    /// against the store's bound, whether read or not).
    pub dropped: u64,
}

/// How a command ended: given exactly once, never changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandProof {
    /// The outcome: `exited`, `signaled`, `timed-out`, `out-of-memory`,
    /// `sandbox-ended`, `daemon-stopped` or `lost`.
    pub reason: ExitReason,
    /// Its exit code, when it exited by itself.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    pub started_at_unix_ms: u64,
    pub ended_at_unix_ms: u64,
    pub stdout: StreamFigures,
    pub stderr: StreamFigures,
}

impl CommandProof {
    /// The outcome's short name (`exited`, `timed-out`, …).
    pub fn outcome(&self) -> &'static str {
        self.reason.as_str()
    }

    /// The exit code a shell would report: the code, 128 + the signal, 124
    /// for a timeout (as `timeout(1)`), 137 when the sandbox or the daemon
    /// ended it, 1 when lost.
    pub fn shell_code(&self) -> i32 {
        match self.reason {
            ExitReason::TimedOut { .. } => 124,
            _ => match (self.exit_code, self.signal) {
                (Some(code), _) => code,
                (None, Some(signal)) => 128 + signal,
                (None, None) => match self.reason {
                    ExitReason::Lost | ExitReason::Unknown => 1,
                    _ => 128 + 9,
                },
            },
        }
    }
}

/// A command's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandState {
    Running,
    Ended,
}

impl CommandState {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandState::Running => "running",
            CommandState::Ended => "ended",
        }
    }
}

/// One command, as `commands` lists it and `command_wait` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandInfo {
    pub command_id: String,
    pub tag: Option<String>,
    pub argv: Vec<String>,
    /// Its host pid.
    pub pid: u32,
    pub state: CommandState,
    pub started_at_unix_ms: u64,
    /// True when it was given a PTY (its output is one stream).
    pub pty: bool,
    /// True while its stdin is open for `command_input`.
    pub stdin_open: bool,
    /// The sandbox's incarnation it ran in (as [`ExecStarted::uid`]).
    pub uid: String,
    /// The sandbox's generation it ran in.
    pub generation: u64,
    /// Set once it has ended.
    pub proof: Option<CommandProof>,
}
