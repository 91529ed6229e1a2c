//! `--syscall-probe NAME`: one system call a seccomp filter should refuse
//! (or let through), made from inside the sandbox, its errno on stdout.
//!
//! Each call's arguments are chosen so that, without a filter, it either
//! succeeds (the attack works: errno 0) or fails with an errno other than
//! the filter's (`EPERM`, or `ENOSYS` for `clone3`): the answer tells the
//! filter from the kernel.

/// The probes: name, and what they say.
pub const PROBES: [&str; 11] = [
    "getpid",
    "io_uring_setup",
    "unshare-user",
    "clone-user",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "personality-no-aslr",
    "personality-query",
    "clone3",
];

/// Makes the call `name` names; its errno (0: it succeeded, -1: no such
/// probe).
pub fn probe(name: &str) -> i32 {
    let done = match name {
        // SAFETY: no arguments.
        "getpid" => unsafe { libc::syscall(libc::SYS_getpid) },
        "io_uring_setup" => io_uring_setup(),
        // SAFETY: an integer argument (this one-shot process may end up in
        // a user namespace of its own, and exits right after).
        "unshare-user" => unsafe { libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER) },
        "clone-user" => clone_user(),
        // An unknown command: EINVAL without a filter.
        // SAFETY: no memory is passed (size 0).
        "bpf" => unsafe { libc::syscall(libc::SYS_bpf, -1, std::ptr::null::<u8>(), 0) },
        // No attribute: EFAULT without a filter.
        // SAFETY: a null pointer, which the kernel refuses to read.
        "perf_event_open" => unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                std::ptr::null::<u8>(),
                0,
                -1,
                -1,
                0,
            )
        },
        // User-mode only: allowed to anyone without a filter.
        // SAFETY: flags only; the descriptor is closed below.
        "userfaultfd" => {
            close_if_fd(unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | 1) })
        }
        // The user keyring, shared by every process of this uid.
        // SAFETY: integer arguments only.
        "keyctl" => unsafe {
            libc::syscall(
                libc::SYS_keyctl,
                libc::KEYCTL_GET_KEYRING_ID,
                libc::KEY_SPEC_USER_KEYRING,
                0,
            )
        },
        // ADDR_NO_RANDOMIZE: turns ASLR off for what this process runs.
        // SAFETY: integer argument; the process exits right after.
        "personality-no-aslr" => unsafe { libc::syscall(libc::SYS_personality, 0x0040000) },
        // The query: allowed everywhere.
        // SAFETY: integer argument, changes nothing.
        "personality-query" => unsafe { libc::syscall(libc::SYS_personality, 0xffff_ffff_u64) },
        // No arguments: EINVAL without a filter.
        // SAFETY: a null pointer with size 0, never read.
        "clone3" => unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0) },
        _ => {
            eprintln!("runner-fixture: no syscall probe {name:?} (known: {PROBES:?})");
            return -1;
        }
    };
    if done < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    } else {
        0
    }
}

/// `io_uring_setup` with one entry: it succeeds without a filter.
fn io_uring_setup() -> libc::c_long {
    // struct io_uring_params is 120 bytes; zeroed asks for the defaults.
    let mut params = [0_u8; 120];
    // SAFETY: the kernel writes at most the 120 bytes of `params`.
    close_if_fd(unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) })
}

/// `clone` with `CLONE_NEWUSER`, like `fork`: the child exits at once.
fn clone_user() -> libc::c_long {
    let flags = libc::CLONE_NEWUSER | libc::SIGCHLD;
    // SAFETY: a fork-like clone (no new stack: the child gets a copy of
    // this one); the child makes one raw call and exits.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0, 0, 0, 0) };
    if pid == 0 {
        // SAFETY: the child ends here, touching nothing of the parent's.
        unsafe { libc::_exit(0) };
    }
    if pid > 0 {
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
    }
    pid
}

fn close_if_fd(done: libc::c_long) -> libc::c_long {
    if done >= 0 {
        // SAFETY: a descriptor the call just made, closed once.
        unsafe { libc::close(done as libc::c_int) };
    }
    done
}
