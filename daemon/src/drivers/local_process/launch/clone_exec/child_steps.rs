//! The steps both clone children take (a runner's and a sandbox's first
//! process's), each a system call or a few on values the parent prepared:
//! nothing here allocates, locks or can panic.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use super::super::child_step::ChildStep;
use super::super::fd_band;
use super::child_plan::ChildPlan;
use super::STAT_CAPACITY;

/// Exit code of a child that failed before exec (as std and the shells use).
const EXEC_FAILED: i32 = 127;

/// What either child does first, before anything else: a descriptor
/// table of its own, not the daemon's (see `fd_band`); then into the
/// cgroups not joined at clone time, so nothing this process does happens
/// outside its sandbox's cgroup; onto its CPUs (inherited by everything it
/// starts: a sandbox's init passes them on to its runner); and none of the
/// daemon's signal handlers left.
///
/// # Safety
/// Only for the clone child, first thing, with every signal blocked.
pub(super) unsafe fn join_sandbox(plan: &ChildPlan) {
    if plan.files_top > 0 {
        unshare_files(plan);
    }
    for &procs in &plan.procs[..plan.procs_len] {
        if libc::write(procs, b"0".as_ptr().cast(), 1) != 1 {
            fail(plan, ChildStep::Cgroup);
        }
    }
    if let Some(cpus) = &plan.cpus {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::syscall(libc::SYS_sched_setaffinity, 0, size, cpus) < 0 {
            fail(plan, ChildStep::Affinity);
        }
    }
    reset_caught_signals();
}

/// Puts the plan's stdio in place as descriptors 0, 1 and 2.
///
/// # Safety
/// Only for the clone child: it changes the process's descriptor table.
pub(super) unsafe fn place_stdio(plan: &ChildPlan) {
    for (target, &source) in plan.stdio.iter().enumerate() {
        if !move_fd(source, target as RawFd) {
            fail(plan, ChildStep::Dup2);
        }
    }
}

/// A descriptor table of the child's own, holding only the numbers below
/// `files_top` (the daemon's few low ones and the band), then only its
/// slots of the band besides 0 to 2.
///
/// # Safety
/// Only for a clone child cloned with `CLONE_FILES`, first thing.
unsafe fn unshare_files(plan: &ChildPlan) {
    let top = plan.files_top as libc::c_uint;
    if libc::syscall(
        libc::SYS_close_range,
        top,
        libc::c_uint::MAX,
        fd_band::CLOSE_RANGE_UNSHARE,
    ) != 0
    {
        fail(plan, ChildStep::UnshareFiles);
    }
    let mut from: libc::c_uint = 3;
    for &keep in &plan.keep[..plan.keep_len] {
        let keep = keep as libc::c_uint;
        if keep > from {
            libc::syscall(libc::SYS_close_range, from, keep - 1, 0);
        }
        from = keep + 1;
    }
    if from < top {
        libc::syscall(libc::SYS_close_range, from, top - 1, 0);
    }
}

/// Its own session and process group (so the whole tree can be signalled
/// at once and no terminal signal reaches it), and death with the thread
/// that cloned it; or `_exit` if that thread is already gone.
///
/// # Safety
/// Only for the clone child.
pub(super) unsafe fn lead_own_session(plan: &ChildPlan) {
    if libc::setsid() < 0 {
        fail(plan, ChildStep::Setsid);
    }
    if plan.controlling_terminal && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
        fail(plan, ChildStep::ControllingTerminal);
    }
    // Dies with the spawning thread (a spawner thread, which lives as
    // long as the daemon; or a sandbox's init). The group reaper covers
    // the rest.
    if libc::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        0,
        0,
        0,
    ) < 0
    {
        fail(plan, ChildStep::Pdeathsig);
    }
    // The parent may have died before the prctl took effect. (In a new
    // PID namespace the parent is outside it and `getppid` says 0: the
    // group reaper covers that instant.)
    if libc::getppid() != plan.parent {
        libc::_exit(1);
    }
}

/// Copies the child's `/proc/self/stat` (for its start time, which the
/// ledger needs) into the parent's buffer. Read here, before exec, it costs
/// a few microseconds; read by the parent after the clone it raced the
/// exec and sometimes took half a millisecond. Best effort: the parent
/// falls back to `/proc/<pid>/stat`.
///
/// # Safety
/// Only for the clone child; `plan.stat` must hold [`STAT_CAPACITY`] bytes
/// (or be null).
pub(super) unsafe fn copy_own_stat(plan: &ChildPlan) {
    if plan.stat.is_null() {
        return;
    }
    let fd = libc::open(
        c"/proc/self/stat".as_ptr(),
        libc::O_RDONLY | libc::O_CLOEXEC,
    );
    if fd < 0 {
        return;
    }
    let n = libc::read(fd, plan.stat.cast(), STAT_CAPACITY);
    libc::close(fd);
    if n > 0 {
        plan.stat_len.store(n as usize, Ordering::Release);
    }
}

/// Makes `source` the descriptor `target`, open across exec.
///
/// # Safety
/// Only for the clone child: it changes the process's descriptor table.
pub(super) unsafe fn move_fd(source: RawFd, target: RawFd) -> bool {
    if source == target {
        // dup2 onto itself would keep close-on-exec set.
        return libc::fcntl(target, libc::F_SETFD, 0) >= 0;
    }
    libc::dup2(source, target) >= 0
}

/// Resets every signal the daemon catches to its default, and SIGPIPE
/// (which Rust ignores) too, as std does for its children; other ignored
/// signals stay ignored, as POSIX has it. The child has its own copy of
/// the handler table (no CLONE_SIGHAND), so the daemon's is untouched.
///
/// # Safety
/// Only for the clone child, with every signal blocked.
unsafe fn reset_caught_signals() {
    for signal in 1..libc::SIGRTMAX() {
        let mut current: libc::sigaction = std::mem::zeroed();
        // Fails for SIGKILL/SIGSTOP and glibc's internal signals: skip them.
        if libc::sigaction(signal, std::ptr::null(), &mut current) < 0 {
            continue;
        }
        let ignored = current.sa_sigaction == libc::SIG_IGN;
        if current.sa_sigaction == libc::SIG_DFL || (ignored && signal != libc::SIGPIPE) {
            continue;
        }
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(signal, &default, std::ptr::null_mut());
    }
}

/// Reports the failed step to the parent and exits the child.
///
/// # Safety
/// Only for the clone child.
pub(super) unsafe fn fail(plan: &ChildPlan, step: ChildStep) -> ! {
    plan.failed_errno.store(errno(), Ordering::Release);
    plan.failed_step.store(step.number(), Ordering::Release);
    libc::_exit(EXEC_FAILED)
}

pub(super) fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
