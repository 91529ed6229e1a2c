//! The wire contract between `sandboxd` and its clients.
//!
//! Everything both ends must agree on lives here and nowhere else: the tarpc
//! service, the types it carries, the naming of runtime objects, the input
//! rules, the error enum and the framing. The crate does no I/O, so the
//! control plane can link it without pulling in the daemon.

pub mod commands;
/// The byte buffer `command_input` carries (one run of bytes on the wire).
pub use serde_bytes::ByteBuf;
pub mod egress;
pub mod error;
pub mod events;
pub mod exit_reason;
pub mod fence;
pub mod files;
pub mod lifecycle;
pub mod naming;
pub mod service;
pub mod shown;
pub mod types;
pub mod usage;
pub mod validate;
pub mod validate_command;
pub mod validate_files;
pub mod view;
pub mod wire;

pub use commands::{
    CommandInfo, CommandLimits, CommandOutput, CommandProof, CommandRef, CommandState, ExecRequest,
    ExecStarted, OutputRead, OutputStream, PtySize, StreamFigures,
};
pub use error::SandboxError;
pub use events::{Event, EventCommand, EventCursor, EventKind, EventsReply};
pub use exit_reason::ExitReason;
pub use fence::Expectation;
pub use files::{FileChunk, FileList, FileStat, FileType, PutChunk, PutReport};
pub use lifecycle::PauseReport;
pub use service::{Sandboxd, SandboxdClient, PROTOCOL_VERSION};
pub use shown::Shown;
pub use types::*;
pub use usage::{SandboxUsage, Usage};
pub use view::{ViewEntry, ViewKind};
