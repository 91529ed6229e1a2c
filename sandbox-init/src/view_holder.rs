//! The PID 1 of a view prepared ahead of its sandbox (the daemon's
//! `prepared`): `sandboxd-init` (or the daemon's own binary) exec'd with a
//! hidden argv[1] by the view's first process once that process has built
//! the view (the daemon's `MountProgram`, the same as for a sandbox started
//! cold, without its workspace) in new mount, PID and IPC namespaces.
//!
//! It holds the namespaces until a sandbox takes them: the runner then
//! joins them from the daemon (`setns`, then the ordinary runner clone), so
//! the runner is the daemon's child as under `uid-cgroup`, and this process
//! stays what a namespace's PID 1 must be: the reaper of every orphan.
//! It forwards nothing (the daemon signals the runner's group itself) and
//! is killed by the daemon (by pidfd) once the runner's exit is known,
//! which ends the view and anything left in it; it stays in the daemon's
//! cgroup (see `prepared::parked::Holder`). An untaken view ends at the
//! daemon's stop, or
//! when the daemon dies however it dies (its lifeline, standard input,
//! reads end-of-file).
//!
//! What it does, in order: non-dumpable first (nothing in the view may read
//! or trace it), every privilege dropped for good (an empty bounding set
//! where the daemon can empty one, no capability, `no_new_privs`; it stays
//! uid 0, so no runner's uid may signal it), every signal blocked, one
//! byte on its standard output to tell the daemon it is ready (the view is
//! offered to no sandbox before: a holder still dumpable could be traced),
//! and then, until it is killed or its standard input (the daemon's lifeline,
//! see `prepared::parked::Lifeline`) ends, reaps whatever exits. Its
//! arguments: [`ARG`] and whether to empty its bounding set.

use std::process::ExitCode;

use crate::init::{DROP_BOUNDING_SET, KEEP_BOUNDING_SET};
use crate::privileges::drop_own_privileges;

/// The hidden first argument that makes the binary a prepared view's holder.
pub const ARG: &str = "__sandbox-view-holder";

/// The holder's `main`: returns only when its set-up failed (127), which
/// the daemon sees as a view that died before it was taken.
pub fn run_view_holder() -> ExitCode {
    // SAFETY: prctl with plain integer arguments and a constant C string.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::prctl(libc::PR_SET_NAME, c"sandbox-view".as_ptr(), 0, 0, 0);
    }
    let drop_bounding_set = match std::env::args().nth(2).as_deref() {
        Some(DROP_BOUNDING_SET) => true,
        Some(KEEP_BOUNDING_SET) => false,
        other => {
            eprintln!("sandbox-view: bad argument {other:?}");
            return ExitCode::from(127);
        }
    };
    if let Err(failure) = drop_own_privileges(None, drop_bounding_set) {
        eprintln!("sandbox-view: {failure}");
        return ExitCode::from(127);
    }
    extern "C" fn wake(_: libc::c_int) {}
    // SAFETY: sigset_t and sigaction are plain data, filled before use; the
    // handler does nothing (async-signal-safe); the mask is this
    // single-threaded process's own. Everything stays blocked but while
    // ppoll waits, when SIGCHLD alone may interrupt it.
    let only_sigchld = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = wake as extern "C" fn(libc::c_int) as usize;
        libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut());
        let mut during: libc::sigset_t = all;
        libc::sigdelset(&mut during, libc::SIGCHLD);
        during
    };
    // Ready: the daemon offers the view from here on. Standard output is
    // the ready pipe and nothing else; closing it is harmless.
    // SAFETY: a one-byte write of a live buffer, then close of our own fd 1.
    unsafe {
        libc::write(1, b"r".as_ptr().cast(), 1);
        libc::close(1);
    }
    loop {
        let mut lifeline = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no timeout, a valid mask.
        let ready = unsafe { libc::ppoll(&mut lifeline, 1, std::ptr::null(), &only_sigchld) };
        if ready > 0 {
            // End-of-file (or anything at all) on the lifeline: the daemon
            // is gone. PID 1 leaving ends the namespace and all in it.
            return ExitCode::SUCCESS;
        }
        reap_all();
    }
}

/// Reaps every exited child (orphans of the sandbox's runner).
fn reap_all() {
    loop {
        let mut status = 0;
        // SAFETY: a valid out-pointer; WNOHANG returns at once.
        if unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } <= 0 {
            return;
        }
    }
}
