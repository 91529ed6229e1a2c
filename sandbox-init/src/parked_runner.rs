//! A runner parked ahead of its sandbox, from the inside: `sandboxd-init`
//! (or the daemon's own binary), exec'd by descriptor with a hidden argv[1]
//! by the pool's background thread (the daemon's
//! `prepared::parked_runner`), already what its runner will be — in
//! the prepared sandbox's cgroups (and view), under its uid, with the
//! keyring, Landlock, clean start and seccomp every runner gets — and
//! waiting, on standard input, for the one thing it lacks: what to run.
//!
//! Its standard input is a `SOCK_SEQPACKET` socket whose other end only
//! the daemon holds. One message arrives ([`Launch`], with the runner's
//! standard input, output and error and an eventfd attached as
//! `SCM_RIGHTS`); the stub changes into the workspace, checks that its uid
//! may execute the program (`access(X_OK)`: the kernel's own answer, ACLs
//! and all), puts the three descriptors in place and execs the runner: it
//! *becomes* the runner, same pid, same cgroups. It tells the daemon how it
//! went: a write to the eventfd once everything but the exec itself is
//! done (see [`say_executing`]), or `<step> <errno>` on a close-on-exec
//! copy of the socket and exit 127 when a step failed. End-of-file before
//! any message (the daemon dropped it, or died) ends the stub.
//!
//! The daemon answers its caller at the eventfd's word, as `runc start` answers
//! once the container's init is told to exec: the exec itself (the loading
//! of the program) is the runner's own time. An exec that still fails
//! then (a program that is not a valid executable, a missing interpreter)
//! is the runner's exit, code 127, with the reason written to its output
//! as a shell would: `sandboxd: cannot exec <program>: <error>`.
//!
//! Why a process of its own rather than the daemon's clone child: a
//! `CLONE_VM` child shares the daemon's memory and suspends its thread
//! until it execs, so it cannot wait. And why wait at all: on a host whose
//! memory, pids and cpu controllers live in cgroup v1 hierarchies, a
//! process can only join those by a write of its own (`tasks`), which on
//! a kernel without the shortcut for a thread moving itself waits for an
//! RCU grace period (milliseconds) — done here ahead of demand, with the
//! user switch and the filters, instead of on the caller's time.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitCode;

/// The hidden first argument that makes the binary a parked runner.
pub const ARG: &str = "__sandbox-parked-runner";

/// The largest message: program, directory, arguments and environment
/// (the token among them), far below a `SOCK_SEQPACKET` message's limit.
pub const MAX_MESSAGE: usize = 192 * 1024;

/// What the runner is to run, as C strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub program: CString,
    pub cwd: CString,
    /// `argv`, from `argv[0]`.
    pub args: Vec<CString>,
    /// `NAME=value` entries.
    pub env: Vec<CString>,
}

impl Launch {
    /// The message: program, directory, the argument count in decimal, the
    /// arguments and the environment, each NUL-terminated (no C string
    /// holds a NUL, so nothing more is needed to split them).
    pub fn encode(&self) -> Vec<u8> {
        let count = CString::new(self.args.len().to_string()).expect("digits hold no NUL");
        let mut message = Vec::new();
        for field in [&self.program, &self.cwd, &count]
            .into_iter()
            .chain(&self.args)
            .chain(&self.env)
        {
            message.extend_from_slice(field.as_bytes_with_nul());
        }
        message
    }

    /// The message back; `None` when it is not one [`Launch::encode`] made.
    pub fn decode(message: &[u8]) -> Option<Launch> {
        let mut fields = message
            .strip_suffix(b"\0")?
            .split(|byte| *byte == 0)
            .map(|field| CString::new(field).expect("split at every NUL"));
        let program = fields.next()?;
        let cwd = fields.next()?;
        let count: usize = fields.next()?.to_str().ok()?.parse().ok()?;
        let args: Vec<CString> = fields.by_ref().take(count).collect();
        if args.len() != count || program.as_bytes().is_empty() {
            return None;
        }
        Some(Launch {
            program,
            cwd,
            args,
            env: fields.collect(),
        })
    }
}

/// The steps a stub reports a failure of, as `<step> <errno>`.
pub const STEP_MESSAGE: &str = "message";
pub const STEP_CHDIR: &str = "chdir";
pub const STEP_ACCESS: &str = "access(X_OK) of the program";
pub const STEP_DUP2: &str = "dup2 of stdio";
pub const STEP_EXECVE: &str = "execve";
pub const STEP_EXECUTING: &str = "the eventfd write that says only the exec is left";

/// What the stub says once it is set up and waits for its launch: only
/// then is its prepared sandbox offered (its start-up, its binary's
/// loading, is over and takes no CPU from a take).
pub const PARKED: &[u8] = b"parked";

/// The stub's `main`: returns only when it did not exec (the daemon let
/// it go, or a step failed, which it has reported).
pub fn run_parked_runner() -> ExitCode {
    // SAFETY: prctl with plain integer arguments and a constant C string.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"sandbox-parked".as_ptr(), 0, 0, 0) };
    let mut buffer = vec![0u8; MAX_MESSAGE];
    say(0, PARKED);
    let Some((length, fds)) = receive(0, &mut buffer) else {
        // End-of-file (the daemon dropped this runner, or is gone) or a
        // broken socket: nothing to run.
        return ExitCode::SUCCESS;
    };
    // SAFETY: F_DUPFD_CLOEXEC of our own standard input.
    let report = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3) };
    if report < 0 {
        return ExitCode::from(127);
    }
    let Some(launch) = Launch::decode(&buffer[..length]) else {
        fail(report, STEP_MESSAGE, libc::EINVAL);
    };
    let [stdin, stdout, stderr, executing] = match <[OwnedFd; 4]>::try_from(fds) {
        Ok(fds) => fds,
        Err(_) => fail(report, STEP_MESSAGE, libc::EBADMSG),
    };
    exec(report, &launch, [&stdin, &stdout, &stderr], &executing)
}

/// Changes directory, puts the descriptors in place, says so on
/// `executing` and execs; returns only by failing.
fn exec(report: RawFd, launch: &Launch, stdio: [&OwnedFd; 3], executing: &OwnedFd) -> ! {
    // SAFETY: chdir with a C string that lives across the call.
    if unsafe { libc::chdir(launch.cwd.as_ptr()) } < 0 {
        fail(report, STEP_CHDIR, errno());
    }
    // SAFETY: access with a C string that lives across the call; as this
    // process's real uid, the sandbox's.
    if unsafe { libc::access(launch.program.as_ptr(), libc::X_OK) } < 0 {
        fail(report, STEP_ACCESS, errno());
    }
    for (target, fd) in stdio.into_iter().enumerate() {
        // SAFETY: dup2 of a descriptor we hold onto 0, 1 or 2 (which clears
        // close-on-exec on the copy).
        if unsafe { libc::dup2(fd.as_raw_fd(), target as RawFd) } < 0 {
            fail(report, STEP_DUP2, errno());
        }
    }
    let argv = pointers(&launch.args);
    let envp = pointers(&launch.env);
    // SAFETY: SIGPIPE back to its default (std ignores it at start, and an
    // ignored signal stays ignored across exec).
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if let Err(errno) = say_executing(executing) {
        fail(report, STEP_EXECUTING, errno);
    }
    // SAFETY: execve with NUL-terminated arrays of C strings that live
    // across the call.
    let errno = unsafe {
        libc::execve(launch.program.as_ptr(), argv.as_ptr(), envp.as_ptr());
        errno()
    };
    // Past the daemon's answer: the runner's own output says why, and its
    // exit code 127 says that it never ran.
    let text = format!(
        "sandboxd: cannot exec {}: {}\n",
        launch.program.to_string_lossy(),
        std::io::Error::from_raw_os_error(errno)
    );
    // SAFETY: a write of a live buffer to our standard error.
    unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
    fail(report, STEP_EXECVE, errno)
}

/// Tells the daemon that only the exec is left, by a write to the eventfd
/// it sent with the launch (close-on-exec, so gone with the exec).
///
/// Why an eventfd and not the socket: a Unix socket wakes its reader
/// "synchronously", queueing the daemon's thread on this CPU in the
/// expectation that this process sleeps next; but it goes on to exec the
/// runner, whose loading held the CPU for about a millisecond while the
/// caller's answer waited behind it with the other CPU idle (traced on the
/// 2-vCPU bench host: 1.06–1.17 ms in 8 of 12 warm starts). A yield here
/// let the daemon's thread run first, but then the exec waited for all of
/// that thread's work, and the scheduler's exec balancing, seeing this CPU
/// busy, moved the exec to the other one half the time. An eventfd's
/// wake-up is an ordinary one: the daemon's thread goes to an idle CPU,
/// and the exec starts at once on this one.
fn say_executing(executing: &OwnedFd) -> Result<(), i32> {
    let word = 1u64.to_ne_bytes();
    // SAFETY: an 8-byte write of a live buffer to an eventfd we hold.
    let written = unsafe { libc::write(executing.as_raw_fd(), word.as_ptr().cast(), word.len()) };
    match written == word.len() as isize {
        true => Ok(()),
        false => Err(errno()),
    }
}

/// Reports `step` and `errno` on `report` and exits 127.
fn fail(report: RawFd, step: &str, errno: i32) -> ! {
    say(report, format!("{step} {errno}").as_bytes());
    // SAFETY: exit without running anything more of this process.
    unsafe { libc::_exit(127) }
}

/// One message to the daemon (which may be gone: no SIGPIPE).
fn say(report: RawFd, message: &[u8]) {
    // SAFETY: a send of a live buffer on a socket we hold.
    unsafe {
        libc::send(
            report,
            message.as_ptr().cast(),
            message.len(),
            libc::MSG_NOSIGNAL,
        )
    };
}

/// The calling thread's `errno`.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `strings` as the NULL-terminated pointer array `execve` takes.
pub(crate) fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|string| string.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// One message from `socket` with the descriptors attached to it
/// (close-on-exec); `None` at end-of-file or on an error.
pub fn receive(socket: RawFd, buffer: &mut [u8]) -> Option<(usize, Vec<OwnedFd>)> {
    // Room for four descriptors.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: msghdr is plain data; every pointer in it is set below to a
    // live buffer of the length given.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    header.msg_control = control.as_mut_ptr().cast();
    header.msg_controllen = std::mem::size_of_val(&control);
    let received = loop {
        // SAFETY: recvmsg into the buffers `header` points at.
        let received = unsafe { libc::recvmsg(socket, &mut header, libc::MSG_CMSG_CLOEXEC) };
        if received < 0 && errno() == libc::EINTR {
            continue;
        }
        break received;
    };
    let fds = attached_fds(&header);
    if received <= 0 || header.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return None;
    }
    Some((received as usize, fds))
}

/// The descriptors of the `SCM_RIGHTS` messages in `header`, owned.
fn attached_fds(header: &libc::msghdr) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    // SAFETY: the CMSG_* macros walk the control buffer recvmsg filled,
    // within the length it set; each SCM_RIGHTS payload is an array of
    // descriptors this process now owns.
    unsafe {
        let mut message = libc::CMSG_FIRSTHDR(header);
        while !message.is_null() {
            if (*message).cmsg_level == libc::SOL_SOCKET && (*message).cmsg_type == libc::SCM_RIGHTS
            {
                let data = libc::CMSG_DATA(message).cast::<RawFd>();
                let payload = (*message).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for index in 0..payload / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(index).read_unaligned()));
                }
            }
            message = libc::CMSG_NXTHDR(header, message);
        }
    }
    fds
}

/// A report read back: the step that failed and its errno.
pub fn parse_report(text: &[u8]) -> Option<(String, i32)> {
    let text = std::str::from_utf8(text).ok()?;
    let (step, errno) = text.rsplit_once(' ')?;
    Some((step.to_string(), errno.parse().ok()?))
}

/// `path` as a C string, for a launch.
pub fn c_string(what: &str, value: &std::ffi::OsStr) -> Result<CString, String> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(value.as_bytes()).map_err(|_| format!("{what} contains a NUL byte: {value:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch() -> Launch {
        let c = |text: &str| CString::new(text).unwrap();
        Launch {
            program: c("/usr/bin/runner"),
            cwd: c("/state/sandboxes/sbx-ses-0123456789ab"),
            args: vec![c("/usr/bin/runner"), c("--flag"), c("")],
            env: vec![c("HOME=/state"), c("STIGMER_TOKEN=tok en")],
        }
    }

    #[test]
    fn a_launch_comes_back_as_it_was_sent() {
        let sent = launch();
        assert_eq!(Launch::decode(&sent.encode()), Some(sent));
        let no_env = Launch {
            env: Vec::new(),
            ..launch()
        };
        assert_eq!(Launch::decode(&no_env.encode()), Some(no_env));
    }

    #[test]
    fn a_message_that_is_not_a_launch_is_refused() {
        let whole = launch().encode();
        for bad in [
            &b""[..],
            b"no terminator",
            b"/p\0/cwd\0five\0",
            b"/p\0/cwd\x003\0a\0",
            b"\0/cwd\x000\0",
            &whole[..whole.len() - 1],
        ] {
            assert_eq!(Launch::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_report_names_its_step_and_errno() {
        assert_eq!(
            parse_report(b"dup2 of stdio 9"),
            Some(("dup2 of stdio".to_string(), 9))
        );
        assert_eq!(parse_report(b"garbage"), None);
    }
}
