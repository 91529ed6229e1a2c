//! The system calls that make a clone child, and the stacks it runs on:
//! `clone3` into a cgroup (a few lines of assembly, see [`clone3_into`])
//! or `clone`, with every signal blocked across either.

use std::io;
use std::os::fd::RawFd;

use super::child_plan::ChildPlan;
use super::ExecError;

/// A clone child's entry: it execs or `_exit`s, never returns.
pub(super) type ChildEntry = extern "C" fn(*mut libc::c_void) -> libc::c_int;

const CHILD_STACK_SIZE: usize = 64 * 1024;

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
/// `namespaces`: `CLONE_NEW*` flags for both calls. The child runs
/// `entry` (a runner's or a sandbox's first process's main) on `child`.
pub(super) fn clone_vfork(
    stack: &ChildStack,
    child: &ChildPlan,
    entry: ChildEntry,
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
    // SAFETY: `entry` only makes async-signal-safe calls and raw system
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
        Some(dir) => clone3_into(stack, child, entry, dir, namespaces | files),
        None => unsafe {
            libc::clone(
                entry,
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

/// `clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP)` of `entry`
/// on `stack`, into the cgroup directory `dir`. Returns the child's pid, or
/// -1 with `errno` set, like `clone`.
#[cfg(target_arch = "x86_64")]
fn clone3_into(
    stack: &ChildStack,
    child: &ChildPlan,
    entry: ChildEntry,
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

/// Elsewhere `clone3` is never tried ([`CLONE3_REFUSED`](super::CLONE3_REFUSED) starts set).
#[cfg(not(target_arch = "x86_64"))]
fn clone3_into(
    _stack: &ChildStack,
    _child: &ChildPlan,
    _entry: ChildEntry,
    _dir: RawFd,
    _namespaces: libc::c_int,
) -> libc::pid_t {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// A stack for clone children, one per thread (only one clone at a time
/// can be in flight on a thread), with a guard page below it.
pub(super) struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

thread_local! {
    pub(super) static CHILD_STACK: ChildStack = ChildStack::new();
    /// The runner's, when the child on [`CHILD_STACK`] is a sandbox's first
    /// process that clones it.
    pub(super) static RUNNER_STACK: ChildStack = ChildStack::new();
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
    pub(super) fn top(&self) -> *mut libc::c_void {
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
