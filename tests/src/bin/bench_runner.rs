//! `bench-runner`: the benchmark's runner. It does nothing but wait for
//! SIGTERM and exit 0 on it, so what the benchmark measures is the cost of
//! starting and stopping a process, not of the runner's own work.
//!
//! SIGTERM is blocked before anything else, so one that arrives while the
//! program is still starting is pending, and `sigwait` returns at once.

fn main() {
    // SAFETY: plain libc calls on a zeroed, then initialised, signal set.
    unsafe {
        let mut term: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut term);
        libc::sigaddset(&mut term, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &term, std::ptr::null_mut());
        let mut received = 0;
        while libc::sigwait(&term, &mut received) != 0 {}
    }
}
