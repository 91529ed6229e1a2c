//! Emptying what a uid keeps in the kernel's keyrings, so that a sandbox
//! given a uid another sandbox had finds nothing of that one's there.
//!
//! A process's session keyring dies with its last holder, but three
//! keyrings belong to the uid itself and outlive every process of it: its
//! user keyring (`@u`), its user-session keyring (`@us`), and its
//! persistent keyring (`KEYCTL_GET_PERSISTENT`, where Kerberos keeps its
//! credential cache, kept for days after the uid's last process). Whatever
//! a sandbox left in them — and the keys' share of the uid's quota,
//! `kernel.keys.maxkeys` — would be the next sandbox of that uid's. So a
//! uid's three keyrings are emptied (`KEYCTL_CLEAR`) when its sandbox
//! releases it and again just before it is handed out (see
//! [`super::uid_pool`]), when no process of it is left: a key held by a
//! live process cannot be taken from it. The user keyrings get their
//! default permissions back too (`KEYCTL_SETPERM`): a sandbox may have
//! opened its `@u` to other uids. (The persistent keyring's permissions
//! cannot be changed by its uid at all; it is invalidated once empty, so
//! it does not linger.)
//!
//! A uid's user keyrings, once looked up, live as long as the kernel's user
//! namespace (until reboot), and each is a *named* keyring: the kernel
//! finds a keyring by name (every runner's and command's
//! `KEYCTL_JOIN_SESSION_KEYRING`) by walking all of them. Left in place,
//! the two of every uid ever handed out made that walk grow without end:
//! a join took 8 µs with 1,200 of them and 574 µs with 21,000, on every
//! start and every command. So a released uid's user keyrings are
//! invalidated once empty ([`Emptied::Freed`]), and the kernel frees them;
//! so are those of a uid still claimed by this daemon but no longer held
//! by it, found at its start (its state directory was emptied while it
//! was stopped).
//! Those of a uid being handed out are kept ([`Emptied::Kept`]): the
//! kernel refuses every lookup of an invalidated user keyring (`ENOKEY`)
//! until its garbage collector has run, which a sandbox started at once
//! would meet. For the same reason a clear that meets such a keyring (a uid
//! handed out again right after its release) waits for the collector.
//!
//! Only the uid itself reaches them (root may not search another uid's
//! user keyrings), so a short-lived clone child switches to the uid and
//! does it: `CLONE_VM | CLONE_VFORK` like the runners' clone child (see
//! `launch::clone_exec`), raw system calls only, and a raw `setresuid`,
//! which switches the child alone (glibc's would signal every thread of
//! the daemon). The persistent keyring is linked into the child's thread
//! keyring to be possessed (its uid alone may only read it), which dies
//! with the child.
//!
//! A user keyring the sandbox closed to its own uid (`KEYCTL_SETPERM`
//! without write or setattr) cannot be emptied or reset: the uid is then
//! skipped whenever it comes up (an error here), and the caller logs why.

use std::io;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// What the child does, in order; a failure reports its index.
const STEPS: [&str; 5] = [
    "setresuid",
    "its user keyring (@u)",
    "its user-session keyring (@us)",
    "its persistent keyring",
    "freeing its user keyrings",
];
const STEP_SETRESUID: usize = 0;
const STEP_USER: usize = 1;
const STEP_USER_SESSION: usize = 2;
const STEP_PERSISTENT: usize = 3;
const STEP_FREE: usize = 4;
const NO_FAILURE: usize = usize::MAX;

/// `KEYCTL_GET_PERSISTENT` (keyctl(2)), not in every libc's constants.
const KEYCTL_GET_PERSISTENT: libc::c_uint = 22;
/// `KEYCTL_INVALIDATE`.
const KEYCTL_INVALIDATE: libc::c_uint = 21;
/// A user keyring's permissions as the kernel makes it: all to its
/// possessor but setattr, all to its uid, nothing to anyone else.
const USER_KEYRING_PERM: libc::c_long = 0x1f3f_0000;

/// The child's stack (it makes a handful of system calls).
const STACK_WORDS: usize = 4096;

/// What becomes of a uid's user keyrings once they are empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emptied {
    /// Kept, as the kernel made them: the uid is being handed out, and its
    /// sandbox may look them up at once.
    Kept,
    /// Invalidated, so the kernel frees them: the uid is being released,
    /// and its next sandbox (if any) is far off.
    Freed,
}

/// How long a clear waits for the kernel's key collector to free a uid's
/// invalidated user keyrings: it runs as soon as they are invalidated, so
/// only a stalled machine waits this long, and the uid is then skipped.
const COLLECTOR_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a uid's keyrings could not be emptied.
#[derive(Debug)]
pub struct ClearError {
    pub step: &'static str,
    pub error: io::Error,
}

impl std::fmt::Display for ClearError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "clearing {}: {}", self.step, self.error)
    }
}

/// What the child reads and where it reports.
struct Job {
    uid: u32,
    then: Emptied,
    failed_step: AtomicUsize,
    failed_errno: AtomicI32,
}

/// Empties `uid`'s user, user-session and persistent keyrings, and keeps
/// or frees the user ones as `then` says. Blocking for the few system calls
/// of a clone child, or longer while the kernel collects the uid's user
/// keyrings invalidated at its release. Needs CAP_SETUID (a root daemon);
/// call only when no process of `uid` is left.
pub fn clear_keyrings_of(uid: u32, then: Emptied) -> Result<(), ClearError> {
    let deadline = std::time::Instant::now() + COLLECTOR_WAIT;
    loop {
        match clear_once(uid, then) {
            Err(error) if error.awaits_collector() && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            done => return done,
        }
    }
}

impl ClearError {
    /// A user keyring invalidated and not yet freed: the lookup says
    /// `ENOKEY` until the kernel's collector has run.
    fn awaits_collector(&self) -> bool {
        (self.step == STEPS[STEP_USER] || self.step == STEPS[STEP_USER_SESSION])
            && self.error.raw_os_error() == Some(libc::ENOKEY)
    }
}

/// One clearing child's run.
fn clear_once(uid: u32, then: Emptied) -> Result<(), ClearError> {
    let job = Job {
        uid,
        then,
        failed_step: AtomicUsize::new(NO_FAILURE),
        failed_errno: AtomicI32::new(0),
    };
    // 16-byte aligned (u128), as the ABI wants the stack.
    let mut stack = vec![0u128; STACK_WORDS];
    let top = stack.as_mut_ptr_range().end.cast::<libc::c_void>();
    let clone_error = |error| ClearError {
        step: "clone",
        error,
    };
    // SAFETY: sigset_t is plain data, filled by sigfillset before use; the
    // child runs `clear_child` (raw system calls on `job`, no allocation,
    // no lock, cannot unwind) on `stack`, which nothing else uses while
    // this thread is suspended (CLONE_VFORK), with every signal blocked so
    // no handler of the daemon runs in it; both outlive it for that reason.
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
        let pid = libc::clone(
            clear_child,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &job as *const Job as *mut libc::c_void,
        );
        let error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_error(error));
        }
        pid
    };
    let mut status = 0;
    // SAFETY: our own child, exited (CLONE_VFORK); nobody else waits for
    // it (spawner threads reap only their own children, and this thread
    // reaps it now).
    unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
    drop(stack);
    let step = job.failed_step.load(Ordering::Acquire);
    if step != NO_FAILURE {
        return Err(ClearError {
            step: STEPS[step],
            error: io::Error::from_raw_os_error(job.failed_errno.load(Ordering::Acquire)),
        });
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(ClearError {
            step: "the clearing child",
            error: io::Error::other(format!("it ended with wait status {status:#x}")),
        });
    }
    Ok(())
}

/// The clone child: the uid, then each keyring.
extern "C" fn clear_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the parent passed a Job that outlives this child.
    let job = unsafe { &*(arg as *const Job) };
    // SAFETY: raw system calls on plain values; see the module's doc.
    unsafe {
        if libc::syscall(libc::SYS_setresuid, job.uid, job.uid, job.uid) < 0 {
            fail(job, STEP_SETRESUID);
        }
        let user = keyctl(
            libc::KEYCTL_GET_KEYRING_ID,
            libc::KEY_SPEC_USER_KEYRING as libc::c_long,
            1,
        );
        let user_session = keyctl(
            libc::KEYCTL_GET_KEYRING_ID,
            libc::KEY_SPEC_USER_SESSION_KEYRING as libc::c_long,
            1,
        );
        for (step, id) in [(STEP_USER, user), (STEP_USER_SESSION, user_session)] {
            if id < 0
                || keyctl(libc::KEYCTL_CLEAR, id, 0) < 0
                || keyctl(libc::KEYCTL_SETPERM, id, USER_KEYRING_PERM) < 0
            {
                fail(job, step);
            }
        }
        // uid -1: the caller's own; linked into (and so possessed through)
        // this child's new thread keyring.
        let id = keyctl(
            KEYCTL_GET_PERSISTENT,
            -1,
            libc::KEY_SPEC_THREAD_KEYRING as libc::c_long,
        );
        // EOPNOTSUPP: a kernel without persistent keyrings.
        if (id < 0 && errno() != libc::EOPNOTSUPP)
            || (id >= 0 && keyctl(libc::KEYCTL_CLEAR, id, 0) < 0)
        {
            fail(job, STEP_PERSISTENT);
        }
        // Empty, it need not wait out its expiry (days) in the kernel's
        // memory, as the lookup above made one for every uid handed out:
        // the next lookup makes a new one. Best effort.
        if id >= 0 {
            keyctl(KEYCTL_INVALIDATE, id, 0);
        }
        // By the ids looked up above: a lookup after an invalidation would
        // meet `ENOKEY` (see the module's doc).
        if job.then == Emptied::Freed
            && (keyctl(KEYCTL_INVALIDATE, user_session, 0) < 0
                || keyctl(KEYCTL_INVALIDATE, user, 0) < 0)
        {
            fail(job, STEP_FREE);
        }
        libc::_exit(0)
    }
}

/// # Safety
/// A raw `keyctl` with plain integer arguments.
unsafe fn keyctl(operation: libc::c_uint, arg2: libc::c_long, arg3: libc::c_long) -> libc::c_long {
    libc::syscall(libc::SYS_keyctl, operation, arg2, arg3)
}

fn errno() -> libc::c_int {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Reports `step` with `errno` and exits.
///
/// # Safety
/// Only for the clearing child.
unsafe fn fail(job: &Job, step: usize) -> ! {
    job.failed_errno.store(errno(), Ordering::Release);
    job.failed_step.store(step, Ordering::Release);
    libc::_exit(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uids of nobody's, outside any range a test daemon uses; one per
    /// test, as tests run at once.
    const UID: u32 = 2_999_000_123;
    const OTHER_UID: u32 = 2_999_000_124;
    const FREED_UID: u32 = 2_999_000_125;

    /// Runs `work` in a forked child as `UID`; its exit code.
    fn as_uid(work: impl FnOnce() -> bool) -> bool {
        as_this_uid(UID, work)
    }

    /// Runs `work` in a forked child as `uid`; its exit code.
    fn as_this_uid(uid: u32, work: impl FnOnce() -> bool) -> bool {
        // SAFETY: the test process forks; the child makes raw system calls
        // (and the closure's) and exits without returning.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                let ok = libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0 && work();
                libc::_exit(if ok { 0 } else { 1 });
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
        }
    }

    /// Adds a user key named `name` to keyring `spec`.
    fn add_key(spec: libc::c_int, name: &std::ffi::CStr) -> bool {
        // SAFETY: add_key with C strings and a 6-byte payload.
        unsafe {
            libc::syscall(
                libc::SYS_add_key,
                c"user".as_ptr(),
                name.as_ptr(),
                b"secret".as_ptr(),
                6usize,
                spec,
            ) >= 0
        }
    }

    /// The caller's persistent keyring, linked into its thread keyring.
    fn persistent() -> libc::c_int {
        // SAFETY: KEYCTL_GET_PERSISTENT with plain numbers.
        unsafe { keyctl(KEYCTL_GET_PERSISTENT, -1, -1) as libc::c_int }
    }

    /// Whether a user key named `name` is in the uid's user, user-session
    /// or persistent keyring.
    fn finds_key(name: &std::ffi::CStr) -> bool {
        [
            libc::KEY_SPEC_USER_KEYRING,
            libc::KEY_SPEC_USER_SESSION_KEYRING,
            persistent(),
        ]
        .into_iter()
        .any(|spec| {
            // SAFETY: keyctl(KEYCTL_SEARCH) with C strings, linking nowhere.
            unsafe {
                libc::syscall(
                    libc::SYS_keyctl,
                    libc::KEYCTL_SEARCH,
                    spec,
                    c"user".as_ptr(),
                    name.as_ptr(),
                    0,
                ) >= 0
            }
        })
    }

    #[test]
    fn a_uids_user_keyrings_are_empty_after_a_clear() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        assert!(as_uid(|| add_key(
            libc::KEY_SPEC_USER_KEYRING,
            c"left-in-u"
        ) && add_key(
            libc::KEY_SPEC_USER_SESSION_KEYRING,
            c"left-in-us"
        ) && add_key(persistent(), c"left-in-persistent")));
        assert!(as_uid(|| finds_key(c"left-in-u")), "the key was planted");
        assert!(as_uid(|| finds_key(c"left-in-us")), "the key was planted");
        assert!(
            as_uid(|| finds_key(c"left-in-persistent")),
            "the key was planted"
        );
        clear_keyrings_of(UID, Emptied::Kept).expect("clear");
        assert!(as_uid(|| !finds_key(c"left-in-u")
            && !finds_key(c"left-in-us")
            && !finds_key(c"left-in-persistent")));
        clear_keyrings_of(UID, Emptied::Kept).expect("a second clear of empty keyrings");
    }

    /// Whether the kernel holds a key of `uid`: `/proc/key-users` lists
    /// every uid that owns one.
    fn owns_keys(uid: u32) -> bool {
        std::fs::read_to_string("/proc/key-users")
            .expect("/proc/key-users")
            .lines()
            .any(|line| line.trim_start().starts_with(&format!("{uid}:")))
    }

    #[test]
    fn a_released_uids_user_keyrings_are_freed_and_it_can_be_handed_out_again_at_once() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        assert!(as_this_uid(FREED_UID, || add_key(
            libc::KEY_SPEC_USER_KEYRING,
            c"left-in-u"
        )));
        assert!(owns_keys(FREED_UID), "the key was planted");
        clear_keyrings_of(FREED_UID, Emptied::Freed).expect("free");
        // At once, as a range of one uid hands it out again: the clear
        // waits for the kernel's collector instead of failing.
        clear_keyrings_of(FREED_UID, Emptied::Kept).expect("a clear right after a free");
        assert!(as_this_uid(FREED_UID, || !finds_key(c"left-in-u")));
        clear_keyrings_of(FREED_UID, Emptied::Freed).expect("free");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while owns_keys(FREED_UID) {
            assert!(
                std::time::Instant::now() < deadline,
                "the kernel still holds keys of a freed uid"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// The permissions of the caller's user keyring.
    fn user_keyring_perm() -> Option<u32> {
        let mut description = [0u8; 128];
        // SAFETY: KEYCTL_DESCRIBE into a buffer of the size given.
        let len = unsafe {
            libc::syscall(
                libc::SYS_keyctl,
                libc::KEYCTL_DESCRIBE,
                libc::KEY_SPEC_USER_KEYRING,
                description.as_mut_ptr(),
                description.len(),
            )
        };
        // "keyring;<uid>;<gid>;<perm>;<name>"
        let text = std::str::from_utf8(&description[..usize::try_from(len).ok()?]).ok()?;
        u32::from_str_radix(text.split(';').nth(3)?, 16).ok()
    }

    #[test]
    fn a_user_keyring_opened_to_everyone_gets_its_default_permissions_back() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        // SAFETY: KEYCTL_SETPERM with plain numbers.
        let open_to_all = || unsafe {
            libc::syscall(
                libc::SYS_keyctl,
                libc::KEYCTL_SETPERM,
                libc::KEY_SPEC_USER_KEYRING,
                0x3f3f_3f3f,
            ) == 0
        };
        assert!(as_this_uid(OTHER_UID, open_to_all));
        assert!(as_this_uid(OTHER_UID, || user_keyring_perm() == Some(0x3f3f_3f3f)));
        clear_keyrings_of(OTHER_UID, Emptied::Kept).expect("clear");
        assert!(as_this_uid(OTHER_UID, || user_keyring_perm()
            == Some(USER_KEYRING_PERM as u32)));
    }
}
