//! The system calls no runner may make, on any tier that filters them: one
//! list, read by the process tier's seccomp filter (by number, see
//! `local_process::isolation::seccomp`) and by the docker tier's seccomp
//! profile (by name, see `docker::seccomp_profile`), so the two cannot
//! drift apart.
//!
//! What is refused is what an unprivileged program does not need and what
//! has been the road into the kernel: new namespaces, mounts, kernel
//! extension and tracing, known exploit primitives (io_uring, userfaultfd,
//! the "shocker" handle calls) and host administration. Why each group is
//! here is said where the process tier's filter is described.

/// One system call, by the name seccomp profiles use and by its number on
/// the architecture the daemon was built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Syscall {
    pub name: &'static str,
    pub number: i64,
}

/// `open_tree_attr` (Linux 6.15): one number on every architecture, not
/// yet in the libc crate.
const SYS_OPEN_TREE_ATTR: i64 = 467;

/// A [`Syscall`] from its name and libc's number for it.
macro_rules! syscall {
    ($name:ident, $number:path) => {
        Syscall {
            name: stringify!($name),
            number: $number,
        }
    };
}

/// Refused with `EPERM` whatever their arguments.
pub fn always_refused() -> Vec<Syscall> {
    let mut calls = vec![
        // New namespaces (and `clone` with a `CLONE_NEW*` flag, below).
        syscall!(unshare, libc::SYS_unshare),
        syscall!(setns, libc::SYS_setns),
        // Mounts, old API and new.
        syscall!(mount, libc::SYS_mount),
        syscall!(umount2, libc::SYS_umount2),
        syscall!(pivot_root, libc::SYS_pivot_root),
        syscall!(move_mount, libc::SYS_move_mount),
        syscall!(open_tree, libc::SYS_open_tree),
        Syscall {
            name: "open_tree_attr",
            number: SYS_OPEN_TREE_ATTR,
        },
        syscall!(fsopen, libc::SYS_fsopen),
        syscall!(fsconfig, libc::SYS_fsconfig),
        syscall!(fsmount, libc::SYS_fsmount),
        syscall!(fspick, libc::SYS_fspick),
        syscall!(mount_setattr, libc::SYS_mount_setattr),
        // Kernel extension and tracing.
        syscall!(bpf, libc::SYS_bpf),
        syscall!(perf_event_open, libc::SYS_perf_event_open),
        syscall!(kexec_load, libc::SYS_kexec_load),
        syscall!(kexec_file_load, libc::SYS_kexec_file_load),
        syscall!(init_module, libc::SYS_init_module),
        syscall!(finit_module, libc::SYS_finit_module),
        syscall!(delete_module, libc::SYS_delete_module),
        syscall!(lookup_dcookie, libc::SYS_lookup_dcookie),
        syscall!(syslog, libc::SYS_syslog),
        // Known exploit primitives.
        syscall!(userfaultfd, libc::SYS_userfaultfd),
        syscall!(io_uring_setup, libc::SYS_io_uring_setup),
        syscall!(io_uring_enter, libc::SYS_io_uring_enter),
        syscall!(io_uring_register, libc::SYS_io_uring_register),
        syscall!(open_by_handle_at, libc::SYS_open_by_handle_at),
        syscall!(name_to_handle_at, libc::SYS_name_to_handle_at),
        // Host administration.
        syscall!(swapon, libc::SYS_swapon),
        syscall!(swapoff, libc::SYS_swapoff),
        syscall!(reboot, libc::SYS_reboot),
        syscall!(acct, libc::SYS_acct),
        syscall!(settimeofday, libc::SYS_settimeofday),
        syscall!(clock_settime, libc::SYS_clock_settime),
        syscall!(quotactl, libc::SYS_quotactl),
        syscall!(quotactl_fd, libc::SYS_quotactl_fd),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        syscall!(iopl, libc::SYS_iopl),
        syscall!(ioperm, libc::SYS_ioperm),
    ]);
    calls
}

/// The kernel keyring calls: allowed where the runner has a session
/// keyring of its own (the process tier), refused where it has none (the
/// docker tier: its user keyring is that of its uid in the host's user
/// namespace, shared with every container and host process of that uid).
pub fn keyring_calls() -> [Syscall; 3] {
    [
        syscall!(keyctl, libc::SYS_keyctl),
        syscall!(add_key, libc::SYS_add_key),
        syscall!(request_key, libc::SYS_request_key),
    ]
}

/// `clone3` is refused with `ENOSYS`, not `EPERM`: its flags are in memory
/// a filter cannot read, and on `ENOSYS` glibc (2.34+) and others fall
/// back to `clone`, whose flags the filter does read.
pub const CLONE3: &str = "clone3";

/// Every `CLONE_NEW*` flag `clone` takes, each refused with `EPERM`
/// (`CLONE_NEWTIME` only goes through `clone3` and `unshare`: in `clone`
/// its bit is the exit signal's).
pub const CLONE_NEW_FLAGS: [libc::c_int; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

/// The only `personality` values allowed, as Docker allows: the query
/// (0xffffffff), `PER_LINUX`, `PER_LINUX32`, `UNAME26`,
/// `UNAME26|PER_LINUX32`. No `ADDR_NO_RANDOMIZE`, `READ_IMPLIES_EXEC` or
/// other ASLR-defeating flag.
pub const HARMLESS_PERSONALITIES: [u64; 5] = [0x0, 0x8, 0x2_0000, 0x2_0008, 0xffff_ffff];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_numbers_match_names() {
        let mut calls = always_refused();
        calls.extend(keyring_calls());
        let mut names: Vec<_> = calls.iter().map(|call| call.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), calls.len(), "a call is listed twice");
        let io_uring = calls.iter().find(|call| call.name == "io_uring_setup");
        assert_eq!(
            io_uring.map(|call| call.number),
            Some(libc::SYS_io_uring_setup)
        );
    }
}
