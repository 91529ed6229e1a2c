//! A runner's lifetime clock: how long it has run, time paused not
//! counted (`max_lifetime` is checked against it), and since when it is
//! paused.

use std::time::{Duration, Instant};

/// When a runner started, and its pauses.
#[derive(Debug, Clone)]
pub struct LifeClock {
    started: Instant,
    /// Since when it is paused: the instant, and the wall clock (ms since
    /// the Unix epoch) for `describe`.
    paused_since: Option<(Instant, u64)>,
    /// The pauses before the current one, in total.
    paused_total: Duration,
}

impl LifeClock {
    /// A runner that started at `started`.
    pub fn started_at(started: Instant) -> LifeClock {
        LifeClock {
            started,
            paused_since: None,
            paused_total: Duration::ZERO,
        }
    }

    #[cfg(test)]
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Since when it is paused, in milliseconds since the Unix epoch.
    pub fn paused_since_unix_ms(&self) -> Option<u64> {
        self.paused_since.map(|(_, unix_ms)| unix_ms)
    }

    pub fn is_paused(&self) -> bool {
        self.paused_since.is_some()
    }

    /// How long it has run at `now`, paused time not counted.
    pub fn lifetime(&self, now: Instant) -> Duration {
        let paused_now = self.paused_since.map_or(Duration::ZERO, |(since, _)| {
            now.saturating_duration_since(since)
        });
        now.saturating_duration_since(self.started)
            .saturating_sub(self.paused_total + paused_now)
    }

    /// Paused now (`unix_ms`: the wall clock of now); one already paused
    /// keeps its first pause's time.
    pub fn mark_paused(&mut self, unix_ms: u64) {
        if self.paused_since.is_none() {
            self.paused_since = Some((Instant::now(), unix_ms));
        }
    }

    /// Paused since `unix_ms` (the wall clock, earlier than now: a pause
    /// found rather than made), `now_unix_ms` being now's.
    pub fn mark_paused_since(&mut self, unix_ms: u64, now_unix_ms: u64) {
        if self.paused_since.is_none() {
            let ago = Duration::from_millis(now_unix_ms.saturating_sub(unix_ms));
            let now = Instant::now();
            self.paused_since = Some((now.checked_sub(ago).unwrap_or(now), unix_ms));
        }
    }

    /// Resumed now: the pause is added to the total. True when it was
    /// paused.
    pub fn mark_resumed(&mut self) -> bool {
        match self.paused_since.take() {
            Some((since, _)) => {
                self.paused_total += Instant::now().saturating_duration_since(since);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paused_time_is_not_lifetime() {
        let start = Instant::now() - Duration::from_secs(10);
        let mut clock = LifeClock::started_at(start);
        assert!(clock.lifetime(Instant::now()) >= Duration::from_secs(10));
        clock.mark_paused(42);
        assert_eq!(clock.paused_since_unix_ms(), Some(42));
        clock.mark_paused(43);
        assert_eq!(clock.paused_since_unix_ms(), Some(42), "the first pause");
        let later = Instant::now() + Duration::from_secs(100);
        assert!(clock.lifetime(later) < Duration::from_secs(11));
        assert!(clock.mark_resumed());
        assert!(!clock.mark_resumed());
        assert!(!clock.is_paused());
    }
}
