//! A sandbox's PID 1 under `isolation = "full"`: `sandboxd-init` (or the
//! daemon's own binary, see the crate's doc), exec'd by descriptor with a
//! hidden argv[1] by the sandbox's first process once that process has
//! built the view and started the runner (the daemon's
//! `launch::view_child`), in the sandbox's mount, PID and IPC namespaces
//! and its cgroup.
//!
//! Why an init and not the runner as PID 1: PID 1 of a namespace ignores
//! every signal it has no handler for (a runner written for an ordinary
//! pid would shrug off SIGTERM) and inherits every orphan, which someone
//! must reap.
//!
//! Its arguments: [`ARG`], the runner's pid in the namespace, the runner's
//! `uid:gid` (or `-`), and whether to empty its bounding set. Descriptor 0 is the status file, which the
//! daemon opened (a file open for writing on a mount of this namespace
//! would keep it from being made read-only); 1 and 2 the sandbox's output.
//! Every signal is blocked when it starts (see `view_child`). What it does,
//! in order:
//! 1. makes itself non-dumpable (the runner cannot ptrace it or read its
//!    memory), names itself, moves the status file off descriptor 0;
//! 2. takes the signals it handles (blocked, so queued even for a PID 1,
//!    until [`supervise`] takes them) and unblocks the rest;
//! 3. drops its own privileges for good: an empty bounding set, the
//!    runner's uid, no capability, `no_new_privs`; then sets its
//!    parent-death signal again (see [`die_with_the_daemon`]);
//! 4. then, until the runner exits: reaps every orphan, and forwards the
//!    signals the daemon sends it (SIGTERM at a stop, …) to the runner's
//!    process group. When the runner exits it writes the runner's raw wait
//!    status into the status file and exits; the kernel kills whatever is
//!    left in the namespace, as the daemon kills the cgroup of a runner
//!    that exited (it does that too, afterwards).
//!
//! None of this is on the caller's time: the daemon's spawn returned when
//! this process was exec'd. A failure here (a step of 1–3) is written to
//! the sandbox's output and ends the sandbox at once (init kills the
//! runner and exits 127 without a status), which the daemon reports as
//! the runner's exit.
//!
//! So the daemon keeps one descriptor per running sandbox (the output
//! pipe), signals and reaps init as the group leader, and reads the real
//! wait status from the file at reap.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::ExitCode;

use crate::privileges::{drop_own_privileges, Failure};

/// The hidden first argument that makes the binary a sandbox's init.
pub const ARG: &str = "__sandbox-init";
/// init's last argument: whether it empties its bounding set, as the
/// runner does where the daemon has CAP_SETPCAP (and cannot where not).
pub const DROP_BOUNDING_SET: &str = "drop-bounding-set";
pub const KEEP_BOUNDING_SET: &str = "keep-bounding-set";

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

/// The init's `main`. Its exit code only matters when it failed (127, as
/// a clone child's); otherwise the status file says.
pub fn run_init_process() -> ExitCode {
    // SAFETY: prctl with plain integer arguments: first of all, nothing
    // of this process may be read or traced by the runner's user.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    // SAFETY: a constant C string; the name shows in ps (the exec by
    // descriptor named this process after the descriptor's number).
    unsafe { libc::prctl(libc::PR_SET_NAME, c"sandbox-init".as_ptr(), 0, 0, 0) };
    let args: Vec<String> = std::env::args().collect();
    let runner: Option<libc::pid_t> = args.get(2).and_then(|pid| pid.parse().ok());
    let user = args.get(3).map(|user| parse_user(user));
    let bounding_set = args.get(4).and_then(|arg| match arg.as_str() {
        DROP_BOUNDING_SET => Some(true),
        KEEP_BOUNDING_SET => Some(false),
        _ => None,
    });
    let (Some(runner), Some(Ok(user)), Some(drop_bounding_set)) = (runner, user, bounding_set)
    else {
        eprintln!("sandbox-init: bad arguments {:?}", &args[1..]);
        return ExitCode::from(127);
    };
    match prepare(user, drop_bounding_set) {
        Ok(status_file) => supervise(runner, status_file),
        Err(failure) => {
            // Not eprintln: with the daemon gone the output has no reader,
            // and a failed write must not keep init from ending the sandbox.
            let _ = writeln!(
                io::stderr(),
                "sandbox-init: {}: {}; ending the sandbox",
                failure.step,
                failure.error
            );
            // SAFETY: our own child, not reaped yet.
            unsafe { libc::kill(runner, libc::SIGKILL) };
            ExitCode::from(127)
        }
    }
}

/// `uid:gid`, or `-` for none.
fn parse_user(text: &str) -> Result<Option<(u32, u32)>, ()> {
    if text == "-" {
        return Ok(None);
    }
    let (uid, gid) = text.split_once(':').ok_or(())?;
    Ok(Some((
        uid.parse().map_err(drop)?,
        gid.parse().map_err(drop)?,
    )))
}

/// Steps 1 to 3: the status file, once off descriptor 0.
fn prepare(user: Option<(u32, u32)>, drop_bounding_set: bool) -> Result<File, Failure> {
    // SAFETY: fcntl on descriptor 0, which the first process set up.
    let status = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3) };
    if status < 0 {
        return Err(Failure::at("take the status file")(
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: a descriptor fcntl just returned, owned by no one else.
    let status_file = unsafe { File::from_raw_fd(status) };
    // Nothing may keep descriptor 0 (the status file) unused: /dev/null
    // takes its number, as a runner's stdin has it.
    let null = File::open("/dev/null").map_err(Failure::at("open /dev/null"))?;
    // SAFETY: dup2 onto descriptor 0, whose old file is kept above.
    if unsafe { libc::dup2(null.as_raw_fd(), 0) } < 0 {
        return Err(Failure::at("dup2 of /dev/null")(io::Error::last_os_error()));
    }
    take_handled_signals().map_err(Failure::at("sigprocmask"))?;
    drop_own_privileges(user, drop_bounding_set)?;
    die_with_the_daemon()?;
    Ok(status_file)
}

/// SIGKILL when the daemon's thread that started this init ends, as the
/// first process asked before its exec: the kernel cleared that request
/// when the uid changed (any change of the effective uid does). Without it
/// a sandbox whose daemon and group reaper were both killed ran on until
/// the next daemon's start. The daemon may have died between the switch
/// and now, and `getppid` cannot tell (the parent is outside this PID
/// namespace, so it reads 0 either way): the output pipe can, as only the
/// daemon holds its read end. Once no reader is left, a write end polls
/// `POLLERR`.
fn die_with_the_daemon() -> Result<(), Failure> {
    // SAFETY: prctl with plain integer arguments.
    if unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    } < 0
    {
        return Err(Failure::at("init: prctl(PR_SET_PDEATHSIG)")(
            io::Error::last_os_error(),
        ));
    }
    let mut output = libc::pollfd {
        fd: 1,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a zero timeout returns at once.
    let ready = unsafe { libc::poll(&mut output, 1, 0) };
    if ready > 0 && output.revents & libc::POLLERR != 0 {
        return Err(Failure::at("init: the daemon")(io::Error::other(
            "it is gone (the output pipe has no reader)",
        )));
    }
    Ok(())
}

/// The forwarded signals and SIGCHLD, blocked (and so queued, even for a
/// PID 1, until [`supervise`] takes them) with a handler each; every other
/// signal unblocked.
fn take_handled_signals() -> io::Result<()> {
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
        if libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) < 0 {
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

#[cfg(test)]
mod tests {
    /// Whether [`super::die_with_the_daemon`] fails in a forked child whose
    /// standard output is a pipe's write end, with its read end `kept`
    /// open or closed everywhere. (Forked: the harness's own stdout, and
    /// this process's parent-death signal, stay as they are.)
    fn sees_the_daemon_gone(kept: bool) -> bool {
        let mut fds = [0; 2];
        // SAFETY: pipe fills two descriptors; the forked child only makes
        // system calls and the call under test, and exits without
        // returning; the parent waits for it and closes what it opened.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            if !kept {
                libc::close(fds[0]);
            }
            let pid = libc::fork();
            if pid == 0 {
                libc::dup2(fds[1], 1);
                let gone = super::die_with_the_daemon().is_err();
                libc::_exit(i32::from(gone));
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            libc::close(fds[1]);
            if kept {
                libc::close(fds[0]);
            }
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 1
        }
    }

    #[test]
    fn init_ends_when_the_daemon_went_before_its_parent_death_signal_was_set_again() {
        assert!(sees_the_daemon_gone(false));
        assert!(!sees_the_daemon_gone(true));
    }
}
