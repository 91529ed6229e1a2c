//! glibc's allocator, set for the daemon: as many malloc arenas as CPUs,
//! not glibc's eight per CPU, and buffers of a few MiB reused, not mapped
//! and unmapped each time.
//!
//! glibc gives a thread that meets another in malloc an arena of its own,
//! up to eight per CPU, and each arena keeps the memory freed into it. The
//! daemon's threads (runtime workers, the blocking pool, spawner, pump and
//! remover threads) each took one, and with thousands of sandboxes their
//! free memory added up: at 2,000 running (`uid-cgroup`, 2 CPUs) the
//! daemon held 9.2–9.9 MiB of anonymous memory with one arena per CPU
//! against 10.3–10.8 MiB with the default. No more threads than CPUs run
//! at a time, so one arena each keeps malloc uncontended.

/// Caps the arenas at the CPUs this process may use. Called first in
/// `main`, while the process has one thread.
pub fn cap_at_cpus() {
    #[cfg(target_env = "gnu")]
    {
        let cpus = std::thread::available_parallelism().map_or(1, |cpus| cpus.get());
        let cpus = libc::c_int::try_from(cpus).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets a parameter of glibc's allocator; no
        // other thread exists yet to allocate meanwhile.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, cpus) };
    }
}

/// Buffers below this are taken from the arenas, never mapped alone.
#[cfg_attr(not(target_env = "gnu"), allow(dead_code))]
const MMAP_THRESHOLD: libc::c_int = 4 << 20;
/// Free memory at an arena's top is given back past this.
#[cfg_attr(not(target_env = "gnu"), allow(dead_code))]
const TRIM_THRESHOLD: libc::c_int = 8 << 20;

/// Keeps file chunks' buffers (a frame of up to 1 MiB, read into a buffer
/// that doubles to 2 MiB) in the arenas. glibc's own threshold only
/// follows the largest block freed and trims an arena past twice that, so
/// each chunk of a copy got pages mapped (or trimmed) fresh and faulted in
/// again: a tar stream in or out cost about a CPU second per GiB more in
/// the daemon. At most [`TRIM_THRESHOLD`] stays free at each arena's top.
/// Called first in `main`, with [`cap_at_cpus`].
pub fn keep_large_buffers() {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallopt only sets parameters of glibc's allocator; no
        // other thread exists yet to allocate meanwhile.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        }
    }
}
