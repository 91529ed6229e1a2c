//! An exec's attached output, taken apart into the command's stdout and
//! stderr: one task reads the engine's stream (frames of stdout and
//! stderr, or with a terminal one raw stream) and writes each frame's
//! bytes into an in-memory pipe per stream, which the command store reads
//! like any other. A reader that reads slowly holds the engine's stream
//! back (each pipe is bounded), never the other stream's bytes lost.
//!
//! With a terminal, bollard tells the engine's raw bytes from frames by
//! their first byte: a read that begins with a byte 0, 1 or 2 (control
//! characters a terminal rarely carries) is taken for a frame header, and
//! its first eight bytes are lost. Without a terminal every read is framed.

use std::pin::Pin;
use std::time::Duration;

use bollard::container::LogOutput;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::watch;

/// Bytes each in-memory pipe holds before the engine's stream waits.
const PIPE_BYTES: usize = 64 * 1024;
/// How long a start that failed may take to say why.
const FIRST_WORDS_WAIT: Duration = Duration::from_secs(2);
/// The most of that said kept in the error.
const FIRST_WORDS_BYTES: usize = 1024;

/// The engine's attached output, as bollard gives it.
pub type Attached = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// The command's side of the split.
pub struct Streams {
    pub stdout: DuplexStream,
    /// `None` with a terminal: one stream.
    pub stderr: Option<DuplexStream>,
    /// True once the engine's stream has ended (the exec's process has
    /// ended and the engine closed its streams, or the connection to the
    /// engine is gone) and every byte is in the pipes. A watch, not a
    /// oneshot, so the start can race its pid's poll against it and the
    /// end watch still wait on it after.
    pub done: watch::Receiver<bool>,
}

/// Starts the task that splits `output`.
pub fn split(output: Attached, terminal: bool) -> Streams {
    let (stdout_writer, stdout) = tokio::io::duplex(PIPE_BYTES);
    let (stderr_writer, stderr) = if terminal {
        (None, None)
    } else {
        let (writer, reader) = tokio::io::duplex(PIPE_BYTES);
        (Some(writer), Some(reader))
    };
    let (done_tx, done) = watch::channel(false);
    tokio::spawn(async move {
        copy_frames(output, Some(stdout_writer), stderr_writer).await;
        let _ = done_tx.send(true);
    });
    Streams {
        stdout,
        stderr,
        done,
    }
}

/// Writes each frame into its pipe until the stream ends; a pipe whose
/// reader has gone is written no more.
async fn copy_frames(
    mut output: Attached,
    mut stdout: Option<DuplexStream>,
    mut stderr: Option<DuplexStream>,
) {
    while let Some(frame) = output.next().await {
        let (pipe, bytes) = match frame {
            Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                (&mut stdout, message)
            }
            Ok(LogOutput::StdErr { message }) => match stderr {
                Some(_) => (&mut stderr, message),
                None => (&mut stdout, message),
            },
            Ok(LogOutput::StdIn { .. }) => continue,
            Err(error) => {
                tracing::debug!(%error, "a command's attached stream ended in an error");
                break;
            }
        };
        if let Some(writer) = pipe.as_mut() {
            if writer.write_all(&bytes).await.is_err() {
                *pipe = None;
            }
        }
    }
}

/// Resolves once `done` says the stream has ended (or its task is gone).
pub async fn ended(done: &mut watch::Receiver<bool>) {
    let _ = done.wait_for(|ended| *ended).await;
}

impl Streams {
    /// What an exec that never ran wrote (the engine writes why its start
    /// failed to the exec's stdout), trimmed, for the caller's error.
    pub async fn read_first_words(&mut self) -> String {
        let mut said = Vec::new();
        let mut buffer = [0u8; 512];
        let reading = async {
            while said.len() < FIRST_WORDS_BYTES {
                match self.stdout.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(count) => said.extend_from_slice(&buffer[..count]),
                }
            }
        };
        let _ = tokio::time::timeout(FIRST_WORDS_WAIT, reading).await;
        let said = String::from_utf8_lossy(&said).trim().to_string();
        if said.is_empty() {
            "the engine said nothing about why".to_string()
        } else {
            said
        }
    }
}
