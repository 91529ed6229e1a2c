//! Landlock scoping (ABI 6, Linux 6.12): a runner cannot connect to an
//! abstract Unix socket, nor signal a process, outside its own Landlock
//! domain — so not another sandbox's, and not the host's.
//!
//! Each runner calls `landlock_restrict_self` and so gets a domain of its
//! own; everything it forks inherits it, so a runner's own processes still
//! reach each other's abstract sockets and signal each other. Abstract
//! sockets have no file to put permissions on and no network namespace
//! keeps them apart here: this is the one kernel mechanism that scopes
//! them per sandbox. No file-system or network access is handled (the
//! ruleset's `handled_access_*` are empty): only the two scopes.
//!
//! Raw system calls rather than the `landlock` crate: the child may not
//! allocate, and all it does is one `landlock_restrict_self` on a ruleset
//! the daemon made once; the crate's `restrict_self` consumes a ruleset
//! object and sets `no_new_privs` itself.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `struct landlock_ruleset_attr` up to `scoped` (ABI 6).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1 << 0;
const LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const LANDLOCK_SCOPE_SIGNAL: u64 = 1 << 1;
/// The first ABI with scopes.
const SCOPES_ABI: i64 = 6;

/// A ruleset with both scopes, made once; each runner restricts itself
/// with it (a new domain each time).
#[derive(Debug)]
pub struct LandlockScoping {
    ruleset: OwnedFd,
    abi: i64,
}

/// Why scoping is not in force.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("not in force: the kernel has no Landlock ({0}; needs Linux 6.12 with landlock in the lsm= list)")]
    Unavailable(std::io::Error),
    #[error("not in force: the kernel offers Landlock ABI {0} (needs 6, Linux 6.12)")]
    TooOld(i64),
    #[error("not in force: cannot create the Landlock ruleset: {0}")]
    Ruleset(std::io::Error),
}

impl LandlockScoping {
    /// The ruleset, where the kernel has ABI 6 or later.
    pub fn for_this_host() -> Result<LandlockScoping, LandlockError> {
        // SAFETY: the version query takes no attribute pointer.
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<RulesetAttr>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        if abi < 0 {
            return Err(LandlockError::Unavailable(std::io::Error::last_os_error()));
        }
        if abi < SCOPES_ABI {
            return Err(LandlockError::TooOld(abi));
        }
        let attr = RulesetAttr {
            handled_access_fs: 0,
            handled_access_net: 0,
            scoped: LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL,
        };
        // SAFETY: a live attribute struct of the size given; the kernel
        // returns a new close-on-exec descriptor.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                std::mem::size_of::<RulesetAttr>(),
                0u32,
            )
        };
        if fd < 0 {
            return Err(LandlockError::Ruleset(std::io::Error::last_os_error()));
        }
        // SAFETY: a descriptor the kernel just returned, owned by no one else.
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        Ok(LandlockScoping { ruleset, abi })
    }

    /// What the child passes to [`restrict_self`].
    pub fn ruleset_fd(&self) -> RawFd {
        self.ruleset.as_raw_fd()
    }

    /// For `status`.
    pub fn describe(&self) -> String {
        format!(
            "Landlock ABI {}: abstract Unix sockets and signals scoped to the sandbox",
            self.abi
        )
    }
}

/// Puts the calling thread in a new Landlock domain of `ruleset`. Child
/// side: allocates nothing; needs `no_new_privs`. Returns false with
/// `errno` set when refused.
///
/// # Safety
/// `ruleset` must be a live Landlock ruleset descriptor.
pub unsafe fn restrict_self(ruleset: RawFd) -> bool {
    libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) >= 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::linux::net::SocketAddrExt;

    /// The errno a forked child gets connecting to the abstract socket
    /// `name` (0: connected), after restricting itself when `scoped`.
    fn connect_errno(ruleset: RawFd, name: &[u8], scoped: bool) -> i32 {
        // SAFETY: sockaddr_un is plain data.
        let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        address.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (slot, &byte) in address.sun_path[1..].iter_mut().zip(name) {
            *slot = byte as libc::c_char;
        }
        let length = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as u32;
        // SAFETY: the child makes only raw system calls and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: in the forked child.
            unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0);
                if scoped && !restrict_self(ruleset) {
                    libc::_exit(255);
                }
                let socket = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                let done = libc::connect(
                    socket,
                    (&address as *const libc::sockaddr_un).cast(),
                    length,
                );
                libc::_exit(if done < 0 {
                    *libc::__errno_location()
                } else {
                    0
                });
            }
        }
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status));
        libc::WEXITSTATUS(status)
    }

    #[test]
    fn a_scoped_process_cannot_reach_an_abstract_socket_made_outside_its_domain() {
        let scoping = match LandlockScoping::for_this_host() {
            Ok(scoping) => scoping,
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        };
        let name = format!("sandboxd-landlock-test-{}", std::process::id());
        let listener = std::os::unix::net::UnixListener::bind_addr(
            &std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap(),
        )
        .unwrap();
        let fd = scoping.ruleset_fd();
        assert_eq!(connect_errno(fd, name.as_bytes(), false), 0, "unscoped");
        assert_eq!(
            connect_errno(fd, name.as_bytes(), true),
            libc::EPERM,
            "scoped"
        );
        drop(listener);
    }
}
