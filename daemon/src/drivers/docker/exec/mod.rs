//! Commands in a docker-tier sandbox, through the Engine's exec API: the
//! command is an exec of the sandbox's container, so it runs as the
//! container's user, in its namespaces and cgroup, with its capabilities
//! and security options, exactly as `docker exec` would run it.
//!
//! The engine, not the daemon, is the command's parent: its output comes
//! over the exec's attached stream ([`streams`]), how it ended from the
//! exec's inspect ([`end`]), and signals go to its host pid ([`control`]:
//! the Engine has no call to signal an exec).
//!
//! What the tier cannot do: limits of a command's own (an exec shares its
//! container's cgroup), and commands on an engine on another host (a
//! signal needs the host pid; the exec itself would run, but could not be
//! signalled, so a timeout could not end it).

mod control;
mod end;
pub mod record;
mod recover;
mod streams;
mod workdir;

use std::sync::atomic::{AtomicBool, AtomicI32};
use std::sync::Arc;
use std::time::Duration;

use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use sandboxd_protocol::{SandboxEnv, SandboxError, Token};

use super::engine::{CallError, READ_TIMEOUT, WRITE_TIMEOUT};
use super::observed::{Lookup, Phase};
use super::Inner;
use crate::sandbox_key::SandboxKey;
use crate::started_command::{self, CommandSpec, StartedCommand};

/// How long an exec the engine has started may take to have a pid.
const START_WAIT: Duration = Duration::from_secs(10);
/// How often its inspect is read meanwhile (at once when its stream ends
/// before the next look, see `wait_started`).
const START_POLL: Duration = Duration::from_millis(10);
/// How long after an exec's exit its pid may still be recorded: the
/// engine records the exit and the pid under one lock, either first.
const PID_AFTER_EXIT: Duration = Duration::from_millis(200);
/// The exit codes the engine gives an exec whose program could not be
/// run: 126 (not executable) and 127 (not found).
const NOT_RUNNABLE: [i64; 2] = [126, 127];

/// The running container a command joins, as one inspect showed it.
struct Target {
    container: String,
    uid: String,
    generation: u64,
    user: String,
    task_queue: String,
    caller_class: String,
    /// Its init's host pid, to tell a host that shows the container's
    /// processes from one that does not.
    init_pid: Option<u32>,
}

/// An exec the engine has started, before its pid is known.
struct Attached {
    exec_id: String,
    streams: streams::Streams,
    stdin: Option<crate::started_command::InputWriter>,
    /// Its exit code, when the inspect that found its pid had one.
    exit_code: Option<i64>,
}

impl Inner {
    /// Starts `spec` in `key`'s running container (see the module doc).
    pub(super) async fn exec(
        self: &Arc<Self>,
        key: &SandboxKey,
        spec: &CommandSpec,
    ) -> Result<StartedCommand, SandboxError> {
        if !spec.limits.is_empty() {
            return Err(SandboxError::FailedPrecondition(format!(
                "cannot give a command in {} limits of its own: on the docker tier a command is an exec of the sandbox's container, which shares the container's cgroup and has none of its own (leave cpu and memory out; the sandbox's limits bound it)",
                key.what()
            )));
        }
        if *self.commands_stop.borrow() {
            return Err(SandboxError::Unavailable(
                "sandboxd is shutting down".into(),
            ));
        }
        // Held across the start, so no deprovision or restart of the same
        // sandbox comes in between the check and the exec.
        let _key_guard = self.key_locks.lock(key).await;
        let target = self.exec_target(key, spec).await?;
        let working_dir = workdir::resolve(
            &self.engine,
            key,
            &target.container,
            spec.workdir.as_deref(),
        )
        .await?;
        let attached = self.start_exec(key, spec, &target, working_dir).await?;
        if let Some(size) = spec.pty {
            // Engines before API 1.42 ignore the create's console size. A
            // resize that fails leaves the default size, not a command
            // nobody follows: the start goes on.
            if let Err(error) = control::resize_exec(&self.engine, &attached.exec_id, size).await {
                tracing::warn!(scope = %key.scope, id = %key.shown_id(), %error, "cannot size a command's terminal");
            }
        }
        let (pid, attached) = self.wait_started(key, &spec.argv[0], attached).await?;
        tracing::debug!(scope = %key.scope, id = %key.shown_id(), pid, exec = %attached.exec_id, "command exec started");
        self.keep_record(key, spec, &target, pid, &attached.exec_id);
        Ok(self.started(key, spec, target, pid, attached))
    }

    /// Writes the command's record, for a later daemon to follow it. A
    /// command whose record cannot be written still runs; only a restart
    /// of the daemon loses it (`daemon-stopped`, and nothing after).
    fn keep_record(
        &self,
        key: &SandboxKey,
        spec: &CommandSpec,
        target: &Target,
        pid: u32,
        exec_id: &str,
    ) {
        let record = record::CommandRecord {
            id: spec.id.clone(),
            scope: key.scope,
            sandbox_id: key.id.clone(),
            tag: spec.tag.clone(),
            argv: spec.argv.clone(),
            pty: spec.pty.is_some(),
            started_at_unix_ms: crate::unix_time::now_unix_ms(),
            timeout_ms: spec.timeout_ms,
            exec_id: exec_id.to_string(),
            container: target.container.clone(),
            pid,
            uid: target.uid.clone(),
            generation: target.generation,
        };
        if let Err(error) = self.command_records.write(&record) {
            tracing::warn!(scope = %key.scope, id = %key.shown_id(), command = %spec.id, %error, "cannot keep a command's record: a restart of the daemon will lose it");
        }
    }

    /// What the store takes: the streams, a control and the end's watch.
    fn started(
        self: &Arc<Self>,
        key: &SandboxKey,
        spec: &CommandSpec,
        target: Target,
        pid: u32,
        attached: Attached,
    ) -> StartedCommand {
        let tty = spec.pty.is_some();
        let host = control::Host::find(pid, target.init_pid, &target.container);
        let exited = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicI32::new(0));
        let watch = end::EndWatch {
            inner: Arc::downgrade(self),
            key: key.clone(),
            container: target.container.clone(),
            exec_id: attached.exec_id.clone(),
            done: attached.streams.done,
            known_code: attached.exit_code,
            sent: sent.clone(),
            exited: exited.clone(),
            stop: self.commands_stop.subscribe(),
            record: Some((self.command_records.clone(), spec.id.clone())),
        };
        StartedCommand {
            pid,
            uid: target.uid,
            generation: target.generation,
            stdout: Box::pin(attached.streams.stdout),
            stderr: attached
                .streams
                .stderr
                .map(|stderr| Box::pin(stderr) as crate::started_command::OutputReader),
            stdin: attached.stdin,
            control: Box::new(control::ExecControl {
                engine: self.engine.clone(),
                exec_id: attached.exec_id,
                pid,
                host,
                tty,
                exited,
                sent,
            }),
            end: Box::pin(watch.wait()),
        }
    }

    /// The sandbox as a command may join it: its container running, not
    /// paused, and the incarnation `spec.expect` names.
    async fn exec_target(
        &self,
        key: &SandboxKey,
        spec: &CommandSpec,
    ) -> Result<Target, SandboxError> {
        let lookup = self.inspect(key).await?;
        let observed = match &lookup {
            Lookup::Ours(observed) => Some(observed),
            Lookup::Absent | Lookup::Foreign { .. } => None,
        };
        let incarnation =
            observed.map(|observed| (observed.uid(), self.generation(key, Some(observed))));
        spec.expect.check(&key.what(), incarnation)?;
        let not_running = |why: &str| started_command::not_running(&key.what(), why);
        let Some(observed) = observed else {
            return Err(not_running("it does not exist"));
        };
        match observed.phase {
            Phase::Running => {}
            Phase::Paused => return Err(started_command::paused(&key.what())),
            phase => {
                return Err(not_running(&format!(
                    "its container is {}, not running",
                    phase.as_str()
                )))
            }
        }
        Ok(Target {
            container: observed.id.clone(),
            uid: observed.uid().to_string(),
            generation: self.generation(key, Some(observed)),
            user: observed.user.clone(),
            task_queue: observed.task_queue().to_string(),
            caller_class: observed.caller_class().to_string(),
            init_pid: observed.pid,
        })
    }

    /// Creates the exec and starts it attached.
    async fn start_exec(
        &self,
        key: &SandboxKey,
        spec: &CommandSpec,
        target: &Target,
        working_dir: String,
    ) -> Result<Attached, SandboxError> {
        let failed = |error: CallError| {
            if error.is_conflict() {
                // Stopped or paused since the inspect: the caller's to fix.
                return SandboxError::FailedPrecondition(format!(
                    "cannot run a command in {}: {error} (ensure it, or resume it, first)",
                    key.what()
                ));
            }
            error.into_sandbox_error(&format!("cannot run a command in {}", key.what()))
        };
        let attach_stdin = spec.stdin || spec.pty.is_some();
        let config = bollard::models::ExecConfig {
            console_size: spec
                .pty
                .map(|size| vec![usize::from(size.rows), usize::from(size.cols)]),
            ..CreateExecOptions {
                cmd: Some(spec.argv.clone()),
                env: Some(self.command_env(target, spec)),
                working_dir: Some(working_dir),
                user: Some(target.user.clone()).filter(|user| !user.is_empty()),
                tty: Some(spec.pty.is_some()),
                attach_stdin: Some(attach_stdin),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                privileged: Some(false),
                ..Default::default()
            }
            .into()
        };
        let container = target.container.clone();
        let created = self
            .engine
            .call(WRITE_TIMEOUT, |docker| async move {
                docker.create_exec(&container, config).await
            })
            .await
            .map_err(failed)?;
        let exec_id = created.id;
        let options = StartExecOptions {
            detach: false,
            tty: spec.pty.is_some(),
            output_capacity: None,
        };
        let id = exec_id.clone();
        let started = self
            .engine
            .call(WRITE_TIMEOUT, |docker| async move {
                docker.start_exec(&id, Some(options)).await
            })
            .await
            .map_err(failed)?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(SandboxError::Internal(format!(
                "the engine started exec {exec_id} detached, though it was asked to attach"
            )));
        };
        Ok(Attached {
            exec_id,
            streams: streams::split(output, spec.pty.is_some()),
            stdin: attach_stdin.then_some(input),
            exit_code: None,
        })
    }

    /// The runner's contract without its token, then the command's own.
    /// The engine gives an exec its container's environment first, so the
    /// token is unset by name (an entry without `=` removes a variable).
    fn command_env(&self, target: &Target, spec: &CommandSpec) -> Vec<String> {
        let contract = SandboxEnv {
            task_queue: target.task_queue.clone(),
            stigmer_token: Token::new(""),
            caller_class: target.caller_class.clone(),
        };
        let mut env = vec!["STIGMER_TOKEN".to_string()];
        env.extend(self.spec.runner_env(&contract));
        if spec.pty.is_some() && !spec.env.iter().any(|(name, _)| name == "TERM") {
            env.push("TERM=xterm".to_string());
        }
        env.extend(
            spec.env
                .iter()
                .map(|(name, value)| format!("{name}={value}")),
        );
        env
    }

    /// The exec's host pid once the engine has one; a program that could
    /// not be run is refused, with what the engine wrote about it. An
    /// error here (the engine gone, or no pid in time) leaves an exec that
    /// may run on in its container unfollowed, bounded by the container.
    ///
    /// The engine answers the start before it asks the runtime to run the
    /// process, which takes the runtime milliseconds, so the first look
    /// comes after [`START_POLL`], or as soon as the attached stream ends
    /// when that is sooner ([`pause_or_end`]). A short command's stream
    /// ends before the next poll would come: its one inspect then has its
    /// pid and its exit code both, and the code is kept for the end watch
    /// (one inspect, where the poll alone put up to a whole interval, and
    /// a second inspect, between the command's end and its proof).
    async fn wait_started(
        &self,
        key: &SandboxKey,
        program: &str,
        mut attached: Attached,
    ) -> Result<(u32, Attached), SandboxError> {
        let deadline = tokio::time::Instant::now() + START_WAIT;
        let mut ended_without_pid = None;
        let mut stream_ended = false;
        loop {
            stream_ended = pause_or_end(&mut attached.streams.done, stream_ended).await;
            let id = attached.exec_id.clone();
            let inspect = self
                .engine
                .call(READ_TIMEOUT, |docker| async move {
                    docker.inspect_exec(&id).await
                })
                .await
                .map_err(|error| {
                    error.into_sandbox_error(&format!(
                        "cannot inspect a command's exec in {}",
                        key.what()
                    ))
                })?;
            let pid = inspect
                .pid
                .and_then(|pid| u32::try_from(pid).ok())
                .unwrap_or(0);
            if pid > 0 {
                // Only an exec no longer running has its code.
                attached.exit_code = inspect.exit_code.filter(|_| inspect.running == Some(false));
                return Ok((pid, attached));
            }
            // An exit before a pid: the start failed, or the command ended
            // before the engine recorded its pid (looked at a few times).
            if let Some(code) = inspect.exit_code {
                let since = *ended_without_pid.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= PID_AFTER_EXIT {
                    let said = attached.streams.read_first_words().await;
                    return Err(not_started(key, program, code, &said));
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(SandboxError::Unavailable(format!(
                    "cannot run a command in {}: the engine started exec {} but gave it no pid within {START_WAIT:?}",
                    key.what(),
                    attached.exec_id
                )));
            }
        }
    }
}

/// Waits [`START_POLL`], or only until the attached stream ends when it
/// has not ended `before`; whether it has ended now. Once it has, each
/// wait is the whole interval, so an exec whose stream ended without a
/// pid (a start that failed) is looked at no more often than before.
async fn pause_or_end(done: &mut tokio::sync::watch::Receiver<bool>, before: bool) -> bool {
    if before {
        tokio::time::sleep(START_POLL).await;
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(START_POLL) => *done.borrow(),
        _ = streams::ended(done) => true,
    }
}

/// An exec whose program never ran.
fn not_started(key: &SandboxKey, program: &str, code: i64, said: &str) -> SandboxError {
    if NOT_RUNNABLE.contains(&code) {
        return SandboxError::InvalidArgument(format!(
            "argv[0] '{program}' cannot be run in {}: {said}",
            key.what()
        ));
    }
    SandboxError::Unavailable(format!(
        "cannot run '{program}' in {}: the engine ended its exec with {code} before it ran: {said}",
        key.what()
    ))
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[tokio::test]
    async fn the_pause_ends_with_the_stream_once_and_runs_whole_after() {
        let (ended, mut done) = tokio::sync::watch::channel(false);
        assert!(!pause_or_end(&mut done, false).await);
        ended.send(true).unwrap();
        assert_eq!(pause_or_end(&mut done, false).now_or_never(), Some(true));
        assert_eq!(pause_or_end(&mut done, true).now_or_never(), None);
        assert!(pause_or_end(&mut done, true).await);
    }
}
