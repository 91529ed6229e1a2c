//! A gVisor sandbox prepared ahead of demand: `runsc run` of a bundle
//! whose process is a parked runner (`sandboxd_init::piped_runner`), made
//! on the pool's parking thread in a prepared sandbox's cgroups, as its
//! uid, with its prepared workspace bound at `/workspace` — so the sentry
//! and gofer have booted, and the stub waits inside, before any caller
//! asks. The take writes one message on the stub's standard input and the
//! stub execs the runner: the caller pays neither `runsc`'s start nor the
//! sentry's boot (runsc run cold: 116 ms to the runner's first instruction
//! on the bench host; `runsc create` ahead and `runsc start` at the take
//! still 63–141 ms, `start` being a runsc process of its own; a parked stub
//! 4–34 ms, measured by hand under load).
//!
//! Why pipes: gVisor cannot pass a host descriptor received by
//! `SCM_RIGHTS` into its sandbox, so the stub's standard descriptors are
//! fixed when runsc starts. Its input is a pipe whose write end only the
//! daemon holds (closed unwritten, it ends the stub: that is how an
//! untaken one is let go); its output and error one pipe, read by the
//! daemon for the stub's word that it waits, then handed to the sandbox's
//! output pump at the take, as a cold runner's pipe is.
//!
//! The workspace: the bundle binds the prepared directory, which the take
//! renames into place (`host_parts`); the gofer holds it open, so the
//! sandbox keeps its workspace under its new name (a file the runner
//! writes is on the host in `<sandboxes>/<base>`, one put there from the
//! host is seen inside). A sandbox whose workspace is on disk already
//! takes none: its bundle would bind the wrong directory.
//!
//! Nothing of one outlives it: dropped untaken, its input is closed, the
//! stub exits, and `runsc run` ends the sandbox and is waited for (its
//! cgroup killed if it takes too long) before its bundle and runsc state
//! are removed and its uid is given back; a daemon that dies takes
//! `runsc run` along (`PR_SET_PDEATHSIG` of the parking thread), the
//! group reaper and the next start's sweep kill the cgroups, and that
//! start wipes `<state>/gvisor`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd_init::piped_runner;

use super::super::isolation::mounts::Bind;
use super::super::launch::child_exits::{ChildExits, RunnerProcess};
use super::super::launch::clone_exec::{CgroupPlacement, Cloned, Privileges};
use super::super::launch::proc_stat;
use super::super::launch::runner_plan::RunnerLaunch;
use super::super::logs::RunnerLogs;
use super::super::pidfd::{self, has_exited, wait_readable};
use super::super::prepared::parked_runner::{launch_message, StartError};
use super::{bundle, Gvisor};

/// How long a sandbox being parked may take to say its stub waits: the
/// sentry's boot and the stub's start, well under a second on an idle
/// host, far more on a loaded one.
const PARK_TIMEOUT: Duration = Duration::from_secs(60);

/// How long an untaken one may take to end once let go, before its
/// cgroup is killed.
const GONE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long after a start the pool waits before it parks the next one
/// (see `prepared::quiet`): a parking is a `runsc run` and a sentry's boot,
/// some 150 ms of CPU, which on a small host held a CPU the started
/// runner's exec under gVisor (its p50 9 ms, p99 26 ms on the 2-vCPU bench
/// host with a 3 ms wait) wanted.
pub const QUIET_AFTER_A_START: Duration = Duration::from_millis(50);

/// The longest output kept from a sandbox that failed to park, for the
/// error (runsc's own message, mostly).
const PARK_OUTPUT_MAX: usize = 4096;

/// What every prepared gVisor sandbox is made with.
pub struct GvisorParker {
    pub gvisor: Arc<Gvisor>,
    /// The stub: the init binary (`sandboxd-init`, or the daemon's own),
    /// run by path inside gVisor and bound there read-only at that path.
    pub stub: PathBuf,
    /// The runner program its bundle binds back (a take of another falls
    /// back to the cold start).
    pub program: PathBuf,
    /// Written to each `runsc run`'s `oom_score_adj`, as to a cold one's.
    pub oom_score_adj: i32,
}

/// A gVisor sandbox parked and not yet started: dropped, it is ended.
pub struct ParkedGvisor {
    gvisor: Arc<Gvisor>,
    /// Its runsc container id.
    id: String,
    /// Its bundle directory.
    bundle: PathBuf,
    /// `runsc run`'s pid: the sandbox's leader once taken.
    pid: libc::pid_t,
    pidfd: OwnedFd,
    user: Option<(u32, u32)>,
    program: PathBuf,
    /// The write end of the stub's standard input.
    input: Option<OwnedFd>,
    /// The read end of its output pipe, until the take hands it on.
    output: Option<OwnedFd>,
    /// Its cgroup v2 directory, killed if it does not end when let go.
    cgroup: OwnedFd,
    /// Its exit, reaped on the parking thread; `None` once started.
    process: Option<RunnerProcess>,
}

impl GvisorParker {
    /// Parks a sandbox named `name` (a prepared one's, `prepared-<n>`) in
    /// `placement` with `privileges`, its workspace `workspace`. Call on
    /// the parking thread, whose children `exits` reaps; blocks until the
    /// stub waits (or fails to).
    pub fn park(
        &self,
        exits: &ChildExits,
        name: &str,
        workspace: &Path,
        placement: CgroupPlacement,
        privileges: Privileges,
    ) -> Result<ParkedGvisor, String> {
        let gvisor = &self.gvisor;
        let dir = self.write_bundle(name, workspace, privileges)?;
        let id = gvisor.container(name);
        let spawned = self.spawn(&dir, &id, &placement);
        let (pid, input, output) = spawned.inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        let start_time = proc_stat::read(pid).map(|stat| stat.start_time);
        let process = exits.watch(pid, start_time);
        let parked = |pidfd| ParkedGvisor {
            gvisor: gvisor.clone(),
            id,
            bundle: dir.clone(),
            pid,
            pidfd,
            user: privileges.user,
            program: self.program.clone(),
            input: Some(input),
            output: Some(output),
            cgroup: placement.v2_dir,
            process: Some(process),
        };
        let parked = match pidfd::open(pid) {
            Ok(pidfd) => parked(pidfd),
            Err(error) => {
                // SAFETY: our own child, not reaped (its watcher reaps it).
                unsafe { libc::kill(pid, libc::SIGKILL) };
                let _ = std::fs::remove_dir_all(&dir);
                return Err(format!("pidfd_open of a parked runsc run: {error}"));
            }
        };
        // Dropped (ended, its bundle removed) on an error.
        parked.wait_until_parked()?;
        Ok(parked)
    }

    /// Writes the bundle of prepared sandbox `name`: the view a cold start
    /// of the runner program would get (its uid named inside too, its
    /// workspace `workspace`), the stub bound in, the stub its process.
    fn write_bundle(
        &self,
        name: &str,
        workspace: &Path,
        privileges: Privileges,
    ) -> Result<PathBuf, String> {
        let gvisor = &self.gvisor;
        let home = gvisor.view.workspace_inside(workspace);
        let plan = gvisor.view.plan(workspace, &self.program);
        let mut plan = gvisor.with_identity(plan, &privileges, &home);
        plan.binds.push(Bind::back(&self.stub, false));
        let stub = RunnerLaunch {
            program: self.stub.clone(),
            args: vec![piped_runner::ARG.to_string()],
            env: Vec::new(),
            cwd: "/".into(),
            workspace: workspace.to_path_buf(),
            privileges,
        };
        let spec = bundle::spec(name, &plan, &stub)?;
        let dir = gvisor.bundles.join(name);
        bundle::write(&dir, &spec)
            .map_err(|error| format!("OCI bundle {}: {error}", dir.display()))?;
        Ok(dir)
    }

    /// Starts `runsc run` of `bundle` as `id` in `placement`, fed by a
    /// pipe: its pid, the pipe's write end, and its output's read end.
    fn spawn(
        &self,
        bundle: &Path,
        id: &str,
        placement: &CgroupPlacement,
    ) -> Result<(libc::pid_t, OwnedFd, OwnedFd), String> {
        let (input_read, input_write) =
            pipe().map_err(|error| format!("pipe for a parked runner's input: {error}"))?;
        let (output_read, output_write) = RunnerLogs::output_pipe()
            .map_err(|error| format!("pipe for a parked runner's output: {error}"))?;
        let error_write = output_write
            .try_clone()
            .map_err(|error| format!("dup of a parked runner's output: {error}"))?;
        let pid = self
            .gvisor
            .runsc
            .run_with_input(
                bundle,
                id,
                Some(input_read),
                [output_write, error_write],
                Some(placement),
                self.oom_score_adj,
            )
            .map_err(|error| format!("{} run: {error}", self.gvisor.runsc.path.display()))?;
        Ok((pid as libc::pid_t, input_write, output_read))
    }
}

impl ParkedGvisor {
    /// The runner program its bundle was made for.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Starts `launch` in it as sandbox `base`, its output pumped into
    /// `base`'s file by `logs`: returns once the launch is written (the
    /// stub execs the runner on its own time; a step of it that fails is
    /// the runner's exit 127, its reason on its output).
    pub fn start(
        mut self,
        launch: &RunnerLaunch,
        logs: &Arc<RunnerLogs>,
        base: &str,
    ) -> Result<(Cloned, RunnerProcess), StartError> {
        let unused = |why: &str| StartError::Unused {
            why: why.to_string(),
            for_good: false,
        };
        if launch.program != self.program {
            return Err(unused("it was parked for another runner program"));
        }
        if launch.privileges.user != self.user {
            return Err(unused("it was parked as another user"));
        }
        if has_exited(&self.pidfd) {
            return Err(unused("its runsc run was gone at its take"));
        }
        let message = launch_message(launch)?;
        let output = self.output.take().expect("taken once");
        logs.pump_into_output(base, output)
            .map_err(|error| StartError::Failed {
                step: "the output file".to_string(),
                error,
            })?;
        let input = self.input.take().expect("taken once");
        write_all(&input, &message).map_err(|error| StartError::Failed {
            step: "the launch, written to the parked runner".to_string(),
            error,
        })?;
        // Closed: the stub reads to the end.
        drop(input);
        self.gvisor.note_running(self.pid, self.id.clone());
        let process = self.process.take().expect("started once");
        let leader = Cloned {
            pid: self.pid,
            start_time: process.start_time(),
        };
        Ok((leader, process))
    }

    /// Waits for the stub's word that it waits for its launch, or says
    /// what came instead (runsc's error, mostly).
    fn wait_until_parked(&self) -> Result<(), String> {
        let output = self.output.as_ref().expect("parked with its output");
        let deadline = Instant::now() + PARK_TIMEOUT;
        let mut said = Vec::new();
        loop {
            if said == piped_runner::PARKED {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let diverged = !piped_runner::PARKED.starts_with(&said);
            if left.is_zero() || said.len() >= PARK_OUTPUT_MAX {
                return Err(parking_failed("did not say it waits in time", &said));
            }
            if !wait_readable(output.as_raw_fd(), left.min(Duration::from_millis(200))) {
                if has_exited(&self.pidfd) {
                    return Err(parking_failed("ended during its start-up", &said));
                }
                continue;
            }
            // No further than the word while it matches: nothing past it
            // (the runner's output, later) is read here.
            let want = match diverged {
                true => PARK_OUTPUT_MAX - said.len(),
                false => piped_runner::PARKED.len() - said.len(),
            };
            let mut buffer = vec![0u8; want];
            // SAFETY: a read into a live buffer of its length.
            let read = unsafe { libc::read(output.as_raw_fd(), buffer.as_mut_ptr().cast(), want) };
            match read {
                0 => return Err(parking_failed("ended during its start-up", &said)),
                read if read > 0 => said.extend_from_slice(&buffer[..read as usize]),
                _ => {
                    let error = io::Error::last_os_error();
                    if !matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) {
                        return Err(format!("read of a parked runner's output: {error}"));
                    }
                }
            }
        }
    }
}

impl Drop for ParkedGvisor {
    /// An untaken one is let go (its input closed: the stub exits and runsc
    /// ends the sandbox), waited for, its cgroup killed if it is slow;
    /// then its bundle and runsc state go.
    fn drop(&mut self) {
        if self.process.is_none() {
            return;
        }
        self.input = None;
        if !wait_gone(&self.pidfd, GONE_TIMEOUT) {
            tracing::warn!(id = %self.id, "a parked gVisor sandbox did not end when let go: killing its cgroup");
            kill_cgroup(&self.cgroup);
            pidfd::kill(&self.pidfd);
            wait_gone(&self.pidfd, GONE_TIMEOUT);
        }
        self.gvisor.runsc.forget(&self.id);
        if let Err(error) = std::fs::remove_dir_all(&self.bundle) {
            if error.kind() != io::ErrorKind::NotFound {
                tracing::warn!(bundle = %self.bundle.display(), %error, "cannot remove a parked gVisor sandbox's bundle");
            }
        }
    }
}

/// Waits up to `timeout` for the process of `pidfd` to exit.
fn wait_gone(pidfd: &OwnedFd, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while !has_exited(pidfd) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        wait_readable(pidfd.as_raw_fd(), left);
    }
    true
}

/// SIGKILLs every process in the cgroup v2 directory `dir`.
fn kill_cgroup(dir: &OwnedFd) {
    let file = nix::fcntl::openat(
        dir,
        "cgroup.kill",
        nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    );
    let written = file.and_then(|file| nix::unistd::write(&file, b"1"));
    if let Err(error) = written {
        tracing::warn!(%error, "cannot kill a parked gVisor sandbox's cgroup");
    }
}

/// Why parking failed, with what the sandbox said.
fn parking_failed(what: &str, said: &[u8]) -> String {
    let said = String::from_utf8_lossy(said);
    let last = said.lines().rev().find(|line| !line.trim().is_empty());
    format!(
        "a parked gVisor sandbox {what}: {}",
        last.unwrap_or("no message")
    )
}

/// Writes all of `bytes` to the pipe `fd` (blocking: the stub reads it).
fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: a write of a live buffer; no SIGPIPE (the daemon ignores it).
        let written = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        if written < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        bytes = &bytes[written as usize..];
    }
    Ok(())
}

/// A close-on-exec pipe: (read end, write end), both blocking.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptors pipe2 just made, owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
