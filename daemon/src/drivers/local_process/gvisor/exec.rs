//! Commands under `isolation = "gvisor"`: `runsc exec` into the sandbox's
//! container, so the command runs on gVisor's sentry beside the runner,
//! with its uid and gid, in its view, with the runner's environment
//! contract plus the request's, in its working directory under
//! `/workspace`.
//!
//! The host's side is one `runsc exec` process per command, cloned into
//! the sandbox's cgroups as the runner's `runsc run` is (its own session,
//! killed with the spawner thread, the runners' OOM score): it asks the
//! sentry to start the process, waits for it and exits with its status,
//! 128 + N when it died of signal N, which is the command's end (see
//! [`Gvisor::runner_exit`]). Its standard streams are the command's, the
//! pipes (or terminal) and output pumps of every process-tier command
//! (`exec::stdio`); the sentry serves the command's reads and writes on
//! them. What the request says goes to runsc as a `process.json` in
//! `<state>/gvisor/exec`, root's only (it holds the command's
//! environment), removed at the command's end.
//!
//! A terminal is a pair from the daemon's `/dev/ptmx` (the sandbox has no
//! devpts of the host's: gVisor has its own), the follower `runsc exec`'s
//! controlling terminal and the process's `terminal: true`: inside,
//! `isatty` holds and the size is the pair's; a resize sets the pair's
//! size, and the host kernel's SIGWINCH to `runsc exec` (its foreground
//! process) is passed on by runsc to the terminal's foreground group
//! inside, as Ctrl-C's SIGINT is.
//!
//! Signals go through `runsc kill --pid` (see [`control`]): this runsc
//! does not pass a signal to `runsc exec` on, it dies of it. Limits of a
//! command's own are refused: a child cgroup would hold only `runsc exec`,
//! while the command itself runs in the sentry, which is the whole
//! sandbox's.
//!
//! A restart of the daemon: like every process-tier command, a gVisor
//! command is the daemon's (`runsc exec` dies with its spawner thread; the
//! next start's sweep kills every sandbox's cgroup, sentry included), so
//! none is found again; its proof, when the daemon stopped, says
//! `daemon-stopped`.

mod control;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use sandboxd_protocol::SandboxError;
use serde_json::json;

use super::super::exec::{command_stdio, started_command, unavailable, Launch};
use super::super::launch::child_exits::RunnerProcess;
use super::super::launch::clone_exec::CgroupPlacement;
use super::super::launch::proc_stat;
use super::super::Inner;
use super::runsc::{self, Runsc};
use super::Gvisor;
use crate::sandbox_key::SandboxKey;
use crate::started_command::{CommandSpec, StartedCommand};

/// What one command's `runsc exec` is given and leaves: its process's
/// spec, and the file runsc writes the process's pid inside to.
struct ExecFiles {
    process: PathBuf,
    pid_inside: PathBuf,
}

impl ExecFiles {
    fn remove(&self) {
        let _ = std::fs::remove_file(&self.process);
        let _ = std::fs::remove_file(&self.pid_inside);
    }
}

impl Inner {
    /// Starts `spec` in `key`'s running gVisor sandbox (see the module doc).
    pub(in super::super) async fn exec_in_gvisor(
        self: &Arc<Self>,
        gvisor: &Arc<Gvisor>,
        key: &SandboxKey,
        spec: &CommandSpec,
    ) -> Result<StartedCommand, SandboxError> {
        refuse_own_limits(key, spec)?;
        // Held across the start, as for any command.
        let _key_guard = self.key_locks.lock(key).await;
        let target = self.exec_target(key, spec)?;
        let launch = self.command_launch(key, spec, &target)?;
        check_program(key, spec, &launch, &self.settings.workspace(key))?;
        // A terminal from the daemon's devpts: gVisor has its own inside.
        let stdio = command_stdio(key, spec, None)?;
        let (placement, _) = self.command_placement(key, spec)?;
        self.check_pids_room(key, &spec.argv[0])?;
        let oom_kills_before = self.oom_kills(key);
        let container = gvisor.container_of(target.leader, &key.base_name);
        let files = gvisor
            .exec_files(&spec.id, &launch, spec.pty.is_some())
            .map_err(|error| unavailable(key, format!("its runsc process spec: {error}")))?;
        let (child, streams, terminal) = stdio.split();
        let exec = RunscExec {
            container: container.clone(),
            process: files.process.clone(),
            pid_inside: files.pid_inside.clone(),
            pty: spec.pty.is_some(),
            oom_score_adj: self.settings.oom_score_adj,
        };
        let spawned = self
            .spawn_runsc_exec(gvisor.runsc.clone(), exec, child, placement)
            .await
            .ok_or_else(|| unavailable(key, "the spawner threads are gone".to_string()))?
            .map_err(|problem| {
                files.remove();
                self.start_failed(key, &spec.argv[0], problem)
            })?;
        let (pid, process) = spawned;
        tracing::debug!(scope = %key.scope, id = %key.shown_id(), pid, container, "runsc exec started");
        let exited = Arc::new(AtomicBool::new(false));
        let end_watch = self.end_watch(key, &target, oom_kills_before, &exited, None);
        let control = control::GvisorControl {
            runsc: gvisor.runsc.clone(),
            container,
            pid_inside: files.pid_inside.clone(),
            exited,
            terminal,
        };
        let end = async move {
            let end = end_watch.wait_mapped(process, Gvisor::command_exit).await;
            files.remove();
            end
        };
        started_command(
            key,
            &target,
            pid as u32,
            streams,
            Box::new(control),
            Box::pin(end),
        )
    }
}

impl Inner {
    /// `runsc exec` started on a spawner thread, which reaps it: its pid
    /// and its exit; `None` when the spawner threads are gone.
    async fn spawn_runsc_exec(
        self: &Arc<Self>,
        runsc: Arc<Runsc>,
        exec: RunscExec,
        stdio: [OwnedFd; 3],
        placement: Option<CgroupPlacement>,
    ) -> Option<Result<(i32, RunnerProcess), String>> {
        let inner = self.clone();
        self.spawner
            .run(move || {
                let pid = runsc
                    .exec(&exec, stdio, placement.as_ref())
                    .map_err(|error| format!("{} exec: {error}", runsc.path.display()))?;
                let start_time = proc_stat::read(pid).map(|stat| stat.start_time);
                Ok((pid, inner.spawner.exits().watch(pid, start_time)))
            })
            .await
    }
}

/// Limits of a command's own are a child cgroup of the sandbox's; under
/// gVisor it would hold `runsc exec` alone, never the command.
fn refuse_own_limits(key: &SandboxKey, spec: &CommandSpec) -> Result<(), SandboxError> {
    if spec.limits.is_empty() {
        return Ok(());
    }
    Err(SandboxError::FailedPrecondition(format!(
        "cannot give a command in {} limits of its own under isolation = \"gvisor\": the command runs inside gVisor's sentry, which serves the whole sandbox, so a cgroup of the command's own would hold only its `runsc exec` on the host; the sandbox's limits bound it (run it without --cpu/--memory)",
        key.what()
    )))
}

/// `argv[0]` as the command's program, checked on the host as full mode's
/// exec checks it: gVisor's root is the host's, its workspace the
/// sandbox's. A path the view hides is only found missing inside (runsc
/// then says so on the command's stderr, exit code 128).
fn check_program(
    key: &SandboxKey,
    spec: &CommandSpec,
    launch: &Launch,
    workspace: &Path,
) -> Result<(), SandboxError> {
    let on_host = match launch.program.strip_prefix(super::WORKSPACE) {
        Ok(relative) => workspace.join(relative),
        Err(_) => launch.program.clone(),
    };
    if super::super::executable::is_executable_file(&on_host) {
        return Ok(());
    }
    Err(SandboxError::InvalidArgument(format!(
        "argv[0] '{}' cannot be run in {}: {} is not an executable file",
        spec.argv[0],
        key.what(),
        launch.program.display()
    )))
}

impl Gvisor {
    /// The runsc container of the sandbox whose `runsc run` is `leader`
    /// (a prepared sandbox's is named after the one it took), else `base`'s.
    fn container_of(&self, leader: u32, base: &str) -> String {
        self.running()
            .get(&(leader as i32))
            .cloned()
            .unwrap_or_else(|| self.container(base))
    }

    /// Writes the `process.json` of command `id` (its program, arguments,
    /// environment, directory and user, no capability, `no_new_privs`, a
    /// terminal or not) in `<state>/gvisor/exec`.
    fn exec_files(&self, id: &str, launch: &Launch, pty: bool) -> io::Result<ExecFiles> {
        let dir = self.bundles.with_file_name("exec");
        let files = ExecFiles {
            process: dir.join(format!("{id}.json")),
            pid_inside: dir.join(format!("{id}.pid")),
        };
        let spec = process_spec(launch, pty).map_err(io::Error::other)?;
        write_private(&dir, &files.process, &spec)?;
        Ok(files)
    }
}

/// `value` as `file` in `dir` (made 0700), `0600`: root's only.
fn write_private(dir: &Path, file: &Path, value: &serde_json::Value) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(file)?;
    out.write_all(value.to_string().as_bytes())
}

/// The OCI process of a command.
fn process_spec(launch: &Launch, pty: bool) -> Result<serde_json::Value, String> {
    let (uid, gid) = launch.privileges.user.unwrap_or((0, 0));
    let (args, env) = super::bundle::process_args_env(&launch.program, &launch.argv, &launch.env)?;
    let none: [&str; 0] = [];
    Ok(json!({
        "user": {"uid": uid, "gid": gid},
        "args": args,
        "env": env,
        "cwd": super::bundle::text("the working directory", launch.cwd.as_os_str())?,
        "terminal": pty,
        "noNewPrivileges": true,
        "capabilities": {
            "bounding": none, "effective": none, "inheritable": none,
            "permitted": none, "ambient": none,
        },
    }))
}

/// One `runsc exec`'s arguments.
struct RunscExec {
    container: String,
    process: PathBuf,
    pid_inside: PathBuf,
    pty: bool,
    oom_score_adj: i32,
}

impl Runsc {
    /// Starts `runsc exec` of `exec` on `stdio`, cloned into `placement`
    /// as `runsc run` is (see `runsc::join_and_detach`), with a terminal
    /// its controlling one. Returns its pid, unreaped: the calling spawner
    /// thread reaps it.
    fn exec(
        &self,
        exec: &RunscExec,
        stdio: [OwnedFd; 3],
        placement: Option<&CgroupPlacement>,
    ) -> io::Result<i32> {
        let procs = match placement {
            Some(placement) => runsc::procs_files(placement)?,
            None => Vec::new(),
        };
        let cpus = placement.and_then(|placement| placement.cpus.clone());
        let adj = format!("{}\n", exec.oom_score_adj);
        let [stdin, stdout, stderr] = stdio;
        let mut command = self.command();
        command
            .arg("exec")
            .arg("--process")
            .arg(&exec.process)
            .arg("--internal-pid-file")
            .arg(&exec.pid_inside)
            .arg(&exec.container)
            .stdin(std::process::Stdio::from(stdin))
            .stdout(std::process::Stdio::from(stdout))
            .stderr(std::process::Stdio::from(stderr));
        let raw: Vec<i32> = procs.iter().map(AsRawFd::as_raw_fd).collect();
        let pty = exec.pty;
        // SAFETY: the hook makes only async-signal-safe system calls on
        // descriptors and buffers prepared before the fork.
        unsafe {
            command.pre_exec(move || {
                runsc::join_and_detach(&raw, cpus.as_deref(), adj.as_bytes())?;
                // A new session leader takes its terminal (stdin) as its
                // controlling one, so the host kernel's SIGWINCH and
                // SIGINT reach runsc, which passes them on inside.
                if pty && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(command.spawn()?.id() as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drivers::local_process::launch::clone_exec::Privileges;

    #[test]
    fn the_process_is_the_commands_as_the_sandboxs_user_without_privileges() {
        let launch = Launch {
            program: "/usr/bin/sh".into(),
            argv: vec!["-c".into(), "id".into()],
            env: vec![
                ("HOME".into(), "/workspace".into()),
                ("FOO".into(), "bar".into()),
            ],
            cwd: "/workspace/sub".into(),
            privileges: Privileges {
                user: Some((2000000001, 2000000001)),
                bounding_set_up_to: None,
            },
            pty: true,
        };
        let spec = process_spec(&launch, true).unwrap();
        assert_eq!(
            spec["user"],
            json!({"uid": 2000000001u32, "gid": 2000000001u32})
        );
        assert_eq!(spec["args"], json!(["/usr/bin/sh", "-c", "id"]));
        assert_eq!(spec["env"], json!(["HOME=/workspace", "FOO=bar"]));
        assert_eq!(spec["cwd"], "/workspace/sub");
        assert_eq!(spec["terminal"], true);
        assert_eq!(spec["noNewPrivileges"], true);
        assert_eq!(spec["capabilities"]["bounding"], json!([]));
    }
}
