//! What a command thread gives up once: the spawner's threads that clone
//! commands (see [`super::spawner`]) and nothing else.
//!
//! Every command's clone child used to give up, at each start, what its
//! runner gave up: its capability bounding set (41 `PR_CAPBSET_DROP`s,
//! each a new set of credentials: 60-80 µs) and the whole seccomp filter
//! (a JIT compile and a verdict cache per attach: 70-170 µs on a loaded
//! 2-CPU host). A thread's bounding set and filter pass to every child it
//! clones, so a command thread drops its bounding set and attaches the
//! filter's thread part once, at its first command, and each child only
//! attaches the few instructions left (~30 µs; see
//! `SeccompPlan::cloning_thread_program`). The child's isolation is the
//! same, stacked filters answering with the stricter of their verdicts.
//!
//! Why the thread part is not the whole filter: the thread still joins
//! each sandbox's namespaces (`setns`) and clones with `clone3`, which the
//! whole filter refuses. What the part refuses (mounts, `bpf`, new
//! namespaces through `clone`, …) a command thread never calls. The rest
//! of the daemon is untouched: a bounding set and a seccomp filter without
//! `SECCOMP_FILTER_FLAG_TSYNC` are the calling thread's alone, and a
//! command thread starts no thread of its own. Runners and views are never
//! cloned here: a view's first process mounts, and a sandbox's init needs
//! the full bounding set across its exec.

use std::cell::Cell;

use super::clone_exec::{Privileges, ThreadConfinement};
use crate::drivers::local_process::isolation::kernel_filters::KernelFilters;
use sandboxd_init::privileges::drop_from_bounding_set;

thread_local! {
    /// Set once on each command thread, before its first job.
    static COMMAND_THREAD: Cell<bool> = const { Cell::new(false) };
    /// What this command thread has given up, once it has.
    static CONFINEMENT: Cell<Option<ThreadConfinement>> = const { Cell::new(None) };
}

/// Makes the calling thread a command thread: the first [`confinement`]
/// on it confines it.
pub fn mark_this_thread() {
    COMMAND_THREAD.with(|flag| flag.set(true));
}

/// What the calling thread has given up for the commands it clones under
/// `filters` with `privileges`: on a command thread, confined at its first
/// call (the same `filters` and `privileges` every time: the daemon's);
/// anywhere else, nothing.
pub fn confinement(filters: &KernelFilters, privileges: &Privileges) -> ThreadConfinement {
    if !COMMAND_THREAD.with(Cell::get) {
        return ThreadConfinement::default();
    }
    if let Some(done) = CONFINEMENT.with(Cell::get) {
        return done;
    }
    let done = confine(filters, privileges);
    CONFINEMENT.with(|confinement| confinement.set(Some(done)));
    done
}

/// Drops the bounding set (where the children would) and attaches the
/// filter's thread part. A step that fails is left to each child, as
/// before: the child drops and attaches in full.
fn confine(filters: &KernelFilters, privileges: &Privileges) -> ThreadConfinement {
    let empty_bounding_set = privileges
        .bounding_set_up_to
        .is_some_and(|last| drop_from_bounding_set(0..=last).is_ok());
    let seccomp_thread_part = match filters.confine_cloning_thread() {
        Ok(attached) => attached,
        Err(error) => {
            tracing::warn!(%error, "a command thread cannot hold the seccomp filter's thread part; each command attaches the whole filter");
            false
        }
    };
    ThreadConfinement {
        empty_bounding_set,
        seccomp_thread_part,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_command_thread_is_confined() {
        let filters = KernelFilters::for_this_host("/usr/bin:/bin");
        let privileges = Privileges {
            user: None,
            bounding_set_up_to: Some(last_capability()),
        };
        let elsewhere = std::thread::spawn({
            let filters = KernelFilters::for_this_host("/usr/bin:/bin");
            move || confinement(&filters, &privileges)
        });
        assert_eq!(elsewhere.join().unwrap(), ThreadConfinement::default());
        let on_command_thread = std::thread::spawn(move || {
            mark_this_thread();
            let first = confinement(&filters, &privileges);
            let bounding = own_status_field("CapBnd:");
            // SAFETY: a raw setns with a descriptor it opened: allowed by
            // the thread part (it joins its own UTS namespace again).
            let setns = unsafe {
                let fd = libc::open(c"/proc/self/ns/uts".as_ptr(), libc::O_RDONLY);
                libc::syscall(libc::SYS_setns, fd, libc::CLONE_NEWUTS)
            };
            // SAFETY: a raw mount of nothing onto a missing path: refused
            // by the thread part before the kernel looks.
            let mount = unsafe { libc::syscall(libc::SYS_mount, 0, 0, 0, 0, 0) };
            let mount_errno = std::io::Error::last_os_error().raw_os_error();
            (
                first,
                confinement(&filters, &privileges),
                bounding,
                setns,
                mount,
                mount_errno,
            )
        });
        let (first, again, bounding, setns, mount, mount_errno) = on_command_thread.join().unwrap();
        assert_eq!(first, again, "confined once");
        assert!(first.empty_bounding_set, "{first:?}");
        assert_eq!(bounding.trim(), "0000000000000000");
        assert!(first.seccomp_thread_part, "{first:?}");
        assert_eq!(setns, 0, "setns stays allowed on the thread");
        assert_eq!((mount, mount_errno), (-1, Some(libc::EPERM)));
        // This thread (the test's) kept its bounding set.
        assert_ne!(own_status_field("CapBnd:").trim(), "0000000000000000");
    }

    fn last_capability() -> u32 {
        std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// A field of the calling thread's own status.
    fn own_status_field(name: &str) -> String {
        // SAFETY: gettid has no arguments.
        let tid = unsafe { libc::gettid() };
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap()
            .to_string()
    }
}
