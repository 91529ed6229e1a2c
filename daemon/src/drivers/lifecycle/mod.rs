//! What every tier's idle and lifetime watcher shares: when a runner
//! counts as idle ([`window`]), how long it has run with its pauses not
//! counted ([`clock`]), and how often to look ([`tick`]). Each tier only
//! says where a runner's CPU time and output are read and how it is
//! stopped or paused; the decisions are made here, once.

pub mod clock;
pub mod window;

use std::time::Duration;

use crate::config::LifecycleConfig;

pub use clock::LifeClock;
pub use window::IdleWindow;

/// The shortest and longest time between two samples. 10 s at most: a
/// 30-minute window still gets 180 samples, and 10,000 runners cost 1,000
/// reads a second.
pub const MIN_TICK: Duration = Duration::from_millis(250);
pub const MAX_TICK: Duration = Duration::from_secs(10);

/// The time between two samples for `limits`: a quarter of the shortest
/// window configured, within [`MIN_TICK`]..=[`MAX_TICK`].
pub fn tick(limits: &LifecycleConfig) -> Duration {
    sandboxd_protocol::Scope::ALL
        .into_iter()
        .flat_map(|scope| {
            let limits = limits.of(scope);
            [limits.idle, limits.max_lifetime]
        })
        .flatten()
        .map(|window| window / 4)
        .min()
        .unwrap_or(MAX_TICK)
        .clamp(MIN_TICK, MAX_TICK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ScopeLimits;

    #[test]
    fn the_tick_is_a_quarter_of_the_shortest_window_within_bounds() {
        let mut limits = LifecycleConfig::default();
        assert_eq!(tick(&limits), MAX_TICK);
        limits.session = ScopeLimits {
            idle: Some(Duration::from_secs(1800)),
            ..ScopeLimits::default()
        };
        assert_eq!(tick(&limits), MAX_TICK);
        limits.session.idle = Some(Duration::from_secs(20));
        assert_eq!(tick(&limits), Duration::from_secs(5));
        limits.connect.max_lifetime = Some(Duration::from_secs(8));
        assert_eq!(tick(&limits), Duration::from_secs(2));
        limits.workflow.idle = Some(Duration::from_secs(1));
        assert_eq!(tick(&limits), MIN_TICK);
    }
}
