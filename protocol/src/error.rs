//! The one error type that crosses the wire.
//!
//! Its kinds are the ones a caller can act on differently: fix the
//! input, get access, retry later, fix the state, or report a bug. The
//! message always names what was wrong and with which input.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum SandboxError {
    /// The request itself is malformed: retrying it unchanged cannot succeed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The caller's uid/gid is not on the daemon's allow-list for this call.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The driver's runtime (process spawn, container engine, cluster) could
    /// not do the work now; the same call may succeed later.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The request is well-formed but the system is not in a state that
    /// allows it (for example a connect sandbox that already exists).
    #[error("failed precondition: {0}")]
    FailedPrecondition(String),
    /// A bug or an unexpected condition inside the daemon.
    #[error("internal error: {0}")]
    Internal(String),
    /// The sandbox the call is about does not exist (never ensured, or
    /// deprovisioned): for calls that need one to exist, such as `logs`.
    #[error("no such sandbox: {0}")]
    NotFound(String),
    /// A fenced call's expectation (uid, generation) does not hold: the
    /// sandbox is another incarnation than the caller saw. Nothing was
    /// changed; the message names expected and actual. Added in protocol 5.
    #[error("conflict: {0}")]
    Conflict(String),
}

impl SandboxError {
    /// A short, stable name for the kind, for logs and `--json` output.
    pub fn kind(&self) -> &'static str {
        match self {
            SandboxError::InvalidArgument(_) => "invalid_argument",
            SandboxError::PermissionDenied(_) => "permission_denied",
            SandboxError::Unavailable(_) => "unavailable",
            SandboxError::FailedPrecondition(_) => "failed_precondition",
            SandboxError::Internal(_) => "internal",
            SandboxError::NotFound(_) => "not_found",
            SandboxError::Conflict(_) => "conflict",
        }
    }
}
