//! The daemon's network, checked once and trusted until the engine says it
//! changed.
//!
//! Before a container joins [`network`](super::egress_network::network), the driver checks that the network
//! is the one the egress rules hold (its bridge interface) and keeps
//! containers apart (inter-container communication off), making it when it
//! is missing. Made on every new container, that check was an engine call
//! on the caller's time each time. Now its outcome is
//! kept, and this watcher forgets it the moment the engine reports the
//! network created or destroyed under that name — by anyone — and whenever
//! the watcher's own event stream breaks, so the next ensure checks again.
//! Each subscription asks for the events since the moment it forgot the
//! outcome (less a margin for the engine's clock), so a change made while
//! it was (re)connecting is replayed rather than missed. A container create
//! or start that fails also forgets it (see the driver's ensure).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use bollard::query_parameters::EventsOptionsBuilder;
use futures::StreamExt;

use super::egress_network::network;
use super::engine::Engine;

/// How far back each subscription reaches, for an engine whose clock is
/// a little behind the daemon's (replaying a change costs only a check).
const CLOCK_MARGIN: Duration = Duration::from_secs(5);

/// Whether the last check (that found the network keeping containers
/// apart) still holds: no change has been seen since it began.
#[derive(Default)]
pub struct Checked {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Counts the forgets, so a check that raced one is not trusted.
    epoch: u64,
    trusted: bool,
}

impl Checked {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// True while the network need not be checked again.
    pub fn trusted(&self) -> bool {
        self.state().trusted
    }

    /// Taken before a check begins, for [`Checked::trust`].
    pub fn epoch(&self) -> u64 {
        self.state().epoch
    }

    /// Trusts a check begun at `epoch`, unless a change was seen since.
    pub fn trust(&self, epoch: u64) {
        let mut state = self.state();
        if state.epoch == epoch {
            state.trusted = true;
        }
    }

    /// The next ensure checks again.
    pub fn forget(&self) {
        let mut state = self.state();
        state.epoch += 1;
        state.trusted = false;
    }
}

/// Follows the engine's events about the network for as long as the
/// daemon runs, forgetting `checked` on each.
pub async fn watch(engine: Arc<Engine>, checked: Arc<Checked>) {
    let mut reconnect = super::engine::Reconnect::new();
    loop {
        // Forget first, then subscribe from that moment: nothing between
        // the two can be missed.
        checked.forget();
        let since = SystemTime::now() - CLOCK_MARGIN;
        let docker = reconnect.docker(&engine).await;
        let filters = HashMap::from([
            ("type", vec!["network".to_string()]),
            ("network", vec![network()]),
            ("event", vec!["create".to_string(), "destroy".to_string()]),
        ]);
        let seconds = since
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
            .to_string();
        let options = EventsOptionsBuilder::new()
            .filters(&filters)
            .since(&seconds)
            .build();
        let mut stream = docker.events(Some(options));
        let ended = loop {
            match stream.next().await {
                Some(Ok(event)) => {
                    tracing::debug!(action = ?event.action, network = %network(), "the sandboxes' network changed: it is checked again at the next ensure");
                    checked.forget();
                }
                Some(Err(error)) => break engine.classify(error).to_string(),
                None => break "the event stream ended".to_string(),
            }
        };
        tracing::debug!(%ended, "the network watcher's event stream ended");
        reconnect.pause().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_that_raced_a_change_is_not_trusted() {
        let checked = Checked::default();
        assert!(!checked.trusted(), "nothing is trusted before a check");
        let epoch = checked.epoch();
        checked.trust(epoch);
        assert!(checked.trusted());

        let epoch = checked.epoch();
        checked.forget();
        assert!(!checked.trusted());
        // The check began before the change was seen: it proves nothing.
        checked.trust(epoch);
        assert!(!checked.trusted());
        let epoch = checked.epoch();
        checked.trust(epoch);
        assert!(checked.trusted());
    }
}
