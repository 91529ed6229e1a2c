//! Reading the daemon's event stream in tests: wait (by long-polling the
//! daemon, with a generous deadline) for an event that matches.

use std::time::Duration;

use sandboxd_client::{Event, EventCursor, EventsReply, SandboxdClient};

/// Generous: the machine is busy; nothing here measures time.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(60);

/// Reads the events after `since` until one matches `wanted`: that one,
/// and every one before it. Panics, listing what it saw, at the deadline.
pub async fn wait_for_event(
    client: &SandboxdClient,
    since: Option<EventCursor>,
    wanted: impl Fn(&Event) -> bool,
) -> (Event, Vec<Event>) {
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    let mut cursor = since;
    let mut seen = Vec::new();
    while tokio::time::Instant::now() < deadline {
        match client
            .events(cursor.as_ref(), 100, Duration::from_secs(5))
            .await
            .unwrap()
        {
            EventsReply::Events { events, next } => {
                for event in events {
                    if wanted(&event) {
                        return (event, seen);
                    }
                    seen.push(event);
                }
                cursor = Some(next);
            }
            EventsReply::Expired { reason, .. } => panic!("expired: {reason}"),
        }
    }
    panic!("no such event within {EVENT_TIMEOUT:?}; seen: {seen:#?}")
}

/// The cursor of the newest event: what follows it is what happens next.
pub async fn events_now(client: &SandboxdClient) -> EventCursor {
    match client.events(None, 1000, Duration::ZERO).await.unwrap() {
        EventsReply::Events { next, .. } => next,
        EventsReply::Expired { reason, .. } => panic!("expired: {reason}"),
    }
}
