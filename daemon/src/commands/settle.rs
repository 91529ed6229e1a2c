//! A command's life after its start, in one task: its output pumped into
//! its stores, its end awaited (and forced at its timeout), and its proof
//! given once, with the event that carries it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use sandboxd_protocol::{CommandProof, ExitReason, StreamFigures};
use tokio::sync::watch;

use super::command::Command;
use super::output::OutputStore;
use crate::started_command::{CommandEnd, OutputReader};
use crate::unix_time::now_unix_ms;

/// How long a stream is still read once its command has ended and nothing
/// is there: what the command wrote is in the pipe by then, so only a
/// process it left behind (holding the pipe open) is cut off.
const LINGER: Duration = Duration::from_millis(200);
/// A quiet stream's read: the most its store takes room for at a time
/// before anything came (a command that prints a line holds 512 bytes).
const QUIET_READ: usize = 512;
/// A busy stream's: a read that fills what it asked for asks for eight
/// times more next time, up to this (a flood is read 1 MiB at a time, from
/// a pipe its reader grows to that size, see `exec::fd_stream`), and a
/// short one goes back to [`QUIET_READ`]. Reads go straight into the
/// store, so no buffer of this size is held.
const BUSY_READ: usize = 1024 * 1024;

/// What the task needs besides the command.
pub struct Life {
    pub stdout: OutputReader,
    pub stderr: Option<OutputReader>,
    pub end: Pin<Box<dyn Future<Output = CommandEnd> + Send>>,
    pub timeout: Option<Duration>,
    /// How long it has run already: a command an earlier daemon started
    /// keeps its timeout from its start.
    pub already: Duration,
}

/// Runs `command` to its proof, which it returns (already settled).
pub async fn run(command: Arc<Command>, life: Life) -> CommandProof {
    let Life {
        stdout,
        stderr,
        end,
        timeout,
        already,
    } = life;
    let (ended_tx, ended) = watch::channel(false);
    let waited = async {
        let end = await_end(&command, end, timeout, already).await;
        let _ = ended_tx.send(true);
        end
    };
    let stderr_pump = async {
        if let Some(stderr) = stderr {
            pump(stderr, &command.stderr, ended.clone()).await;
        }
    };
    let (end, (), ()) = tokio::join!(
        waited,
        pump(stdout, &command.stdout, ended.clone()),
        stderr_pump
    );
    command.stdout.close();
    command.stderr.close();
    command.close_input().await;
    let figures = |store: &OutputStore| {
        let (written, dropped) = store.figures();
        StreamFigures { written, dropped }
    };
    let proof = CommandProof {
        reason: end.reason,
        exit_code: end.exit_code,
        signal: end.signal,
        started_at_unix_ms: command.started.started_at_unix_ms,
        ended_at_unix_ms: now_unix_ms(),
        stdout: figures(&command.stdout),
        stderr: figures(&command.stderr),
    };
    command.settle(proof.clone());
    proof
}

/// Its end; at `timeout`, its group is killed and the end says so.
async fn await_end(
    command: &Command,
    mut end: Pin<Box<dyn Future<Output = CommandEnd> + Send>>,
    timeout: Option<Duration>,
    already: Duration,
) -> CommandEnd {
    let Some(limit) = timeout else {
        return end.await;
    };
    if let Ok(end) = tokio::time::timeout(limit.saturating_sub(already), &mut end).await {
        return end;
    }
    if let Err(error) = command.control.signal(libc::SIGKILL).await {
        tracing::warn!(command = %command.started.id, %error, "cannot kill a command at its timeout");
    }
    let end = end.await;
    match end.reason {
        // Killed by us (or by anything at that moment): the timeout is why.
        ExitReason::Signaled { .. } => end.because(ExitReason::TimedOut {
            limit_ms: limit.as_millis() as u64,
        }),
        _ => end,
    }
}

/// The next read's size: larger after a read that filled `want`, back to
/// quiet after one that used an eighth of it.
fn next_want(want: usize, read: usize) -> usize {
    if read >= want {
        (want * 8).min(BUSY_READ)
    } else if read < want / 8 {
        QUIET_READ
    } else {
        want
    }
}

/// Reads `reader` into `store` until its end, or until it has nothing
/// more for [`LINGER`] once the command has ended.
async fn pump(mut reader: OutputReader, store: &OutputStore, mut ended: watch::Receiver<bool>) {
    let mut want = QUIET_READ;
    loop {
        let fill = std::future::poll_fn(|cx| store.poll_fill(cx, reader.as_mut(), want));
        let read = if *ended.borrow() {
            match tokio::time::timeout(LINGER, fill).await {
                Ok(read) => read,
                Err(_) => return,
            }
        } else {
            tokio::select! {
                read = fill => read,
                _ = ended.changed() => continue,
            }
        };
        match read {
            Ok(0) => return,
            Ok(count) => want = next_want(want, count),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            // A terminal whose last follower closed reads EIO: its end.
            Err(_) => return,
        }
    }
}
