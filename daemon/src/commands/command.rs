//! One command, live or ended: what it is, its two output stores, its
//! stdin, and its proof once settled.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sandboxd_protocol::{CommandInfo, CommandProof, CommandState, OutputStream, SandboxError};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use super::output::OutputStore;
use crate::sandbox_key::SandboxKey;
use crate::started_command::{CommandControl, InputWriter};

/// What a command was started as.
pub struct Started {
    pub id: String,
    pub key: SandboxKey,
    pub tag: Option<String>,
    pub argv: Vec<String>,
    pub pid: u32,
    pub uid: String,
    pub generation: u64,
    pub started_at_unix_ms: u64,
    pub pty: bool,
}

pub struct Command {
    pub started: Started,
    pub stdout: OutputStore,
    pub stderr: OutputStore,
    pub control: Box<dyn CommandControl>,
    /// Held across a write, so two callers' bytes never interleave.
    stdin: tokio::sync::Mutex<Option<InputWriter>>,
    stdin_open: AtomicBool,
    /// `Some` once settled; set once.
    proof: watch::Sender<Option<CommandProof>>,
}

impl Command {
    pub fn new(
        started: Started,
        output_bytes: usize,
        stdin: Option<InputWriter>,
        control: Box<dyn CommandControl>,
    ) -> Command {
        let stderr_bytes = if started.pty { 1 } else { output_bytes };
        Command {
            started,
            stdout: OutputStore::new(output_bytes),
            stderr: OutputStore::new(stderr_bytes),
            control,
            stdin_open: AtomicBool::new(stdin.is_some()),
            stdin: tokio::sync::Mutex::new(stdin),
            proof: watch::Sender::new(None),
        }
    }

    pub fn output(&self, stream: OutputStream) -> &OutputStore {
        match stream {
            OutputStream::Stdout => &self.stdout,
            OutputStream::Stderr => &self.stderr,
        }
    }

    pub fn proof(&self) -> Option<CommandProof> {
        self.proof.borrow().clone()
    }

    pub fn is_live(&self) -> bool {
        self.proof.borrow().is_none()
    }

    /// Settles it: the first proof stays, any later one is ignored.
    pub fn settle(&self, proof: CommandProof) {
        self.stdin_open.store(false, Ordering::Release);
        self.proof.send_if_modified(|kept| {
            if kept.is_some() {
                return false;
            }
            *kept = Some(proof);
            true
        });
    }

    /// Waits until it is settled, at most `wait`.
    pub async fn wait_settled(&self, wait: Duration) {
        let mut settled = self.proof.subscribe();
        let _ = tokio::time::timeout(wait, settled.wait_for(Option::is_some)).await;
    }

    pub fn info(&self) -> CommandInfo {
        let proof = self.proof();
        let started = &self.started;
        CommandInfo {
            command_id: started.id.clone(),
            tag: started.tag.clone(),
            argv: started.argv.clone(),
            pid: started.pid,
            state: if proof.is_some() {
                CommandState::Ended
            } else {
                CommandState::Running
            },
            started_at_unix_ms: started.started_at_unix_ms,
            pty: started.pty,
            stdin_open: self.stdin_open.load(Ordering::Acquire),
            uid: started.uid.clone(),
            generation: started.generation,
            proof,
        }
    }

    /// Writes `data` to its stdin, then closes it when `close`. A stdin
    /// that was never open, or is closed, is a failed precondition.
    pub async fn write_input(&self, data: &[u8], close: bool) -> Result<(), SandboxError> {
        let mut stdin = self.stdin.lock().await;
        let Some(writer) = stdin.as_mut() else {
            return Err(SandboxError::FailedPrecondition(format!(
                "command {}'s stdin is not open (start it with stdin open, and write before closing it)",
                self.started.id
            )));
        };
        if !data.is_empty() {
            let written = async {
                writer.write_all(data).await?;
                writer.flush().await
            };
            if let Err(error) = written.await {
                *stdin = None;
                self.stdin_open.store(false, Ordering::Release);
                return Err(SandboxError::FailedPrecondition(format!(
                    "command {}'s stdin is closed: {error}",
                    self.started.id
                )));
            }
        }
        if close {
            if let Some(mut writer) = stdin.take() {
                let _ = writer.shutdown().await;
            }
            self.stdin_open.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Drops its stdin (at its end: nobody can write to it any more).
    pub async fn close_input(&self) {
        self.stdin.lock().await.take();
        self.stdin_open.store(false, Ordering::Release);
    }
}
