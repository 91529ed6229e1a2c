//! Stopping a runner: SIGTERM to its whole group, and after the grace a
//! kill of its whole cgroup (SIGKILL to its group in the process-group
//! fallback).

use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::cgroup::kill;
use super::cgroup::tree::CgroupTree;
use crate::sandbox_key::SandboxKey;

/// Signals every process in the group; a group already gone is fine. A
/// stop's SIGTERM goes through `Launcher::terminate` instead, which knows
/// how the sandbox was launched.
pub fn kill_group(pgid: i32, signal: Signal) {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(error) => tracing::warn!(pgid, %signal, %error, "cannot signal runner group"),
    }
}

/// How a runner is being stopped.
pub struct Stopping {
    /// Its SIGTERM is sent already (the daemon's stop sends every
    /// runner's at once): only wait, and by its watcher (nobody waits for
    /// this answer, so no pidfd is opened to hear the exit sooner).
    pub signalled: bool,
    /// How long it has from its SIGTERM before its cgroup is killed.
    pub grace: Duration,
}

/// Asks the group to drain and returns once its leader has exited, or,
/// when `grace` passes first, once the kill of its whole cgroup (its group,
/// without one) has been sent. True when the kill was needed.
///
/// What follows the leader's exit — the rest of the cgroup killed and
/// emptied, its removal, the output drained — is the runner's watcher's,
/// and [`super::deprovision`] waits for it off the caller's time.
/// `exited`: resolves at the leader's exit (or when its watcher is gone).
/// `cgroup`: the cgroup tree and the sandbox's base name, when in force.
/// `terminate`: sends its SIGTERM, as its launcher does (see
/// `Launcher::terminate`).
pub async fn stop_runner(
    key: &SandboxKey,
    pid: u32,
    exited: impl std::future::Future<Output = ()>,
    stopping: Stopping,
    cgroup: Option<(&Arc<CgroupTree>, &str)>,
    terminate: impl FnOnce(),
) -> bool {
    let Stopping { signalled, grace } = stopping;
    // The leader's exit, seen directly: its pidfd is readable the moment
    // it exits, before its spawner thread has reaped it and told its
    // watcher (a SIGCHLD, a thread hop and two task wake-ups later).
    let exit_seen = if signalled {
        None
    } else {
        let exit_seen = leader_exit(pid);
        terminate();
        exit_seen
    };
    tokio::pin!(exited);
    let leader_gone = async {
        match exit_seen {
            Some(pidfd) => {
                tokio::select! {
                    _ = pidfd.readable() => {}
                    _ = &mut exited => {}
                }
            }
            None => {
                (&mut exited).await;
            }
        }
    };
    if tokio::time::timeout(grace, leader_gone).await.is_ok() {
        return false;
    }
    match cgroup.map(|(tree, base_name)| tree.dirs(base_name)) {
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
    true
}

/// A pidfd of the leader `pid`, watched by the runtime; `None` when it
/// cannot be opened (gone already: its watcher says so).
///
/// The pid is the daemon's unreaped child while its record exists (the
/// caller took the record, and its watcher reaps it only at its exit), so
/// it names the leader and no other process.
fn leader_exit(pid: u32) -> Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    super::pidfd::open_watched(pid as libc::pid_t).ok()
}
