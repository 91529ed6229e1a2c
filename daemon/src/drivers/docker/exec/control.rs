//! Signalling and resizing a docker-tier command.
//!
//! The Engine API has no call to signal an exec (only its container), so a
//! signal goes to the exec's host pid with `kill(2)`: the daemon runs as
//! root beside a local engine, and the pid the engine reports is a host
//! pid. The engine's runtime makes an exec's process lead its own session,
//! so its whole process group is signalled, as on the process tier. A
//! process the daemon cannot see (an engine on another host, or a daemon
//! in another pid namespace) cannot be signalled: that is refused by name.
//! Before each signal the pid is checked to still be the same process
//! (its start time), so a reused pid is never signalled.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bollard::exec::ResizeExecOptions;
use sandboxd_protocol::{PtySize, SandboxError};

use super::super::engine::{Engine, WRITE_TIMEOUT};
use crate::started_command::CommandControl;

/// Where the exec's process is, as this host sees it.
#[derive(Debug, Clone, Copy)]
pub enum Host {
    Process(HostProcess),
    /// Not there, though the container's init is: it has ended already.
    Ended,
    /// This host does not show the container's processes.
    Unseen,
}

impl Host {
    pub fn find(pid: u32, init_pid: Option<u32>, container: &str) -> Host {
        if let Some(process) = HostProcess::find(pid, container) {
            return Host::Process(process);
        }
        let init_seen = init_pid.is_some_and(|init| HostProcess::find(init, container).is_some());
        if init_seen {
            Host::Ended
        } else {
            Host::Unseen
        }
    }
}

/// The exec's process as this host sees it.
#[derive(Debug, Clone, Copy)]
pub struct HostProcess {
    pid: libc::pid_t,
    /// Its start time (`/proc/PID/stat` field 22), to tell it from a
    /// later process given the same pid.
    start_time: u64,
}

impl HostProcess {
    /// The process `pid`, when this host has it and it is in `container`'s
    /// cgroup (a pid from another pid namespace names another process, or
    /// none). `None` too when it has already ended: then there is nothing
    /// left to signal either.
    pub fn find(pid: u32, container: &str) -> Option<HostProcess> {
        let pid = libc::pid_t::try_from(pid).ok()?;
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        if container.is_empty() || !cgroup.contains(container) {
            return None;
        }
        let (start_time, _) = stat(pid)?;
        Some(HostProcess { pid, start_time })
    }

    /// Sends `signal` to its process group when it leads one, else to it
    /// alone; one that has ended is left be.
    fn signal(&self, signal: i32) -> std::io::Result<()> {
        let Some((start_time, group)) = stat(self.pid) else {
            return Ok(());
        };
        if start_time != self.start_time {
            return Ok(());
        }
        let target = if group == self.pid {
            -self.pid
        } else {
            self.pid
        };
        // SAFETY: kill with a pid (or a negated process group id) and a
        // plain signal number; no memory is involved.
        if unsafe { libc::kill(target, signal) } < 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::ESRCH) {
                return Err(error);
            }
        }
        Ok(())
    }
}

/// Start time and process group of `pid`, from `/proc/PID/stat`.
fn stat(pid: libc::pid_t) -> Option<(u64, libc::pid_t)> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Fields 22 (start time) and 5 (process group) of a `/proc/PID/stat`.
/// The command name (field 2) may hold spaces and parentheses: the fields
/// after its last `)` start at field 3 (the state).
fn parse_stat(text: &str) -> Option<(u64, libc::pid_t)> {
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let group = fields.get(2)?.parse().ok()?;
    let start_time = fields.get(19)?.parse().ok()?;
    Some((start_time, group))
}

pub struct ExecControl {
    pub engine: Arc<Engine>,
    pub exec_id: String,
    pub pid: u32,
    pub host: Host,
    pub tty: bool,
    /// Set once the exec has ended: its pid may name another process then.
    pub exited: Arc<AtomicBool>,
    /// The last signal sent (0: none), so the end can tell an exit code of
    /// 128 + N that this signal N explains.
    pub sent: Arc<AtomicI32>,
}

#[async_trait]
impl CommandControl for ExecControl {
    async fn signal(&self, signal: i32) -> Result<(), SandboxError> {
        if self.exited.load(Ordering::Acquire) {
            return Ok(());
        }
        let host = match self.host {
            Host::Process(process) => process,
            Host::Ended => return Ok(()),
            Host::Unseen => {
                return Err(SandboxError::FailedPrecondition(format!(
                    "cannot send signal {signal} to command pid {}: the Engine API cannot signal an exec, and this host does not show the container's processes (an engine on another host, or a daemon in another pid namespace)",
                    self.pid
                )))
            }
        };
        self.sent.store(signal, Ordering::Release);
        host.signal(signal).map_err(|error| {
            SandboxError::Unavailable(format!(
                "cannot send signal {signal} to command pid {}: {error}",
                self.pid
            ))
        })
    }

    async fn resize(&self, size: PtySize) -> Result<(), SandboxError> {
        if !self.tty {
            return Err(SandboxError::FailedPrecondition(format!(
                "command pid {} has no terminal to resize (start it with a pty)",
                self.pid
            )));
        }
        resize_exec(&self.engine, &self.exec_id, size).await
    }
}

/// Sets the terminal size of exec `exec_id` (the engine waits for its
/// start when it has not started yet).
pub async fn resize_exec(
    engine: &Engine,
    exec_id: &str,
    size: PtySize,
) -> Result<(), SandboxError> {
    let (id, options) = (
        exec_id.to_string(),
        ResizeExecOptions {
            height: size.rows,
            width: size.cols,
        },
    );
    engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.resize_exec(&id, options).await
        })
        .await
        .map_err(|error| {
            error.into_sandbox_error(&format!("cannot resize the terminal of exec {exec_id}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_found_by_its_stat_and_not_in_another_cgroup() {
        let pid = std::process::id() as libc::pid_t;
        let (start_time, group) = stat(pid).expect("our own stat");
        assert!(start_time > 0);
        assert!(group > 0);
        assert!(HostProcess::find(pid as u32, "no-such-container-id").is_none());
        assert!(HostProcess::find(pid as u32, "").is_none());
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let line =
            "29 (a) b (c)) S 8 29 29 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 154238 2703360 267";
        assert_eq!(parse_stat(line), Some((154238, 29)));
        assert_eq!(parse_stat("29 (cut short) S 8"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }
}
