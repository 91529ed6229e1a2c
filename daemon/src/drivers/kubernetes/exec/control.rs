//! Signalling and resizing a kubernetes-tier command.
//!
//! pods/exec has no signal: a signal is a second exec in the same
//! container, `kill -N -PID` (the process group the command leads, as a
//! runtime makes a command with a terminal lead its session), or, when it
//! leads none, `kill -N PID` (the command alone; processes it forked keep
//! running). PID is the pid the command's wrapper wrote, in the pod's pid
//! namespace. Nothing is signalled once its end is known; between its exit
//! and the daemon hearing of it, its pid could be reused only after the
//! pod's pids wrapped around. Resizing is a message on the stream's
//! channel 4, which the kubelet turns into the terminal's `TIOCSWINSZ`.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use futures::SinkExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, TerminalSize};
use sandboxd_protocol::{PtySize, SandboxError};
use tokio::io::AsyncReadExt;

use super::super::shapes::CONTAINER;
use super::super::Inner;
use crate::started_command::CommandControl;

/// `$1` the signal number, `$2` the pid; silent when it has ended.
const KILL: &str = "kill -\"$1\" -\"$2\" 2>/dev/null && exit 0; \
                    kill -0 \"$2\" 2>/dev/null || exit 0; \
                    kill -\"$1\" \"$2\"";

pub type Resizer = futures::channel::mpsc::Sender<TerminalSize>;

pub struct ExecControl {
    pub inner: Weak<Inner>,
    pub pod: String,
    pub pid: u32,
    /// The terminal's size channel, with a PTY.
    pub resizer: Option<Resizer>,
    pub exited: Arc<AtomicBool>,
    /// The last signal sent (0: none), so the end can tell an exit code of
    /// 128 + N that this signal N explains.
    pub sent: Arc<AtomicI32>,
}

impl ExecControl {
    fn unavailable(&self, signal: i32, why: impl std::fmt::Display) -> SandboxError {
        SandboxError::Unavailable(format!(
            "cannot send signal {signal} to command pid {} in pod {}: {why}",
            self.pid, self.pod
        ))
    }
}

#[async_trait]
impl CommandControl for ExecControl {
    async fn signal(&self, signal: i32) -> Result<(), SandboxError> {
        if self.exited.load(Ordering::Acquire) {
            return Ok(());
        }
        let Some(inner) = self.inner.upgrade() else {
            return Err(self.unavailable(signal, "sandboxd is shutting down"));
        };
        self.sent.store(signal, Ordering::Release);
        let argv = [
            "sh".to_string(),
            "-c".to_string(),
            KILL.to_string(),
            "sandboxd-kill".to_string(),
            signal.to_string(),
            self.pid.to_string(),
        ];
        let params = AttachParams {
            container: Some(CONTAINER.to_string()),
            stdout: false,
            ..AttachParams::default()
        };
        let pods: kube::Api<Pod> = inner.pods_api();
        let run = async {
            let mut attached = pods.exec(&self.pod, argv, &params).await?;
            let mut said = String::new();
            if let Some(mut stderr) = attached.stderr() {
                let _ = stderr.read_to_string(&mut said).await;
            }
            let status = match attached.take_status() {
                Some(status) => status.await,
                None => None,
            };
            Ok::<_, kube::Error>((status, said))
        };
        let context = format!(
            "cannot send signal {signal} to command pid {} in pod {}",
            self.pid, self.pod
        );
        let (status, said) = inner
            .cluster
            .call(run)
            .await
            .map_err(|error| inner.cluster.error(&context, super::EXEC, error))?;
        match super::end::read_status(status.as_ref()) {
            super::end::Said::Code(0) => Ok(()),
            other => Err(self.unavailable(signal, format!("kill in the pod: {other:?} {said}"))),
        }
    }

    async fn resize(&self, size: PtySize) -> Result<(), SandboxError> {
        let Some(resizer) = &self.resizer else {
            return Err(SandboxError::FailedPrecondition(format!(
                "command pid {} has no terminal to resize (start it with a pty)",
                self.pid
            )));
        };
        resizer
            .clone()
            .send(terminal_size(size))
            .await
            .map_err(|_| {
                SandboxError::FailedPrecondition(format!(
                    "command pid {} has ended: its terminal is gone",
                    self.pid
                ))
            })
    }
}

pub fn terminal_size(size: PtySize) -> TerminalSize {
    TerminalSize {
        width: size.cols,
        height: size.rows,
    }
}
