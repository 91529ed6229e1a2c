//! Stopping a runner: SIGTERM to its whole group, and after the grace a
//! kill of its whole cgroup (SIGKILL to its group in the process-group
//! fallback).

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use sandboxd_protocol::SandboxError;
use tokio::sync::oneshot;

use super::cgroup::kill::{self, Dirs};
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
/// leader is reaped and its cgroup emptied (the watcher says `gone`). True
/// when SIGKILL was needed. `cgroup`: the runner's cgroup, when in force.
pub async fn stop_runner(
    key: &SandboxKey,
    pid: u32,
    mut gone: oneshot::Receiver<()>,
    grace: Duration,
    cgroup: Option<Dirs>,
) -> Result<bool, SandboxError> {
    kill_group(pid as i32, Signal::SIGTERM);
    // A dropped sender (a watcher that ended early) also means gone.
    if tokio::time::timeout(grace, &mut gone).await.is_ok() {
        return Ok(false);
    }
    match cgroup {
        Some(dirs) => {
            tracing::warn!(scope = %key.scope, id = %key.id, pid, grace = ?grace, "runner ignored SIGTERM; killing its cgroup");
            // Blocking only in the freezer loop of kernels without cgroup.kill.
            let killed = tokio::task::spawn_blocking(move || kill::kill(&dirs)).await;
            if !matches!(killed, Ok(Ok(()))) {
                tracing::error!(pid, result = ?killed, "cannot kill the runner's cgroup; killing its group");
                kill_group(pid as i32, Signal::SIGKILL);
            }
        }
        None => {
            tracing::warn!(scope = %key.scope, id = %key.id, pid, grace = ?grace, "runner ignored SIGTERM; killing its group");
            kill_group(pid as i32, Signal::SIGKILL);
        }
    }
    match tokio::time::timeout(KILL_WAIT, &mut gone).await {
        Ok(_) => Ok(true),
        Err(_) => Err(SandboxError::Unavailable(format!(
            "runner pid {pid} of {} '{}' did not die within {KILL_WAIT:?} of SIGKILL",
            key.scope, key.id
        ))),
    }
}
