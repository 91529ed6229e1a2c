//! Giving privileges up for good: what a sandbox's init and a view's holder
//! do first, and what the daemon's clone child does for a runner (the
//! capability sets, with [`empty_capability_sets`], which allocates
//! nothing).

use std::io;

/// A step that failed, named as the sandbox's output reports it.
#[derive(Debug)]
pub struct Failure {
    pub step: &'static str,
    pub error: io::Error,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.error)
    }
}

impl Failure {
    pub fn at(step: &'static str) -> impl FnOnce(io::Error) -> Failure {
        move |error| Failure { step, error }
    }
}

/// An empty bounding set (when asked), the runner's user (when it has
/// one), no capability in any set, `no_new_privs`. For a process with one
/// thread: glibc's wrappers switch every thread, which here is this one.
pub fn drop_own_privileges(
    user: Option<(u32, u32)>,
    drop_bounding_set: bool,
) -> Result<(), Failure> {
    let check = |result: libc::c_int| {
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: prctl with plain integer arguments.
    let prctl = |option: libc::c_int, arg: libc::c_ulong| {
        check(unsafe { libc::prctl(option, arg, 0, 0, 0) })
    };
    if drop_bounding_set {
        drop_from_bounding_set(0..=last_capability())
            .map_err(Failure::at("init: prctl(PR_CAPBSET_DROP)"))?;
    }
    if let Some((uid, gid)) = user {
        // SAFETY: setgroups with an empty list (no pointer is read).
        check(unsafe { libc::setgroups(0, std::ptr::null()) })
            .map_err(Failure::at("init: setgroups"))?;
        // SAFETY: plain integer arguments.
        check(unsafe { libc::setresgid(gid, gid, gid) }).map_err(Failure::at("init: setresgid"))?;
        // SAFETY: plain integer arguments.
        check(unsafe { libc::setresuid(uid, uid, uid) }).map_err(Failure::at("init: setresuid"))?;
    }
    empty_capability_sets().map_err(Failure::at("init: capset (all sets empty)"))?;
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map_err(Failure::at("init: prctl(PR_SET_NO_NEW_PRIVS)"))
}

/// Drops `caps` from the calling thread's bounding set (one the kernel
/// does not know, `EINVAL`, is passed over). Each drop is a new set of
/// credentials, ~2 µs. Allocates nothing, so a clone child may call it.
pub fn drop_from_bounding_set(caps: std::ops::RangeInclusive<u32>) -> io::Result<()> {
    for cap in caps {
        // SAFETY: prctl with plain integer arguments; it changes the
        // calling thread's credentials only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } < 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EINVAL) {
                return Err(error);
            }
        }
    }
    Ok(())
}

/// `capset(2)`'s header (`struct __user_cap_header_struct`).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `capset(2)`'s data (`struct __user_cap_data_struct`); version 3 takes two.
#[repr(C)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets, as two [`CapData`].
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Empties the calling thread's permitted, effective and inheritable sets
/// (always allowed: it only gives up). Allocates nothing, so a clone child
/// may call it.
pub fn empty_capability_sets() -> io::Result<()> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let empty = [0, 1].map(|_| CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    });
    // SAFETY: a valid header and two data structs, as version 3 takes.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, empty.as_ptr()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The highest capability number this kernel knows:
/// `/proc/sys/kernel/cap_last_cap`, else found by asking the bounding set
/// (`PR_CAPBSET_READ` fails past it).
pub fn last_capability() -> u32 {
    let from_proc = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|text| text.trim().parse().ok());
    from_proc.unwrap_or_else(|| {
        // SAFETY: PR_CAPBSET_READ only reads this thread's bounding set.
        (0..=63u32)
            .take_while(|&cap| unsafe {
                libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) >= 0
            })
            .last()
            .unwrap_or(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_capability_is_the_kernels() {
        let last = last_capability();
        // CAP_AUDIT_READ (37) exists since Linux 3.16.
        assert!(last >= 37, "{last}");
        // SAFETY: only reads this thread's bounding set.
        let beyond =
            unsafe { libc::prctl(libc::PR_CAPBSET_READ, (last + 1) as libc::c_ulong, 0, 0, 0) };
        assert!(beyond < 0, "the kernel knows capability {}", last + 1);
    }
}
