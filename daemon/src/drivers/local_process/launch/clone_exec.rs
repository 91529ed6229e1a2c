//! Starting a runner the way glibc's `posix_spawn` starts a program: a
//! `clone3(CLONE_VM | CLONE_VFORK)` child that shares the daemon's memory,
//! makes a handful of system calls and execs.
//!
//! The clone also places the child in its sandbox's cgroup:
//! `CLONE_INTO_CGROUP` (Linux 5.7) with a descriptor of the cgroup's v2
//! directory opened beforehand, so the runner exists inside its cgroup from
//! its first instruction and nothing it ever forks can start outside it.
//! Controllers that live in v1 hierarchies (a hybrid host) cannot be
//! joined at clone time: the child's very first step writes `0` (itself)
//! to each of their `cgroup.procs`, through descriptors opened beforehand,
//! before it does anything else. Where `clone3` is refused (`ENOSYS`: a
//! kernel before 5.3, or systemd's seccomp filter for `RestrictNamespaces=`,
//! which cannot inspect `clone3`'s flags and so refuses the call; `E2BIG`:
//! a kernel before 5.7, without `CLONE_INTO_CGROUP`) and on
//! architectures without the assembly below, the child is made with
//! `clone` and writes itself into the v2 `cgroup.procs` the same way, first.
//!
//! Why not `std::process::Command`: a runner needs `setsid`,
//! `PR_SET_PDEATHSIG` and a user switch between clone and exec, and any of
//! these (a `pre_exec` hook, `uid`/`gid`) moves std off its `posix_spawn`
//! path onto `fork`. Forking copies the daemon's page tables, the child
//! tears them down again at exec, and every page the daemon's other threads
//! write before that exec costs a copy-on-write fault. That was most of
//! what a new sandbox cost the daemon beyond the spawn itself (see
//! BENCHMARKS.md). A `CLONE_VM` child copies nothing; the spawning thread
//! is suspended until the child has exec'd or exited.
//!
//! The price is a child that runs on the daemon's memory, so it must be
//! written like glibc's own spawn child:
//! - everything it needs (C strings, pointer arrays, descriptors) is
//!   prepared before the clone; the child allocates nothing, takes no lock
//!   and cannot panic;
//! - it runs on a stack of its own, with a guard page;
//! - the user switch uses raw `setgroups`/`setresgid`/`setresuid` system
//!   calls: glibc's wrappers would signal every thread of the *daemon* to
//!   switch them too (and wait for them, forever);
//! - so does giving up privileges for good (`no_new_privs`, the capability
//!   sets, the securebits; see [`Privileges`]): raw `prctl`/`capset` calls,
//!   which act on the calling thread — the child — only;
//! - every signal is blocked across the clone, and the child resets each
//!   caught signal to its default before it unblocks, so none of the
//!   daemon's signal handlers can ever run in it;
//! - a failure is written to memory the parent reads (`step` and `errno`),
//!   and the child `_exit`s; the parent reaps it;
//! - `clone3` returns in the child on the new stack with no frame to
//!   return to, so it is issued from a few lines of assembly that call the
//!   child's entry function at once (as glibc's own `clone3` wrapper does).
//!
//! Under `isolation = "full"` the daemon's clone child is a sandbox's
//! first process instead ([`ExecPlan::into_sandbox_init`], `view_child`):
//! cloned into new namespaces with the daemon's privileges, it builds the
//! view, starts the runner as its own `CLONE_VM` child (this same
//! [`child_main`], on a second stack), and execs `sandboxd-init` by
//! descriptor as the sandbox's init (see `sandboxd_init::init`).
//!
//! The spawn returns the child's pid unreaped; the caller has its exit
//! watched ([`super::child_exits`]: reaped by the thread that cloned it),
//! and the pid cannot be recycled until then.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;

use super::super::isolation::kernel_filters::{ChildFilters, KernelFilters};
use super::super::isolation::mount_program::MountProgram;
use super::super::isolation::{keyring, landlock, seccomp};
use super::child_step::ChildStep;
use super::fd_band;
use sandboxd_init::privileges;

#[path = "view_child.rs"]
mod view_child;

/// Everything the child needs, allocated before the clone.
pub struct ExecPlan {
    program: CString,
    /// `argv`, NUL-terminated array over `args`.
    args: Vec<CString>,
    env: Vec<CString>,
    cwd: CString,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    privileges: Privileges,
    /// The cgroup to start in; `None` starts in the daemon's own.
    cgroup: Option<CgroupPlacement>,
    /// Keyring, Landlock, clean start and seccomp; `None`: none of them.
    filters: Option<Arc<KernelFilters>>,
    /// `CLONE_NEW*` flags: the namespaces the child starts in (none: the
    /// daemon's).
    namespaces: libc::c_int,
    /// `Some`: this is a sandbox's first process, not a runner (see
    /// [`ExecPlan::into_sandbox_init`]).
    sandbox: Option<SandboxInit>,
    /// The child starts in a PID namespace the spawning thread joined (a
    /// prepared view's, see `prepared`): its parent is outside it.
    joins_pid_namespace: bool,
    /// A close-on-exec descriptor of the binary to exec instead of looking
    /// `program` up, or -1 (see [`ExecPlan::exec_by_descriptor`]).
    exe: RawFd,
    /// Its stdin is a terminal, made its controlling one once it leads its
    /// own session (see [`ExecPlan::with_controlling_terminal`]).
    controlling_terminal: bool,
}

/// What a sandbox's first process needs beyond an ordinary plan.
pub struct SandboxInit {
    /// `sandboxd-init` (see `isolation::init_binary`), exec'd
    /// (`execveat(AT_EMPTY_PATH)`) as the
    /// sandbox's init once the runner runs.
    exe: RawFd,
    /// The view, built before the runner starts.
    mounts: MountProgram,
    /// The runner, started as this process's child inside the view;
    /// `None` for a prepared view, whose runner joins it later (see
    /// `prepared`).
    runner: Option<Box<ExecPlan>>,
}

/// Where a runner starts, opened before the clone.
pub struct CgroupPlacement {
    /// The sandbox's cgroup v2 directory (`CLONE_INTO_CGROUP`).
    pub v2_dir: OwnedFd,
    /// `cgroup.procs` of the sandbox's cgroup in each v1 hierarchy.
    pub v1_procs: Vec<OwnedFd>,
    /// The CPUs it starts on (`sched_setaffinity`, right after joining the
    /// cgroups), as many as its cpu quota rounds up to (see
    /// `cgroup::cpus`); `None`: the daemon's. Boxed: a mask is 128 bytes.
    pub cpus: Option<Box<libc::cpu_set_t>>,
}

impl CgroupPlacement {
    /// The same cgroups, opened again (duplicated descriptors).
    pub fn try_clone(&self) -> io::Result<CgroupPlacement> {
        Ok(CgroupPlacement {
            v2_dir: self.v2_dir.try_clone()?,
            v1_procs: self
                .v1_procs
                .iter()
                .map(OwnedFd::try_clone)
                .collect::<io::Result<_>>()?,
            cpus: self.cpus.clone(),
        })
    }
}

/// The most `cgroup.procs` the child writes itself into (v1 memory, pids,
/// cpu and freezer, and v2's when `clone3` is refused).
const MAX_PROCS_FDS: usize = 5;

/// Set once `clone3` has been refused with `ENOSYS`: later spawns go
/// straight to `clone`.
static CLONE3_REFUSED: AtomicBool = AtomicBool::new(!cfg!(target_arch = "x86_64"));

pub use super::super::users::identity::Privileges;

/// The securebits a runner gets, each with its lock: root is not special,
/// a uid change never adjusts capabilities, and neither keep-caps nor
/// ambient raises can be turned on.
const RUNNER_SECUREBITS: libc::c_int = libc::SECBIT_NOROOT
    | libc::SECBIT_NOROOT_LOCKED
    | libc::SECBIT_NO_SETUID_FIXUP
    | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
    | libc::SECBIT_KEEP_CAPS_LOCKED
    | libc::SECBIT_NO_CAP_AMBIENT_RAISE
    | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;

/// What failed, and how, when a runner could not be started.
#[derive(Debug)]
pub struct ExecError {
    pub step: String,
    pub error: io::Error,
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.error)
    }
}

const NO_FAILURE: usize = usize::MAX;
/// The argument of a sandbox's init that its first process replaces with
/// the runner's pid (in the sandbox's namespace) before it execs init.
pub const RUNNER_PID_ARG: &str = "@runner-pid@";
/// Room for a pid's digits and a NUL.
const PID_ARG_CAPACITY: usize = 16;
/// Exit code of a child that failed before exec (as std and the shells use).
const EXEC_FAILED: i32 = 127;
const CHILD_STACK_SIZE: usize = 64 * 1024;
/// Room for a `/proc/<pid>/stat` line (52 fields and a 16-byte name).
const STAT_CAPACITY: usize = 1024;

impl ExecPlan {
    /// `program` must be an absolute path (no `PATH` search happens).
    pub fn new(
        program: &OsStr,
        args: impl IntoIterator<Item = impl AsRef<OsStr>>,
        env: impl IntoIterator<Item = (impl AsRef<OsStr>, impl AsRef<OsStr>)>,
        cwd: &OsStr,
        stdio: [OwnedFd; 3],
        privileges: Privileges,
    ) -> Result<ExecPlan, String> {
        let c_string = |what: &str, value: &OsStr| {
            CString::new(value.as_bytes())
                .map_err(|_| format!("{what} contains a NUL byte: {value:?}"))
        };
        let program = c_string("the program path", program)?;
        let mut argv = vec![program.clone()];
        for arg in args {
            argv.push(c_string("an argument", arg.as_ref())?);
        }
        let mut envp = Vec::new();
        for (name, value) in env {
            let (name, value) = (name.as_ref(), value.as_ref());
            let mut entry = name.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            envp.push(
                CString::new(entry)
                    .map_err(|_| format!("environment variable {name:?} contains a NUL byte"))?,
            );
        }
        let [stdin, stdout, stderr] = stdio;
        Ok(ExecPlan {
            program,
            args: argv,
            env: envp,
            cwd: c_string("the working directory", cwd)?,
            stdin,
            stdout,
            stderr,
            privileges,
            cgroup: None,
            filters: None,
            namespaces: 0,
            sandbox: None,
            joins_pid_namespace: false,
            exe: -1,
            controlling_terminal: false,
        })
    }

    /// Execs the binary open as `exe` (close-on-exec; `execveat` with
    /// `AT_EMPTY_PATH`) rather than the file at `program`, which stays
    /// `argv[0]`: the binary the daemon opened and checked at its start,
    /// reached wherever the child is (a view may hide its path), never a
    /// file put in its place since. The plan must not outlive `exe`.
    pub fn exec_by_descriptor(mut self, exe: RawFd) -> ExecPlan {
        self.exe = exe;
        self
    }

    /// Starts the runner under these kernel filters (see
    /// [`KernelFilters`]), applied between the user switch and exec.
    pub fn with_filters(mut self, filters: Arc<KernelFilters>) -> ExecPlan {
        self.filters = Some(filters);
        self
    }

    /// Makes this the plan of a sandbox's first process rather than of a
    /// runner: the child is cloned into new `namespaces` (`CLONE_NEW*`)
    /// and keeps the daemon's privileges; it runs `mounts`, starts `runner`
    /// (a runner's plan, filters and all) as its child, and execs `exe`, an
    /// open descriptor of `sandboxd-init` (see `isolation::init_binary`: so
    /// an upgraded file on disk never runs as the init of an older daemon), with this plan's
    /// arguments and stdio. Its argument [`RUNNER_PID_ARG`] is replaced by
    /// the runner's pid in the sandbox's namespace. Cgroup, `setsid` and
    /// `PR_SET_PDEATHSIG` are as for a runner; init drops its privileges
    /// itself (see `sandboxd_init::init`).
    pub fn into_sandbox_init(
        self,
        exe: RawFd,
        namespaces: libc::c_int,
        mounts: MountProgram,
        runner: ExecPlan,
    ) -> ExecPlan {
        self.into_first_process(exe, namespaces, mounts, Some(Box::new(runner)))
    }

    /// As [`into_sandbox_init`](Self::into_sandbox_init), for a view
    /// prepared ahead of its sandbox: the first process builds the view in
    /// its new `namespaces` and execs `exe` (the view's holder, see
    /// `sandboxd_init::view_holder`) without starting any runner.
    pub fn into_prepared_view(
        self,
        exe: RawFd,
        namespaces: libc::c_int,
        mounts: MountProgram,
    ) -> ExecPlan {
        self.into_first_process(exe, namespaces, mounts, None)
    }

    fn into_first_process(
        mut self,
        exe: RawFd,
        namespaces: libc::c_int,
        mounts: MountProgram,
        runner: Option<Box<ExecPlan>>,
    ) -> ExecPlan {
        self.namespaces = namespaces;
        // It keeps every privilege to build the view: no runner's filters.
        self.filters = None;
        self.sandbox = Some(SandboxInit {
            exe,
            mounts,
            runner,
        });
        self
    }

    /// Says that the spawning thread has joined the PID namespace the child
    /// starts in (`setns`), so the child's parent is outside it and
    /// `getppid` says 0.
    pub fn joining_pid_namespace(mut self) -> ExecPlan {
        self.joins_pid_namespace = true;
        self
    }

    /// Makes its stdin (a terminal's follower side) its controlling
    /// terminal, as a login shell's: job control, `SIGWINCH` at a resize,
    /// `SIGHUP` when the terminal closes (a command given a PTY).
    pub fn with_controlling_terminal(mut self) -> ExecPlan {
        self.controlling_terminal = true;
        self
    }

    /// Starts the runner in this cgroup rather than the daemon's.
    pub fn in_cgroup(mut self, placement: CgroupPlacement) -> ExecPlan {
        debug_assert!(placement.v1_procs.len() < MAX_PROCS_FDS);
        self.cgroup = Some(placement);
        self
    }

    /// Starts the program. Must be called from a thread that lives as long
    /// as the runner should (`PR_SET_PDEATHSIG` fires when that thread
    /// exits) and that reaps it (see [`super::child_exits`]).
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
        // In a new PID namespace the parent is outside it: `getppid` says 0.
        let parent = if self.namespaces & libc::CLONE_NEWPID != 0 || self.joins_pid_namespace {
            0
        } else {
            // SAFETY: getpid has no preconditions.
            unsafe { libc::getpid() }
        };
        let mut child = ChildPlan::new(self, &argv, &envp, parent, stat.as_mut_ptr());
        // A sandbox's first process: the runner's plan (its parent is that
        // process, pid 1 of the namespace), a stack for it, and where the
        // runner's pid is written into init's arguments.
        let runner_argv;
        let runner_envp;
        let mut runner_child;
        let mut pid_arg = [0u8; PID_ARG_CAPACITY];
        if let Some(sandbox) = &self.sandbox {
            let runner_plan = match &sandbox.runner {
                Some(runner) => {
                    runner_argv = null_terminated(&runner.args);
                    runner_envp = null_terminated(&runner.env);
                    runner_child =
                        ChildPlan::new(runner, &runner_argv, &runner_envp, 1, std::ptr::null_mut());
                    &mut runner_child as *mut ChildPlan
                }
                None => std::ptr::null_mut(),
            };
            if let Some(slot) = self
                .args
                .iter()
                .position(|arg| arg.as_bytes() == RUNNER_PID_ARG.as_bytes())
            {
                argv[slot] = pid_arg.as_ptr().cast();
            }
            child.view = Some(view_child::ViewChild {
                exe: sandbox.exe,
                mounts: &sandbox.mounts,
                runner: runner_plan,
                runner_stack: RUNNER_STACK.with(|stack| stack.top()),
                pid_arg: pid_arg.as_mut_ptr(),
            });
            child.argv = argv.as_ptr();
        }
        let cloned = self.clone_into_cgroup(&mut child, try_clone3);
        // The band's copies go: the daemon keeps none of the child's.
        fd_band::with_band(|band| band.map(fd_band::ThreadBand::reset));
        let pid = cloned?;
        let failed_step = child.failed_step.load(Ordering::Acquire);
        if failed_step != NO_FAILURE {
            // Exited (or about to): its failure is all there is to know.
            let _ = super::child_exits::wait_for(pid);
            return Err(self.failure(&child, failed_step));
        }
        let stat_len = child.stat_len.load(Ordering::Acquire).min(STAT_CAPACITY);
        let start_time = std::str::from_utf8(&stat[..stat_len])
            .ok()
            .and_then(super::proc_stat::parse)
            .map(|stat| stat.start_time);
        Ok(Cloned { pid, start_time })
    }
}

impl ExecPlan {
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
            return CHILD_STACK.with(|stack| clone_vfork(stack, child, None, self.namespaces));
        };
        for procs in &cgroup.v1_procs {
            child.push_procs(procs.as_raw_fd());
        }
        if try_clone3 {
            child.use_band();
            let dir = cgroup.v2_dir.as_raw_fd();
            match CHILD_STACK.with(|stack| clone_vfork(stack, child, Some(dir), self.namespaces)) {
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
        CHILD_STACK.with(|stack| clone_vfork(stack, child, None, self.namespaces))
    }
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|string| string.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// What the child reads (raw pointers into the [`ExecPlan`], which outlives
/// it: the parent thread is suspended until the child has exec'd or exited)
/// and where it reports a failure.
struct ChildPlan {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdio: [RawFd; 3],
    privileges: Privileges,
    /// `Some` for a sandbox's first process ([`view_child`]); a runner
    /// execs `program`, its privileges dropped.
    view: Option<view_child::ViewChild>,
    /// What `getppid` must say after `PR_SET_PDEATHSIG`, or the parent
    /// died first.
    parent: libc::pid_t,
    failed_step: AtomicUsize,
    failed_errno: AtomicI32,
    /// Where the child copies its `/proc/self/stat` ([`STAT_CAPACITY`] bytes).
    stat: *mut u8,
    stat_len: AtomicUsize,
    /// `cgroup.procs` descriptors the child writes `0` to, first thing.
    procs: [RawFd; MAX_PROCS_FDS],
    procs_len: usize,
    /// The CPUs it is confined to once in its cgroups (see
    /// [`CgroupPlacement::cpus`]).
    cpus: Option<libc::cpu_set_t>,
    /// Pointers into the plan's [`KernelFilters`].
    filters: Option<ChildFilters>,
    /// The sandbox's session keyring to join by name (NUL-terminated), or
    /// `None`: a new anonymous one (see `isolation::keyring`).
    session_keyring: Option<[u8; keyring::SESSION_NAME_CAPACITY]>,
    /// Non-zero: the child shares the daemon's descriptor table
    /// (`CLONE_FILES`) and first gives itself one of its own holding only
    /// the numbers below this, keeping `keep` (see `fd_band`).
    files_top: RawFd,
    keep: [RawFd; fd_band::SLOTS],
    keep_len: usize,
    /// The binary to `execveat`, or -1: `execve` of `program`.
    exe: RawFd,
    /// `TIOCSCTTY` on stdin once it leads its session.
    controlling_terminal: bool,
}

impl ChildPlan {
    /// The plan of `plan`'s child, over `argv` and `envp` (made from it);
    /// `stat` is where it copies its `/proc/self/stat` (null: nowhere).
    fn new(
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
            filters: plan.filters.as_ref().map(|filters| filters.child_plan()),
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
    fn fds_mut(&mut self) -> Vec<*mut RawFd> {
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
    fn use_band(&mut self) {
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

    fn push_procs(&mut self, fd: RawFd) {
        if self.procs_len < MAX_PROCS_FDS {
            self.procs[self.procs_len] = fd;
            self.procs_len += 1;
        }
    }
}

/// `struct clone_args` of `clone3(2)`, up to `cgroup` (version 2, 88 bytes).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7), not in every libc's headers.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Clones the child with every signal blocked in this thread, then restores
/// the thread's mask. Returns when the child has exec'd or exited. With
/// `cgroup` (a v2 directory descriptor) it is `clone3` into that cgroup.
/// `namespaces`: `CLONE_NEW*` flags for both calls.
fn clone_vfork(
    stack: &ChildStack,
    child: &ChildPlan,
    cgroup: Option<RawFd>,
    namespaces: libc::c_int,
) -> Result<libc::pid_t, ExecError> {
    // SAFETY: sigset_t is plain data, filled by sigfillset before any use.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; pthread_sigmask writes the old mask into it.
    let mut previous: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live, writable sigset_t values.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
    }
    // SAFETY: `child_main` only makes async-signal-safe calls and raw system
    // calls, allocates nothing and cannot unwind; it runs on `stack`, which
    // nothing else uses while this thread is suspended (CLONE_VFORK), and
    // `child` outlives it for the same reason. SIGCHLD as the exit signal
    // makes it an ordinary child for waitpid.
    // Sharing the daemon's table rather than copying it, when the child
    // has its descriptors on the band (see `fd_band`).
    let files = if child.files_top > 0 {
        libc::CLONE_FILES
    } else {
        0
    };
    let pid = match cgroup {
        Some(dir) => clone3_into(stack, child, dir, namespaces | files),
        None => unsafe {
            libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | namespaces | files | libc::SIGCHLD,
                child as *const ChildPlan as *mut libc::c_void,
            )
        },
    };
    let clone_error = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut()) };
    if pid < 0 {
        return Err(ExecError {
            step: "clone".to_string(),
            error: clone_error,
        });
    }
    Ok(pid)
}

/// `clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP)` of [`child_main`]
/// on `stack`, into the cgroup directory `dir`. Returns the child's pid, or
/// -1 with `errno` set, like `clone`.
#[cfg(target_arch = "x86_64")]
fn clone3_into(
    stack: &ChildStack,
    child: &ChildPlan,
    dir: RawFd,
    namespaces: libc::c_int,
) -> libc::pid_t {
    let page = page_size();
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | namespaces) as u64 | CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        // The lowest address above the guard page; the kernel starts the
        // child at stack + stack_size (page-aligned, so 16-byte aligned).
        stack: stack.base as u64 + page as u64,
        stack_size: (stack.len - page) as u64,
        cgroup: dir as u64,
        ..CloneArgs::default()
    };
    let entry: extern "C" fn(*mut libc::c_void) -> libc::c_int = child_main;
    let ret: i64;
    // SAFETY: the system call gets a valid clone_args of the size given.
    // In the parent it returns like any system call (rcx and r11 are the
    // only registers the kernel clobbers). In the child (rax 0) the kernel
    // has switched to the new stack, and the next instructions call the
    // entry with the plan from r12/r13, which the kernel leaves as they
    // were; the entry never returns (it execs or _exits), and `ud2` marks
    // that. The parent thread is suspended until then (CLONE_VFORK), so
    // nothing else runs on that stack or reads the plan meanwhile.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") &args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") child as *const ChildPlan,
            in("r13") entry,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if ret < 0 {
        // SAFETY: errno is this thread's; the raw system call did not set it.
        unsafe { *libc::__errno_location() = -ret as i32 };
        return -1;
    }
    ret as libc::pid_t
}

/// Elsewhere `clone3` is never tried ([`CLONE3_REFUSED`] starts set).
#[cfg(not(target_arch = "x86_64"))]
fn clone3_into(
    _stack: &ChildStack,
    _child: &ChildPlan,
    _dir: RawFd,
    _namespaces: libc::c_int,
) -> libc::pid_t {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// The child, from clone to exec. Every call here is async-signal-safe or a
/// raw system call; nothing allocates, locks or can panic.
extern "C" fn child_main(plan: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the parent passed a pointer to a ChildPlan that stays alive
    // and unmoved until this child execs or exits.
    let plan = unsafe { &*(plan as *const ChildPlan) };
    // SAFETY: each call below is a system call on values the parent
    // prepared; see the module comment for why these and no others.
    unsafe {
        // Before anything touches a descriptor: a table of its own, not the
        // daemon's (see `fd_band`).
        if plan.files_top > 0 {
            unshare_files(plan);
        }
        // First of all, into the cgroups not joined at clone time: nothing
        // this process does may happen outside its sandbox's cgroup.
        for &procs in &plan.procs[..plan.procs_len] {
            if libc::write(procs, b"0".as_ptr().cast(), 1) != 1 {
                fail(plan, ChildStep::Cgroup);
            }
        }
        // Inherited by everything it starts: a sandbox's init passes it
        // on to its runner.
        if let Some(cpus) = &plan.cpus {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            if libc::syscall(libc::SYS_sched_setaffinity, 0, size, cpus) < 0 {
                fail(plan, ChildStep::Affinity);
            }
        }
        reset_caught_signals();
        if let Some(view) = &plan.view {
            view_child::start_sandbox(plan, view);
        }
        for (target, &source) in plan.stdio.iter().enumerate() {
            if !move_fd(source, target as RawFd) {
                fail(plan, ChildStep::Dup2);
            }
        }
        // Before the switch: dropping from the bounding set and setting
        // securebits need CAP_SETPCAP, and a switch away from uid 0 would
        // clear it (were NO_SETUID_FIXUP not set first).
        drop_privileges_for_good(plan);
        if let Some((uid, gid)) = plan.privileges.user {
            // Ignoring EPERM as std does: without CAP_SETGID there are no
            // groups to shed that the switch would not already drop.
            if libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) < 0
                && errno() != libc::EPERM
            {
                fail(plan, ChildStep::Setgroups);
            }
            if libc::syscall(libc::SYS_setresgid, gid, gid, gid) < 0 {
                fail(plan, ChildStep::Setresgid);
            }
            if libc::syscall(libc::SYS_setresuid, uid, uid, uid) < 0 {
                fail(plan, ChildStep::Setresuid);
            }
        }
        // With SECBIT_NO_SETUID_FIXUP the switch kept the daemon's
        // capabilities; without a switch they are the daemon's. Exec would
        // clear most of them for a non-root uid, but not the inheritable
        // set, and not for root: empty all three here.
        clear_capability_sets(plan);
        // As the sandbox's uid, so the keyring is its own.
        if plan
            .filters
            .is_some_and(|filters| filters.join_session_keyring)
        {
            let joined = match &plan.session_keyring {
                Some(name) => keyring::join_named_session(name.as_ptr().cast()),
                None => keyring::join_fresh_session(),
            };
            if !joined {
                fail(plan, ChildStep::Keyring);
            }
        }
        // As the runner's user: a workspace it cannot enter is an error now.
        if libc::chdir(plan.cwd) < 0 {
            fail(plan, ChildStep::Chdir);
        }
        lead_own_session(plan);
        copy_own_stat(plan);
        // Landlock while its ruleset descriptor is open; then every
        // descriptor beyond 0-2 closed, the limits lowered (no privilege
        // needed by now).
        if let Some(filters) = &plan.filters {
            if filters.landlock_ruleset >= 0 && !landlock::restrict_self(filters.landlock_ruleset) {
                fail(plan, ChildStep::Landlock);
            }
            filters.clean_start.close_inherited(plan.exe);
            if !filters.clean_start.reset_limits() {
                fail(plan, ChildStep::Limits);
            }
        }
        // The runner starts with nothing blocked, as std's children do.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // Last before exec (after no_new_privs, which it needs): from here
        // on the calls above would be refused.
        if let Some(filter) = plan
            .filters
            .as_ref()
            .and_then(|filters| filters.seccomp.as_ref())
        {
            if !seccomp::apply(filter) {
                fail(plan, ChildStep::Seccomp);
            }
        }
        if plan.exe >= 0 {
            libc::syscall(
                libc::SYS_execveat,
                plan.exe,
                c"".as_ptr(),
                plan.argv,
                plan.envp,
                libc::AT_EMPTY_PATH,
            );
        } else {
            libc::execve(plan.program, plan.argv, plan.envp);
        }
        fail(plan, ChildStep::Execve)
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
unsafe fn lead_own_session(plan: &ChildPlan) {
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

/// `no_new_privs` and an empty ambient set always; with
/// `bounding_set_up_to`, an empty bounding set and the locked securebits.
///
/// # Safety
/// Only for the clone child, before the user switch.
unsafe fn drop_privileges_for_good(plan: &ChildPlan) {
    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) < 0 {
        fail(plan, ChildStep::NoNewPrivs);
    }
    // EINVAL: a kernel before 4.3, which has no ambient set to clear.
    if libc::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0,
        0,
        0,
    ) < 0
        && errno() != libc::EINVAL
    {
        fail(plan, ChildStep::Ambient);
    }
    let Some(last) = plan.privileges.bounding_set_up_to else {
        return;
    };
    for cap in 0..=last {
        // EINVAL: a capability this kernel does not know (none, as `last`
        // is the kernel's own).
        if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0
            && errno() != libc::EINVAL
        {
            fail(plan, ChildStep::BoundingSet);
        }
    }
    if libc::prctl(
        libc::PR_SET_SECUREBITS,
        RUNNER_SECUREBITS as libc::c_ulong,
        0,
        0,
        0,
    ) < 0
    {
        fail(plan, ChildStep::Securebits);
    }
}

/// Empties the permitted, effective and inheritable sets (always allowed:
/// it only gives up).
///
/// # Safety
/// Only for the clone child.
unsafe fn clear_capability_sets(plan: &ChildPlan) {
    if privileges::empty_capability_sets().is_err() {
        fail(plan, ChildStep::Capset);
    }
}

/// Copies the child's `/proc/self/stat` (for its start time, which the
/// ledger needs) into the parent's buffer. Read here, before exec, it costs
/// a few microseconds; read by the parent after the clone it raced the
/// exec and sometimes took half a millisecond. Best effort: the parent
/// falls back to `/proc/<pid>/stat`.
///
/// # Safety
/// Only for the clone child; `plan.stat` must hold [`STAT_CAPACITY`] bytes.
unsafe fn copy_own_stat(plan: &ChildPlan) {
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
unsafe fn move_fd(source: RawFd, target: RawFd) -> bool {
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
unsafe fn fail(plan: &ChildPlan, step: ChildStep) -> ! {
    plan.failed_errno.store(errno(), Ordering::Release);
    plan.failed_step.store(step.number(), Ordering::Release);
    libc::_exit(EXEC_FAILED)
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A stack for clone children, one per thread (only one clone at a time
/// can be in flight on a thread), with a guard page below it.
struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

thread_local! {
    static CHILD_STACK: ChildStack = ChildStack::new();
    /// The runner's, when the child on [`CHILD_STACK`] is a sandbox's first
    /// process that clones it.
    static RUNNER_STACK: ChildStack = ChildStack::new();
}

impl ChildStack {
    fn new() -> ChildStack {
        let page = page_size();
        let len = CHILD_STACK_SIZE + page;
        // SAFETY: an anonymous private mapping; no pointer is passed in.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        assert!(
            base != libc::MAP_FAILED,
            "cannot map a stack for runner spawns: {}",
            io::Error::last_os_error()
        );
        // SAFETY: the lowest page of the mapping just made.
        unsafe { libc::mprotect(base, page, libc::PROT_NONE) };
        ChildStack { base, len }
    }

    /// The stack grows down: the child starts at the top, 16-byte aligned.
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping; page-aligned, so aligned.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unused once its thread ends.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// A runner that has exec'd, not yet reaped.
#[derive(Debug, Clone, Copy)]
pub struct Cloned {
    pub pid: libc::pid_t,
    /// Field 22 of its `/proc/<pid>/stat`, as the child read it before exec.
    pub start_time: Option<u64>,
}

#[cfg(test)]
impl Cloned {
    /// Waits (off the runtime's threads) for it to exit, and reaps it.
    pub async fn wait(self) -> Option<std::process::ExitStatus> {
        let pid = self.pid;
        tokio::task::spawn_blocking(move || super::child_exits::wait_for(pid))
            .await
            .ok()
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_init::privileges::last_capability;
    use std::fs::File;
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;

    fn null_stdio() -> [OwnedFd; 3] {
        let open = || {
            let null = File::options().read(true).write(true).open("/dev/null");
            OwnedFd::from(null.unwrap())
        };
        [open(), open(), open()]
    }

    fn plan(program: &str, args: &[&str], cwd: &str, privileges: Privileges) -> (ExecPlan, File) {
        let (read, write) = nix::unistd::pipe().unwrap();
        let mut stdio = null_stdio();
        stdio[1] = write;
        let env = [("PATH", "/usr/bin:/bin"), ("MARKER", "clone-exec")];
        let plan = ExecPlan::new(
            OsStr::new(program),
            args,
            env,
            OsStr::new(cwd),
            stdio,
            privileges,
        )
        .unwrap();
        (plan, File::from(read))
    }

    fn as_user(uid: u32, gid: u32) -> Privileges {
        Privileges {
            user: Some((uid, gid)),
            bounding_set_up_to: None,
        }
    }

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    /// Runs `sh -c script` and returns its exit status and what it printed.
    async fn run_shell(script: &str, privileges: Privileges) -> (std::process::ExitStatus, String) {
        let (plan, mut output) = plan("/bin/sh", &["-c", script], "/", privileges);
        let runner = plan.spawn().unwrap();
        drop(plan); // our copy of the pipe's write end
        let status = runner.wait().await.unwrap();
        let mut text = String::new();
        output.read_to_string(&mut text).unwrap();
        (status, text)
    }

    /// The descriptors `ls /proc/self/fd` lists in a child spawned on a
    /// thread of its own, with the band claimed or not.
    fn fds_seen_by_a_child(with_band: bool) -> Vec<RawFd> {
        std::thread::spawn(move || {
            if with_band {
                fd_band::claim_for_this_thread();
            }
            let (plan, mut output) = plan(
                "/bin/sh",
                &["-c", "ls /proc/self/fd"],
                "/",
                Privileges::default(),
            );
            let runner = plan.spawn().unwrap();
            drop(plan);
            let _ = super::super::child_exits::wait_for(runner.pid);
            let mut text = String::new();
            output.read_to_string(&mut text).unwrap();
            text.split_whitespace()
                .filter_map(|fd| fd.parse().ok())
                .collect()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_clone_on_the_band_inherits_nothing_of_the_daemons_table() {
        if let Err(why) = fd_band::reserve() {
            eprintln!("skipped: {why}");
            return;
        }
        // High up, inheritable: a copied table carries it across exec.
        let null = File::open("/dev/null").unwrap();
        // SAFETY: F_DUPFD (no close-on-exec) of a descriptor we hold.
        let leaked = unsafe { libc::fcntl(null.as_raw_fd(), libc::F_DUPFD, 900) };
        assert!(leaked >= 900);
        let copied = fds_seen_by_a_child(false);
        assert!(copied.contains(&leaked), "the copied table: {copied:?}");
        let banded = fds_seen_by_a_child(true);
        assert!(
            !banded.contains(&leaked),
            "a clone on the band saw the daemon's descriptor {leaked}: {banded:?}"
        );
        // SAFETY: our own descriptor.
        unsafe { libc::close(leaked) };
    }

    #[tokio::test]
    async fn reports_exit_codes_and_signals() {
        assert_eq!(
            run_shell("exit 3", Privileges::default()).await.0.code(),
            Some(3)
        );
        let (killed, _) = run_shell("kill -TERM $$", Privileges::default()).await;
        assert_eq!(killed.signal(), Some(libc::SIGTERM));
    }

    #[tokio::test]
    async fn the_child_gets_exactly_the_environment_cwd_and_stdout_given() {
        let (status, out) = run_shell("env | sort; pwd", Privileges::default()).await;
        assert!(status.success());
        // sh adds PWD (and perhaps SHLVL and _) itself; nothing of ours leaks.
        let ours: Vec<&str> = out
            .lines()
            .filter(|line| {
                !["PWD=", "SHLVL=", "_="]
                    .iter()
                    .any(|own| line.starts_with(own))
            })
            .collect();
        assert_eq!(ours, ["MARKER=clone-exec", "PATH=/usr/bin:/bin", "/"]);
    }

    #[tokio::test]
    async fn the_child_leads_its_own_session_with_nothing_blocked_and_sigpipe_default() {
        // SigBlk is the blocked mask and SigIgn the ignored set in
        // /proc/<pid>/status; the session id is field 6 of /proc/<pid>/stat.
        // (exec: the shell itself blocks every signal while it waits.)
        let script = "echo pid=$$; cut -d' ' -f6 /proc/$$/stat; \
                      exec grep -E '^(SigBlk|SigIgn):' /proc/self/status";
        let (status, out) = run_shell(script, Privileges::default()).await;
        assert!(status.success(), "{out}");
        assert!(out.contains("SigBlk:\t0000000000000000"), "{out}");
        let ignored = out
            .lines()
            .find_map(|line| line.strip_prefix("SigIgn:\t"))
            .map(|mask| u64::from_str_radix(mask, 16).unwrap())
            .unwrap();
        assert_eq!(
            ignored & (1 << (libc::SIGPIPE - 1)),
            0,
            "SIGPIPE ignored: {out}"
        );
        let pid = out
            .lines()
            .find_map(|line| line.strip_prefix("pid="))
            .unwrap();
        assert_eq!(out.lines().nth(1), Some(pid), "not its own session: {out}");
    }

    #[tokio::test]
    async fn switches_user_and_sheds_supplementary_groups() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to switch users");
            return;
        }
        let script = "grep -E '^(Uid|Gid|Groups):' /proc/$$/status";
        let (status, out) = run_shell(script, as_user(65534, 65534)).await;
        assert!(status.success(), "{out}");
        assert!(out.contains("Uid:\t65534\t65534\t65534\t65534"), "{out}");
        assert!(out.contains("Gid:\t65534\t65534\t65534\t65534"), "{out}");
        let groups = out.lines().find_map(|line| line.strip_prefix("Groups:"));
        assert_eq!(groups.map(str::trim), Some(""), "{out}");
        // Only the child switched: this process is still root.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(status.contains("Uid:\t0\t0\t0\t0"), "{status}");
    }

    /// The capability lines and NoNewPrivs of the runner's own status.
    const PRIVILEGE_LINES: &str =
        "exec grep -E '^(Uid|Gid|Groups|NoNewPrivs|CapInh|CapPrm|CapEff|CapBnd|CapAmb):' /proc/self/status";

    #[tokio::test]
    async fn a_switched_runner_has_no_capability_in_any_set_and_no_new_privileges() {
        if !is_root() {
            eprintln!("skipped: needs root to switch users and drop the bounding set");
            return;
        }
        let privileges = Privileges {
            user: Some((65534, 65534)),
            bounding_set_up_to: Some(last_capability()),
        };
        let (status, out) = run_shell(PRIVILEGE_LINES, privileges).await;
        assert!(status.success(), "{out}");
        for line in [
            "Uid:\t65534\t65534\t65534\t65534",
            "Gid:\t65534\t65534\t65534\t65534",
            "NoNewPrivs:\t1",
            "CapInh:\t0000000000000000",
            "CapPrm:\t0000000000000000",
            "CapEff:\t0000000000000000",
            "CapBnd:\t0000000000000000",
            "CapAmb:\t0000000000000000",
        ] {
            assert!(out.lines().any(|got| got == line), "no {line:?} in:\n{out}");
        }
        let groups = out.lines().find_map(|line| line.strip_prefix("Groups:"));
        assert_eq!(groups.map(str::trim), Some(""), "{out}");
    }

    #[tokio::test]
    async fn a_root_runner_is_root_without_capabilities() {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        // allow_root_runners: uid 0, but SECBIT_NOROOT keeps exec from
        // granting it the full sets again.
        let privileges = Privileges {
            user: Some((0, 0)),
            bounding_set_up_to: Some(last_capability()),
        };
        let (status, out) = run_shell(PRIVILEGE_LINES, privileges).await;
        assert!(status.success(), "{out}");
        assert!(out.contains("Uid:\t0\t0\t0\t0"), "{out}");
        for set in ["CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            let line = format!("{set}:\t0000000000000000");
            assert!(out.lines().any(|got| got == line), "no {line:?} in:\n{out}");
        }
    }

    #[tokio::test]
    async fn without_the_bounding_set_drop_no_new_privs_and_empty_sets_still_hold() {
        // What a daemon without CAP_SETPCAP gives its runners (as root, a
        // switch to nobody: exec would hand uid 0 its capabilities back).
        let privileges = if is_root() {
            as_user(65534, 65534)
        } else {
            Privileges::default()
        };
        let (status, out) = run_shell(PRIVILEGE_LINES, privileges).await;
        assert!(status.success(), "{out}");
        for line in [
            "NoNewPrivs:\t1",
            "CapPrm:\t0000000000000000",
            "CapEff:\t0000000000000000",
            "CapAmb:\t0000000000000000",
        ] {
            assert!(out.lines().any(|got| got == line), "no {line:?} in:\n{out}");
        }
    }

    #[tokio::test]
    async fn under_the_kernel_filters_a_shell_runs_clean_and_cannot_unshare() {
        if !is_root() {
            eprintln!("skipped: needs root to switch users");
            return;
        }
        let filters = Arc::new(KernelFilters::for_this_host("/usr/bin:/bin"));
        let script = "unshare -U true 2>/dev/null; echo unshare=$?; \
                      echo nofile=$(ulimit -Sn)/$(ulimit -Hn); \
                      exec ls /proc/self/fd";
        let (plan, mut output) = plan("/bin/sh", &["-c", script], "/", as_user(65534, 65534));
        // A descriptor left open across exec by mistake: the clean start closes it.
        let leaked = File::open("/dev/null").unwrap();
        // SAFETY: clears close-on-exec on a descriptor this test owns.
        unsafe { libc::fcntl(leaked.as_raw_fd(), libc::F_SETFD, 0) };
        let runner = plan.with_filters(filters.clone()).spawn().unwrap();
        let status = runner.wait().await.unwrap();
        let mut text = String::new();
        output.read_to_string(&mut text).unwrap();
        assert!(status.success(), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "unshare=1", "{text}");
        let nofile = filters.clean_start_nofile();
        assert_eq!(lines[1], format!("nofile={}/{}", nofile.soft, nofile.hard));
        // ls's own listing of /proc/self/fd is the 3.
        assert_eq!(&lines[2..], ["0", "1", "2", "3"], "{text}");
    }

    #[test]
    fn a_failed_exec_names_the_step_and_leaves_no_child_behind() {
        // On a thread of its own name: the failed child (a clone of this
        // thread) carries that name, which tells it apart from the children
        // of tests running alongside.
        let error = std::thread::Builder::new()
            .name("clone-exec-fail".into())
            .spawn(|| {
                plan("/nonexistent/runner", &[], "/", Privileges::default())
                    .0
                    .spawn()
                    .err()
            })
            .unwrap()
            .join()
            .unwrap()
            .expect("the spawn must fail");
        assert_eq!(error.step, "execve");
        assert_eq!(error.error.raw_os_error(), Some(libc::ENOENT));
        let me = std::process::id().to_string();
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
            .filter(|stat| stat.contains("(clone-exec-fail)"))
            .filter(|stat| stat.rsplit(')').next().unwrap().split(' ').nth(2) == Some(&me))
            .collect();
        assert!(left.is_empty(), "unreaped children: {left:?}");
    }

    #[tokio::test]
    async fn reports_the_start_time_the_kernel_gives_the_process() {
        let (plan, _output) = plan("/bin/sleep", &["5"], "/", Privileges::default());
        let runner = plan.spawn().unwrap();
        let from_proc = super::super::proc_stat::read(runner.pid)
            .unwrap()
            .start_time;
        assert_eq!(runner.start_time, Some(from_proc));
        // SAFETY: our unreaped child.
        unsafe { libc::kill(runner.pid, libc::SIGKILL) };
        assert_eq!(runner.wait().await.unwrap().signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn a_missing_working_directory_fails_at_chdir() {
        let error = plan(
            "/bin/true",
            &[],
            "/nonexistent/workspace",
            Privileges::default(),
        )
        .0
        .spawn()
        .err();
        let error = error.expect("the spawn must fail");
        assert_eq!(error.step, "chdir");
        assert_eq!(error.error.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn a_nul_byte_is_refused_before_anything_runs() {
        let error = ExecPlan::new(
            OsStr::new("/bin/true"),
            [] as [&str; 0],
            [("STIGMER_TASK_QUEUE", "a\0b")],
            OsStr::new("/"),
            null_stdio(),
            Privileges::default(),
        )
        .err()
        .unwrap();
        assert!(error.contains("STIGMER_TASK_QUEUE"), "{error}");
    }
}
