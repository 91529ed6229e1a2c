//! A command in a running process-tier sandbox, with exactly the
//! isolation its runner has (runc's `exec`): the same clone child a runner
//! gets — the sandbox's uid, no privileges, its keyring, Landlock domain,
//! clean start and seccomp filter — cloned straight into the sandbox's
//! cgroups (so its limits and egress rules bound runner and commands
//! together), and, under `isolation = "full"`, from a command thread that
//! has joined the sandbox's mount, PID and IPC namespaces (its view). A
//! command thread holds the empty bounding set and most of the seccomp
//! filter already, so each command only inherits them (see
//! `launch::command_threads`).
//!
//! The command is the daemon's own child, so its wait status is read
//! directly; how it ended beyond that (its sandbox ended, the OOM killer,
//! the daemon stopping) is told from the sandbox's record and cgroup at
//! its end ([`end`]).

mod control;
pub(super) mod end;
pub(super) mod fd_stream;
pub(super) mod stdio;
mod view_terminal;
mod workdir;

use std::ffi::OsString;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use sandboxd_protocol::SandboxError;

use super::cgroup::{self, command::CommandCgroup};
use super::launch::clone_exec::{CgroupPlacement, Cloned, ExecPlan, Privileges};
use super::launch::command_threads;
use super::launcher::Launcher;
use super::pidfd;
use super::prepared::parked::enter_namespaces_of;
use super::Inner;
use crate::sandbox_key::SandboxKey;
use crate::started_command::{self, CommandControl, CommandEnd, CommandSpec, StartedCommand};
use fd_stream::FdStream;
use stdio::{Stdio, Streams};

/// The running sandbox a command joins, read from its record.
pub(super) struct Target {
    /// Its group leader: the daemon's unreaped child (its init, or its
    /// runner in a prepared view), so its pid names it and no other.
    pub(super) leader: u32,
    pub(super) uid: String,
    pub(super) generation: u64,
    task_queue: String,
    /// Its runner's count of commands beside it (the idle watcher's).
    pub(super) live_commands: Arc<std::sync::atomic::AtomicU32>,
}

/// Everything the clone needs, made before it.
pub(super) struct Launch {
    pub(super) program: PathBuf,
    pub(super) argv: Vec<String>,
    pub(super) env: Vec<(OsString, OsString)>,
    pub(super) cwd: PathBuf,
    pub(super) privileges: Privileges,
    pub(super) pty: bool,
}

impl Inner {
    /// Starts `spec` in `key`'s running sandbox (see the module doc).
    pub(super) async fn exec(
        self: &Arc<Self>,
        key: &SandboxKey,
        spec: &CommandSpec,
    ) -> Result<StartedCommand, SandboxError> {
        if let Launcher::Gvisor(gvisor) = &self.settings.launcher {
            return self.exec_in_gvisor(gvisor, key, spec).await;
        }
        // Held across the start, so no deprovision or restart of the same
        // sandbox comes in between the check and the clone.
        let _key_guard = self.key_locks.lock(key).await;
        let target = self.exec_target(key, spec)?;
        let launch = self.command_launch(key, spec, &target)?;
        let in_view = self.settings.view.is_some();
        let stdio = command_stdio(key, spec, in_view.then_some(target.leader))?;
        let (placement, own_cgroup) = self.command_placement(key, spec)?;
        self.check_pids_room(key, &spec.argv[0])?;
        let oom_kills_before = self.oom_kills(key);
        let (child, streams, terminal) = stdio.split();
        let inner = self.clone();
        let leader = target.leader;
        let spawned = self
            .spawner
            .run_command(move || {
                let cloned = clone_command(&launch, child, placement, &inner, leader, in_view)?;
                let process = inner
                    .spawner
                    .exits()
                    .watch_promptly(cloned.pid, cloned.start_time);
                Ok::<_, String>((cloned.pid, process))
            })
            .await
            .ok_or_else(|| unavailable(key, "the spawner threads are gone".to_string()))?
            .map_err(|problem| self.start_failed(key, &spec.argv[0], problem))?;
        let (pid, process) = spawned;
        tracing::debug!(scope = %key.scope, id = %key.shown_id(), pid, "command cloned");
        let exited = Arc::new(AtomicBool::new(false));
        let end_watch = self.end_watch(key, &target, oom_kills_before, &exited, own_cgroup);
        started_command(
            key,
            &target,
            pid as u32,
            streams,
            Box::new(control::ProcessControl::new(pid, exited, terminal)),
            Box::pin(end_watch.wait(process)),
        )
    }

    /// The sandbox as the command may join it: running, not paused, and
    /// the incarnation `spec.expect` names.
    pub(super) fn exec_target(
        &self,
        key: &SandboxKey,
        spec: &CommandSpec,
    ) -> Result<Target, SandboxError> {
        if self.stopping.load(std::sync::atomic::Ordering::Acquire) {
            return Err(SandboxError::Unavailable(
                "sandboxd is shutting down".into(),
            ));
        }
        let mut records = self.records();
        let record = records.get_mut(key);
        spec.expect.check(
            &key.what(),
            record
                .as_ref()
                .map(|record| (record.uid.as_str(), record.generation)),
        )?;
        let not_running = |why: &str| started_command::not_running(&key.what(), why);
        let Some(record) = record else {
            return Err(not_running("it does not exist"));
        };
        let Some(running) = &mut record.running else {
            return Err(not_running("its runner is not running"));
        };
        if running.life.is_paused() {
            return Err(started_command::paused(&key.what()));
        }
        Ok(Target {
            leader: running.leader,
            uid: record.uid.clone(),
            generation: running.generation,
            live_commands: running.life.live_commands(),
            task_queue: record.task_queue.clone(),
        })
    }

    /// The program, arguments, environment, directory and user of `spec`.
    pub(super) fn command_launch(
        &self,
        key: &SandboxKey,
        spec: &CommandSpec,
        target: &Target,
    ) -> Result<Launch, SandboxError> {
        let workspace = self.settings.workspace(key);
        // Resolved on the host's path; started where the view mounts it.
        let resolved = workdir::resolve(&workspace, spec.workdir.as_deref())?;
        let seen = self.settings.workspace_seen(&workspace);
        let cwd = match resolved.strip_prefix(&workspace) {
            Ok(relative) if relative.as_os_str().is_empty() => seen.clone(),
            Ok(relative) => seen.join(relative),
            Err(_) => resolved,
        };
        let env = self.command_env(&seen, &target.task_queue, spec);
        let path = env
            .iter()
            .find(|(name, _)| name == "PATH")
            .map(|(_, value)| value.clone())
            .unwrap_or_default();
        let sandbox_uid = self.uids.as_ref().and_then(|uids| uids.uid_of(key));
        Ok(Launch {
            program: find_program(&spec.argv[0], &path, &cwd),
            argv: spec.argv[1..].to_vec(),
            env,
            cwd,
            privileges: self.settings.identity.privileges(sandbox_uid),
            pty: spec.pty.is_some(),
        })
    }

    /// The runner's contract without its token, then the command's own.
    fn command_env(
        &self,
        workspace: &Path,
        task_queue: &str,
        spec: &CommandSpec,
    ) -> Vec<(OsString, OsString)> {
        let settings = &self.settings;
        let mut env: Vec<(OsString, OsString)> = settings
            .inherited_env
            .iter()
            .filter(|(name, _)| *name != "PATH")
            .map(|(name, value)| (name.into(), value.clone()))
            .collect();
        env.push(("PATH".into(), settings.runner_path.clone()));
        env.push(("HOME".into(), workspace.into()));
        env.push(("MODE".into(), "local".into()));
        env.push(("STIGMER_TASK_QUEUE".into(), task_queue.into()));
        env.push(("WORKSPACE_ROOT_DIR".into(), workspace.into()));
        for (name, value) in [
            ("STIGMER_BACKEND_ENDPOINT", &settings.backend_endpoint),
            ("TEMPORAL_SERVICE_ADDRESS", &settings.temporal_address),
        ] {
            if !value.is_empty() {
                env.push((name.into(), value.into()));
            }
        }
        for (name, value) in &settings.limit_env {
            env.push((name.into(), value.into()));
        }
        for (name, value) in &settings.extra_env {
            env.retain(|(kept, _)| kept.as_os_str() != name.as_str());
            env.push((name.into(), value.into()));
        }
        if spec.pty.is_some() && !spec.env.iter().any(|(name, _)| name == "TERM") {
            env.push(("TERM".into(), "xterm".into()));
        }
        for (name, value) in &spec.env {
            env.retain(|(kept, _)| kept.as_os_str() != name.as_str());
            env.push((name.into(), value.into()));
        }
        env
    }

    /// Where the command starts: its sandbox's cgroups, or a cgroup of its
    /// own inside them when it asks for limits of its own (see
    /// `cgroup::command`).
    pub(super) fn command_placement(
        &self,
        key: &SandboxKey,
        spec: &CommandSpec,
    ) -> Result<(Option<CgroupPlacement>, Option<CommandCgroup>), SandboxError> {
        let Some(tree) = self.containment.tree() else {
            if !spec.limits.is_empty() {
                return Err(SandboxError::FailedPrecondition(format!(
                    "cannot give a command in {} limits of its own: this daemon runs on the process-group fallback, without cgroups",
                    key.what()
                )));
            }
            return Ok((None, None));
        };
        if spec.limits.is_empty() {
            let placement = tree
                .open_existing(&key.base_name)
                .map_err(|error| unavailable(key, format!("its sandbox's cgroup: {error}")))?;
            return Ok((Some(placement), None));
        }
        let name = format!("command-{:016x}", rand::random::<u64>());
        let limits = cgroup::command::CommandLimits {
            memory_bytes: spec.limits.memory_bytes,
            cpu_millis: spec.limits.cpu_millis,
        };
        let (placement, own) =
            tree.command_cgroup(&key.base_name, &name, limits)
                .map_err(|why| {
                    SandboxError::FailedPrecondition(format!(
                        "cannot give a command in {} limits of its own: {why}",
                        key.what()
                    ))
                })?;
        Ok((Some(placement), Some(own)))
    }

    /// Refused when the sandbox holds as many processes as its pids limit.
    pub(super) fn check_pids_room(
        &self,
        key: &SandboxKey,
        program: &str,
    ) -> Result<(), SandboxError> {
        let Some(tree) = self.containment.tree() else {
            return Ok(());
        };
        match (tree.pids_current(&key.base_name), tree.pids_limit()) {
            (Some(current), Some(limit)) if current >= limit => {
                Err(SandboxError::FailedPrecondition(format!(
                    "cannot run '{program}' in {}: it holds {current} processes and threads, as many as its pids limit allows ([limits] pids = {limit})",
                    key.what()
                )))
            }
            _ => Ok(()),
        }
    }

    /// The OOM kills its cgroup has counted so far (0 without cgroups).
    pub(super) fn oom_kills(&self, key: &SandboxKey) -> u64 {
        self.containment
            .tree()
            .map_or(0, |tree| tree.oom_kills(&key.base_name))
    }
}

/// The clone, on a spawner thread: inside the sandbox's namespaces when it
/// has a view, back in the daemon's once it returns.
fn clone_command(
    launch: &Launch,
    stdio: [OwnedFd; 3],
    placement: Option<CgroupPlacement>,
    inner: &Inner,
    leader: u32,
    in_view: bool,
) -> Result<Cloned, String> {
    let mut plan = ExecPlan::new(
        launch.program.as_os_str(),
        &launch.argv,
        launch.env.iter().map(|(name, value)| (name, value)),
        launch.cwd.as_os_str(),
        stdio,
        launch.privileges,
    )?
    .with_filters(inner.settings.filters.clone())
    .on_confined_thread(command_threads::confinement(
        &inner.settings.filters,
        &launch.privileges,
    ))
    .without_start_time();
    if launch.pty {
        plan = plan.with_controlling_terminal();
    }
    if let Some(placement) = placement {
        plan = plan.in_cgroup(placement);
    }
    if !in_view {
        return plan.spawn().map_err(|error| error.to_string());
    }
    let leader_fd = pidfd::open(leader as libc::pid_t)
        .map_err(|error| format!("pidfd_open of the sandbox's init {leader}: {error}"))?;
    let inside = enter_namespaces_of(&leader_fd, "setns into the sandbox's namespaces")
        .map_err(|error| format!("{}: {}", error.step, error.error))?;
    let spawned = plan.joining_pid_namespace().spawn();
    drop(inside);
    spawned.map_err(|error| error.to_string())
}

/// `name` as a path: as given when it has a `/` (relative to `cwd`), else
/// the first executable of that name in `path`. A name found nowhere on
/// the host is still tried in the first directory: inside a view the exec
/// itself says whether it exists there.
fn find_program(name: &str, path: &OsString, cwd: &Path) -> PathBuf {
    if name.contains('/') {
        return cwd.join(name);
    }
    let mut dirs = std::env::split_paths(path).filter(|dir| dir.is_absolute());
    let first = dirs.next();
    std::iter::once(first.clone())
        .flatten()
        .chain(dirs)
        .map(|dir| dir.join(name))
        .find(|candidate| super::executable::is_executable_file(candidate))
        .or_else(|| first.map(|dir| dir.join(name)))
        .unwrap_or_else(|| Path::new("/usr/bin").join(name))
}

pub(super) fn unavailable(key: &SandboxKey, what: String) -> SandboxError {
    SandboxError::Unavailable(format!("cannot run a command in {}: {what}", key.what()))
}

/// A started command as its caller gets it, whichever launcher started
/// it: the daemon's ends of its standard streams (`stdout`, `stderr`,
/// `stdin`, as `Stdio` holds them) made async streams, with its control
/// and its end.
pub(super) fn started_command(
    key: &SandboxKey,
    target: &Target,
    pid: u32,
    (stdout, stderr, stdin): Streams,
    control: Box<dyn CommandControl>,
    end: Pin<Box<dyn Future<Output = CommandEnd> + Send>>,
) -> Result<StartedCommand, SandboxError> {
    let stream = |fd: OwnedFd| {
        FdStream::new(fd)
            .map(Box::pin)
            .map_err(|error| unavailable(key, format!("its output: {error}")))
    };
    Ok(StartedCommand {
        pid,
        uid: target.uid.clone(),
        generation: target.generation,
        stdout: stream(stdout)?,
        stderr: stderr.map(stream).transpose()?.map(|s| s as _),
        stdin: stdin.map(stream).transpose()?.map(|s| s as _),
        control,
        end,
    })
}

/// The command's standard streams as `spec` asks: a terminal (from the
/// devpts of `view_of`'s sandbox when given, else the daemon's) or pipes.
pub(super) fn command_stdio(
    key: &SandboxKey,
    spec: &CommandSpec,
    view_of: Option<u32>,
) -> Result<Stdio, SandboxError> {
    match spec.pty {
        Some(size) => Stdio::terminal(size, view_of),
        None => Stdio::pipes(spec.stdin),
    }
    .map_err(|error| match error.kind() {
        // A devpts at its `max` (a view's holds `[limits] ptys`: the
        // sandbox's to free).
        std::io::ErrorKind::StorageFull => SandboxError::FailedPrecondition(format!(
            "cannot run '{}' in {} on a terminal: {error}",
            spec.argv[0],
            key.what()
        )),
        _ => unavailable(key, format!("its standard streams: {error}")),
    })
}

impl Inner {
    /// What settles a command started in `target`: its end, told apart
    /// against the sandbox's record and cgroup, counted among its runner's
    /// live commands until then.
    pub(super) fn end_watch(
        self: &Arc<Self>,
        key: &SandboxKey,
        target: &Target,
        oom_kills_before: u64,
        exited: &Arc<AtomicBool>,
        own_cgroup: Option<CommandCgroup>,
    ) -> end::EndWatch {
        end::EndWatch {
            inner: Arc::downgrade(self),
            key: key.clone(),
            generation: target.generation,
            oom_kills_before,
            exited: exited.clone(),
            own_cgroup,
            _live: end::LiveCommand::new(target.live_commands.clone()),
        }
    }
}

impl Inner {
    /// A clone that failed: a program that is not there (or not
    /// executable) is the caller's to fix; a sandbox at its pids limit
    /// says so; anything else is the daemon's.
    pub(super) fn start_failed(
        &self,
        key: &SandboxKey,
        program: &str,
        problem: String,
    ) -> SandboxError {
        let not_there = problem.starts_with("execve")
            && (problem.contains("No such file") || problem.contains("Permission denied"));
        if not_there {
            return SandboxError::InvalidArgument(format!(
                "argv[0] '{program}' cannot be run in {}: {problem}",
                key.what()
            ));
        }
        // Where runners share a uid (`run_as`) each command joins a
        // session keyring of its own (see `isolation::keyring`), and the
        // kernel holds every uid to a number of keys.
        if problem.contains("KEYCTL_JOIN_SESSION_KEYRING") && problem.contains("quota") {
            let max = std::fs::read_to_string("/proc/sys/kernel/keys/maxkeys")
                .map(|text| text.trim().to_string())
                .unwrap_or_else(|_| "?".into());
            return SandboxError::FailedPrecondition(format!(
                "cannot run '{program}' in {}: its uid holds as many keys as the kernel allows one uid (kernel.keys.maxkeys = {max}); where runners share a uid (run_as) each running command holds a session keyring of its own, so this many commands at once need a higher kernel.keys.maxkeys: {problem}",
                key.what()
            ));
        }
        let pids_limit = self.containment.tree().and_then(|tree| tree.pids_limit());
        if let (true, Some(limit)) = (problem.contains("temporarily unavailable"), pids_limit) {
            return SandboxError::FailedPrecondition(format!(
                "cannot run '{program}' in {}: it holds as many processes and threads as its pids limit allows ([limits] pids = {limit}): {problem}",
                key.what()
            ));
        }
        unavailable(key, format!("'{program}': {problem}"))
    }
}
