//! What a clone child reads, laid out before the clone: raw pointers into
//! the parent's [`ExecPlan`] and the spawn's frame (which outlive the
//! child: the parent thread is suspended until it has exec'd or exited),
//! and where the child reports a failure.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicUsize};

use super::super::super::isolation::kernel_filters::ChildFilters;
use super::super::super::isolation::keyring;
use super::super::super::isolation::mount_program::MountProgram;
use super::super::fd_band;
use super::{ExecPlan, Privileges, MAX_PROCS_FDS, NO_FAILURE};

/// What the child reads (raw pointers into the [`ExecPlan`], which outlives
/// it: the parent thread is suspended until the child has exec'd or exited)
/// and where it reports a failure.
pub(super) struct ChildPlan {
    pub(super) program: *const libc::c_char,
    pub(super) argv: *const *const libc::c_char,
    pub(super) envp: *const *const libc::c_char,
    pub(super) cwd: *const libc::c_char,
    pub(super) stdio: [RawFd; 3],
    pub(super) privileges: Privileges,
    /// `Some` for a sandbox's first process (see `view_child`); a runner
    /// execs `program`, its privileges dropped.
    pub(super) view: Option<ViewChild>,
    /// What `getppid` must say after `PR_SET_PDEATHSIG`, or the parent
    /// died first.
    pub(super) parent: libc::pid_t,
    pub(super) failed_step: AtomicUsize,
    pub(super) failed_errno: AtomicI32,
    /// Where the child copies its `/proc/self/stat` ([`STAT_CAPACITY`](super::STAT_CAPACITY) bytes).
    pub(super) stat: *mut u8,
    pub(super) stat_len: AtomicUsize,
    /// Cgroup join descriptors (v1 `tasks`, v2 `cgroup.procs`) the child
    /// writes `0` to, first thing.
    pub(super) procs: [RawFd; MAX_PROCS_FDS],
    pub(super) procs_len: usize,
    /// The CPUs it is confined to once in its cgroups (see
    /// [`CgroupPlacement::cpus`](super::CgroupPlacement::cpus)).
    pub(super) cpus: Option<libc::cpu_set_t>,
    /// Pointers into the plan's [`KernelFilters`].
    pub(super) filters: Option<ChildFilters>,
    /// The spawning thread's bounding set is empty already, and so the
    /// child's (see [`ThreadConfinement`](super::ThreadConfinement)).
    pub(super) bounding_set_empty: bool,
    /// The sandbox's session keyring to join by name (NUL-terminated), or
    /// `None`: a new anonymous one (see `isolation::keyring`).
    pub(super) session_keyring: Option<[u8; keyring::SESSION_NAME_CAPACITY]>,
    /// Non-zero: the child shares the daemon's descriptor table
    /// (`CLONE_FILES`) and first gives itself one of its own holding only
    /// the numbers below this, keeping `keep` (see `fd_band`).
    pub(super) files_top: RawFd,
    pub(super) keep: [RawFd; fd_band::SLOTS],
    pub(super) keep_len: usize,
    /// The binary to `execveat`, or -1: `execve` of `program`.
    pub(super) exe: RawFd,
    /// `TIOCSCTTY` on stdin once it leads its session.
    pub(super) controlling_terminal: bool,
}

impl ChildPlan {
    /// The plan of `plan`'s child, over `argv` and `envp` (made from it);
    /// `stat` is where it copies its `/proc/self/stat` (null: nowhere).
    pub(super) fn new(
        plan: &ExecPlan,
        argv: &[*const libc::c_char],
        envp: &[*const libc::c_char],
        parent: libc::pid_t,
        stat: *mut u8,
    ) -> ChildPlan {
        ChildPlan {
            program: plan.program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            cwd: plan.cwd.as_ptr(),
            stdio: [
                plan.stdin.as_raw_fd(),
                plan.stdout.as_raw_fd(),
                plan.stderr.as_raw_fd(),
            ],
            privileges: plan.privileges,
            view: None,
            parent,
            failed_step: AtomicUsize::new(NO_FAILURE),
            failed_errno: AtomicI32::new(0),
            stat,
            stat_len: AtomicUsize::new(0),
            procs: [-1; MAX_PROCS_FDS],
            procs_len: 0,
            cpus: plan
                .cgroup
                .as_ref()
                .and_then(|cgroup| cgroup.cpus.as_deref().copied()),
            filters: plan
                .filters
                .as_ref()
                .map(|filters| filters.child_plan(plan.thread.seccomp_thread_part)),
            bounding_set_empty: plan.thread.empty_bounding_set,
            session_keyring: plan
                .filters
                .as_ref()
                .zip(plan.privileges.user)
                .and_then(|(filters, (uid, _))| filters.session_name_of(uid)),
            files_top: 0,
            keep: [-1; fd_band::SLOTS],
            keep_len: 0,
            exe: plan.exe,
            controlling_terminal: plan.controlling_terminal,
        }
    }

    /// Every descriptor this child (and its runner, under an init) uses.
    pub(super) fn fds_mut(&mut self) -> Vec<*mut RawFd> {
        let mut fds: Vec<*mut RawFd> = self.stdio.iter_mut().map(|fd| fd as *mut RawFd).collect();
        fds.extend(
            self.procs[..self.procs_len]
                .iter_mut()
                .map(|fd| fd as *mut RawFd),
        );
        if let Some(filters) = &mut self.filters {
            fds.push(&mut filters.landlock_ruleset);
        }
        if self.exe >= 0 {
            fds.push(&mut self.exe);
        }
        if let Some(view) = &mut self.view {
            fds.push(&mut view.exe);
            if !view.runner.is_null() {
                // SAFETY: the runner's plan is the spawn's own, alive and
                // not otherwise borrowed while the spawn prepares.
                fds.extend(unsafe { (*view.runner).fds_mut() });
            }
        }
        fds
    }

    /// Moves every descriptor the child uses onto this thread's band, so
    /// it is cloned with `CLONE_FILES` and copies none of the daemon's
    /// table (see `fd_band`). Nothing changes when the thread has no band
    /// or too small a one: the child then copies the table.
    pub(super) fn use_band(&mut self) {
        fd_band::with_band(|band| {
            let Some(band) = band else {
                return;
            };
            let fds = self.fds_mut();
            // SAFETY: pointers into this plan (and its runner's), alive
            // and unaliased for this call.
            let placed: Option<Vec<RawFd>> =
                fds.iter().map(|&fd| band.place(unsafe { *fd })).collect();
            let Some(placed) = placed else {
                band.reset();
                return;
            };
            for (fd, slot) in fds.into_iter().zip(placed) {
                // SAFETY: as above.
                unsafe { *fd = slot };
            }
            let used = band.used();
            self.keep[..used.len()].copy_from_slice(used);
            self.keep_len = used.len();
            self.files_top = band.top();
        });
    }

    pub(super) fn push_procs(&mut self, fd: RawFd) {
        if self.procs_len < MAX_PROCS_FDS {
            self.procs[self.procs_len] = fd;
            self.procs_len += 1;
        }
    }
}

/// What a sandbox's first process needs beyond a runner's plan: raw
/// pointers into the daemon's [`ExecPlan`] and the spawn's frame, which
/// outlive it (the spawning thread is suspended until it has exec'd).
pub(super) struct ViewChild {
    pub(super) exe: RawFd,
    pub(super) mounts: *const MountProgram,
    /// Null for a prepared view: no runner yet (see `prepared`).
    pub(super) runner: *mut ChildPlan,
    /// The top of the runner's stack.
    pub(super) runner_stack: *mut libc::c_void,
    /// [`PID_ARG_CAPACITY`](super::PID_ARG_CAPACITY) bytes of init's
    /// arguments, for the runner's pid.
    pub(super) pid_arg: *mut u8,
}
