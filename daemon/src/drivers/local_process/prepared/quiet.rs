//! When the pool's refill may work: not right after a runner's start.
//!
//! The runner's loading (its `ld.so`, 1.3–1.7 ms traced on the 2-vCPU
//! bench host) and the caller waking to its answer both come right after
//! a start. A refill woken at once held the other vCPU, and the caller's
//! thread waited 1.2–1.5 ms behind one of the two (`perf sched`; see
//! BENCHMARKS.md, the prepared rows). Neither end can be observed from the driver:
//! a runner is any program, and the server writes the answer. So the wait
//! is a time, [`AFTER_A_START`]: short next to the wait for the next take,
//! which is what the pool is for, and long next to a start.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long after a runner's start the refill waits before it works.
pub const AFTER_A_START: Duration = Duration::from_millis(3);

/// The moment before which no refill works; each start pushes it back.
pub struct Quiet {
    until: Mutex<Option<Instant>>,
    /// How long after a start: [`AFTER_A_START`], or longer where the
    /// runner's start takes longer (under gVisor, see `gvisor::prepared`).
    after: Duration,
}

impl Default for Quiet {
    fn default() -> Self {
        Quiet::lasting(AFTER_A_START)
    }
}

impl Quiet {
    /// Quiet for `after` after each start.
    pub fn lasting(after: Duration) -> Quiet {
        Quiet {
            until: Mutex::new(None),
            after,
        }
    }

    /// A runner has just started: quiet for its time from now.
    pub fn after_a_start(&self) {
        self.quiet_until(Instant::now() + self.after);
    }

    fn quiet_until(&self, until: Instant) {
        *self.until.lock().unwrap_or_else(PoisonError::into_inner) = Some(until);
    }

    /// Sleeps until no start is that recent, or `stopping` is set. A
    /// start that took nothing from the pool counts too, so during a
    /// burst the refill works only in its pauses of [`AFTER_A_START`] or
    /// more, and after it: the burst's cold starts keep the CPUs.
    pub fn wait(&self, stopping: &AtomicBool) {
        loop {
            let until = *self.until.lock().unwrap_or_else(PoisonError::into_inner);
            let left = until.map_or(Duration::ZERO, |until| {
                until.saturating_duration_since(Instant::now())
            });
            if left.is_zero() || stopping.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(left);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_no_start_a_refill_works_at_once() {
        let began = Instant::now();
        Quiet::default().wait(&AtomicBool::new(false));
        assert!(began.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_refill_waits_out_the_quiet_after_the_latest_start() {
        let quiet = Quiet::default();
        quiet.after_a_start();
        let later = Instant::now() + Duration::from_millis(40);
        quiet.quiet_until(later);
        quiet.wait(&AtomicBool::new(false));
        assert!(
            Instant::now() >= later,
            "returned before the latest start's quiet"
        );
    }

    #[test]
    fn a_stop_ends_the_wait() {
        let quiet = Quiet::default();
        quiet.quiet_until(Instant::now() + Duration::from_secs(3600));
        let began = Instant::now();
        quiet.wait(&AtomicBool::new(true));
        assert!(began.elapsed() < Duration::from_secs(60));
    }
}
