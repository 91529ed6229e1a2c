//! The seccomp filter every process-tier runner gets: no new namespaces
//! from inside, and none of the calls container runtimes refuse by default.
//!
//! In the spirit of Docker's default profile and systemd's
//! `RestrictNamespaces=` / `SystemCallFilter=`, but as a deny list over a
//! default of "allow": a runner is an ordinary program (shells, compilers,
//! interpreters), and an allow list that misses one call breaks it in ways
//! that are hard to see. What is refused is what an unprivileged process
//! does not need and what has been the road into the kernel:
//! - **namespaces** (`EPERM`): `unshare`, `setns`, and `clone` with any
//!   `CLONE_NEW*` flag (its flags are an argument the filter can read). A
//!   user namespace is where most unprivileged kernel exploits start.
//!   `clone3` passes its flags in memory a filter cannot read, so it is
//!   refused with `ENOSYS`: glibc (2.34+) and others then fall back to
//!   `clone`, as they do under Docker and systemd.
//! - **mounts** (`EPERM`): `mount`, `umount2`, `pivot_root`, `move_mount`,
//!   `open_tree`, `open_tree_attr`, `fsopen`, `fsconfig`, `fsmount`,
//!   `fspick`, `mount_setattr`.
//! - **kernel extension and tracing** (`EPERM`): `bpf`, `perf_event_open`,
//!   `kexec_load`, `kexec_file_load`, `init_module`, `finit_module`,
//!   `delete_module`, `lookup_dcookie`, `syslog` (the kernel log).
//! - **known exploit primitives** (`EPERM`): `userfaultfd` (stalls kernel
//!   copies at will), `io_uring_setup`/`_enter`/`_register` (refused by
//!   Docker since 25.0 and by Google's fleet), `open_by_handle_at` and
//!   `name_to_handle_at` (the "shocker" container escape).
//! - **host administration** (`EPERM`): `swapon`, `swapoff`, `reboot`,
//!   `acct`, `settimeofday`, `clock_settime`, `quotactl`, `quotactl_fd`,
//!   and on x86 `iopl`, `ioperm`.
//! - **`personality`** except the harmless values Docker allows (query,
//!   `PER_LINUX`, `PER_LINUX32`, `UNAME26` and both): no
//!   `ADDR_NO_RANDOMIZE`, `READ_IMPLIES_EXEC` or other ASLR-defeating flag.
//!
//! The list of refused calls is shared with the docker tier's seccomp
//! profile: [`crate::drivers::refused_syscalls`].
//!
//! Allowed on purpose: `keyctl`, `add_key`, `request_key` (the runner has a
//! session keyring of its own, see [`super::keyring`]), `ptrace` of its own
//! processes (debuggers), `landlock_*` and `seccomp` (a runner may confine
//! itself further).
//!
//! A system call of another ABI than the daemon's (i386 `int 0x80` on
//! x86_64, 32-bit ARM on aarch64) would bypass a filter written in the
//! daemon's numbers, so it kills the process (seccompiler's architecture
//! check), and on x86_64 every x32 call (numbers with bit 30 set) is
//! refused with `ENOSYS`, as on kernels built without x32.
//!
//! The filter is compiled once, by [`seccompiler`] (Firecracker's: pure
//! Rust, no libseccomp C library to link or ship), behind a few
//! hand-written instructions for the `ENOSYS` answers (seccompiler gives
//! one filter one action) and a few that send each call number to one of
//! several shorter programs seccompiler compiled (see [`dispatch`]: what
//! makes an attach cheaper); the clone child only hands the kernel a
//! pointer to it ([`apply`]).

use std::collections::BTreeMap;

use crate::drivers::refused_syscalls::{self, CLONE_NEW_FLAGS, HARMLESS_PERSONALITIES};
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// The filter, compiled: one program (each filter attached costs the
/// kernel a JIT compile and a cache of its verdicts, ~30 µs even for a
/// tiny one, so the three parts are one program). And the same filter in
/// two parts for a command's clone, which a thread of the daemon attaches
/// once (see [`SeccompPlan::cloning_thread_program`]).
#[derive(Debug)]
pub struct SeccompPlan {
    program: BpfProgram,
    cloning_thread: BpfProgram,
    after_cloning_thread: BpfProgram,
}

/// The calls a thread that clones commands into sandboxes still makes
/// itself (it joins a sandbox's namespaces for each), and `clone3`, which
/// it clones them with: refused by the part each child attaches, not by
/// the part the thread holds.
const CLONING_THREAD_CALLS: [i64; 2] = [libc::SYS_setns, libc::SYS_unshare];

/// Refused with `EPERM` whatever their arguments: the list every tier
/// shares (see [`refused_syscalls`]).
fn refused_calls() -> Vec<i64> {
    refused_syscalls::always_refused()
        .into_iter()
        .map(|call| call.number)
        .collect()
}

/// Why a filter could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("not in force: seccompiler has no filters for the {0} architecture (x86_64, aarch64 and riscv64 only)")]
    Architecture(&'static str),
    #[error("not in force: the kernel has no seccomp filters ({0})")]
    Kernel(std::io::Error),
    #[error("cannot compile the seccomp filter: {0}")]
    Compile(#[from] seccompiler::BackendError),
}

impl SeccompPlan {
    /// Compiles the filters for this architecture, after checking that the
    /// kernel takes them.
    pub fn for_this_host() -> Result<SeccompPlan, SeccompError> {
        let arch = TargetArch::try_from(std::env::consts::ARCH)
            .map_err(|_| SeccompError::Architecture(std::env::consts::ARCH))?;
        kernel_takes_errno_filters().map_err(SeccompError::Kernel)?;
        let x32 = arch == TargetArch::x86_64;
        let all = refusals();
        let (mut thread_rules, mut child_rules) = (all.clone(), BTreeMap::new());
        for call in CLONING_THREAD_CALLS {
            child_rules.insert(call, thread_rules.remove(&call).unwrap_or_default());
        }
        Ok(SeccompPlan {
            program: assemble(all, arch, true, x32)?,
            cloning_thread: assemble(thread_rules, arch, false, x32)?,
            after_cloning_thread: assemble(child_rules, arch, true, false)?,
        })
    }

    /// What the child hands the kernel, pointing into this plan (which
    /// must outlive the clone).
    pub fn program(&self) -> libc::sock_fprog {
        fprog(&self.program)
    }

    /// The filter less what a thread that clones commands still calls
    /// itself ([`CLONING_THREAD_CALLS`] and `clone3`), for that thread to
    /// attach once: each child it clones then inherits it, and attaches
    /// only [`after_cloning_thread_program`](Self::after_cloning_thread_program),
    /// a few instructions (the kernel keeps the stricter answer of the
    /// two, so the child is refused exactly what [`program`](Self::program)
    /// refuses). Attaching the whole filter cost each command's start
    /// 70-170 µs, the tail 30.
    pub fn cloning_thread_program(&self) -> libc::sock_fprog {
        fprog(&self.cloning_thread)
    }

    /// The rest of the filter, for a child of a thread holding
    /// [`cloning_thread_program`](Self::cloning_thread_program).
    pub fn after_cloning_thread_program(&self) -> libc::sock_fprog {
        fprog(&self.after_cloning_thread)
    }

    /// For `status`.
    pub fn describe(&self) -> String {
        format!(
            "{} calls refused with EPERM (unshare, setns, clone with CLONE_NEW*, mount and the new mount API, bpf, perf_event_open, io_uring, userfaultfd, kexec and modules, open_by_handle_at, swap, reboot, clock, quotas, personality beyond the harmless values), clone3 with ENOSYS, calls of another ABI refused",
            refusals().len()
        )
    }
}

/// The `EPERM` rules: by call number, each with its argument conditions
/// (none: always).
fn refusals() -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = refused_calls()
        .into_iter()
        .map(|call| (call, vec![]))
        .collect();
    // `clone` with any namespace flag: one rule per flag (rules are or-ed).
    let clone_rules = CLONE_NEW_FLAGS
        .iter()
        .map(|&flag| {
            let flag = flag as u64;
            rule(vec![condition(0, SeccompCmpOp::MaskedEq(flag), flag)])
        })
        .collect();
    rules.insert(libc::SYS_clone, clone_rules);
    // `personality` with anything but the harmless values (conditions and-ed).
    let personality = HARMLESS_PERSONALITIES
        .iter()
        .map(|&value| condition(0, SeccompCmpOp::Ne, value))
        .collect();
    rules.insert(libc::SYS_personality, vec![rule(personality)]);
    rules
}

fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> SeccompCondition {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
        .expect("argument 0 exists for every call")
}

fn rule(conditions: Vec<SeccompCondition>) -> SeccompRule {
    SeccompRule::new(conditions).expect("a rule with conditions")
}

/// A whole filter over `rules` (`EPERM`), behind the `ENOSYS` part:
/// seccompiler's programs in groups by call number, so a call walks one
/// group's chain only.
fn assemble(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    arch: TargetArch,
    clone3: bool,
    x32: bool,
) -> Result<BpfProgram, SeccompError> {
    let eperm = SeccompAction::Errno(libc::EPERM as u32);
    let mut pivots = Vec::with_capacity(GROUPS);
    let mut groups = Vec::with_capacity(GROUPS);
    for group in by_number(rules, GROUPS) {
        pivots.push(*group.keys().next().expect("groups are not empty") as u32);
        groups.push(compile(group, eperm.clone(), arch)?);
    }
    let mut program = enosys_prefix(clone3, x32);
    let lens: Vec<u32> = groups.iter().map(|group| group.len() as u32).collect();
    program.extend(dispatch(&pivots, &lens));
    program.extend(groups.into_iter().flatten());
    Ok(program)
}

/// `program` as the kernel takes it, pointing into it.
fn fprog(program: &BpfProgram) -> libc::sock_fprog {
    libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        // seccompiler's sock_filter is `#[repr(C)]` with the kernel's
        // layout, as libc's is; the kernel only reads it.
        filter: program.as_ptr() as *mut libc::sock_filter,
    }
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
    arch: TargetArch,
) -> Result<BpfProgram, SeccompError> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, arch)?;
    Ok(BpfProgram::try_from(filter)?)
}

/// The `ENOSYS` part, ahead of seccompiler's program: `clone3` (when
/// `clone3`), and on x86_64 (when `x32`) every x32 call (x32 shares
/// x86_64's architecture token but numbers its calls from `0x4000_0000`).
/// Everything else falls through, the call number loaded, to seccompiler's
/// program, which checks the architecture first: this part only ever
/// refuses, so a call of another ABI is never let through by it.
fn enosys_prefix(clone3: bool, x32: bool) -> BpfProgram {
    const LOAD_NR: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS
    const JUMP_IF_EQUAL: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
    const JUMP_IF_AT_LEAST: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
    const JUMP: u16 = 0x05; // BPF_JMP | BPF_JA
    const RETURN: u16 = 0x06; // BPF_RET | BPF_K
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let instruction = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let mut tests = Vec::new();
    if clone3 {
        tests.push((JUMP_IF_EQUAL, libc::SYS_clone3 as u32));
    }
    if x32 {
        tests.push((JUMP_IF_AT_LEAST, X32_SYSCALL_BIT));
    }
    // seccomp_data.nr is at offset 0.
    let mut program = vec![instruction(LOAD_NR, 0, 0, 0)];
    if tests.is_empty() {
        return program;
    }
    let count = tests.len();
    for (index, (code, k)) in tests.into_iter().enumerate() {
        // True: on to the ENOSYS return, past the tests left and the jump
        // (offsets count from the next instruction).
        let past = u8::try_from(count - index).expect("two tests at most");
        program.push(instruction(code, past, 0, k));
    }
    program.extend([
        // Past the return, into seccompiler's program.
        instruction(JUMP, 0, 0, 1),
        instruction(RETURN, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]);
    program
}

/// How many programs the rules are split into by call number (see
/// [`dispatch`]). seccompiler lays a filter out as one chain that every
/// call not in it walks to its end, and the kernel walks the filter once
/// per call number (about 460 on x86_64) when it builds its verdict cache
/// at each attach, the most of an attach's cost (every runner and command
/// pays it). Eight groups of about five calls: a call number walks three
/// comparisons and one short chain instead of half of the whole list. On a
/// loaded 2-CPU host an attach took 95-125 µs with two halves, 70-105 µs
/// with eight groups (a one-instruction filter: 12 µs); 16 or 40 groups
/// were slower again: each group starts with its own architecture check,
/// and the kernel translates and JIT-compiles every instruction.
const GROUPS: usize = 8;

/// `rules` in `count` groups (fewer when there are fewer rules) of
/// consecutive call numbers, as even as they divide.
fn by_number(
    mut rules: BTreeMap<i64, Vec<SeccompRule>>,
    count: usize,
) -> Vec<BTreeMap<i64, Vec<SeccompRule>>> {
    let count = count.clamp(1, rules.len().max(1));
    let mut groups = Vec::with_capacity(count);
    for left in (1..=count).rev() {
        let size = rules.len() / left;
        let rest = match rules.keys().nth(size) {
            Some(&pivot) => rules.split_off(&pivot),
            None => BTreeMap::new(),
        };
        groups.push(std::mem::replace(&mut rules, rest));
    }
    groups
}

/// After [`enosys_prefix`] (the call number loaded): a balanced tree of
/// comparisons with `pivots` (each group's lowest call number, ascending)
/// that sends each call to the program of the group whose range holds it,
/// laid out right after this, one after another (`lens` instructions
/// each). Each group's program checks the architecture and reloads the
/// number itself, and lets every call it does not refuse through, as the
/// whole filter does, so which group a call lands in only decides how
/// much of the chain it walks (see [`GROUPS`]).
fn dispatch(pivots: &[u32], lens: &[u32]) -> BpfProgram {
    const JUMP_IF_AT_LEAST: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
    const JUMP: u16 = 0x05; // BPF_JMP | BPF_JA
    /// The tree over groups `first..end`, its leaves a long jump each to
    /// their group (noted in `leaves`: the offset is set once all is laid out).
    fn node(
        pivots: &[u32],
        first: usize,
        end: usize,
        out: &mut BpfProgram,
        leaves: &mut Vec<(usize, usize)>,
    ) {
        if end - first == 1 {
            leaves.push((out.len(), first));
            out.push(sock_filter {
                code: JUMP,
                jt: 0,
                jf: 0,
                k: 0,
            });
            return;
        }
        let middle = (first + end) / 2;
        let at = out.len();
        out.push(sock_filter {
            code: JUMP_IF_AT_LEAST,
            jt: 0,
            jf: 0,
            k: pivots[middle],
        });
        node(pivots, first, middle, out, leaves);
        // At least the middle pivot: past the lower subtree (offsets count
        // from the next instruction); below it: on into the lower subtree.
        out[at].jt = u8::try_from(out.len() - at - 1).expect("a small tree");
        node(pivots, middle, end, out, leaves);
    }
    let mut program = Vec::new();
    let mut leaves = Vec::new();
    node(pivots, 0, pivots.len(), &mut program, &mut leaves);
    let mut starts = Vec::with_capacity(lens.len());
    let mut next = program.len() as u32;
    for len in lens {
        starts.push(next);
        next += len;
    }
    for (at, group) in leaves {
        program[at].k = starts[group] - at as u32 - 1;
    }
    program
}

/// `SECCOMP_GET_ACTION_AVAIL` for `SECCOMP_RET_ERRNO`: fails where the
/// kernel has no seccomp filters (or is older than 4.14).
fn kernel_takes_errno_filters() -> std::io::Result<()> {
    let action: u32 = libc::SECCOMP_RET_ERRNO;
    // SAFETY: the kernel reads one u32 from the pointer.
    let done = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        )
    };
    if done < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Installs the filter on the calling thread. Child side: allocates
/// nothing; needs `no_new_privs` (or CAP_SYS_ADMIN). Returns false with
/// `errno` set when the kernel refuses it.
///
/// # Safety
/// `program` must point at a live program (see [`SeccompPlan::program`]).
pub unsafe fn apply(program: &libc::sock_fprog) -> bool {
    libc::syscall(
        libc::SYS_seccomp,
        libc::SECCOMP_SET_MODE_FILTER,
        0,
        program as *const libc::sock_fprog,
    ) >= 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `probe` in a forked child under the filters and returns the
    /// errno it reports (0: the call succeeded). The child makes only raw
    /// system calls: this test process has other threads.
    /// A probe: raw system calls, returning what the last one returned.
    type Probe = fn() -> libc::c_long;

    fn errno_under_filters(probe: Probe) -> i32 {
        let plan = SeccompPlan::for_this_host().expect("this host takes seccomp filters");
        errno_under(&[plan.program()], probe)
    }

    /// As [`errno_under_filters`], under `programs` attached in turn.
    fn errno_under(programs: &[libc::sock_fprog], probe: Probe) -> i32 {
        exit_code_under(programs, || {
            // SAFETY: errno of the probe's last call, in the forked child.
            match probe() < 0 {
                true => unsafe { *libc::__errno_location() },
                false => 0,
            }
        })
    }

    /// Runs `probe` in a forked child under `programs`, attached in turn,
    /// and returns the code it exits with (the filters could not be
    /// attached: a failed assertion).
    fn exit_code_under(programs: &[libc::sock_fprog], probe: impl Fn() -> i32) -> i32 {
        // SAFETY: the child only makes raw system calls and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: in the forked child, on the plan's live programs.
            unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0);
                if !programs.iter().all(|program| apply(program)) {
                    libc::_exit(255);
                }
                libc::_exit(probe());
            }
        }
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "the probe died: {status:#x}");
        let code = libc::WEXITSTATUS(status);
        assert_ne!(code, 255, "the filters could not be installed");
        code
    }

    #[test]
    fn namespaces_and_mounts_are_refused_with_eperm() {
        // Each probe would succeed, or fail otherwise, without the filter
        // (this test runs as root: unshare and setns would work, the
        // mount fails with ENOENT on its missing target).
        let probes: [(&str, Probe); 6] = [
            // SAFETY: raw system calls with constant arguments, in the forked probe child.
            ("unshare(CLONE_NEWUSER)", || unsafe {
                libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER)
            }),
            // SAFETY: raw system calls with constant arguments, in the forked probe child.
            ("unshare(CLONE_NEWNS)", || unsafe {
                libc::syscall(libc::SYS_unshare, libc::CLONE_NEWNS)
            }),
            // SAFETY: raw system calls with constant arguments, in the forked probe child.
            ("setns(own uts)", || unsafe {
                let fd = libc::open(c"/proc/self/ns/uts".as_ptr(), libc::O_RDONLY);
                libc::syscall(libc::SYS_setns, fd, libc::CLONE_NEWUTS)
            }),
            // SAFETY: raw system calls with constant arguments, in the forked probe child.
            ("mount", || unsafe {
                libc::syscall(
                    libc::SYS_mount,
                    c"none".as_ptr(),
                    c"/nonexistent/sandboxd-seccomp-test".as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    0,
                )
            }),
            // SAFETY: raw system calls with constant arguments, in the forked probe child.
            ("clone(CLONE_NEWUSER)", || unsafe {
                // A fork-like clone: the child (if any) exits at once.
                let pid = libc::syscall(
                    libc::SYS_clone,
                    libc::CLONE_NEWUSER | libc::SIGCHLD,
                    0,
                    0,
                    0,
                    0,
                );
                if pid == 0 {
                    libc::_exit(0);
                }
                pid
            }),
            // SAFETY: raw system calls with constant arguments, in the forked probe child.
            ("personality(ADDR_NO_RANDOMIZE)", || unsafe {
                libc::syscall(libc::SYS_personality, 0x0040000)
            }),
        ];
        for (name, probe) in probes {
            assert_eq!(errno_under_filters(probe), libc::EPERM, "{name}");
        }
    }

    #[test]
    fn every_refused_call_gets_eperm_in_every_group() {
        // With every argument all ones, each call would fail harmlessly
        // without the filter (EFAULT, EBADF, EINVAL; this test runs as
        // root): only the filter answers EPERM to all of them. Under the
        // whole filter, and under its two parts stacked.
        let mut calls = refused_calls();
        calls.push(libc::SYS_clone);
        let plan = SeccompPlan::for_this_host().unwrap();
        let whole = vec![plan.program()];
        let parts = vec![
            plan.cloning_thread_program(),
            plan.after_cloning_thread_program(),
        ];
        for programs in [whole, parts] {
            let code = first_call_not_refused(&programs, &calls);
            assert_eq!(code, 0, "call {} was not refused", calls[code as usize - 1]);
        }
    }

    /// In a forked child under `programs`: 0 when every one of `calls`
    /// was refused with EPERM, else the index (from 1) of the first that
    /// was not.
    fn first_call_not_refused(programs: &[libc::sock_fprog], calls: &[i64]) -> i32 {
        exit_code_under(programs, || {
            let all = u64::MAX;
            for (index, &call) in calls.iter().enumerate() {
                // SAFETY: each call with all-ones arguments fails harmlessly
                // without the filter (see the test), in the forked child.
                let refused = unsafe {
                    libc::syscall(call, all, all, all, all, all, all) < 0
                        && *libc::__errno_location() == libc::EPERM
                };
                if !refused {
                    return index as i32 + 1;
                }
            }
            0
        })
    }

    #[test]
    fn clone3_is_refused_with_enosys_and_ordinary_calls_still_work() {
        // clone3 with a size the kernel refuses (EINVAL) without the filter.
        // SAFETY: raw system calls with constant arguments, in the forked probe child.
        let clone3 = || unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0) };
        assert_eq!(errno_under_filters(clone3), libc::ENOSYS);
        // SAFETY: raw system calls with constant arguments, in the forked probe child.
        let fork = || unsafe {
            let pid = libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0);
            if pid == 0 {
                libc::_exit(0);
            }
            pid
        };
        assert_eq!(errno_under_filters(fork), 0, "a plain fork");
        // SAFETY: raw system calls with constant arguments, in the forked probe child.
        let query = || unsafe { libc::syscall(libc::SYS_personality, 0xffff_ffff_u64) };
        assert_eq!(errno_under_filters(query), 0, "a personality query");
        // SAFETY: raw system calls with constant arguments, in the forked probe child.
        let keyring = || unsafe {
            libc::syscall(
                libc::SYS_keyctl,
                libc::KEYCTL_GET_KEYRING_ID,
                libc::KEY_SPEC_SESSION_KEYRING,
                0,
            )
        };
        assert_eq!(errno_under_filters(keyring), 0, "keyctl");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_calls_are_refused() {
        // getpid through the x32 ABI.
        // SAFETY: getpid, harmless in this process and in the probe child.
        let x32 = || unsafe { libc::syscall(0x4000_0000 | libc::SYS_getpid) };
        if x32() < 0 {
            eprintln!(
                "skipped: this kernel has no x32 ABI (CONFIG_X86_X32_ABI off or x32 disabled)"
            );
            return;
        }
        assert_eq!(errno_under_filters(x32), libc::ENOSYS);
    }

    #[test]
    fn the_two_parts_refuse_what_the_whole_filter_refuses() {
        let plan = SeccompPlan::for_this_host().unwrap();
        let whole = [plan.program()];
        let parts = [
            plan.cloning_thread_program(),
            plan.after_cloning_thread_program(),
        ];
        // SAFETY (every probe): raw system calls with constant arguments,
        // in the forked probe child.
        let probes: [(&str, Probe); 7] = [
            ("setns", || unsafe {
                let fd = libc::open(c"/proc/self/ns/uts".as_ptr(), libc::O_RDONLY);
                libc::syscall(libc::SYS_setns, fd, libc::CLONE_NEWUTS)
            }),
            ("unshare", || unsafe {
                libc::syscall(libc::SYS_unshare, libc::CLONE_NEWNS)
            }),
            ("clone3", || unsafe {
                libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0)
            }),
            ("mount", || unsafe {
                libc::syscall(libc::SYS_mount, 0, 0, 0, 0, 0)
            }),
            ("bpf", || unsafe { libc::syscall(libc::SYS_bpf, -1, 0, 0) }),
            ("personality(ADDR_NO_RANDOMIZE)", || unsafe {
                libc::syscall(libc::SYS_personality, 0x0040000)
            }),
            ("getpid", || unsafe { libc::syscall(libc::SYS_getpid) }),
        ];
        for (name, probe) in probes {
            assert_eq!(
                errno_under(&parts, probe),
                errno_under(&whole, probe),
                "{name}"
            );
        }
        // What each command attaches is a few instructions (27 on x86_64),
        // not the whole filter (309).
        assert!(plan.after_cloning_thread.len() < 40);
        assert!(plan.program.len() > 200);
        // The thread's part alone lets through what the thread itself calls.
        let alone = [plan.cloning_thread_program()];
        assert_eq!(errno_under(&alone, probes[0].1), 0, "setns, thread part");
        assert_eq!(
            errno_under(&alone, probes[2].1),
            libc::EINVAL,
            "clone3, thread part"
        );
        assert_eq!(
            errno_under(&alone, probes[4].1),
            libc::EPERM,
            "bpf, thread part"
        );
    }
}
