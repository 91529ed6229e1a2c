//! Signalling and resizing a command under gVisor.
//!
//! A signal goes to the command's process inside, by the pid runsc wrote
//! at its start, through `runsc kill --pid` (the daemon's call to the
//! sentry): `runsc exec` itself does not pass a signal on, it would die of
//! it and leave the command running. runsc signals that one process, not
//! its process group: children it started and left running end with the
//! sandbox (a shell passes a SIGTERM or SIGHUP on to its jobs itself).
//! A resize is the terminal's (see the parent module).

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandboxd_protocol::{PtySize, SandboxError};

use super::super::super::exec::stdio;
use super::super::runsc::Runsc;
use crate::started_command::CommandControl;

/// How long a signal waits for runsc to say the command's pid inside:
/// runsc writes it as soon as the sentry has started the process.
const PID_WAIT: Duration = Duration::from_secs(10);

pub struct GvisorControl {
    pub runsc: Arc<Runsc>,
    /// The sandbox's runsc container.
    pub container: String,
    /// Where runsc writes the command's pid inside the sandbox.
    pub pid_inside: PathBuf,
    /// Set once its `runsc exec` has been reaped: the command has ended.
    pub exited: Arc<AtomicBool>,
    /// Its terminal's leader side, when it has one.
    pub terminal: Option<OwnedFd>,
}

impl GvisorControl {
    /// The command's pid inside, once runsc has written it; `None` when
    /// the command ended first.
    async fn pid_inside(&self) -> Result<Option<u32>, SandboxError> {
        let deadline = Instant::now() + PID_WAIT;
        loop {
            let written = tokio::fs::read_to_string(&self.pid_inside).await;
            if let Some(pid) = written
                .ok()
                .and_then(|text| text.trim().parse::<u32>().ok())
            {
                return Ok(Some(pid));
            }
            if self.exited.load(Ordering::Acquire) {
                return Ok(None);
            }
            if Instant::now() > deadline {
                return Err(SandboxError::Unavailable(format!(
                    "runsc has not said within {PID_WAIT:?} which process inside container {} the command is ({} is missing)",
                    self.container,
                    self.pid_inside.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

#[async_trait]
impl CommandControl for GvisorControl {
    async fn signal(&self, signal: i32) -> Result<(), SandboxError> {
        if self.exited.load(Ordering::Acquire) {
            return Ok(());
        }
        let Some(pid) = self.pid_inside().await? else {
            return Ok(());
        };
        let mut command = self.runsc.command();
        command
            .args(["kill", "--pid", &pid.to_string(), &self.container])
            .arg(signal.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .map_err(|error| SandboxError::Internal(format!("runsc kill's task: {error}")))?
            .map_err(|error| {
                SandboxError::Unavailable(format!("runsc kill cannot run: {error}"))
            })?;
        let message = String::from_utf8_lossy(&output.stderr);
        // Ended in between: nothing left to signal.
        if output.status.success()
            || self.exited.load(Ordering::Acquire)
            || message.contains("no such process")
        {
            return Ok(());
        }
        Err(SandboxError::Unavailable(format!(
            "cannot send signal {signal} to the command (pid {pid} inside container {}): runsc kill {}: {}",
            self.container,
            output.status,
            message.trim()
        )))
    }

    async fn resize(&self, size: PtySize) -> Result<(), SandboxError> {
        let Some(terminal) = &self.terminal else {
            return Err(SandboxError::FailedPrecondition(
                "the command has no terminal to resize (start it with a pty)".to_string(),
            ));
        };
        stdio::resize(terminal, size).map_err(|error| {
            SandboxError::Unavailable(format!("cannot resize the command's terminal: {error}"))
        })
    }
}
