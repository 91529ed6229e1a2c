//! The parent's side of a spawn: the raw plan the child reads, made from
//! an [`ExecPlan`] (the only allocations), the clone, and what the child
//! left behind (its failed step, or its start time).

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use super::super::child_step::ChildStep;
use super::super::fd_band;
use super::child_plan::{ChildPlan, ViewChild};
use super::clone::{clone_vfork, ChildEntry, CHILD_STACK, RUNNER_STACK};
use super::{
    runner_child, view_child, Cloned, ExecError, ExecPlan, SandboxInit, CLONE3_REFUSED, NO_FAILURE,
    PID_ARG_CAPACITY, RUNNER_PID_ARG, STAT_CAPACITY,
};

impl ExecPlan {
    /// Starts the program. Must be called from a thread that lives as long
    /// as the runner should (`PR_SET_PDEATHSIG` fires when that thread
    /// exits) and that reaps it (see [`super::super::child_exits`]).
    pub fn spawn(&self) -> Result<Cloned, ExecError> {
        self.spawn_trying_clone3(!CLONE3_REFUSED.load(Ordering::Relaxed))
    }

    /// [`spawn`](Self::spawn) as where `clone3` is refused: `clone`, and
    /// the child joins its cgroups itself.
    #[cfg(test)]
    pub fn spawn_with_clone(&self) -> Result<Cloned, ExecError> {
        self.spawn_trying_clone3(false)
    }

    /// [`spawn`](Self::spawn), with `clone3` tried only when `try_clone3`.
    fn spawn_trying_clone3(&self, try_clone3: bool) -> Result<Cloned, ExecError> {
        let mut argv = null_terminated(&self.args);
        let envp = null_terminated(&self.env);
        let mut stat = [0u8; STAT_CAPACITY];
        let stat_at = match self.start_time {
            true => stat.as_mut_ptr(),
            false => std::ptr::null_mut(),
        };
        let mut child = ChildPlan::new(self, &argv, &envp, self.parent_pid(), stat_at);
        // A sandbox's first process: the runner's plan, a stack for it,
        // and where the runner's pid is written into init's arguments.
        let mut runner = self
            .sandbox
            .as_ref()
            .and_then(|sandbox| sandbox.runner.as_deref())
            .map(RunnerChild::new);
        let mut pid_arg = [0u8; PID_ARG_CAPACITY];
        if let Some(sandbox) = &self.sandbox {
            let runner = runner.as_mut().map(|runner| &mut runner.plan);
            child.view = Some(self.view_child(sandbox, runner, &mut argv, &mut pid_arg));
            child.argv = argv.as_ptr();
        }
        let cloned = self.clone_into_cgroup(&mut child, try_clone3);
        // The band's copies go: the daemon keeps none of the child's.
        fd_band::with_band(|band| band.map(fd_band::ThreadBand::reset));
        let pid = cloned?;
        self.outcome(&child, pid, &stat)
    }

    /// What `getppid` says in the child: 0 in a new PID namespace, whose
    /// parent is outside it.
    fn parent_pid(&self) -> libc::pid_t {
        if self.namespaces & libc::CLONE_NEWPID != 0 || self.joins_pid_namespace {
            0
        } else {
            // SAFETY: getpid has no preconditions.
            unsafe { libc::getpid() }
        }
    }

    /// What a sandbox's first process needs beyond its plan: `runner`
    /// (none for a prepared view), its stack, and `pid_arg` put in place
    /// of [`RUNNER_PID_ARG`] in `argv`.
    fn view_child(
        &self,
        sandbox: &SandboxInit,
        runner: Option<&mut ChildPlan>,
        argv: &mut [*const libc::c_char],
        pid_arg: &mut [u8; PID_ARG_CAPACITY],
    ) -> ViewChild {
        if let Some(slot) = self
            .args
            .iter()
            .position(|arg| arg.as_bytes() == RUNNER_PID_ARG.as_bytes())
        {
            argv[slot] = pid_arg.as_ptr().cast();
        }
        ViewChild {
            exe: sandbox.exe,
            mounts: &sandbox.mounts,
            runner: runner.map_or(std::ptr::null_mut(), |runner| runner as *mut ChildPlan),
            runner_stack: RUNNER_STACK.with(|stack| stack.top()),
            pid_arg: pid_arg.as_mut_ptr(),
        }
    }

    /// The spawn's outcome once the child has exec'd or exited: its
    /// failed step, or its pid and the start time it copied into `stat`.
    fn outcome(
        &self,
        child: &ChildPlan,
        pid: libc::pid_t,
        stat: &[u8; STAT_CAPACITY],
    ) -> Result<Cloned, ExecError> {
        let failed_step = child.failed_step.load(Ordering::Acquire);
        if failed_step != NO_FAILURE {
            // Exited (or about to): its failure is all there is to know.
            let _ = super::super::child_exits::wait_for(pid);
            return Err(self.failure(child, failed_step));
        }
        let stat_len = child.stat_len.load(Ordering::Acquire).min(STAT_CAPACITY);
        let start_time = std::str::from_utf8(&stat[..stat_len])
            .ok()
            .and_then(super::super::proc_stat::parse)
            .map(|stat| stat.start_time);
        Ok(Cloned { pid, start_time })
    }

    /// The error of a child that failed at `step`: for a sandbox's first
    /// process, the view's step or the runner's, in their own words.
    fn failure(&self, child: &ChildPlan, step: usize) -> ExecError {
        let errno = child.failed_errno.load(Ordering::Acquire);
        let step = ChildStep::from_number(step);
        let detail = match (&self.sandbox, &child.view) {
            (Some(sandbox), _) if step == Some(ChildStep::View) => sandbox.mounts.failure(),
            (Some(_), Some(view)) if step == Some(ChildStep::Runner) => {
                // SAFETY: the runner's plan outlives both children, which
                // have exited.
                let runner = unsafe { &*view.runner };
                let step = runner.failed_step.load(Ordering::Acquire);
                ChildStep::from_number(step).map(|step| {
                    let words = step.name();
                    let errno = runner.failed_errno.load(Ordering::Acquire);
                    (
                        format!("runner: {words}"),
                        io::Error::from_raw_os_error(errno),
                    )
                })
            }
            _ => None,
        };
        let (step, error) = detail.unwrap_or_else(|| {
            let words = step.map_or("an unknown step", ChildStep::name);
            (words.to_string(), io::Error::from_raw_os_error(errno))
        });
        ExecError { step, error }
    }

    /// Clones the child into the plan's cgroup: `clone3` with
    /// `CLONE_INTO_CGROUP` where it can, else `clone` with the child
    /// writing itself into the v2 `cgroup.procs` first.
    fn clone_into_cgroup(
        &self,
        child: &mut ChildPlan,
        try_clone3: bool,
    ) -> Result<libc::pid_t, ExecError> {
        let Some(cgroup) = &self.cgroup else {
            child.use_band();
            return CHILD_STACK
                .with(|stack| clone_vfork(stack, child, entry_of(child), None, self.namespaces));
        };
        for procs in &cgroup.v1_procs {
            child.push_procs(procs.as_raw_fd());
        }
        if try_clone3 {
            child.use_band();
            let dir = cgroup.v2_dir.as_raw_fd();
            match CHILD_STACK.with(|stack| {
                clone_vfork(stack, child, entry_of(child), Some(dir), self.namespaces)
            }) {
                // ENOSYS: no clone3 (or a seccomp filter); E2BIG: a kernel
                // before 5.7, which has no CLONE_INTO_CGROUP.
                Err(error)
                    if matches!(error.error.raw_os_error(), Some(libc::ENOSYS | libc::E2BIG)) =>
                {
                    tracing::info!(%error, "clone3 into a cgroup is refused here: runners join their cgroup by writing cgroup.procs");
                    CLONE3_REFUSED.store(true, Ordering::Relaxed);
                }
                result => return result,
            }
        }
        let procs = crate::drivers::local_process::cgroup::procs::open_procs_in(&cgroup.v2_dir)
            .map_err(|error| ExecError {
                step: "open of the v2 cgroup.procs".to_string(),
                error,
            })?;
        // Once only (the refusal is remembered): the child copies the
        // table, its descriptors where the refused clone3 had them.
        child.files_top = 0;
        child.keep_len = 0;
        child.push_procs(procs.as_raw_fd());
        CHILD_STACK.with(|stack| clone_vfork(stack, child, entry_of(child), None, self.namespaces))
    }
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|string| string.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The plan of a sandbox's first process's runner (its parent is that
/// process, pid 1 of the namespace), with the arrays it points into.
struct RunnerChild {
    _argv: Vec<*const libc::c_char>,
    _envp: Vec<*const libc::c_char>,
    plan: ChildPlan,
}

impl RunnerChild {
    fn new(runner: &ExecPlan) -> RunnerChild {
        let argv = null_terminated(&runner.args);
        let envp = null_terminated(&runner.env);
        // The arrays' buffers stay where they are when the arrays move.
        let plan = ChildPlan::new(runner, &argv, &envp, 1, std::ptr::null_mut());
        RunnerChild {
            _argv: argv,
            _envp: envp,
            plan,
        }
    }
}

/// The child's main: a sandbox's first process's, or a runner's.
fn entry_of(child: &ChildPlan) -> ChildEntry {
    match child.view {
        Some(_) => view_child::first_process_main,
        None => runner_child::child_main,
    }
}
