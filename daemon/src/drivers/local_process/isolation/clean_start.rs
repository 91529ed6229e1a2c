//! A clean start: a runner begins with the resource limits a service gets
//! from systemd, not the daemon's raised ones, and with no descriptor of
//! the daemon's beyond stdin, stdout and stderr. (Its defined `PATH` is
//! part of its environment: `runner_path`, see [`crate::config`].)
//!
//! Limits: `RLIMIT_NOFILE` is 1024 soft and 524288 hard, systemd's
//! defaults since v240 (the soft limit `select(2)` needs, and room to
//! raise it), or the daemon's own hard limit where that is lower (raising
//! a hard limit needs a capability the runner no longer has when the
//! limits are set). Every other limit the daemon has changed since its
//! start ([`remember_startup_limits`]) goes back to the value it had then,
//! which under systemd is its `DefaultLimit*=`; limits the daemon never
//! touched are inherited as they are. Only lowering is ever needed, so
//! the child sets them after the user switch, without privilege.
//!
//! Descriptors: the child's table is a copy of the daemon's, and every
//! descriptor the daemon opens is close-on-exec, but one that is not (a
//! library's, a future bug's) would reach untrusted code: the child closes
//! everything from 3 up just before exec (`close_range`, Linux 5.9; before
//! that, one `close` per possible number).

use std::sync::OnceLock;

/// `struct rlimit64`, for the raw `prlimit64` call (one type on every libc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Limit {
    pub soft: u64,
    pub hard: u64,
}

/// `RLIMIT_NOFILE` as systemd sets it for its services.
pub const RUNNER_NOFILE: Limit = Limit {
    soft: 1024,
    hard: 524288,
};

/// `RLIM_NLIMITS`: resources 0 (CPU) to 15 (RTTIME).
const RESOURCES: libc::c_int = 16;
const NOFILE: libc::c_int = libc::RLIMIT_NOFILE as libc::c_int;

/// The most limits the child sets.
pub const MAX_LIMITS: usize = RESOURCES as usize;

static STARTUP_LIMITS: OnceLock<[Option<Limit>; MAX_LIMITS]> = OnceLock::new();

/// Records the daemon's limits as it started. Call before the daemon
/// changes any (it raises its open-file limit when the driver starts).
pub fn remember_startup_limits() {
    STARTUP_LIMITS.get_or_init(|| std::array::from_fn(|resource| get(resource as libc::c_int)));
}

/// The limits a runner starts with, worked out once by the daemon.
#[derive(Debug, Clone)]
pub struct CleanStart {
    /// `(resource, limit)` to set, in the child.
    limits: Vec<(libc::c_int, Limit)>,
    /// The daemon's open-file soft limit: no descriptor of its is above
    /// it, so the fallback closes up to it.
    close_fallback_up_to: u32,
}

impl CleanStart {
    /// From the daemon's limits now and at its start.
    pub fn for_this_daemon() -> CleanStart {
        let startup = STARTUP_LIMITS.get();
        let mut limits = Vec::new();
        for resource in 0..RESOURCES {
            let Some(now) = get(resource) else { continue };
            let wanted = if resource == NOFILE {
                Limit {
                    soft: RUNNER_NOFILE.soft.min(now.hard),
                    hard: RUNNER_NOFILE.hard.min(now.hard),
                }
            } else {
                match startup.and_then(|limits| limits[resource as usize]) {
                    // Only lowering: the child holds no privilege by then.
                    Some(then) if then.hard <= now.hard => then,
                    _ => now,
                }
            };
            // NOFILE always: the daemon's may be changed later (prlimit).
            if wanted != now || resource == NOFILE {
                limits.push((resource, wanted));
            }
        }
        let close_fallback_up_to = get(NOFILE)
            .map(|limit| limit.soft.min(u32::MAX as u64) as u32)
            .unwrap_or(RUNNER_NOFILE.hard as u32);
        CleanStart {
            limits,
            close_fallback_up_to,
        }
    }

    /// The open-file limit runners get, for `status`.
    pub fn runner_nofile(&self) -> Limit {
        self.limits
            .iter()
            .find(|(resource, _)| *resource == NOFILE)
            .map(|(_, limit)| *limit)
            .or_else(|| get(NOFILE))
            .unwrap_or(RUNNER_NOFILE)
    }

    /// What the child needs, as plain values: the planned limits, each
    /// within the daemon's hard limit as it is now (someone may have
    /// lowered it with `prlimit` since; the child cannot raise one).
    pub fn child_plan(&self) -> ChildCleanStart {
        let mut plan = ChildCleanStart {
            limits: [(0, RUNNER_NOFILE); MAX_LIMITS],
            limits_len: 0,
            close_fallback_up_to: self.close_fallback_up_to,
        };
        for (slot, &(resource, limit)) in plan.limits.iter_mut().zip(&self.limits) {
            let now = get(resource);
            let hard = now.map_or(limit.hard, |now| limit.hard.min(now.hard));
            *slot = (
                resource,
                Limit {
                    soft: limit.soft.min(hard),
                    hard,
                },
            );
            plan.limits_len += 1;
            if resource == NOFILE {
                // Descriptors of the daemon's may lie up to its limit now.
                let soft = now.map_or(0, |now| now.soft.min(u32::MAX as u64) as u32);
                plan.close_fallback_up_to = plan.close_fallback_up_to.max(soft);
            }
        }
        plan
    }

    /// For `status`.
    pub fn describe(&self, runner_path: &str) -> String {
        let nofile = self.runner_nofile();
        format!(
            "RLIMIT_NOFILE {}/{}, the daemon's other limits as at its start; PATH {runner_path}; no descriptor beyond 0-2",
            nofile.soft, nofile.hard
        )
    }
}

fn get(resource: libc::c_int) -> Option<Limit> {
    let mut limit = Limit { soft: 0, hard: 0 };
    // SAFETY: prlimit64 on this process writes one rlimit64.
    let done = unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            resource,
            std::ptr::null::<Limit>(),
            &mut limit as *mut Limit,
        )
    };
    (done == 0).then_some(limit)
}

/// The clean start, as the child reads it (no allocation).
#[derive(Debug, Clone, Copy)]
pub struct ChildCleanStart {
    limits: [(libc::c_int, Limit); MAX_LIMITS],
    limits_len: usize,
    close_fallback_up_to: u32,
}

impl ChildCleanStart {
    /// Sets the limits. Returns false with `errno` set when one is refused.
    ///
    /// # Safety
    /// Only for the clone child.
    pub unsafe fn reset_limits(&self) -> bool {
        for (resource, limit) in &self.limits[..self.limits_len] {
            if libc::syscall(
                libc::SYS_prlimit64,
                0,
                *resource,
                limit as *const Limit,
                std::ptr::null_mut::<Limit>(),
            ) < 0
            {
                return false;
            }
        }
        true
    }

    /// Closes every descriptor from 3 up but `spare` (the close-on-exec
    /// descriptor of the binary to exec, or -1). Cannot fail: `close_range`
    /// where the kernel has it, else one `close` per number.
    ///
    /// # Safety
    /// Only for the clone child, just before exec: nothing may use a
    /// descriptor above 2 after it (but `spare`, for the exec).
    pub unsafe fn close_inherited(&self, spare: libc::c_int) {
        let close_range = |from: u32, to: u32| {
            from > to || libc::syscall(libc::SYS_close_range, from, to, 0u32) == 0
        };
        let closed = match u32::try_from(spare) {
            Ok(spare) if spare >= 3 => {
                close_range(3, spare - 1) && close_range(spare + 1, u32::MAX)
            }
            _ => close_range(3, u32::MAX),
        };
        if closed {
            return;
        }
        for fd in 3..self.close_fallback_up_to {
            if fd as libc::c_int != spare {
                libc::close(fd as libc::c_int);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runners_get_systemds_open_file_limit_within_the_daemons_hard_one() {
        remember_startup_limits();
        let now = get(NOFILE).unwrap();
        let nofile = CleanStart::for_this_daemon().runner_nofile();
        assert_eq!(nofile.hard, RUNNER_NOFILE.hard.min(now.hard));
        assert_eq!(nofile.soft, RUNNER_NOFILE.soft.min(now.hard));
    }

    #[test]
    fn limits_the_daemon_never_changed_are_left_alone() {
        remember_startup_limits();
        let plan = CleanStart::for_this_daemon();
        // This test process changes nothing; NOFILE is always set.
        assert!(
            plan.limits.iter().all(|(resource, _)| *resource == NOFILE),
            "{:?}",
            plan.limits
        );
    }
}
