//! The last output of a removed container, kept for the followers of its
//! generation.
//!
//! A container's log goes with the container, and a follower polls: what
//! the runner wrote between the follower's last read and the removal (its
//! "got SIGTERM, bye") would be lost. So when a container that someone
//! followed lately is removed, its newest entries (stamped, as the engine
//! hands them out) are read first and kept in memory for
//! [`DEPARTED_FOR`], with one line on how its generation ended; a
//! follower whose cursor names that container reads the rest from them,
//! then the line. A container nobody followed costs its removal nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a removed container's last output stays readable.
pub const DEPARTED_FOR: Duration = Duration::from_secs(60);

/// How many of its newest entries are kept.
pub const DEPARTED_ENTRIES: u64 = 4096;

/// A follower polled within this long: its sandbox counts as followed.
const FOLLOWED_WITHIN: Duration = Duration::from_secs(30);

/// One removed container's last entries.
#[derive(Debug, Clone)]
pub struct Departed {
    /// The container's identity, as cursors carry it.
    pub identity: u32,
    /// Its newest entries, stamped, in the log's order.
    pub entries: Vec<Vec<u8>>,
    /// How many were asked for (fewer came: they are the whole log).
    pub asked: u64,
    /// How its generation ended, one line.
    pub how: String,
}

/// Every sandbox's removed container, and which sandboxes are followed.
#[derive(Debug, Default)]
pub struct DepartedLogs {
    inner: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    departed: HashMap<String, (Departed, Instant)>,
    followed: HashMap<String, Instant>,
}

impl DepartedLogs {
    /// A follower of `base` polled now.
    pub fn followed(&self, base: &str) {
        let mut state = self.state();
        state.followed.insert(base.to_string(), Instant::now());
    }

    /// True when a follower of `base` polled lately.
    pub fn is_followed(&self, base: &str) -> bool {
        self.state()
            .followed
            .get(base)
            .is_some_and(|at| at.elapsed() < FOLLOWED_WITHIN)
    }

    /// Keeps `departed` for `base`'s followers; forgets what expired.
    pub fn keep(&self, base: &str, departed: Departed) {
        let mut state = self.state();
        state
            .departed
            .retain(|_, (_, since)| since.elapsed() < DEPARTED_FOR);
        state
            .followed
            .retain(|_, at| at.elapsed() < FOLLOWED_WITHIN);
        state
            .departed
            .insert(base.to_string(), (departed, Instant::now()));
    }

    /// What was kept of `base`'s container `identity`, if still kept.
    pub fn get(&self, base: &str, identity: u32) -> Option<Departed> {
        self.state()
            .departed
            .get(base)
            .filter(|(departed, since)| {
                departed.identity == identity && since.elapsed() < DEPARTED_FOR
            })
            .map(|(departed, _)| departed.clone())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_output_is_found_by_its_container_only() {
        let logs = DepartedLogs::default();
        assert!(!logs.is_followed("sbx-a"));
        logs.followed("sbx-a");
        assert!(logs.is_followed("sbx-a"));
        logs.keep(
            "sbx-a",
            Departed {
                identity: 7,
                entries: vec![b"2026-01-01T00:00:00Z bye\n".to_vec()],
                asked: DEPARTED_ENTRIES,
                how: "generation 1: deprovisioned".to_string(),
            },
        );
        assert!(logs.get("sbx-a", 8).is_none(), "another container's cursor");
        assert_eq!(logs.get("sbx-a", 7).unwrap().entries.len(), 1);
        assert!(logs.get("sbx-b", 7).is_none());
    }
}
