//! As many malloc arenas as CPUs, not glibc's eight per CPU.
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
