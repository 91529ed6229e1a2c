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
//! to each of their `tasks` files (see `cgroup::tree::V1_JOIN` for why not
//! `cgroup.procs`), through descriptors opened beforehand, before it does
//! anything else. Where `clone3` is refused (`ENOSYS`: a
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
//! `runner_child::child_main`, on a second stack), and execs `sandboxd-init` by
//! descriptor as the sandbox's init (see `sandboxd_init::init`).
//!
//! The spawn returns the child's pid unreaped; the caller has its exit
//! watched ([`super::child_exits`]: reaped by the thread that cloned it),
//! and the pid cannot be recycled until then.
//!
//! The files, in the order a spawn runs through them: this one is the
//! plan the parent builds ([`ExecPlan`]); `parent` spawns it, turning it
//! into the raw `child_plan` the child reads; `clone` holds the system
//! calls that make the child and the stacks it runs on; the child itself
//! is `runner_child` (a runner, from clone to exec) or `view_child` (a
//! sandbox's first process), both built from the steps in `child_steps`.
//! Only the parent's side allocates.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::super::isolation::kernel_filters::KernelFilters;
use super::super::isolation::mount_program::MountProgram;

mod child_plan;
mod child_steps;
mod clone;
mod parent;
mod runner_child;
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
    /// The child copies its `/proc/self/stat` for [`Cloned::start_time`]
    /// (see [`ExecPlan::without_start_time`]).
    start_time: bool,
    /// What the spawning thread gave up already, for the child to inherit
    /// (see [`ExecPlan::on_confined_thread`]).
    thread: ThreadConfinement,
}

/// What a thread that clones commands has given up for good, once, so
/// that each child it clones inherits it instead of doing it again (see
/// `launch::command_threads`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadConfinement {
    /// Its bounding set is empty: the child skips its 41 drops (each a
    /// new set of credentials, 2 µs).
    pub empty_bounding_set: bool,
    /// It holds the seccomp filter's thread part: the child attaches only
    /// the rest (see `SeccompPlan::cloning_thread_program`).
    pub seccomp_thread_part: bool,
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
    /// `tasks` of the sandbox's cgroup in each v1 hierarchy (what a
    /// single-threaded child joins it through, see `cgroup::tree::V1_JOIN`).
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

/// The most cgroup files the child writes itself into (v1 memory, pids,
/// cpu and freezer `tasks`, and v2's `cgroup.procs` when `clone3` is
/// refused).
const MAX_PROCS_FDS: usize = 5;

/// Set once `clone3` has been refused with `ENOSYS`: later spawns go
/// straight to `clone`.
static CLONE3_REFUSED: AtomicBool = AtomicBool::new(!cfg!(target_arch = "x86_64"));

pub use super::super::users::identity::Privileges;

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
            start_time: true,
            thread: ThreadConfinement::default(),
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

    /// Leaves [`Cloned::start_time`] out: the child does not read its
    /// `/proc/self/stat` (15-60 µs of a start on a loaded 2-CPU host) for
    /// a process whose start time nobody asks for (a command: only a
    /// runner's goes to the ledger).
    pub fn without_start_time(mut self) -> ExecPlan {
        self.start_time = false;
        self
    }

    /// Says what the spawning thread has given up already (see
    /// [`ThreadConfinement`]): the child inherits it and does the rest.
    pub fn on_confined_thread(mut self, thread: ThreadConfinement) -> ExecPlan {
        self.thread = thread;
        self
    }

    /// Starts the runner in this cgroup rather than the daemon's.
    pub fn in_cgroup(mut self, placement: CgroupPlacement) -> ExecPlan {
        debug_assert!(placement.v1_procs.len() < MAX_PROCS_FDS);
        self.cgroup = Some(placement);
        self
    }
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
mod tests;
