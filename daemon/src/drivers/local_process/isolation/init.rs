//! A sandbox's PID 1 under `isolation = "full"`: the daemon's own binary,
//! exec'd (by descriptor) from the clone child with a hidden argv[1], in
//! the sandbox's new mount, PID and IPC namespaces and its cgroup.
//!
//! Why an init and not the runner as PID 1: PID 1 of a namespace ignores
//! every signal it has no handler for (a runner written for an ordinary
//! pid would shrug off SIGTERM) and inherits every orphan, which someone
//! must reap.
//!
//! What it does, in order:
//! 1. reads its [`InitPlan`] from descriptor 0, a socket the daemon holds
//!    the other end of (never argv or the environment: the plan holds the
//!    token), until EOF; with its first bytes comes (`SCM_RIGHTS`) the
//!    status file, which the daemon opened: a file open for writing on a
//!    mount of this namespace would keep it from being made read-only;
//! 2. builds the view ([`MountPlan::apply`]) and mounts a `/proc` of its
//!    own PID namespace;
//! 3. blocks the signals it handles, then starts the runner with the
//!    daemon's own [`RunnerLaunch::exec_plan`] and clone child — so every
//!    step (privileges, user switch, filters) is the daemon's;
//! 4. drops its own privileges for good: non-dumpable (the runner cannot
//!    ptrace it or read its memory), an empty bounding set, the runner's
//!    uid, no capability, `no_new_privs`;
//! 5. reports [`InitReport::Started`] (or the step and errno that failed)
//!    on the socket and closes it: the daemon's spawn waits for this;
//! 6. then, until the runner exits: reaps every orphan, and forwards the
//!    signals the daemon sends it (SIGTERM at a stop, …) to the runner's
//!    process group. When the runner exits it writes the runner's raw wait
//!    status into the status file and exits; the kernel kills whatever is
//!    left in the namespace, as the daemon kills the cgroup of a runner
//!    that exited (it does that too, afterwards).
//!
//! So the daemon keeps one descriptor per running sandbox (the output
//! pipe), signals and reaps init as the group leader, and reads the real
//! wait status from the file at reap.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;

use serde::{Deserialize, Serialize};

use super::super::launch::clone_exec::{self, ExecError};
use super::super::launch::runner_plan::RunnerLaunch;
use super::kernel_filters::KernelFilters;
use super::mounts::MountPlan;

/// The hidden first argument that makes `sandboxd` a sandbox's init.
pub const ARG: &str = "__sandbox-init";

/// What init is told, on its socket.
#[derive(Debug, Serialize, Deserialize)]
pub struct InitPlan {
    pub runner: RunnerLaunch,
    pub mounts: MountPlan,
}

/// What init answers once the runner has started, or could not.
#[derive(Debug, Serialize, Deserialize)]
pub enum InitReport {
    /// `pid` is the runner's pid in the sandbox's namespace.
    Started { pid: i32 },
    /// The step that failed (as the clone child names its steps) and errno.
    Failed { step: String, errno: i32 },
}

/// The signals init forwards to the runner's group.
const FORWARDED: [libc::c_int; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGCONT,
];

/// A step of init that failed.
struct Failure {
    step: String,
    error: io::Error,
}

impl Failure {
    fn at(step: impl Into<String>) -> impl FnOnce(io::Error) -> Failure {
        move |error| Failure {
            step: step.into(),
            error,
        }
    }
}

impl From<ExecError> for Failure {
    fn from(error: ExecError) -> Failure {
        Failure {
            step: error.step.to_string(),
            error: error.error,
        }
    }
}

/// The init's `main`. Its exit code only matters when the start failed
/// (127, as the clone child's); otherwise the status file says.
pub fn run_init_process() -> ExitCode {
    // SAFETY: a constant C string; the name shows in ps (the exec by
    // descriptor named this process after the descriptor's number).
    unsafe { libc::prctl(libc::PR_SET_NAME, c"sandbox-init".as_ptr(), 0, 0, 0) };
    // SAFETY: descriptor 0 is the socket the daemon gave, owned by no one
    // else in this process.
    let mut channel = unsafe { UnixStream::from_raw_fd(0) };
    let started =
        read_plan(&mut channel).and_then(|(plan, status_file)| Ok((start(&plan)?, status_file)));
    let report = match &started {
        Ok((pid, _)) => InitReport::Started { pid: *pid },
        Err(failure) => InitReport::Failed {
            step: failure.step.clone(),
            errno: failure.error.raw_os_error().unwrap_or(libc::EIO),
        },
    };
    let reported = serde_json::to_vec(&report)
        .map_err(io::Error::other)
        .and_then(|bytes| channel.write_all(&bytes));
    drop(channel);
    let Ok((runner, status_file)) = started else {
        return ExitCode::from(127);
    };
    // Nothing may keep descriptor 0 (the socket, closed above) unused:
    // /dev/null takes its number, as a runner's stdin has it.
    if let Ok(null) = File::open("/dev/null") {
        // SAFETY: dup2 onto the free descriptor 0.
        unsafe { libc::dup2(null.as_raw_fd(), 0) };
    }
    if reported.is_err() {
        // The daemon gave up waiting: it will not watch this sandbox.
        // SAFETY: our own child.
        unsafe { libc::kill(runner, libc::SIGKILL) };
        return ExitCode::from(127);
    }
    supervise(runner, status_file)
}

/// The plan, and the status file the daemon sends with its first bytes.
fn read_plan(channel: &mut UnixStream) -> Result<(InitPlan, File), Failure> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut bytes = vec![0u8; 64 * 1024];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let (received, status_file) = {
        let mut iov = [std::io::IoSliceMut::new(&mut bytes)];
        let message = recvmsg::<()>(
            channel.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(|errno| Failure::at("receive the sandbox plan")(errno.into()))?;
        let mut status_file = None;
        for control in message.cmsgs().into_iter().flatten() {
            if let ControlMessageOwned::ScmRights(fds) = control {
                for fd in fds {
                    // SAFETY: a descriptor the kernel just installed for us.
                    let file = unsafe { File::from_raw_fd(fd) };
                    status_file.get_or_insert(file);
                }
            }
        }
        (message.bytes, status_file)
    };
    bytes.truncate(received);
    channel
        .read_to_end(&mut bytes)
        .map_err(Failure::at("read the sandbox plan"))?;
    let status_file = status_file.ok_or_else(|| Failure {
        step: "receive the status file".to_string(),
        error: io::Error::from_raw_os_error(libc::EBADF),
    })?;
    let plan = serde_json::from_slice(&bytes).map_err(|error| Failure {
        step: format!("parse the sandbox plan ({error})"),
        error: io::Error::from_raw_os_error(libc::EINVAL),
    })?;
    Ok((plan, status_file))
}

/// Steps 2 to 4: returns the runner's pid (in the namespace).
fn start(plan: &InitPlan) -> Result<libc::pid_t, Failure> {
    plan.mounts.apply().map_err(|error| Failure {
        step: format!("{} {}", error.step, error.path.display()),
        error: error.error,
    })?;
    mount_proc().map_err(Failure::at("mount /proc"))?;
    block_handled_signals().map_err(Failure::at("sigprocmask"))?;
    let null = File::open("/dev/null").map_err(Failure::at("open /dev/null"))?;
    let duplicate = |fd: libc::c_int| -> Result<OwnedFd, Failure> {
        // SAFETY: descriptors 1 and 2 are the runner's output pipe, open
        // for the whole life of this process.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        borrowed
            .try_clone_to_owned()
            .map_err(Failure::at("dup of stdio"))
    };
    let stdio = [OwnedFd::from(null), duplicate(1)?, duplicate(2)?];
    // The runner's kernel filters, prepared here as the daemon prepares its
    // own (a seccomp program and a Landlock ruleset do not cross an exec):
    // the same detection, the same clean start (init inherits the daemon's
    // limits and changes none).
    let filters = std::sync::Arc::new(KernelFilters::for_this_host(""));
    let exec_plan = plan
        .runner
        .exec_plan(stdio, filters)
        .map_err(|problem| Failure {
            step: problem,
            error: io::Error::from_raw_os_error(libc::EINVAL),
        })?;
    let runner = exec_plan.spawn()?.pid;
    drop(exec_plan);
    if let Err(failure) = drop_own_privileges(plan.runner.privileges.user) {
        // SAFETY: our own child, not reaped yet.
        unsafe { libc::kill(runner, libc::SIGKILL) };
        return Err(failure);
    }
    Ok(runner)
}

/// A `/proc` of this PID namespace over the host's.
fn mount_proc() -> io::Result<()> {
    // SAFETY: constant C strings; proc takes no data.
    let result = unsafe {
        libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The forwarded signals and SIGCHLD, blocked (and so queued, even for a
/// PID 1, until [`supervise`] takes them) with a handler each, which the
/// runner's clone child resets to the default.
fn block_handled_signals() -> io::Result<()> {
    extern "C" fn ignore(_: libc::c_int) {}
    // SAFETY: sigset_t is plain data, initialised by sigemptyset; the
    // handler does nothing, so it is async-signal-safe.
    unsafe {
        let set = handled_signals();
        for signal in FORWARDED.into_iter().chain([libc::SIGCHLD]) {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = ignore as extern "C" fn(libc::c_int) as usize;
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
        if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn handled_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in FORWARDED.into_iter().chain([libc::SIGCHLD]) {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Non-dumpable, an empty bounding set, the runner's user (when it has
/// one), no capability in any set, `no_new_privs`. This process has one
/// thread, so glibc's wrappers are fine here.
fn drop_own_privileges(user: Option<(u32, u32)>) -> Result<(), Failure> {
    let prctl = |option: libc::c_int, arg: libc::c_ulong| {
        // SAFETY: prctl with plain integer arguments.
        if unsafe { libc::prctl(option, arg, 0, 0, 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    prctl(libc::PR_SET_DUMPABLE, 0).map_err(Failure::at("init: prctl(PR_SET_DUMPABLE)"))?;
    for cap in 0..=clone_exec::last_capability() {
        match prctl(libc::PR_CAPBSET_DROP, cap.into()) {
            Err(error) if error.raw_os_error() != Some(libc::EINVAL) => {
                return Err(Failure::at("init: prctl(PR_CAPBSET_DROP)")(error))
            }
            _ => {}
        }
    }
    if let Some((uid, gid)) = user {
        let (uid, gid) = (
            nix::unistd::Uid::from_raw(uid),
            nix::unistd::Gid::from_raw(gid),
        );
        nix::unistd::setgroups(&[])
            .map_err(|errno| Failure::at("init: setgroups")(errno.into()))?;
        nix::unistd::setresgid(gid, gid, gid)
            .map_err(|errno| Failure::at("init: setresgid")(errno.into()))?;
        nix::unistd::setresuid(uid, uid, uid)
            .map_err(|errno| Failure::at("init: setresuid")(errno.into()))?;
    }
    clone_exec::empty_capability_sets().map_err(Failure::at("init: capset (all sets empty)"))?;
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map_err(Failure::at("init: prctl(PR_SET_NO_NEW_PRIVS)"))
}

/// Step 6: reaps, forwards, and at the runner's exit records its status
/// and exits.
fn supervise(runner: libc::pid_t, mut status_file: File) -> ExitCode {
    let set = handled_signals();
    loop {
        // SAFETY: a valid set; no siginfo wanted.
        let signal = unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
        if signal == libc::SIGCHLD {
            if let Some(status) = reap_orphans_and(runner) {
                let _ = status_file.write_all(format!("{status}\n").as_bytes());
                return ExitCode::SUCCESS;
            }
        } else if signal > 0 {
            // The runner leads its own group (its clone child's setsid);
            // once it is gone, nothing is left to forward to.
            // SAFETY: kill with plain integers.
            if unsafe { libc::kill(-runner, signal) } < 0 {
                // SAFETY: as above.
                unsafe { libc::kill(runner, signal) };
            }
        }
    }
}

/// Reaps every exited child; the runner's raw wait status, if it was one.
fn reap_orphans_and(runner: libc::pid_t) -> Option<libc::c_int> {
    let mut runner_status = None;
    loop {
        let mut status = 0;
        // SAFETY: a valid out-pointer; WNOHANG returns at once.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return runner_status;
        }
        if pid == runner {
            runner_status = Some(status);
        }
    }
}
