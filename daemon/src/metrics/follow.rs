//! Counts exits (and, once they exist, pauses) from the daemon's event
//! stream: every tier announces every runner exit there with its typed
//! reason, so nothing is counted per tier and nothing twice.

use std::sync::Arc;
use std::time::Duration;

use sandboxd_protocol::EventsReply;

use super::Metrics;
use crate::events::EventHub;

/// Events taken a read.
const BATCH: usize = 256;
/// How long one read waits for an event before it looks again.
const WAIT: Duration = Duration::from_secs(30);

/// Follows `events` from the oldest kept (so exits announced while the
/// driver started, such as runners found lost, are counted) until the
/// task is dropped.
pub async fn follow(events: Arc<EventHub>, metrics: Arc<Metrics>) {
    let mut since = None;
    loop {
        match events.wait_read(since.as_ref(), BATCH, WAIT).await {
            EventsReply::Events { events, next } => {
                for event in &events {
                    metrics.event(event);
                }
                since = Some(next);
            }
            EventsReply::Expired { reason, now } => {
                // Behind by more than the ring: what fell out is lost to
                // the counts, and counted as lost.
                let missed = since
                    .as_ref()
                    .map_or(0, |since: &sandboxd_protocol::EventCursor| {
                        now.seq.saturating_sub(since.seq)
                    });
                metrics.missed(missed);
                tracing::warn!(%reason, missed, "the metrics fell behind the event stream");
                since = Some(now);
            }
        }
    }
}
