//! Stopping a runner: SIGTERM to its whole group, SIGKILL after the grace.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use sandboxd_protocol::SandboxError;
use tokio::sync::watch;

use crate::provisioner::SandboxKey;

/// How long a SIGKILLed group may take to be reaped before we report it.
const KILL_WAIT: Duration = Duration::from_secs(30);

/// Signals every process in the group; a group already gone is fine.
pub fn kill_group(pgid: i32, signal: Signal) {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(error) => tracing::warn!(pgid, %signal, %error, "cannot signal runner group"),
    }
}

/// Asks the group to drain, escalates after `grace`, and returns once the
/// leader is reaped (the watcher says `gone`). True when SIGKILL was needed.
pub async fn stop_runner(
    key: &SandboxKey,
    pid: u32,
    mut gone: watch::Receiver<bool>,
    grace: Duration,
) -> Result<bool, SandboxError> {
    kill_group(pid as i32, Signal::SIGTERM);
    if tokio::time::timeout(grace, gone.wait_for(|gone| *gone))
        .await
        .is_ok()
    {
        return Ok(false);
    }
    tracing::warn!(scope = %key.scope, id = %key.id, pid, grace = ?grace, "runner ignored SIGTERM; killing its group");
    kill_group(pid as i32, Signal::SIGKILL);
    match tokio::time::timeout(KILL_WAIT, gone.wait_for(|gone| *gone)).await {
        Ok(_) => Ok(true),
        Err(_) => Err(SandboxError::Unavailable(format!(
            "runner pid {pid} of {} '{}' did not die within {KILL_WAIT:?} of SIGKILL",
            key.scope, key.id
        ))),
    }
}
