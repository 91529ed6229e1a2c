//! A runner parked ahead of its sandbox under `isolation = "gvisor"`, from
//! the inside: the process of a prepared gVisor sandbox's OCI bundle, run
//! by `runsc run` ahead of demand (the daemon's `gvisor::prepared`), so the
//! sentry's boot is over before any caller asks. It runs in gVisor, as the
//! prepared sandbox's uid, in the prepared sandbox's workspace, and waits
//! for the one thing it lacks: what to run.
//!
//! Why not [`crate::parked_runner`]: that one receives its standard
//! descriptors by `SCM_RIGHTS` over a host socket, which gVisor cannot pass
//! into its sandbox. Here everything travels over the pipes runsc was given
//! as the container's standard descriptors:
//! - it writes [`PARKED`] on its standard output (a pipe only the daemon
//!   reads until the take), once it is up: only then is the sandbox offered;
//! - it reads its standard input (a pipe whose write end only the daemon
//!   holds) to its end: one [`Launch`] (the same message as the other
//!   stub's), or nothing at all when the daemon let it go or died, and then
//!   it exits 0;
//! - its standard input becomes `/dev/null`, it changes into the working
//!   directory, checks that it may execute the program, and execs it. Its
//!   standard output and error, the pipe the daemon then pumps into the
//!   sandbox's output file, are the runner's.
//!
//! No word goes back once the launch is read: the daemon answers its caller
//! when the message is written. A step that fails is the runner's exit,
//! code 127, with the reason on its output, as a shell says it:
//! `sandboxd: cannot start <program>: <step>: <error>`.

use std::os::fd::RawFd;
use std::process::ExitCode;

use crate::parked_runner::{errno, pointers, Launch, MAX_MESSAGE};

/// The hidden first argument that makes the binary a piped parked runner.
pub const ARG: &str = "__sandbox-piped-runner";

/// What the stub writes on its standard output once it waits for its
/// launch. A line, so that a person reading a pipe sees it as one.
pub const PARKED: &[u8] = b"sandboxd-parked\n";

/// The stub's `main`: returns only when there was nothing to run.
pub fn run_piped_runner() -> ExitCode {
    // SAFETY: prctl with plain integer arguments and a constant C string.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"sandbox-parked".as_ptr(), 0, 0, 0) };
    if write_all(1, PARKED).is_err() {
        return ExitCode::from(127);
    }
    let message = match read_to_end(0) {
        Ok(message) if message.is_empty() => return ExitCode::SUCCESS,
        Ok(message) => message,
        Err(errno) => fail(c"the program", "read of the launch", errno),
    };
    let Some(launch) = Launch::decode(&message) else {
        fail(c"the program", "the launch message", libc::EINVAL);
    };
    exec(&launch)
}

/// Puts `/dev/null` as standard input, changes directory and execs;
/// returns only by failing.
fn exec(launch: &Launch) -> ! {
    let program = launch.program.as_c_str();
    // SAFETY: open and dup2 of our own descriptors, with a constant path.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if null < 0 || libc::dup2(null, 0) < 0 {
            fail(program, "/dev/null as standard input", errno());
        }
        libc::close(null);
    }
    // SAFETY: chdir with a C string that lives across the call.
    if unsafe { libc::chdir(launch.cwd.as_ptr()) } < 0 {
        fail(program, "chdir", errno());
    }
    // SAFETY: access with a C string that lives across the call; as this
    // process's real uid, the sandbox's.
    if unsafe { libc::access(program.as_ptr(), libc::X_OK) } < 0 {
        fail(program, "access(X_OK)", errno());
    }
    let argv = pointers(&launch.args);
    let envp = pointers(&launch.env);
    // SAFETY: SIGPIPE back to its default (std ignores it at start, and an
    // ignored signal stays ignored across exec); then execve with
    // NUL-terminated arrays of C strings that live across the call.
    let errno = unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
        errno()
    };
    fail(program, "execve", errno)
}

/// Says on standard error which step failed, and exits 127 (the runner
/// never ran).
fn fail(program: &std::ffi::CStr, step: &str, errno: i32) -> ! {
    let text = format!(
        "sandboxd: cannot start {}: {step}: {}\n",
        program.to_string_lossy(),
        std::io::Error::from_raw_os_error(errno)
    );
    let _ = write_all(2, text.as_bytes());
    // SAFETY: exit without running anything more of this process.
    unsafe { libc::_exit(127) }
}

/// All of `fd` up to its end, at most [`MAX_MESSAGE`] bytes (more is
/// `E2BIG`); the errno of a failed read.
fn read_to_end(fd: RawFd) -> Result<Vec<u8>, i32> {
    let mut message = vec![0u8; MAX_MESSAGE + 1];
    let mut length = 0;
    loop {
        if length == message.len() {
            return Err(libc::E2BIG);
        }
        // SAFETY: a read into the unfilled rest of a live buffer.
        let read = unsafe {
            libc::read(
                fd,
                message[length..].as_mut_ptr().cast(),
                message.len() - length,
            )
        };
        match read {
            0 => break,
            read if read > 0 => length += read as usize,
            _ if errno() == libc::EINTR => {}
            _ => return Err(errno()),
        }
    }
    message.truncate(length);
    Ok(message)
}

/// Writes all of `bytes` to `fd`.
fn write_all(fd: RawFd, mut bytes: &[u8]) -> Result<(), i32> {
    while !bytes.is_empty() {
        // SAFETY: a write of a live buffer.
        let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        match written {
            written if written > 0 => bytes = &bytes[written as usize..],
            _ if errno() == libc::EINTR => {}
            _ => return Err(errno()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    fn pipe() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: the descriptors pipe2 just made, owned by no one else.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    /// Writes `bytes` into a pipe from a thread of its own, then closes it.
    fn read_what_is_written(bytes: Vec<u8>) -> Result<Vec<u8>, i32> {
        let (read, write) = pipe();
        let writer = std::thread::spawn(move || {
            let _ = write_all(write.as_raw_fd(), &bytes);
        });
        let read_back = read_to_end(read.as_raw_fd());
        drop(read);
        writer.join().unwrap();
        read_back
    }

    #[test]
    fn a_launch_larger_than_a_pipe_comes_back_whole() {
        let c = |text: &str| CString::new(text).unwrap();
        let launch = Launch {
            program: c("/usr/bin/runner"),
            cwd: c("/workspace"),
            args: vec![c("/usr/bin/runner")],
            env: vec![CString::new(vec![b'x'; 100_000]).unwrap()],
        };
        let read = read_what_is_written(launch.encode()).unwrap();
        assert_eq!(Launch::decode(&read), Some(launch));
    }

    #[test]
    fn nothing_written_reads_as_nothing_and_too_much_is_refused() {
        assert_eq!(read_what_is_written(Vec::new()), Ok(Vec::new()));
        let too_much = vec![b'x'; MAX_MESSAGE + 1];
        assert_eq!(read_what_is_written(too_much), Err(libc::E2BIG));
    }
}
