//! The event stream's daemon side: a bounded ring of the latest events and
//! a wake-up for the callers long-polling it (see `sandboxd_protocol::events`).
//!
//! Emission is on the hot paths (every spawn, every exit), so it costs one
//! short mutex hold around a `VecDeque` push — no I/O, no `.await`, nothing
//! allocated under the lock — and one `Notify::notify_waiters`, which is a
//! few atomics when nobody follows. Readers copy what they need out under
//! the same lock and wait outside it.

mod kept;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sandboxd_protocol::{Event, EventCommand, EventCursor, EventKind, EventsReply, ExitInfo};
use tokio::sync::Notify;

use crate::sandbox_key::SandboxKey;
use crate::unix_time::now_unix_ms;
use kept::Kept;

/// The daemon's events: the latest `capacity`, and the callers waiting for more.
pub struct EventHub {
    /// Random at each start: a cursor of another boot is expired.
    boot_id: String,
    ring: Mutex<Ring>,
    /// Woken on every emit; waiters register before they look.
    arrived: Notify,
}

struct Ring {
    /// Never more than `capacity`: made that size, the oldest dropped
    /// before the newest goes in, so it is never reallocated.
    events: VecDeque<Kept>,
    capacity: usize,
    /// The sequence number the next event gets (the first is 1).
    next_seq: u64,
    /// The newest sequence number dropped from the ring (0: none yet).
    dropped_through: u64,
}

impl EventHub {
    pub fn new(capacity: usize) -> Arc<EventHub> {
        Arc::new(EventHub {
            boot_id: format!("{:016x}", rand::random::<u64>()),
            ring: Mutex::new(Ring {
                events: VecDeque::with_capacity(capacity.min(4096)),
                capacity: capacity.max(1),
                next_seq: 1,
                dropped_through: 0,
            }),
            arrived: Notify::new(),
        })
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cursor of the newest event: following from it gets only what
    /// happens next.
    pub fn now(&self) -> EventCursor {
        let seq = self.ring().next_seq - 1;
        self.cursor(seq)
    }

    fn cursor(&self, seq: u64) -> EventCursor {
        EventCursor {
            boot_id: self.boot_id.clone(),
            seq,
        }
    }

    /// Records an event and wakes every waiting caller.
    pub fn emit(
        &self,
        kind: EventKind,
        key: &SandboxKey,
        uid: &str,
        generation: u64,
        exit: Option<ExitInfo>,
    ) {
        self.keep(Kept::new(now_unix_ms(), kind, key, uid, generation, exit));
    }

    /// Records an event about one of `key`'s commands.
    pub fn emit_command(
        &self,
        kind: EventKind,
        key: &SandboxKey,
        uid: &str,
        generation: u64,
        command: EventCommand,
        exit: Option<ExitInfo>,
    ) {
        let mut event = Kept::new(now_unix_ms(), kind, key, uid, generation, exit);
        event.command = Some(Box::new(command));
        self.keep(event);
    }

    fn keep(&self, mut event: Kept) {
        let dropped = {
            let mut ring = self.ring();
            event.seq = ring.next_seq;
            ring.next_seq += 1;
            let dropped = if ring.events.len() >= ring.capacity {
                ring.events.pop_front()
            } else {
                None
            };
            if let Some(dropped) = &dropped {
                ring.dropped_through = dropped.seq;
            }
            ring.events.push_back(event);
            dropped
        };
        // Freed outside the lock.
        drop(dropped);
        self.arrived.notify_waiters();
    }

    /// The events after `since` (all kept, for `None`), at most `max`; or
    /// why the cursor cannot be continued.
    fn read(&self, since: Option<&EventCursor>, max: usize) -> EventsReply {
        let ring = self.ring();
        let newest = ring.next_seq - 1;
        let after = match since {
            None => ring.dropped_through,
            Some(cursor) if cursor.boot_id != self.boot_id => {
                drop(ring);
                return self.expired(format!(
                    "cursor {cursor} is from another daemon boot (this one is {}): the daemon restarted, so events were missed; relist",
                    self.boot_id
                ));
            }
            Some(cursor) if cursor.seq > newest => {
                drop(ring);
                return self.expired(format!(
                    "cursor {cursor} is ahead of the newest event ({newest}) of this boot; relist"
                ));
            }
            Some(cursor) if cursor.seq < ring.dropped_through => {
                let oldest = ring.dropped_through + 1;
                drop(ring);
                return self.expired(format!(
                    "cursor {cursor} is older than the oldest event kept ({oldest}; the ring holds the latest events only): events were missed; relist"
                ));
            }
            Some(cursor) => cursor.seq,
        };
        // Sequence numbers are dense: the one after `after` sits at this index.
        let skip = (after - ring.dropped_through) as usize;
        let events: Vec<Event> = ring
            .events
            .iter()
            .skip(skip)
            .take(max)
            .map(|kept| kept.to_event(&self.boot_id))
            .collect();
        let next_seq = events.last().map_or(after, |event| event.cursor.seq);
        drop(ring);
        EventsReply::Events {
            events,
            next: self.cursor(next_seq),
        }
    }

    fn expired(&self, reason: String) -> EventsReply {
        EventsReply::Expired {
            reason,
            now: self.now(),
        }
    }

    /// [`Self::read`], waiting up to `wait` for an event when there is none
    /// yet. Cancellation-safe (it holds nothing across its `.await`).
    pub async fn wait_read(
        &self,
        since: Option<&EventCursor>,
        max: usize,
        wait: Duration,
    ) -> EventsReply {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before looking, so an emit in between still wakes it.
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let reply = self.read(since, max);
            let empty = matches!(&reply, EventsReply::Events { events, .. } if events.is_empty());
            if !empty || tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return reply;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use sandboxd_protocol::Scope;

    use super::*;

    fn events(reply: EventsReply) -> (Vec<u64>, EventCursor) {
        match reply {
            EventsReply::Events { events, next } => {
                (events.iter().map(|event| event.cursor.seq).collect(), next)
            }
            EventsReply::Expired { reason, .. } => panic!("expired: {reason}"),
        }
    }

    #[test]
    fn cursors_continue_and_old_or_foreign_ones_expire() {
        let hub = EventHub::new(16);
        let made_for = hub.ring().events.capacity();
        let key = SandboxKey::new(Scope::Session, "s");
        for generation in 1..=20 {
            hub.emit(EventKind::Started, &key, "u", generation, None);
        }
        // Full, it drops before it pushes: never grown past its size.
        assert_eq!(hub.ring().events.capacity(), made_for);
        // The ring keeps the latest 16: 5..=20.
        let (seqs, next) = events(hub.read(None, 4));
        assert_eq!(seqs, [5, 6, 7, 8]);
        let (seqs, next) = events(hub.read(Some(&next), 100));
        assert_eq!(seqs, (9..=20).collect::<Vec<_>>());
        let (seqs, _) = events(hub.read(Some(&next), 100));
        assert!(seqs.is_empty());
        let old = EventCursor {
            boot_id: hub.boot_id.clone(),
            seq: 2,
        };
        assert!(matches!(
            hub.read(Some(&old), 10),
            EventsReply::Expired { .. }
        ));
        let foreign = EventCursor {
            boot_id: "0123".into(),
            seq: 5,
        };
        match hub.read(Some(&foreign), 10) {
            EventsReply::Expired { reason, now } => {
                assert!(reason.contains("another daemon boot"), "{reason}");
                assert_eq!(now.seq, 20);
            }
            other => panic!("{other:?}"),
        }
        // The edge: the newest dropped one is still a valid place to continue from.
        let edge = EventCursor {
            boot_id: hub.boot_id.clone(),
            seq: 4,
        };
        assert_eq!(events(hub.read(Some(&edge), 1)).0, [5]);
    }

    #[tokio::test]
    async fn a_waiter_is_woken_by_an_emit() {
        let hub = EventHub::new(16);
        let now = hub.now();
        let waiter = {
            let hub = hub.clone();
            tokio::spawn(
                async move { hub.wait_read(Some(&now), 10, Duration::from_secs(60)).await },
            )
        };
        tokio::task::yield_now().await;
        hub.emit(
            EventKind::Created,
            &SandboxKey::new(Scope::Workflow, "w"),
            "u",
            1,
            None,
        );
        let (seqs, _) = events(waiter.await.unwrap());
        assert_eq!(seqs, [1]);
        // Nothing new: the wait ends empty at its deadline.
        let (seqs, _) = events(
            hub.wait_read(Some(&hub.now()), 10, Duration::from_millis(1))
                .await,
        );
        assert!(seqs.is_empty());
    }
}
