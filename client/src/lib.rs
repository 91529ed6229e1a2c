//! The client side of `sandboxd`: what a control plane links to provision
//! and tear down agent-runner sandboxes, and what `sandboxctl` is built on.
//!
//! ```no_run
//! # async fn example() -> Result<(), sandboxd_client::ClientError> {
//! use sandboxd_client::{SandboxdClient, SandboxEnv, Token};
//!
//! let client = SandboxdClient::connect_default().await?;
//! let env = SandboxEnv {
//!     task_queue: "session:ses_01".into(),
//!     stigmer_token: Token::new("…"),
//!     caller_class: "user".into(),
//! };
//! let report = client.ensure_session_sandbox("ses_01", &env).await?;
//! assert!(report.pid.is_some() || !report.created);
//! # Ok(())
//! # }
//! ```
//!
//! The client speaks the wire contract in `sandboxd-protocol` and nothing
//! else: one tarpc connection over the daemon's Unix socket, checked for a
//! matching protocol version before first use, shared by every clone of the
//! handle, re-established once for idempotent calls when the daemon
//! restarts, and bounded by a per-call deadline.

mod builder;
mod calls;
mod chunk_pipeline;
mod client;
mod commands;
mod connection;
pub mod deadline;
mod error;
mod events;
mod exec;
mod fenced;
mod file_stream;
mod files;
mod lifecycle;
mod multiplex;
mod outgoing;
mod socket_path;
mod stop_wait;
mod tar_reader;
mod tar_stream;

pub use builder::ClientBuilder;
pub use client::SandboxdClient;
pub use deadline::{DEFAULT_DEADLINE, MAX_DEADLINE};
pub use error::ClientError;
pub use events::StreamItem;
pub use exec::{ExecHandle, OutputEvent, OutputFollower, RunOptions, RunOutcome};
pub use socket_path::{default_socket_path, SOCKET_ENV, SYSTEM_SOCKET, USER_SOCKET_SUFFIX};
pub use tar_reader::TarReader;
pub use tar_stream::TarStreamError;

/// The egress postures and their address table (SPEC §9): the one table
/// the control plane and the daemon both judge addresses with.
pub use sandboxd_protocol::egress;
pub use sandboxd_protocol::usage::cpu_percent;
pub use sandboxd_protocol::WorkspaceInfo;
pub use sandboxd_protocol::{
    ClusterState, DaemonStatus, DeprovisionReport, EgressStatus, EnsureReport, ExitInfo,
    IsolationFeature, LogChunk, LogCursor, LogStart, ProbeState, SandboxCounts, SandboxEnv,
    SandboxError, SandboxInfo, Scope, Token, MAX_LOG_CHUNK, PROTOCOL_VERSION,
};
pub use sandboxd_protocol::{
    CommandInfo, CommandLimits, CommandOutput, CommandProof, CommandRef, CommandState,
    EventCommand, ExecRequest, ExecStarted, OutputStream, PtySize, StreamFigures,
};
pub use sandboxd_protocol::{Event, EventCursor, EventKind, EventsReply, ExitReason, Expectation};
pub use sandboxd_protocol::{FileChunk, FileList, FileStat, FileType, PutChunk, PutReport};
pub use sandboxd_protocol::{Health, HealthVerdict, PauseReport, Shown};
pub use sandboxd_protocol::{SandboxUsage, Usage};
pub use sandboxd_protocol::{ViewEntry, ViewKind};
