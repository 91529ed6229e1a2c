//! One file call's exec in the runner container: a script of [`super::scripts`]
//! started through `pods/exec` (as the container's user, in its working
//! directory, the workspace), fed a host file on stdin when it takes one,
//! its stderr drained beside its stdout (the exec's channels share one
//! stream: an unread one would hold up the other), and its end read from
//! the status on channel 3.

use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use kube::api::{AttachParams, AttachedProcess};
use sandboxd_protocol::SandboxError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

use super::super::exec::end::{read_status, Said};
use super::super::exec::refused::exec_refused;
use super::super::shapes::CONTAINER;
use super::super::Inner;
use super::FileCall;

/// How long one file exec may take, from its start to its status.
pub const FILE_TIMEOUT: Duration = Duration::from_secs(600);
/// How long the status may take once the streams ended.
const STATUS_WAIT: Duration = Duration::from_secs(10);
/// The most of stderr kept (the scripts' word is its last line).
const MAX_STDERR: usize = 8 * 1024;
/// The exec stream's buffer per channel.
const STREAM_BUFFER: usize = 256 * 1024;
/// The name the scripts run under (`$0`).
const NAME: &str = "sandboxd-files";

/// An exec under way: its stdout to read, its stderr being drained.
pub struct Opened {
    attached: AttachedProcess,
    pub stdout: Pin<Box<dyn AsyncRead + Send>>,
    stderr: JoinHandle<Vec<u8>>,
}

/// How an exec ended: its status and what it wrote on stderr.
pub struct Ended {
    pub said: Said,
    pub stderr: Vec<u8>,
}

impl FileCall {
    /// Starts `script` with `args` in the pod; with `input`, the first
    /// `size` bytes of that host file are its stdin, then stdin closes.
    pub async fn open_exec(
        &self,
        inner: &Inner,
        script: &str,
        args: &[String],
        input: Option<(PathBuf, u64)>,
    ) -> Result<Opened, SandboxError> {
        let params = AttachParams {
            container: Some(CONTAINER.to_string()),
            stdin: input.is_some(),
            stdout: true,
            stderr: true,
            tty: false,
            max_stdin_buf_size: Some(STREAM_BUFFER),
            max_stdout_buf_size: Some(STREAM_BUFFER),
            max_stderr_buf_size: Some(STREAM_BUFFER),
        };
        let mut argv = vec!["sh".to_string(), "-c".into(), script.into(), NAME.into()];
        argv.extend(args.iter().cloned());
        let pods = inner.pods_api();
        let context = self.context();
        let mut attached = inner
            .cluster
            .call(pods.exec(&self.place.pod, argv, &params))
            .await
            .map_err(|error| exec_refused(inner, &context, &self.place, error))?;
        let stdout: Pin<Box<dyn AsyncRead + Send>> = match attached.stdout() {
            Some(stdout) => Box::pin(stdout),
            None => Box::pin(tokio::io::empty()),
        };
        let stderr = attached.stderr();
        let stderr = tokio::spawn(async move {
            let Some(mut stderr) = stderr else {
                return Vec::new();
            };
            drain_bounded(&mut stderr, MAX_STDERR).await
        });
        if let (Some(mut stdin), Some((file, size))) = (attached.stdin(), input) {
            // Fed beside the reads; a script that stopped reading (it
            // refused) ends it, and its status says why.
            tokio::spawn(async move {
                if let Ok(file) = tokio::fs::File::open(&file).await {
                    let _ = tokio::io::copy(&mut file.take(size), &mut stdin).await;
                }
                let _ = stdin.shutdown().await;
            });
        }
        Ok(Opened {
            attached,
            stdout,
            stderr,
        })
    }

    /// Runs `script` to its end: its stdout (at most `max_stdout` bytes;
    /// more is an error naming the call) and how it ended.
    pub async fn run(
        &self,
        inner: &Inner,
        script: &str,
        args: &[String],
        input: Option<(PathBuf, u64)>,
        max_stdout: usize,
    ) -> Result<(Vec<u8>, Ended), SandboxError> {
        let ran = async {
            let mut opened = self.open_exec(inner, script, args, input).await?;
            let mut stdout = Vec::new();
            let mut limited = (&mut opened.stdout).take(max_stdout as u64 + 1);
            let read = limited.read_to_end(&mut stdout).await;
            if let Err(error) = read {
                return Err(self.told.stream(&error.to_string()));
            }
            if stdout.len() > max_stdout {
                return Err(self.told.stream(&format!(
                    "it wrote more than the {max_stdout} bytes expected"
                )));
            }
            Ok((stdout, opened.end().await))
        };
        tokio::time::timeout(FILE_TIMEOUT, ran).await.map_err(|_| {
            self.told
                .stream(&format!("it took longer than {FILE_TIMEOUT:?}"))
        })?
    }
}

impl Opened {
    /// Waits for the exec's status (its stdout read to its end).
    pub async fn end(mut self) -> Ended {
        let status = match self.attached.take_status() {
            Some(status) => tokio::time::timeout(STATUS_WAIT, status)
                .await
                .ok()
                .flatten(),
            None => None,
        };
        let stderr = tokio::time::timeout(STATUS_WAIT, &mut self.stderr)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        Ended {
            said: read_status(status.as_ref()),
            stderr,
        }
    }
}

impl Drop for Opened {
    /// An exec left unread (a download abandoned) is closed, which ends
    /// its command in the pod.
    fn drop(&mut self) {
        self.attached.abort();
        self.stderr.abort();
    }
}

/// Everything `reader` gives, of which the first `max` bytes are kept.
async fn drain_bounded(reader: &mut (impl AsyncRead + Unpin), max: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buffer = vec![0u8; 8 * 1024];
    while let Ok(count) = reader.read(&mut buffer).await {
        if count == 0 {
            break;
        }
        let room = max.saturating_sub(kept.len()).min(count);
        kept.extend_from_slice(&buffer[..room]);
    }
    kept
}
