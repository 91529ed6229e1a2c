//! A sandbox's first process under `isolation = "full"`, from clone to the
//! exec of its init: the part of a runner's child
//! ([`child_main`](super::runner_child::child_main)) that it does not do.
//!
//! Cloned by the daemon into the sandbox's new mount, PID and IPC
//! namespaces and its cgroup, on the daemon's memory (`CLONE_VM |
//! CLONE_VFORK`, like every clone child here, so the same rules hold:
//! nothing allocates, locks or panics), it:
//! 1. leads its own session and dies with the daemon's spawner thread, and
//!    copies its `/proc/self/stat` (the start time the daemon records)
//!    while `/proc` is still the host's;
//! 2. builds the view ([`MountProgram::run`]: the calls the daemon wrote
//!    down), `/proc` of the new PID namespace last;
//! 3. starts the runner as its own child, pid 2 of the namespace, with
//!    [`child_main`](super::child_main) on a second stack: the runner's
//!    privileges, user switch and kernel filters are exactly those of a
//!    runner the daemon starts directly;
//! 4. writes the runner's pid into init's arguments, puts init's stdio in
//!    place (0: the status file, 1 and 2: the output pipe), and execs the
//!    daemon's binary by descriptor as the sandbox's init.
//!
//! Every signal stays blocked from the clone to init's own set-up, so a
//! SIGTERM the daemon sends early waits for init instead of being dropped
//! (a namespace's PID 1 ignores signals it has no handler for).
//!
//! The daemon's spawn returns once this process has exec'd: by then the
//! view is built and the runner has exec'd, and any failure on the way is
//! in the plan with its step (the view's own, or the runner's).

use std::sync::atomic::Ordering;

use super::super::super::isolation::mount_program::write_decimal;
use super::super::child_step::ChildStep;
use super::child_plan::{ChildPlan, ViewChild};
use super::child_steps::{copy_own_stat, fail, join_sandbox, lead_own_session, place_stdio};
use super::runner_child::child_main;
use super::{NO_FAILURE, PID_ARG_CAPACITY};

/// A sandbox's first process, from clone to the exec of its init (or of a
/// prepared view's holder).
pub(super) extern "C" fn first_process_main(plan: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the parent passed a pointer to a ChildPlan that stays alive
    // and unmoved until this child execs or exits.
    let plan = unsafe { &*(plan as *const ChildPlan) };
    // SAFETY: this is that clone child, every signal blocked; `view` is
    // set for it by the parent (see `parent::entry_of`).
    unsafe {
        join_sandbox(plan);
        match &plan.view {
            Some(view) => start_sandbox(plan, view),
            None => fail(plan, ChildStep::View),
        }
    }
}

/// Steps 1 to 4 above; never returns.
///
/// # Safety
/// Only for the clone child of a sandbox's first process, with every
/// signal blocked and caught ones reset.
unsafe fn start_sandbox(plan: &ChildPlan, view: &ViewChild) -> ! {
    lead_own_session(plan);
    copy_own_stat(plan);
    if !(*view.mounts).run() {
        fail(plan, ChildStep::View);
    }
    let runner = view.runner;
    if !runner.is_null() {
        start_runner(plan, view);
    }
    place_stdio(plan);
    libc::chdir(c"/".as_ptr());
    libc::syscall(
        libc::SYS_execveat,
        view.exe,
        c"".as_ptr(),
        plan.argv,
        plan.envp,
        libc::AT_EMPTY_PATH,
    );
    fail(plan, ChildStep::Execve)
}

/// Step 3: the runner, on its own stack, and its pid in init's arguments.
///
/// # Safety
/// As [`start_sandbox`], with `view.runner` not null.
unsafe fn start_runner(plan: &ChildPlan, view: &ViewChild) {
    let runner = view.runner;
    let pid = libc::clone(
        child_main,
        view.runner_stack,
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        runner as *mut libc::c_void,
    );
    if pid < 0 {
        fail(plan, ChildStep::RunnerClone);
    }
    if (*runner).failed_step.load(Ordering::Acquire) != NO_FAILURE {
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        // The runner's own step and errno are in its plan; the daemon
        // reads them there.
        fail(plan, ChildStep::Runner);
    }
    write_decimal(
        std::slice::from_raw_parts_mut(view.pid_arg, PID_ARG_CAPACITY),
        pid.unsigned_abs(),
    );
}
