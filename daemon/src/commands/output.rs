//! One output stream of a command, kept in a bounded store and readable
//! from any offset.
//!
//! The store holds the latest `capacity` bytes. When a writer outruns
//! every reader, the oldest bytes go and are counted: a reader asking for
//! an offset that is gone gets what is still kept, told how many bytes it
//! missed, never a silent gap. The writer never waits for a reader, so a
//! command flooding its output never blocks its sandbox or the daemon, and
//! a caller that never reads never grows the store past its bound.

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

/// The latest bytes, in a ring: `ring[head..]` then `ring[..head]` once it
/// has wrapped. Copies are `memcpy`s of at most two pieces each way.
struct Kept {
    ring: Vec<u8>,
    capacity: usize,
    /// Where the oldest kept byte is, once the ring is full.
    head: usize,
    /// The stream offset of the oldest kept byte: how many were dropped.
    first: u64,
    closed: bool,
}

impl Kept {
    fn len(&self) -> usize {
        self.ring.len()
    }

    fn end(&self) -> u64 {
        self.first + self.ring.len() as u64
    }

    /// Appends `data` (at most `capacity` bytes), dropping the oldest.
    fn push(&mut self, data: &[u8]) {
        let room = self.capacity - self.ring.len();
        let (fits, rest) = data.split_at(room.min(data.len()));
        // Memory is taken as bytes arrive, never ahead.
        self.ring.extend_from_slice(fits);
        if rest.is_empty() {
            return;
        }
        // Full: overwrite the oldest, from the head, wrapping once.
        let first_part = rest.len().min(self.capacity - self.head);
        self.ring[self.head..self.head + first_part].copy_from_slice(&rest[..first_part]);
        let second = &rest[first_part..];
        self.ring[..second.len()].copy_from_slice(second);
        self.head = (self.head + rest.len()) % self.capacity;
        self.first += rest.len() as u64;
    }

    /// `take` bytes from the `skip`th kept one, into `out`.
    fn copy(&self, skip: usize, take: usize, out: &mut Vec<u8>) {
        let (older, newer) = if self.ring.len() == self.capacity {
            (&self.ring[self.head..], &self.ring[..self.head])
        } else {
            (&self.ring[..], &self.ring[..0])
        };
        if skip < older.len() {
            let upto = (skip + take).min(older.len());
            out.extend_from_slice(&older[skip..upto]);
            out.extend_from_slice(&newer[..take - (upto - skip)]);
        } else {
            let from = skip - older.len();
            out.extend_from_slice(&newer[from..from + take]);
        }
    }
}

impl OutputStore {
    /// A store keeping the latest `capacity` bytes (at least one).
    pub fn new(capacity: usize) -> OutputStore {
        OutputStore {
            kept: Mutex::new(Kept {
                ring: Vec::new(),
                capacity: capacity.max(1),
                head: 0,
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
            if data.len() > capacity {
                // Only its tail can be kept: the rest is dropped at once.
                let skipped = data.len() - capacity;
                kept.first += skipped as u64;
                kept.push(&data[skipped..]);
            } else {
                kept.push(data);
            }
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
        (kept.end(), kept.first)
    }

    /// At most `max` bytes from `offset` (from the oldest kept when it is
    /// gone; nothing when it is beyond the end).
    pub fn read(&self, offset: u64, max: usize) -> Read {
        let kept = self.kept();
        let end = kept.end();
        let start = offset.clamp(kept.first, end);
        let skip = (start - kept.first) as usize;
        let take = max.min(kept.len() - skip);
        let mut data = Vec::with_capacity(take);
        kept.copy(skip, take, &mut data);
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
                if kept.closed || kept.end() > offset {
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

    #[test]
    fn a_full_ring_wraps_and_reads_in_order_across_the_wrap() {
        let store = OutputStore::new(5);
        let mut written = Vec::new();
        for (n, piece) in [&b"abc"[..], b"de", b"fgh", b"i", b"jklmnop", b"q"]
            .iter()
            .enumerate()
        {
            store.write(piece);
            written.extend_from_slice(piece);
            let kept_from = written.len().saturating_sub(5);
            let read = store.read(0, 100);
            assert_eq!(read.data, &written[kept_from..], "after write {n}");
            assert_eq!(read.start, kept_from as u64);
            for skip in 0..read.data.len() {
                let part = store.read(kept_from as u64 + skip as u64, 2);
                let want = &written[kept_from + skip..(kept_from + skip + 2).min(written.len())];
                assert_eq!(part.data, want, "after write {n}, from {skip}");
            }
        }
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
