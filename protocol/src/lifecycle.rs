//! Pausing and resuming a sandbox (protocol 8): what the two calls answer.
//!
//! A paused sandbox keeps its runner — same pid, same generation, memory
//! and workspace intact — but the runner gets no CPU: the process tier
//! freezes its cgroup, the docker tier pauses its container. `probe` says
//! `stopped` for it (the seed's three states); `describe` and `list` say
//! since when it is paused ([`crate::SandboxInfo::paused_since_unix_ms`]).
//! `ensure` of a paused sandbox resumes it, on the fast path.

use serde::{Deserialize, Serialize};

/// What a `pause` or `resume` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseReport {
    /// False when the sandbox already was in the state asked for (still a
    /// success: both calls are idempotent).
    pub changed: bool,
    /// The runner's generation, unchanged by either call.
    pub generation: u64,
    /// The runner's pid (process tier).
    pub pid: Option<u32>,
    /// When it was paused, in milliseconds since the Unix epoch; `None`
    /// once resumed.
    pub paused_since_unix_ms: Option<u64>,
}
