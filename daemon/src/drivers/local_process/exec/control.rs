//! Signalling and resizing a process-tier command.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use sandboxd_protocol::{PtySize, SandboxError};

use super::stdio;
use crate::started_command::CommandControl;

pub struct ProcessControl {
    /// The command's pid, which is also its process group's id (it leads
    /// its own session).
    pid: libc::pid_t,
    /// Set once it has been reaped: its pid may name another process then.
    exited: Arc<AtomicBool>,
    /// Its terminal's leader side, when it has one.
    terminal: Option<OwnedFd>,
}

impl ProcessControl {
    pub fn new(pid: libc::pid_t, exited: Arc<AtomicBool>, terminal: Option<OwnedFd>) -> Self {
        ProcessControl {
            pid,
            exited,
            terminal,
        }
    }
}

#[async_trait]
impl CommandControl for ProcessControl {
    async fn signal(&self, signal: i32) -> Result<(), SandboxError> {
        if self.exited.load(Ordering::Acquire) {
            return Ok(());
        }
        // SAFETY: kill with a process group id and a plain signal number.
        if unsafe { libc::kill(-self.pid, signal) } < 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::ESRCH) {
                return Err(SandboxError::Unavailable(format!(
                    "cannot send signal {signal} to command pid {}: {error}",
                    self.pid
                )));
            }
        }
        Ok(())
    }

    async fn resize(&self, size: PtySize) -> Result<(), SandboxError> {
        let Some(terminal) = &self.terminal else {
            return Err(SandboxError::FailedPrecondition(format!(
                "command pid {} has no terminal to resize (start it with a pty)",
                self.pid
            )));
        };
        stdio::resize(terminal, size).map_err(|error| {
            SandboxError::Unavailable(format!(
                "cannot resize command pid {}'s terminal: {error}",
                self.pid
            ))
        })
    }
}
