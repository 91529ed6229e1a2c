//! The event stream, as a [`futures::Stream`] that hides the long-poll.
//!
//! Each poll asks the daemon for what follows the last cursor, waiting up
//! to [`POLL_WAIT`] when nothing is new, so a follower learns of an exit
//! as it happens instead of polling every sandbox. A cursor the daemon can
//! no longer continue (it restarted, or the follower fell further behind
//! than its ring) comes out as [`StreamItem::Expired`]: relist, and the
//! stream goes on from the daemon's present.

use std::collections::VecDeque;
use std::time::Duration;

use futures::Stream;
use sandboxd_protocol::{Event, EventCursor, EventsReply};

use crate::client::Resend;
use crate::{ClientError, SandboxdClient};

/// How long one call waits for an event before asking again.
pub const POLL_WAIT: Duration = Duration::from_secs(25);
/// How many events one call fetches at most.
const BATCH: u32 = 256;
/// Slack on top of the wait for the call's own deadline.
const SLACK: Duration = Duration::from_secs(10);

/// One item of [`SandboxdClient::event_stream`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamItem {
    Event(Event),
    /// Events were missed (see [`EventsReply::Expired`]): relist; the
    /// stream continues from `now`.
    Expired {
        reason: String,
        now: EventCursor,
    },
}

impl SandboxdClient {
    /// One `events` call: what follows `since` (`None`: the oldest kept),
    /// at most `max`, waiting up to `wait` when nothing is new.
    pub async fn events(
        &self,
        since: Option<&EventCursor>,
        max: u32,
        wait: Duration,
    ) -> Result<EventsReply, ClientError> {
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        self.call_within(
            self.deadline().max(wait + SLACK),
            Resend::Once,
            |rpc, ctx| {
                let since = since.cloned();
                async move { rpc.events(ctx, since, max, wait_ms).await }
            },
        )
        .await
    }

    /// Every event after `since` (`None`: from the oldest kept), forever.
    /// An error ends nothing by itself: the caller decides whether to poll
    /// the stream again (it retries from the same cursor).
    pub fn event_stream(
        &self,
        since: Option<EventCursor>,
    ) -> impl Stream<Item = Result<StreamItem, ClientError>> + Send + 'static {
        let state = (self.clone(), since, VecDeque::<StreamItem>::new());
        futures::stream::unfold(state, |(client, mut since, mut pending)| async move {
            loop {
                if let Some(item) = pending.pop_front() {
                    return Some((Ok(item), (client, since, pending)));
                }
                match client.events(since.as_ref(), BATCH, POLL_WAIT).await {
                    Ok(EventsReply::Events { events, next }) => {
                        since = Some(next);
                        pending.extend(events.into_iter().map(StreamItem::Event));
                    }
                    Ok(EventsReply::Expired { reason, now }) => {
                        since = Some(now.clone());
                        pending.push_back(StreamItem::Expired { reason, now });
                    }
                    Err(error) => return Some((Err(error), (client, since, pending))),
                }
            }
        })
    }
}
