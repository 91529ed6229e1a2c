//! A runner's clone child, from clone to exec: into its sandbox, its
//! privileges given up for good, its user, keyring, working directory
//! and session, the kernel filters, then exec. Every call here is
//! async-signal-safe or a raw system call; nothing allocates, locks or
//! can panic.

use super::super::super::isolation::{keyring, landlock, seccomp};
use super::super::child_step::ChildStep;
use super::child_plan::ChildPlan;
use super::child_steps::{copy_own_stat, errno, fail, join_sandbox, lead_own_session, place_stdio};
use sandboxd_init::privileges;

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

/// A runner's child, from clone to exec. Every call here is
/// async-signal-safe or a raw system call; nothing allocates, locks or
/// can panic.
pub(super) extern "C" fn child_main(plan: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the parent passed a pointer to a ChildPlan that stays alive
    // and unmoved until this child execs or exits.
    let plan = unsafe { &*(plan as *const ChildPlan) };
    // SAFETY: each step is a system call on values the parent prepared;
    // see `clone_exec`'s docs for why these and no others.
    unsafe {
        join_sandbox(plan);
        place_stdio(plan);
        // Before the switch: dropping from the bounding set and setting
        // securebits need CAP_SETPCAP, and a switch away from uid 0 would
        // clear it (were NO_SETUID_FIXUP not set first).
        drop_privileges_for_good(plan);
        switch_user(plan);
        // With SECBIT_NO_SETUID_FIXUP the switch kept the daemon's
        // capabilities; without a switch they are the daemon's. Exec would
        // clear most of them for a non-root uid, but not the inheritable
        // set, and not for root: empty all three here.
        clear_capability_sets(plan);
        // As the sandbox's uid, so the keyring is its own.
        join_session_keyring(plan);
        // As the runner's user: a workspace it cannot enter is an error now.
        if libc::chdir(plan.cwd) < 0 {
            fail(plan, ChildStep::Chdir);
        }
        lead_own_session(plan);
        copy_own_stat(plan);
        restrict_and_clean(plan);
        // The runner starts with nothing blocked, as std's children do.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // Last before exec (after no_new_privs, which it needs): from here
        // on the calls above would be refused.
        apply_seccomp(plan);
        exec(plan)
    }
}

/// The switch to the runner's user, when it has one: no supplementary
/// groups, then its gid and uid (raw system calls: glibc's wrappers would
/// switch every thread of the daemon).
///
/// # Safety
/// Only for the clone child.
unsafe fn switch_user(plan: &ChildPlan) {
    let Some((uid, gid)) = plan.privileges.user else {
        return;
    };
    // Ignoring EPERM as std does: without CAP_SETGID there are no groups
    // to shed that the switch would not already drop.
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

/// The sandbox's own session keyring (by name), or a fresh one, when the
/// filters ask for it.
///
/// # Safety
/// Only for the clone child, after the user switch.
unsafe fn join_session_keyring(plan: &ChildPlan) {
    if !plan
        .filters
        .is_some_and(|filters| filters.join_session_keyring)
    {
        return;
    }
    let joined = match &plan.session_keyring {
        Some(name) => keyring::join_named_session(name.as_ptr().cast()),
        None => keyring::join_fresh_session(),
    };
    if !joined {
        fail(plan, ChildStep::Keyring);
    }
}

/// Landlock while its ruleset descriptor is open; then every descriptor
/// beyond 0-2 closed, the limits lowered (no privilege needed by now).
///
/// # Safety
/// Only for the clone child, after the user switch.
unsafe fn restrict_and_clean(plan: &ChildPlan) {
    let Some(filters) = &plan.filters else {
        return;
    };
    if filters.landlock_ruleset >= 0 && !landlock::restrict_self(filters.landlock_ruleset) {
        fail(plan, ChildStep::Landlock);
    }
    filters.clean_start.close_inherited(plan.exe);
    if !filters.clean_start.reset_limits() {
        fail(plan, ChildStep::Limits);
    }
}

/// The seccomp filter, when there is one.
///
/// # Safety
/// Only for the clone child, last before exec.
unsafe fn apply_seccomp(plan: &ChildPlan) {
    if let Some(filter) = plan
        .filters
        .as_ref()
        .and_then(|filters| filters.seccomp.as_ref())
    {
        if !seccomp::apply(filter) {
            fail(plan, ChildStep::Seccomp);
        }
    }
}

/// Execs the runner: the binary open as `exe` when there is one, else the
/// file at `program`; a failure is reported and the child exits.
///
/// # Safety
/// Only for the clone child, every step before done.
unsafe fn exec(plan: &ChildPlan) -> ! {
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
    if !plan.bounding_set_empty && privileges::drop_from_bounding_set(0..=last).is_err() {
        fail(plan, ChildStep::BoundingSet);
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
