//! One output stream of a command, kept in a bounded store and readable
//! from any offset.
//!
//! The store holds the latest `capacity` bytes. When a writer outruns
//! every reader, the oldest bytes go and are counted: a reader asking for
//! an offset that is gone gets what is still kept, told how many bytes it
//! missed, never a silent gap. The writer never waits for a reader, so a
//! command flooding its output never blocks its sandbox or the daemon, and
//! a caller that never reads never grows the store past its bound.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub data: Vec<u8>,
    /// The offset of `data`'s first byte.
    pub start: u64,
    /// Bytes gone between the offset asked for and `start`.
    pub dropped: u64,
    /// True when `data` reaches everything written so far and the stream
    /// is closed: nothing more will come.
    pub at_closed_end: bool,
}

pub struct OutputStore {
    kept: Mutex<Kept>,
    /// Woken on every write and at the close.
    grew: Notify,
}

struct Kept {
    bytes: VecDeque<u8>,
    capacity: usize,
    /// The stream offset of `bytes[0]`: how many bytes were dropped.
    first: u64,
    closed: bool,
}

impl OutputStore {
    /// A store keeping the latest `capacity` bytes (at least one). Memory
    /// is taken as bytes arrive, never ahead.
    pub fn new(capacity: usize) -> OutputStore {
        OutputStore {
            kept: Mutex::new(Kept {
                bytes: VecDeque::new(),
                capacity: capacity.max(1),
                first: 0,
                closed: false,
            }),
            grew: Notify::new(),
        }
    }

    fn kept(&self) -> MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `data`, dropping the oldest bytes beyond the bound.
    pub fn write(&self, data: &[u8]) {
        {
            let mut kept = self.kept();
            let capacity = kept.capacity;
            let data = if data.len() > capacity {
                // Only its tail can be kept: the rest is dropped at once.
                let skipped = data.len() - capacity;
                kept.first += (kept.bytes.len() + skipped) as u64;
                kept.bytes.clear();
                &data[skipped..]
            } else {
                data
            };
            let overflow = (kept.bytes.len() + data.len()).saturating_sub(capacity);
            if overflow > 0 {
                kept.bytes.drain(..overflow);
                kept.first += overflow as u64;
            }
            kept.bytes.extend(data);
        }
        self.grew.notify_waiters();
    }

    /// No more bytes will come.
    pub fn close(&self) {
        self.kept().closed = true;
        self.grew.notify_waiters();
    }

    /// Bytes written so far, and bytes dropped.
    pub fn figures(&self) -> (u64, u64) {
        let kept = self.kept();
        (kept.first + kept.bytes.len() as u64, kept.first)
    }

    /// At most `max` bytes from `offset` (from the oldest kept when it is
    /// gone; nothing when it is beyond the end).
    pub fn read(&self, offset: u64, max: usize) -> Read {
        let kept = self.kept();
        let end = kept.first + kept.bytes.len() as u64;
        let start = offset.clamp(kept.first, end);
        let from = (start - kept.first) as usize;
        let take = max.min(kept.bytes.len() - from);
        let (front, back) = kept.bytes.as_slices();
        let mut data = Vec::with_capacity(take);
        if from < front.len() {
            let upto = (from + take).min(front.len());
            data.extend_from_slice(&front[from..upto]);
            data.extend_from_slice(&back[..take - (upto - from)]);
        } else {
            let from = from - front.len();
            data.extend_from_slice(&back[from..from + take]);
        }
        Read {
            at_closed_end: kept.closed && start + take as u64 == end,
            dropped: start.saturating_sub(offset),
            start,
            data,
        }
    }

    /// Waits until something is written at or after `offset`, or the
    /// stream closes. Returns at once when either holds already.
    pub async fn wait_past(&self, offset: u64) {
        loop {
            let grew = self.grew.notified();
            tokio::pin!(grew);
            grew.as_mut().enable();
            {
                let kept = self.kept();
                if kept.closed || kept.first + kept.bytes.len() as u64 > offset {
                    return;
                }
            }
            grew.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_continue_where_they_stopped_and_name_what_was_dropped() {
        let store = OutputStore::new(8);
        store.write(b"hello ");
        let first = store.read(0, 3);
        assert_eq!(
            (first.data.as_slice(), first.start, first.dropped),
            (&b"hel"[..], 0, 0)
        );
        store.write(b"world");
        // 11 written, 8 kept: bytes 0..3 are gone.
        let late = store.read(3, 100);
        assert_eq!(late.data, b"lo world");
        assert_eq!(
            (late.start, late.dropped, late.at_closed_end),
            (3, 0, false)
        );
        let lost = store.read(0, 100);
        assert_eq!((lost.start, lost.dropped), (3, 3));
        assert_eq!(store.figures(), (11, 3));
        store.close();
        assert!(store.read(3, 100).at_closed_end);
        assert!(!store.read(3, 2).at_closed_end);
        assert!(store.read(11, 100).data.is_empty());
    }

    #[test]
    fn a_write_larger_than_the_store_keeps_its_tail() {
        let store = OutputStore::new(4);
        store.write(b"ab");
        store.write(b"0123456789");
        assert_eq!(store.read(0, 100).data, b"6789");
        assert_eq!(store.figures(), (12, 8));
    }

    #[tokio::test]
    async fn a_waiter_wakes_at_a_write_and_at_the_close() {
        let store = std::sync::Arc::new(OutputStore::new(16));
        let waiter = tokio::spawn({
            let store = store.clone();
            async move { store.wait_past(0).await }
        });
        tokio::task::yield_now().await;
        store.write(b"x");
        waiter.await.unwrap();
        let waiter = tokio::spawn({
            let store = store.clone();
            async move { store.wait_past(1).await }
        });
        store.close();
        waiter.await.unwrap();
    }
}
