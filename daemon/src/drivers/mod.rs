//! The isolation tiers behind [`crate::provisioner::Driver`].

pub mod archive_names;
pub mod cgroup_files;
pub mod differs;
pub mod docker;
pub mod idle_sessions;
use std::future::Future;

use sandboxd_protocol::SandboxError;

pub mod key_lock;
pub mod kubernetes;
pub mod lifecycle;
pub mod local_process;
pub mod refused_syscalls;
pub mod select;
pub mod upload_partials;

/// Runs `work` in a task of its own and waits for it. The server drops a
/// call's future at the caller's deadline; work that must not stop halfway
/// once begun (a kill's escalation to SIGKILL, a created container's start)
/// runs here, so it finishes whether or not anyone still waits.
pub async fn run_to_completion<T: Send + 'static>(
    what: &str,
    work: impl Future<Output = Result<T, SandboxError>> + Send + 'static,
) -> Result<T, SandboxError> {
    tokio::spawn(work)
        .await
        .map_err(|error| SandboxError::Internal(format!("{what} task failed: {error}")))?
}
