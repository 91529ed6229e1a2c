//! The daemon's side of a sandbox's private view: whether this daemon can
//! make namespaces at all ([`probe`]), and starting a sandbox's init in new
//! mount, PID and IPC namespaces ([`View::spawn`]) and waiting for its word
//! that the runner has started (see [`super::init`] for the other side).
//!
//! The pids: the daemon signals, reaps and records in its ledger the
//! init's (host) pid — the sandbox's group leader, as the runner is under
//! `uid-cgroup` — and reports the runner's host pid (`ensure`, `describe`),
//! read from `/proc/<init>/task/<init>/children` once init says the runner
//! has started.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::super::launch::child_exits;
use super::super::launch::clone_exec::{CgroupPlacement, Cloned, ExecPlan, Privileges};
use super::super::launch::runner_plan::RunnerLaunch;
use super::init::{InitPlan, InitReport, ARG};
use super::mounts::ViewSettings;

/// The namespaces every sandbox's init is cloned into.
pub const NAMESPACES: libc::c_int = libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;

/// How long a spawn waits for init to report: mounts take milliseconds,
/// but the machine may be loaded.
const REPORT_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether this daemon can make the namespaces, tried for real: a child
/// that `unshare`s them and execs `sandboxd --version`. `Err` says why not
/// (not root, a seccomp filter such as systemd's `RestrictNamespaces=`, a
/// kernel without them).
pub fn probe() -> Result<(), String> {
    let exe =
        std::env::current_exe().map_err(|error| format!("cannot find this binary: {error}"))?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: unshare is async-signal-safe and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(NAMESPACES) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    match command.status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("the namespace probe exited with {status}")),
        Err(error) => Err(format!(
            "unshare(CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWIPC) is refused: {error}"
        )),
    }
}

/// What the process tier needs to start sandboxes with a private view.
#[derive(Debug)]
pub struct View {
    pub settings: ViewSettings,
    /// This daemon's own binary, opened at start: every init is exactly
    /// the daemon that starts it, whatever is on disk by then.
    exe: OwnedFd,
    /// Where each sandbox's init writes its runner's wait status.
    exits_dir: PathBuf,
}

/// A sandbox started in its view, not yet reaped.
pub struct ViewSpawn {
    /// The init: the sandbox's group leader.
    pub init: Cloned,
    /// The runner's host pid, as reported.
    pub runner_pid: libc::pid_t,
    /// Holds the runner's wait status once init has exited.
    pub status_file: PathBuf,
}

/// What failed when a sandbox could not start in its view.
#[derive(Debug)]
pub struct StartError {
    pub step: String,
    pub error: io::Error,
}

impl StartError {
    fn at(step: &str) -> impl FnOnce(io::Error) -> StartError + '_ {
        move |error| StartError {
            step: step.to_string(),
            error,
        }
    }
}

impl View {
    /// Opens this binary; `exits_dir` must exist.
    pub fn open(settings: ViewSettings, exits_dir: PathBuf) -> io::Result<View> {
        let exe = File::open("/proc/self/exe")?;
        Ok(View {
            settings,
            exe: OwnedFd::from(exe),
            exits_dir,
        })
    }

    /// Starts `runner` as the child of a new init in its own namespaces
    /// (and `cgroup`), its output on `output`, and returns once it runs.
    /// Call on a spawner thread (see `launch::spawner`); the caller watches
    /// `init` when this succeeds, and nothing is left when it fails.
    pub fn spawn(
        &self,
        base_name: &str,
        runner: &RunnerLaunch,
        output: [OwnedFd; 2],
        cgroup: Option<CgroupPlacement>,
    ) -> Result<ViewSpawn, StartError> {
        let status_file = self.exits_dir.join(base_name);
        let status =
            File::create(&status_file).map_err(StartError::at("create the status file"))?;
        let plan = InitPlan {
            runner: runner.clone(),
            mounts: self.settings.plan(&runner.cwd, &runner.program),
        };
        let (mut ours, theirs) = UnixStream::pair().map_err(StartError::at("socketpair"))?;
        let [stdout, stderr] = output;
        let init = ExecPlan::new(
            "sandboxd-init".as_ref(),
            [ARG],
            [] as [(&str, &str); 0],
            "/".as_ref(),
            [OwnedFd::from(theirs), stdout, stderr],
            Privileges::default(),
        )
        .map_err(|problem| StartError {
            step: problem,
            error: io::Error::from_raw_os_error(libc::EINVAL),
        })?
        .into_sandbox_init(self.exe.as_raw_fd(), NAMESPACES);
        let init = match cgroup {
            Some(placement) => init.in_cgroup(placement),
            None => init,
        };
        let cloned = init.spawn().map_err(|error| StartError {
            step: format!("init: {}", error.step),
            error: error.error,
        })?;
        // Our copies of init's descriptors: only init holds its end now.
        drop(init);
        let handshake = handshake(&mut ours, &plan, status);
        match handshake {
            Ok(()) => {}
            Err(error) => {
                // SAFETY: our unreaped child.
                unsafe { libc::kill(cloned.pid, libc::SIGKILL) };
                let _ = child_exits::wait_for(cloned.pid);
                let _ = std::fs::remove_file(&status_file);
                return Err(error);
            }
        }
        let runner_pid = first_child(cloned.pid).unwrap_or_else(|| {
            tracing::warn!(
                init = cloned.pid,
                "cannot read the runner's pid from /proc: reporting the init's"
            );
            cloned.pid
        });
        Ok(ViewSpawn {
            init: cloned,
            runner_pid,
            status_file,
        })
    }
}

/// Sends init its plan, with `status` (its first bytes carry it), and
/// waits for its report.
fn handshake(channel: &mut UnixStream, plan: &InitPlan, status: File) -> Result<(), StartError> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let bytes = serde_json::to_vec(plan).map_err(|error| StartError {
        step: format!("serialise the sandbox plan ({error})"),
        error: io::Error::from_raw_os_error(libc::EINVAL),
    })?;
    let read_report = StartError::at("read init's report");
    let fds = [status.as_raw_fd()];
    let sent = sendmsg::<()>(
        channel.as_raw_fd(),
        &[io::IoSlice::new(&bytes)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(|errno| StartError::at("send init its plan")(errno.into()))?;
    // Init has its own copy now.
    drop(status);
    channel
        .write_all(&bytes[sent..])
        .and_then(|()| channel.shutdown(std::net::Shutdown::Write))
        .map_err(StartError::at("send init its plan"))?;
    channel
        .set_read_timeout(Some(REPORT_TIMEOUT))
        .map_err(StartError::at("set a timeout on init's report"))?;
    let mut answer = Vec::new();
    channel.read_to_end(&mut answer).map_err(read_report)?;
    match serde_json::from_slice::<InitReport>(&answer) {
        Ok(InitReport::Started { .. }) => Ok(()),
        Ok(InitReport::Failed { step, errno }) => Err(StartError {
            step,
            error: io::Error::from_raw_os_error(errno),
        }),
        Err(_) => Err(StartError {
            step: "init ended without a report".to_string(),
            error: io::Error::from_raw_os_error(libc::ECHILD),
        }),
    }
}

/// The first child of `pid` (its only one, at this point: the runner).
fn first_child(pid: libc::pid_t) -> Option<libc::pid_t> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

/// The runner's wait status as its init recorded it in `status_file`
/// (which is removed); `None` when init did not (it was killed first: the
/// cgroup kill, which the runner then got too).
pub fn recorded_status(status_file: &Path) -> Option<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    let text = std::fs::read_to_string(status_file).ok();
    let _ = std::fs::remove_file(status_file);
    let raw: i32 = text?.trim().parse().ok()?;
    Some(std::process::ExitStatus::from_raw(raw))
}
