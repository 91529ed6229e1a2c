//! The CPUs a sandbox's processes start on: as many as its cpu quota
//! rounds up to, so that what a program asks about the machine tells the
//! truth. `nproc`, Go's `runtime.NumCPU`, node's `os.availableParallelism`,
//! Python's `os.sched_getaffinity` and `os.process_cpu_count`, and the
//! thread pools sized from them read the affinity mask
//! (`sched_getaffinity`), not the cgroup's quota: under a quota of 1.5 CPUs
//! on a 64-core host they would start 64 threads that then take turns.
//!
//! The quota stays the bound (the kernel's CFS bandwidth control); the
//! mask is what is advertised, and a process may widen its own again
//! (`taskset`) without getting more CPU time. No mask is set when the quota
//! rounds up to every CPU the daemon may use, or no cpu limit is in force.
//!
//! Which CPUs: `ceil(quota)` consecutive ones of the daemon's own mask,
//! starting at a place chosen by a hash of the sandbox's cgroup name. A
//! hash rather than a counter, because the choice must be the same for a
//! sandbox's runner and for every command started in it later (which
//! opens the cgroup by name), and after a daemon restart; and it spreads
//! sandboxes across the host rather than putting every one on CPU 0.

use std::mem::MaybeUninit;

/// The CPUs `name`'s processes are confined to under `quota` CPUs (0 =
/// unlimited), as a mask for `sched_setaffinity`; `None` for "all of the
/// daemon's".
pub fn mask_for(quota: f64, name: &str) -> Option<libc::cpu_set_t> {
    // Read once: this runs at every spawn, and the daemon's own mask is
    // what it was started with.
    static DAEMON_CPUS: std::sync::OnceLock<Option<Vec<usize>>> = std::sync::OnceLock::new();
    let allowed = DAEMON_CPUS.get_or_init(daemon_cpus).as_deref()?;
    let chosen = choose(quota, allowed, name)?;
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { MaybeUninit::zeroed().assume_init() };
    for cpu in chosen {
        // SAFETY: `cpu` came from a mask of CPU_SETSIZE bits: in range.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    Some(set)
}

/// The CPUs the calling thread may run on (the daemon's own mask).
fn daemon_cpus() -> Option<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { MaybeUninit::zeroed().assume_init() };
    // SAFETY: the size and pointer are those of `set`, which lives across the call.
    let got = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if got != 0 {
        return None;
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: every index is below CPU_SETSIZE, the set's size.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect();
    (!cpus.is_empty()).then_some(cpus)
}

/// `ceil(quota)` of `allowed`, consecutive (wrapping), from a place given
/// by `name`; `None` when that is all of them or `quota` is 0.
fn choose(quota: f64, allowed: &[usize], name: &str) -> Option<Vec<usize>> {
    if quota <= 0.0 || allowed.is_empty() {
        return None;
    }
    let count = (quota.ceil() as usize).max(1);
    if count >= allowed.len() {
        return None;
    }
    let start = (fnv1a(name.as_bytes()) % allowed.len() as u64) as usize;
    Some(
        (0..count)
            .map(|step| allowed[(start + step) % allowed.len()])
            .collect(),
    )
}

/// FNV-1a, 64 bits: stable across builds and runs (std's hasher is not
/// promised to be).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_rounded_up_and_never_more() {
        let host: Vec<usize> = (0..8).collect();
        for (quota, count) in [(0.01, 1), (1.0, 1), (1.5, 2), (2.0, 2), (7.5, 8)] {
            let chosen = choose(quota, &host, "sbx-ses-0123456789ab");
            if count == host.len() {
                assert_eq!(chosen, None, "{quota}: all of them is no mask");
            } else {
                assert_eq!(chosen.unwrap().len(), count, "{quota}");
            }
        }
        assert_eq!(choose(0.0, &host, "x"), None, "unlimited");
        assert_eq!(choose(2.0, &[0, 1], "x"), None, "as many as the host");
        assert_eq!(choose(4.0, &[0, 1], "x"), None, "more than the host");
    }

    #[test]
    fn the_same_name_gets_the_same_cpus_and_names_spread() {
        let allowed = [0, 2, 4, 6];
        let first = choose(1.0, &allowed, "prepared-3").unwrap();
        assert_eq!(first, choose(1.0, &allowed, "prepared-3").unwrap());
        assert!(first.iter().all(|cpu| allowed.contains(cpu)));
        let starts: std::collections::BTreeSet<usize> = (0..32)
            .map(|n| choose(1.0, &allowed, &format!("sbx-ses-{n:012x}")).unwrap()[0])
            .collect();
        assert!(starts.len() > 1, "every sandbox on one CPU: {starts:?}");
        let two = choose(2.0, &allowed, "prepared-3").unwrap();
        let at = allowed.iter().position(|&cpu| cpu == two[0]).unwrap();
        assert_eq!(two[1], allowed[(at + 1) % allowed.len()], "consecutive");
    }
}
