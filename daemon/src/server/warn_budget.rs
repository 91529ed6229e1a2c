//! A budget of warning lines per peer uid, so one misbehaving client cannot
//! fill the disk through the daemon's log.
//!
//! A fuzzing client once made about 10,000 warnings a second (one per bad
//! or refused connection). Now each uid gets the first [`LINES_PER_WINDOW`]
//! lines of a [`WINDOW`]; the rest are counted, and one summary line per
//! window says how many were left out. The summary is written by the next
//! warning after the window, or by [`WarnBudget::flush`], which the accept
//! loop calls once a window, whichever comes first.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Lines each uid may log per window before they are only counted.
pub const LINES_PER_WINDOW: u32 = 5;
/// The window, and how often the summaries are written.
pub const WINDOW: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Window {
    started: Instant,
    logged: u32,
    suppressed: u64,
}

/// Per-uid counters of warning lines.
#[derive(Debug, Default)]
pub struct WarnBudget {
    windows: Mutex<HashMap<u32, Window>>,
}

impl WarnBudget {
    /// True when the caller may write its warning about `uid` now; false
    /// when it is over the budget and has been counted instead.
    pub fn allow(&self, uid: u32) -> bool {
        self.allow_at(uid, Instant::now())
    }

    fn allow_at(&self, uid: u32, now: Instant) -> bool {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let window = windows.entry(uid).or_insert(Window {
            started: now,
            logged: 0,
            suppressed: 0,
        });
        if now.duration_since(window.started) >= WINDOW {
            summarize(uid, window);
            *window = Window {
                started: now,
                logged: 0,
                suppressed: 0,
            };
        }
        if window.logged < LINES_PER_WINDOW {
            window.logged += 1;
            true
        } else {
            window.suppressed += 1;
            false
        }
    }

    /// Writes the summary of every finished window that left lines out,
    /// and forgets the uids that have been quiet for a whole window.
    pub fn flush(&self) {
        self.flush_at(Instant::now());
    }

    fn flush_at(&self, now: Instant) {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        windows.retain(|uid, window| {
            if now.duration_since(window.started) < WINDOW {
                return true;
            }
            summarize(*uid, window);
            false
        });
    }

    #[cfg(test)]
    fn suppressed(&self, uid: u32) -> u64 {
        let windows = self.windows.lock().unwrap();
        windows.get(&uid).map_or(0, |window| window.suppressed)
    }
}

fn summarize(uid: u32, window: &Window) {
    if window.suppressed > 0 {
        tracing::warn!(
            uid,
            suppressed = window.suppressed,
            window_secs = WINDOW.as_secs(),
            "more warnings about this uid's connections were left out of the log"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_lines_pass_then_they_are_counted_per_uid_and_per_window() {
        let budget = WarnBudget::default();
        let start = Instant::now();
        let passed = (0..100).filter(|_| budget.allow_at(7, start)).count();
        assert_eq!(passed, LINES_PER_WINDOW as usize);
        assert_eq!(budget.suppressed(7), 100 - u64::from(LINES_PER_WINDOW));
        assert!(budget.allow_at(8, start), "another uid has its own budget");
        // A new window starts afresh (its summary was written on the way).
        assert!(budget.allow_at(7, start + WINDOW));
        assert_eq!(budget.suppressed(7), 0);
        budget.flush_at(start + WINDOW * 3);
        assert!(budget.windows.lock().unwrap().is_empty());
    }
}
