//! A sandbox's commands go when it is deprovisioned, however that happens:
//! a call, a connect sandbox's TTL, a tier's reaper. One follower of the
//! event stream sees every `deprovisioned` event and lets the commands of
//! that incarnation go (never those of a newer one with the same id).

use std::sync::Weak;
use std::time::Duration;

use sandboxd_protocol::{EventKind, EventsReply};

use super::CommandTable;
use crate::events::EventHub;
use crate::sandbox_key::SandboxKey;

/// How many events one read takes.
const BATCH: usize = 256;
/// How long one read waits for events.
const WAIT: Duration = Duration::from_secs(60);

/// Follows `events` for as long as the table lives.
pub async fn on_deprovision(table: Weak<CommandTable>, events: std::sync::Arc<EventHub>) {
    let mut cursor = events.now();
    loop {
        let reply = events.wait_read(Some(&cursor), BATCH, WAIT).await;
        let Some(table) = table.upgrade() else { return };
        match reply {
            EventsReply::Events { events: seen, next } => {
                for event in seen.iter().filter(|e| e.kind == EventKind::Deprovisioned) {
                    let key = SandboxKey::new(event.scope, event.id.clone());
                    table.forget_incarnation(&key, &event.uid);
                }
                cursor = next;
            }
            // Fell behind the ring: some went unseen; their commands stay
            // until the bound per sandbox lets them go.
            EventsReply::Expired { reason, now } => {
                tracing::warn!(%reason, "the commands' forgetter missed events");
                cursor = now;
            }
        }
    }
}
