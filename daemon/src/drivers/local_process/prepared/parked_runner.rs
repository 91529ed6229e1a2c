//! A runner parked ahead of its sandbox, from the daemon's side: made on
//! the pool's parking thread ([`RunnerParker::park`]) in a prepared
//! sandbox's cgroups (and view) under its uid, and started by the sandbox
//! that takes it ([`ParkedRunner::start`]): one message with its launch,
//! its three standard descriptors and an eventfd for its word, and the
//! runner runs once the stub (see `sandboxd_init::parked_runner`) has
//! exec'd it.
//!
//! What the take no longer does on the caller's time: the clone, the v1
//! cgroup joins (a hybrid host's; a grace period each on a kernel that
//! does not let a thread move itself without the global lock), the
//! user switch, the keyring, Landlock, the clean start, the seccomp filter
//! — all done when the runner was parked, by the same clone child every
//! runner has ([`ExecPlan`]), so a parked runner gives up exactly what a
//! cold one does. What is left: a `sendmsg`, the stub's `chdir`, its
//! `access` check, three `dup2`s — and the exec, which the caller no
//! longer waits for (see `sandboxd_init::parked_runner`).
//!
//! The runner is a child of the parking thread (which lives as long as the
//! daemon, so `PR_SET_PDEATHSIG` holds) and is reaped there, like any
//! runner by its spawner thread. Its stub ends with its control socket (the
//! daemon dropped it, or died), with the daemon's death, and with its
//! prepared sandbox's cgroups or view: dropping a parked runner kills it and
//! waits until it is gone, so its uid is never given back while a process
//! of it lives.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::isolation::init_binary::InitBinary;
use super::super::isolation::kernel_filters::KernelFilters;
use super::super::launch::child_exits::{ChildExits, RunnerProcess};
use super::super::launch::clone_exec::{CgroupPlacement, ExecPlan, Privileges};
use super::super::launch::runner_plan::RunnerLaunch;
use super::super::pidfd::{self, has_exited, wait_readable};
use super::parked::{dev_null, ParkedView};
use sandboxd_init::parked_runner::{self as runner_stub, Launch};

/// How long a parked runner may take from its launch to its word that
/// only the exec is left (a few system calls; a loaded host), before it
/// is killed and the start fails.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a runner being parked may take to say it waits (its exec and
/// start-up: milliseconds on an idle host, much more on a loaded one).
const PARK_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a dropped parked runner is waited for after its SIGKILL.
const GONE_TIMEOUT: Duration = Duration::from_secs(5);

/// What every parked runner is made with.
pub struct RunnerParker {
    /// Every runner's kernel filters, the daemon's.
    pub filters: Arc<KernelFilters>,
    /// Written to each parked runner's `oom_score_adj`, as to any runner's.
    pub oom_score_adj: i32,
    /// What each parked runner runs until its exec (see `init_binary`).
    pub init_binary: Arc<InitBinary>,
}

/// A runner parked and not yet started: dropped, it is killed.
pub struct ParkedRunner {
    pid: libc::pid_t,
    /// Its user, for the taker to check against the sandbox's.
    user: Option<(u32, u32)>,
    control: OwnedFd,
    pidfd: OwnedFd,
    /// Its exit, reaped on the parking thread; `None` once started.
    process: Option<RunnerProcess>,
}

/// Why a parked runner did not start its sandbox's runner.
#[derive(Debug)]
pub enum StartError {
    /// It was not used (gone before it got the launch, or its view could
    /// not take the workspace): nothing ran, and the sandbox may start
    /// otherwise. `for_good`: nothing parked can be used on this daemon.
    Unused { why: String, for_good: bool },
    /// A step of the runner's start failed (or the stub died in it): the
    /// sandbox's start failed, as it would have cold.
    Failed { step: String, error: io::Error },
}

impl RunnerParker {
    /// Parks a runner with `privileges` in `placement` (the prepared
    /// sandbox's cgroups), inside `view` when given. Call on the parking
    /// thread, whose children `exits` reaps.
    pub fn park(
        &self,
        exits: &ChildExits,
        placement: CgroupPlacement,
        privileges: Privileges,
        view: Option<&mut ParkedView>,
    ) -> Result<ParkedRunner, String> {
        let (control, stub_end) =
            seqpacket_pair().map_err(|error| format!("socketpair for a parked runner: {error}"))?;
        // By descriptor: the binary checked at the daemon's start, whatever
        // is on disk by now, reached inside a view too.
        let plan = ExecPlan::new(
            self.init_binary.path().as_os_str(),
            [runner_stub::ARG],
            [] as [(&str, &str); 0],
            "/".as_ref(),
            [stub_end, dev_null()?, dev_null()?],
            privileges,
        )?
        .with_filters(self.filters.clone())
        .in_cgroup(placement)
        .exec_by_descriptor(self.init_binary.fd());
        let cloned = match view {
            Some(view) => {
                let inside = view.enter_bare().map_err(|error| {
                    format!("{} (parking a runner): {}", error.step, error.error)
                })?;
                let cloned = plan.joining_pid_namespace().spawn();
                drop(inside);
                cloned
            }
            None => plan.spawn(),
        }
        .map_err(|error| format!("parking a runner: {error}"))?;
        let process = exits.watch(cloned.pid, cloned.start_time);
        let pidfd = match pidfd::open(cloned.pid) {
            Ok(pidfd) => pidfd,
            Err(error) => {
                // SAFETY: our own child, not reaped (its watcher reaps it).
                unsafe { libc::kill(cloned.pid, libc::SIGKILL) };
                return Err(format!("pidfd_open of a parked runner: {error}"));
            }
        };
        let adj = self.oom_score_adj.to_string();
        if let Err(error) = std::fs::write(format!("/proc/{}/oom_score_adj", cloned.pid), adj) {
            tracing::warn!(pid = cloned.pid, %error, "cannot set a parked runner's oom_score_adj");
        }
        let parked = ParkedRunner {
            pid: cloned.pid,
            user: privileges.user,
            control,
            pidfd,
            process: Some(process),
        };
        // Dropped (killed) on an error.
        match read_message(parked.control.as_raw_fd(), PARK_TIMEOUT) {
            Ok(word) if word == runner_stub::PARKED => Ok(parked),
            Ok(word) if word.is_empty() => Err("a parked runner ended during its start-up".into()),
            Ok(word) => Err(format!(
                "a parked runner said {:?} at its start-up",
                String::from_utf8_lossy(&word)
            )),
            Err(error) => Err(format!("a parked runner's start-up: {error}")),
        }
    }
}

impl ParkedRunner {
    /// Its host pid: the runner's once started.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// The user it runs as.
    pub fn user(&self) -> Option<(u32, u32)> {
        self.user
    }

    /// Starts `launch` (its program, arguments, environment and workspace;
    /// its user and filters are the parked runner's already) with `stdio`
    /// as descriptors 0, 1 and 2, and returns once only the runner's exec
    /// is left (see `sandboxd_init::parked_runner`).
    pub fn start(
        mut self,
        launch: &RunnerLaunch,
        stdio: &[OwnedFd; 3],
    ) -> Result<RunnerProcess, StartError> {
        let failed = |step: &str| {
            let step = step.to_string();
            move |error| StartError::Failed { step, error }
        };
        let message = launch_message(launch)?;
        let executing = eventfd().map_err(failed("an eventfd for the parked runner's word"))?;
        let fds = [&stdio[0], &stdio[1], &stdio[2], &executing].map(AsRawFd::as_raw_fd);
        send_with_fds(self.control.as_raw_fd(), &message, &fds).map_err(|error| {
            StartError::Unused {
                why: format!("it was gone at its take: {error}"),
                for_good: false,
            }
        })?;
        let read = match first_word(self.control.as_raw_fd(), executing.as_raw_fd()) {
            Word::Executing => {
                return Ok(self.process.take().expect("a parked runner starts once"));
            }
            Word::Report(read) => read,
        };
        let report = match read {
            // The stub closed its end with the launch still unread in it:
            // killed while parked, after the send. It never saw the launch.
            Err(error) if error.raw_os_error() == Some(libc::ECONNRESET) => {
                return Err(StartError::Unused {
                    why: "it ended with the launch unread (killed while parked?)".to_string(),
                    for_good: false,
                })
            }
            read => read.map_err(failed("wait for the parked runner"))?,
        };
        // Ended with no word at all: killed while parked, the kill still
        // under way at its take (a liveness look cannot close that race),
        // after it read the launch. None of the runner ran, so the sandbox
        // starts cold, as for one found gone at the send.
        if report.is_empty() {
            return Err(StartError::Unused {
                why: "it ended before it could exec the runner, with no report (killed while parked?)"
                    .to_string(),
                for_good: false,
            });
        }
        Err(match runner_stub::parse_report(&report) {
            Some((step, errno)) => StartError::Failed {
                step,
                error: io::Error::from_raw_os_error(errno),
            },
            None => StartError::Failed {
                step: "the parked runner's start".to_string(),
                error: io::Error::other("it ended before it could exec the runner"),
            },
        })
    }
}

impl Drop for ParkedRunner {
    /// An unstarted runner is killed, and waited for until it is gone.
    fn drop(&mut self) {
        if self.process.is_none() {
            return;
        }
        crate::drivers::local_process::pidfd::kill(&self.pidfd);
        let deadline = Instant::now() + GONE_TIMEOUT;
        while !has_exited(&self.pidfd) && Instant::now() < deadline {
            wait_readable(self.pidfd.as_raw_fd(), Duration::from_millis(100));
        }
    }
}

/// The message that tells a parked runner (this one, or one under gVisor,
/// see `gvisor::prepared`) what to run: `launch`'s program, directory,
/// arguments and environment.
pub fn launch_message(launch: &RunnerLaunch) -> Result<Vec<u8>, StartError> {
    let message = Launch {
        program: runner_stub::c_string("the program path", launch.program.as_os_str())
            .map_err(|problem| invalid(&problem))?,
        cwd: runner_stub::c_string("the working directory", launch.cwd.as_os_str())
            .map_err(|problem| invalid(&problem))?,
        args: std::iter::once(launch.program.as_os_str())
            .chain(launch.args.iter().map(std::ffi::OsStr::new))
            .map(|arg| runner_stub::c_string("an argument", arg))
            .collect::<Result<_, _>>()
            .map_err(|problem| invalid(&problem))?,
        env: launch
            .env
            .iter()
            .map(|(name, value)| {
                let mut entry = name.clone();
                entry.push("=");
                entry.push(value);
                runner_stub::c_string("an environment variable", &entry)
            })
            .collect::<Result<_, _>>()
            .map_err(|problem| invalid(&problem))?,
    }
    .encode();
    if message.len() > runner_stub::MAX_MESSAGE {
        return Err(invalid(&format!(
            "the runner's arguments and environment take {} bytes, more than the {} a parked runner takes",
            message.len(),
            runner_stub::MAX_MESSAGE
        )));
    }
    Ok(message)
}

fn invalid(problem: &str) -> StartError {
    StartError::Failed {
        step: problem.to_string(),
        error: io::Error::from_raw_os_error(libc::EINVAL),
    }
}

/// A close-on-exec `SOCK_SEQPACKET` pair: (the daemon's end, the stub's).
/// The stub's end loses close-on-exec as its standard input.
fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into the array.
    let made = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if made < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptors socketpair just made, owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// What a started stub said first.
enum Word {
    /// Only its exec is left (its eventfd was written).
    Executing,
    /// A report on its socket (a failed step), its end (empty), or an
    /// error (a time-out among them).
    Report(io::Result<Vec<u8>>),
}

/// Waits up to [`START_TIMEOUT`] for the stub's first word: on
/// `executing`, an eventfd (see `sandboxd_init::parked_runner::say_executing`
/// for why not the socket), or on its `control` socket. An eventfd
/// written is taken first: the exec that follows it closes the socket, and
/// that end must never be taken for a stub that died unused (the sandbox
/// would start a second runner).
fn first_word(control: RawFd, executing: RawFd) -> Word {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fds = [executing, control].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        let millis = left.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: two valid pollfds and a timeout.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, millis) };
        if fds[0].revents & libc::POLLIN != 0 {
            return Word::Executing;
        }
        if fds[1].revents != 0 || left.is_zero() {
            // The eventfd again: poll may have looked at it just before
            // the stub wrote it and at the socket just after the exec
            // closed it; the write comes first, so a look now sees it.
            if wait_readable(executing, Duration::ZERO) {
                return Word::Executing;
            }
            return Word::Report(read_message(control, left));
        }
        if ready < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return Word::Report(Err(io::Error::last_os_error()));
        }
    }
}

/// A close-on-exec eventfd.
fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd with a zero count and plain flags; it returns a new
    // descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor eventfd just made, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `message` on `socket` with `raw` (one to four descriptors)
/// attached.
fn send_with_fds(socket: RawFd, message: &[u8], raw: &[RawFd]) -> io::Result<()> {
    assert!((1..=4).contains(&raw.len()), "one to four descriptors");
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: message.as_ptr() as *mut libc::c_void,
        iov_len: message.len(),
    };
    // SAFETY: msghdr is plain data; its pointers are set to live buffers of
    // the lengths given; CMSG_* fill one SCM_RIGHTS message inside
    // `control`, which is large enough for four descriptors.
    let sent = unsafe {
        let mut header: libc::msghdr = std::mem::zeroed();
        header.msg_iov = &mut iov;
        header.msg_iovlen = 1;
        header.msg_control = control.as_mut_ptr().cast();
        header.msg_controllen = libc::CMSG_SPACE(std::mem::size_of_val(raw) as u32) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&header);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(raw) as u32) as usize;
        std::ptr::copy_nonoverlapping(raw.as_ptr(), libc::CMSG_DATA(cmsg).cast(), raw.len());
        libc::sendmsg(socket, &header, libc::MSG_NOSIGNAL)
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The next message on `socket` (empty: its other end was closed, the
/// stub gone), within `timeout`.
fn read_message(socket: RawFd, timeout: Duration) -> io::Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no word within {timeout:?}"),
            ));
        }
        if !wait_readable(socket, left) {
            continue;
        }
        let mut buffer = [0u8; 256];
        // SAFETY: a read into a live buffer of its length.
        let read = unsafe {
            libc::recv(
                socket,
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if read >= 0 {
            return Ok(buffer[..read as usize].to_vec());
        }
        let error = io::Error::last_os_error();
        if !matches!(
            error.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        ) {
            return Err(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `start` tells apart: a stub killed with the launch unread
    /// (ECONNRESET) from one that read it and ended without a word (EOF).
    #[test]
    fn a_stub_gone_with_the_launch_unread_is_a_reset_and_after_reading_it_an_end() {
        let null = dev_null().unwrap();
        let (daemon_end, stub_end) = seqpacket_pair().unwrap();
        send_with_fds(daemon_end.as_raw_fd(), b"launch", &[null.as_raw_fd()]).unwrap();
        drop(stub_end);
        let error = read_message(daemon_end.as_raw_fd(), Duration::from_secs(5)).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ECONNRESET));

        let (daemon_end, stub_end) = seqpacket_pair().unwrap();
        send_with_fds(daemon_end.as_raw_fd(), b"launch", &[null.as_raw_fd()]).unwrap();
        assert_eq!(
            read_message(stub_end.as_raw_fd(), Duration::from_secs(5)).unwrap(),
            b"launch"
        );
        drop(stub_end);
        let report = read_message(daemon_end.as_raw_fd(), Duration::from_secs(5)).unwrap();
        assert!(report.is_empty());
    }

    /// The eventfd's word wins over the socket's end that the exec after
    /// it brings; without it, a report or the end is read.
    #[test]
    fn the_first_word_is_the_eventfd_when_written_else_the_socket() {
        let word = 1u64.to_ne_bytes();
        let (daemon_end, stub_end) = seqpacket_pair().unwrap();
        let executing = eventfd().unwrap();
        // SAFETY: an 8-byte write of a live buffer to our eventfd.
        unsafe { libc::write(executing.as_raw_fd(), word.as_ptr().cast(), 8) };
        drop(stub_end);
        let first = first_word(daemon_end.as_raw_fd(), executing.as_raw_fd());
        assert!(matches!(first, Word::Executing));

        let (daemon_end, stub_end) = seqpacket_pair().unwrap();
        let executing = eventfd().unwrap();
        // SAFETY: a send of a live buffer on a socket we hold.
        unsafe { libc::send(stub_end.as_raw_fd(), b"chdir 2".as_ptr().cast(), 7, 0) };
        let first = first_word(daemon_end.as_raw_fd(), executing.as_raw_fd());
        assert!(matches!(first, Word::Report(Ok(report)) if report == b"chdir 2"));
        drop(stub_end);
        let first = first_word(daemon_end.as_raw_fd(), executing.as_raw_fd());
        assert!(matches!(first, Word::Report(Ok(report)) if report.is_empty()));
    }
}
