//! Stand-in API server: watches (`?watch=1`), as the real server serves
//! them: a chunked stream of `{"type":…,"object":…}` lines (`ADDED`,
//! `MODIFIED`, `DELETED`) after the given `resourceVersion`, for one kind
//! in one namespace, filtered by label selector; `ERROR` with a 410
//! `Expired` Status when that version is older than the history kept (the
//! client relists); ended at `timeoutSeconds`. No bookmarks (they are
//! optional). Without a `resourceVersion` (or with "0") the current
//! objects come first as `ADDED`, as the real server sends them.
//!
//! The history is the store's change log ([`Change`]), bounded as etcd's
//! compaction bounds it; [`crate::k8s_standin::StandIn::expire_watches`]
//! ends every open watch with a 410 and drops the history, so a test can
//! force a relist.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::StreamBody;
use hyper::body::{Bytes, Frame};
use serde_json::{json, Value};

use super::selector::Selector;
use super::status::Failure;
use super::store::{Kind, Store};

/// How many changes the store keeps for watches to resume from.
pub const HISTORY: usize = 2000;

/// One change to one object, at its revision.
#[derive(Clone)]
pub struct Change {
    pub revision: u64,
    pub resource: &'static str,
    pub namespace: String,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    /// The object as it was rendered after the change (before, for `DELETED`,
    /// with the deletion's revision).
    pub object: Value,
}

/// The change log and the wake-up of the watches waiting on it.
#[derive(Default)]
pub struct History {
    changes: VecDeque<Change>,
    /// The newest revision no longer in `changes` (0: nothing dropped).
    pub compacted_through: u64,
    /// Bumped by [`History::expire_watches`]: a watch opened before the
    /// bump is answered 410 and ended.
    pub watches_expired: u64,
    pub arrived: Arc<tokio::sync::Notify>,
}

impl History {
    pub fn record(&mut self, change: Change) {
        self.changes.push_back(change);
        while self.changes.len() > HISTORY {
            if let Some(dropped) = self.changes.pop_front() {
                self.compacted_through = dropped.revision;
            }
        }
        self.arrived.notify_waiters();
    }

    /// Ends every open watch with 410 `Expired`, as an API server does to
    /// watchers that fell too far behind; and drops the history, so none
    /// can resume from where it was: each must relist.
    pub fn expire_watches(&mut self, revision: u64) {
        self.compact(revision);
        self.watches_expired += 1;
        self.arrived.notify_waiters();
    }

    /// Drops every change up to `revision`, as etcd's compaction does.
    pub fn compact(&mut self, revision: u64) {
        while self
            .changes
            .front()
            .is_some_and(|change| change.revision <= revision)
        {
            self.changes.pop_front();
        }
        self.compacted_through = self.compacted_through.max(revision);
    }
}

/// What one watch asks for.
pub struct Request {
    pub kind: Kind,
    pub namespace: String,
    pub selector: Selector,
    /// `None`: from now, the current objects first.
    pub after: Option<u64>,
    pub timeout: Duration,
}

/// One line of the stream.
fn line(kind: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": kind, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

/// The watch's body, or the failure to answer with instead.
pub type Body = StreamBody<
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send>>,
>;

pub fn serve(store: Arc<Mutex<Store>>, request: Request) -> Result<Body, Failure> {
    let (first, after, arrived, epoch) = {
        let store = store.lock().unwrap_or_else(|poison| poison.into_inner());
        let arrived = store.history.arrived.clone();
        let epoch = store.history.watches_expired;
        match request.after {
            Some(after) if after < store.history.compacted_through => {
                // Sent as an ERROR event on a 200 stream, as the real server does.
                let failure = super::status::expired(after, store.history.compacted_through);
                let stream =
                    futures::stream::once(
                        async move { Ok(Frame::data(line("ERROR", &failure.body))) },
                    );
                return Ok(StreamBody::new(Box::pin(stream)));
            }
            Some(after) => (Vec::new(), after, arrived, epoch),
            None => {
                let current = store.list(request.kind, &request.namespace, &request.selector)?;
                let items = current["items"].as_array().cloned().unwrap_or_default();
                let revision = store.revision();
                (
                    items.iter().map(|item| line("ADDED", item)).collect(),
                    revision,
                    arrived,
                    epoch,
                )
            }
        }
    };
    let deadline = tokio::time::Instant::now() + request.timeout;
    let head = futures::stream::iter(first.into_iter().map(|bytes| Ok(Frame::data(bytes))));
    let state = Following {
        store,
        request,
        after,
        arrived,
        epoch,
        done: false,
    };
    let tail = futures::stream::unfold(state, move |mut state| async move {
        let bytes = state.next(deadline).await?;
        Some((Ok(Frame::data(bytes)), state))
    });
    Ok(StreamBody::new(Box::pin(futures::StreamExt::chain(
        head, tail,
    ))))
}

/// A watch past its first lines: where it is in the history.
struct Following {
    store: Arc<Mutex<Store>>,
    request: Request,
    after: u64,
    arrived: Arc<tokio::sync::Notify>,
    /// [`History::watches_expired`] when the watch opened.
    epoch: u64,
    /// An ERROR was sent: the stream ends.
    done: bool,
}

impl Following {
    /// The next lines, waiting for a change until the deadline.
    async fn next(&mut self, deadline: tokio::time::Instant) -> Option<Bytes> {
        if self.done {
            return None;
        }
        loop {
            // Registered before looking, so a change in between still wakes it.
            let arrived = self.arrived.clone();
            let notified = arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let store = self
                    .store
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner());
                if self.after < store.history.compacted_through
                    || self.epoch != store.history.watches_expired
                {
                    let failure =
                        super::status::expired(self.after, store.history.compacted_through);
                    self.done = true;
                    return Some(line("ERROR", &failure.body));
                }
                let mut lines = Vec::new();
                let after = self.after;
                for change in store
                    .history
                    .changes
                    .iter()
                    .filter(|change| change.revision > after)
                {
                    self.after = change.revision;
                    if change.resource == self.request.kind.resource
                        && change.namespace == self.request.namespace
                        && self.request.selector.matches(&change.object)
                    {
                        lines.push(line(change.kind, &change.object));
                    }
                }
                if !lines.is_empty() {
                    return Some(Bytes::from(lines.concat()));
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }
}
