//! Work-aware idleness: the idle window of one runner.
//!
//! Each sample gives the runner's CPU time so far and how much output it
//! has written so far (bytes; any counter that only grows). A sample saw
//! work when the output grew, or the runner used at least [`BUSY_SHARE`]
//! of one core since the sample before; a runner none of whose samples
//! saw work for the whole `idle` window is idle. What cannot be read
//! counts as work: a runner is never stopped on what the daemon could not
//! see.

use std::time::{Duration, Instant};

/// The share of one core below which a runner counts as not working: 1 %
/// (10 ms of CPU per second). A runner waiting for work — a long poll on
/// its task queue, a heartbeat, a runtime's timers and garbage collector —
/// uses well under a tenth of that; any real work (a build, a test run, a
/// model call's parsing, even a shell loop that forks `sleep`) uses more
/// than that within a second or two. A runner that computes never looks
/// idle, whatever the control plane does.
pub const BUSY_SHARE: f64 = 0.01;

/// True when `cpu_usec` used over `elapsed` is at least [`BUSY_SHARE`].
fn busy(cpu_usec: u64, elapsed: Duration) -> bool {
    cpu_usec as f64 >= elapsed.as_micros() as f64 * BUSY_SHARE
}

/// The last sample of one runner, and the last that saw work.
#[derive(Debug, Clone)]
pub struct IdleWindow {
    output_bytes: Option<u64>,
    cpu_usec: Option<u64>,
    at: Instant,
    /// The last sample that saw work (or the start, or the last resume).
    busy_at: Instant,
}

impl IdleWindow {
    /// A window that starts at `at`, from these counts (`None`: not known
    /// yet; the first sample that reads it only sets it).
    pub fn starting(at: Instant, cpu_usec: Option<u64>, output_bytes: Option<u64>) -> IdleWindow {
        IdleWindow {
            output_bytes,
            cpu_usec,
            at,
            busy_at: at,
        }
    }

    /// Starts the window again at `at` (a runner just resumed has had no
    /// chance to work), keeping the counts.
    pub fn restart(&mut self, at: Instant) {
        self.at = at;
        self.busy_at = at;
    }

    /// Takes one sample at `at`; true when the runner has now been idle
    /// for the whole `idle` window. `None` for a count that could not be
    /// read: that sample saw work.
    pub fn sample(
        &mut self,
        cpu_usec: Option<u64>,
        output_bytes: Option<u64>,
        at: Instant,
        idle: Duration,
    ) -> bool {
        let wrote = match (output_bytes, self.output_bytes) {
            (Some(now), Some(before)) => now != before,
            (Some(_), None) => false,
            (None, _) => true,
        };
        let computed = match (cpu_usec, self.cpu_usec) {
            (Some(now), Some(before)) => busy(
                now.saturating_sub(before),
                at.saturating_duration_since(self.at),
            ),
            // The first count read: nothing to compare it with yet, so
            // the window goes on from the start.
            (Some(_), None) => false,
            (None, _) => true,
        };
        self.output_bytes = output_bytes.or(self.output_bytes);
        self.cpu_usec = cpu_usec.or(self.cpu_usec);
        self.at = at;
        if wrote || computed {
            self.busy_at = at;
        }
        at.saturating_duration_since(self.busy_at) >= idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_or_output_restarts_the_window_and_quiet_ends_it() {
        let idle = Duration::from_secs(2);
        let start = Instant::now();
        let mut window = IdleWindow::starting(start, Some(0), Some(0));
        let second = Duration::from_secs(1);
        // 5 ms in a second: under 1 % of a core.
        assert!(!window.sample(Some(5_000), Some(0), start + second, idle));
        assert!(window.sample(Some(9_000), Some(0), start + 2 * second, idle));
        // 20 ms in a second: work.
        assert!(!window.sample(Some(29_000), Some(0), start + 3 * second, idle));
        assert!(!window.sample(Some(29_000), Some(0), start + 4 * second, idle));
        assert!(
            !window.sample(Some(29_000), Some(10), start + 5 * second, idle),
            "output is work"
        );
        assert!(!window.sample(Some(29_000), Some(10), start + 6 * second, idle));
        assert!(window.sample(Some(29_000), Some(10), start + 7 * second, idle));
        assert!(
            !window.sample(None, Some(10), start + 8 * second, idle),
            "unread CPU counts as work"
        );
        assert!(
            !window.sample(Some(29_000), None, start + 11 * second, idle),
            "unread output counts as work"
        );
        window.restart(start + 20 * second);
        assert!(!window.sample(Some(29_000), Some(10), start + 21 * second, idle));
        assert!(window.sample(Some(29_000), Some(10), start + 22 * second, idle));
    }

    #[test]
    fn the_first_count_read_only_sets_it() {
        let idle = Duration::from_secs(2);
        let start = Instant::now();
        let mut window = IdleWindow::starting(start, None, None);
        assert!(!window.sample(
            Some(1_000_000),
            Some(500),
            start + Duration::from_secs(1),
            idle
        ));
        assert!(window.sample(
            Some(1_000_000),
            Some(500),
            start + Duration::from_secs(2),
            idle
        ));
    }
}
