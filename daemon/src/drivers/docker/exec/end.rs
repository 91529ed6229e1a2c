//! How a docker-tier command ended, from its exec's inspect once its
//! attached stream has ended (the engine closes an exec's streams at most
//! two seconds after its process exits, even when a process it left holds
//! them open).
//!
//! The engine gives an exec's exit code and no signal: a process killed
//! by signal N reads as code 128 + N, like a shell's `$?`, and so does one
//! that exited with that code. So the end reports `signaled` only when it
//! can tell: the daemon sent signal N to it (`command_signal`, or the
//! store's kill at a timeout) and the code is 128 + N. A code of 128 + N
//! while the sandbox's container has stopped (or is gone, or is another
//! container now) is the container's end: the kernel kills every process
//! of a container whose init has died, so it reads `sandbox-ended`. A 137
//! (SIGKILL) while the container runs on and the engine has just reported
//! an OOM kill in it (its `oom` event, one per container, not per exec) is
//! the OOM killer's: `out-of-memory`. Any other code is `exited` with it.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use sandboxd_protocol::ExitReason;
use tokio::sync::watch;

use super::super::engine::{CallError, READ_TIMEOUT};
use super::super::observed::{Lookup, Phase};
use super::super::Inner;
use super::record::CommandRecords;
use super::streams;
use crate::sandbox_key::SandboxKey;
use crate::started_command::CommandEnd;

/// How long the container's state may lag the exec's exit: the engine
/// records an exec's exit and its container's on separate events.
const CONTAINER_LAG: Duration = Duration::from_secs(2);
/// How often the exec or its container is read while waiting.
const POLL: Duration = Duration::from_millis(50);
/// How often a command still running after its stream ended is read.
const SLOW_POLL: Duration = Duration::from_secs(1);
/// How long the engine may stay unreachable before the command is lost.
const ENGINE_GONE: Duration = Duration::from_secs(120);

pub struct EndWatch {
    pub inner: Weak<Inner>,
    pub key: SandboxKey,
    pub container: String,
    pub exec_id: String,
    /// True once the attached stream has ended.
    pub done: watch::Receiver<bool>,
    /// The exit code, when the start's last inspect already had it (the
    /// exec had ended by the time its pid was read): the engine never
    /// changes an exec's code once set, so it is not read a second time.
    pub known_code: Option<i64>,
    /// The last signal the daemon sent (see `ExecControl`).
    pub sent: Arc<AtomicI32>,
    pub exited: Arc<AtomicBool>,
    /// True once the driver is shutting down.
    pub stop: watch::Receiver<bool>,
    /// The command's record, let go once its end is known (kept when the
    /// daemon stops first, for the next daemon to follow it).
    pub record: Option<(Arc<CommandRecords>, String)>,
}

/// What the exec's inspect finally said.
enum Outcome {
    Code(i64),
    /// The engine has no such exec: its container was removed.
    Gone,
    /// The engine could not be asked for [`ENGINE_GONE`].
    Unknown,
}

impl EndWatch {
    pub async fn wait(self) -> CommandEnd {
        let mut stop = self.stop.clone();
        let record = self.record.clone();
        let end = tokio::select! {
            end = self.follow() => end,
            _ = stop.wait_for(|stop| *stop) => {
                // The command goes on in its container; the next daemon
                // follows it from its record.
                return CommandEnd::from_status(None, None).because(ExitReason::DaemonStopped);
            }
        };
        if let Some((records, id)) = record {
            if end.reason != ExitReason::DaemonStopped {
                records.remove(&id);
            }
        }
        end
    }

    async fn follow(mut self) -> CommandEnd {
        streams::ended(&mut self.done).await;
        let outcome = self.outcome().await;
        self.exited.store(true, Ordering::Release);
        let Some(inner) = self.inner.upgrade() else {
            return CommandEnd::from_status(None, None).because(ExitReason::DaemonStopped);
        };
        match outcome {
            Outcome::Gone => CommandEnd::from_status(None, None).because(ExitReason::SandboxEnded),
            Outcome::Unknown => CommandEnd::from_status(None, None).because(ExitReason::Lost),
            Outcome::Code(code) => self.explain(&inner, code).await,
        }
    }

    /// The exit code, once the engine has it.
    async fn outcome(&self) -> Outcome {
        if let Some(code) = self.known_code {
            return Outcome::Code(code);
        }
        let Some(inner) = self.inner.upgrade() else {
            return Outcome::Unknown;
        };
        let mut unreachable_since = None;
        let mut stopped_without_code = None;
        let began = tokio::time::Instant::now();
        loop {
            let id = self.exec_id.clone();
            let inspected = inner
                .engine
                .call(READ_TIMEOUT, |docker| async move {
                    docker.inspect_exec(&id).await
                })
                .await;
            match inspected {
                Ok(inspect) => {
                    unreachable_since = None;
                    if let Some(code) = inspect.exit_code {
                        return Outcome::Code(code);
                    }
                    // Not running and no code: its exit is being recorded,
                    // or never will be (the runtime lost it).
                    if inspect.running != Some(true) {
                        let since =
                            *stopped_without_code.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() >= CONTAINER_LAG {
                            return Outcome::Unknown;
                        }
                    }
                }
                Err(error) if error.is_not_found() => return Outcome::Gone,
                Err(CallError::Unreachable(_)) => {
                    let since = *unreachable_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= ENGINE_GONE {
                        return Outcome::Unknown;
                    }
                }
                Err(error) => {
                    tracing::warn!(exec = %self.exec_id, %error, "cannot read how a command ended");
                    return Outcome::Unknown;
                }
            }
            // Still running long after its stream ended: the connection to
            // the engine broke, not the command; look now and then.
            let pause = if began.elapsed() < CONTAINER_LAG {
                POLL
            } else {
                SLOW_POLL
            };
            tokio::time::sleep(pause).await;
        }
    }

    /// The end exit code `code` tells of (see the module doc).
    async fn explain(&self, inner: &Inner, code: i64) -> CommandEnd {
        match read_code(code, self.sent.load(Ordering::Acquire)) {
            Reading::End(end) => end,
            Reading::AskContainer { code, signal } => {
                match self.container_after(inner, signal).await {
                    After::Ended => CommandEnd::from_status(None, Some(signal))
                        .because(ExitReason::SandboxEnded),
                    After::OutOfMemory => {
                        let limit_bytes = u64::try_from(inner.spec.memory).ok();
                        CommandEnd::from_status(None, Some(signal))
                            .because(ExitReason::OutOfMemory { limit_bytes })
                    }
                    After::Running => CommandEnd::from_status(Some(code), None),
                }
            }
        }
    }

    /// What became of the container the command ended in, looked at for
    /// up to [`CONTAINER_LAG`] (its stop, or the engine's `oom` event, may
    /// come a little after the command's exit).
    async fn container_after(&self, inner: &Inner, signal: i32) -> After {
        let deadline = tokio::time::Instant::now() + CONTAINER_LAG;
        loop {
            match super::super::containers::inspect(&inner.engine, &self.key).await {
                Ok(Lookup::Ours(observed)) => {
                    let same = observed.id == self.container;
                    let up = matches!(observed.phase, Phase::Running | Phase::Paused);
                    if !same || !up {
                        return After::Ended;
                    }
                }
                Ok(Lookup::Absent | Lookup::Foreign { .. }) => return After::Ended,
                Err(_) => return After::Running,
            }
            if signal == libc::SIGKILL && inner.exits.take_oom(&self.container) {
                return After::OutOfMemory;
            }
            if tokio::time::Instant::now() >= deadline {
                return After::Running;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// The container, after a command in it ended with 128 + N unexplained.
enum After {
    /// Stopped, gone or replaced: its end ended the command.
    Ended,
    /// Still running, and the OOM killer struck in it: the command was its pick.
    OutOfMemory,
    /// Still running, nothing explains the code: an exit with it.
    Running,
}

/// What an exit code alone tells.
#[derive(Debug, PartialEq, Eq)]
enum Reading {
    End(CommandEnd),
    /// 128 + `signal`, not a signal the daemon sent: the container's end
    /// explains it, or nothing does and it is an exit with `code`.
    AskContainer {
        code: i32,
        signal: i32,
    },
}

/// Reads `code` knowing that the daemon last sent signal `sent` (0: none).
fn read_code(code: i64, sent: i32) -> Reading {
    let code = i32::try_from(code).unwrap_or(i32::MAX);
    let Some(signal) = (129..=128 + 64).contains(&code).then(|| code - 128) else {
        return Reading::End(CommandEnd::from_status(Some(code), None));
    };
    if signal == sent {
        return Reading::End(CommandEnd::from_status(None, Some(signal)));
    }
    Reading::AskContainer { code, signal }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_read_only_when_the_daemon_sent_it() {
        let exited = |code| Reading::End(CommandEnd::from_status(Some(code), None));
        assert_eq!(read_code(3, 0), exited(3));
        assert_eq!(read_code(0, libc::SIGKILL), exited(0));
        assert_eq!(read_code(255, 0), exited(255));
        assert_eq!(
            read_code(137, libc::SIGKILL),
            Reading::End(CommandEnd::from_status(None, Some(9)))
        );
        assert_eq!(
            read_code(137, libc::SIGTERM),
            Reading::AskContainer {
                code: 137,
                signal: 9
            }
        );
        assert_eq!(
            read_code(143, 0),
            Reading::AskContainer {
                code: 143,
                signal: 15
            }
        );
    }
}
