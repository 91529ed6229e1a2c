//! One output stream of a command, kept in a bounded store and readable
//! from any offset.
//!
//! The store holds the latest `capacity` bytes. When a writer outruns
//! every reader, the oldest bytes go and are counted: a reader asking for
//! an offset that is gone gets what is still kept, told how many bytes it
//! missed, never a silent gap. The writer never waits for a reader, so a
//! command flooding its output never blocks its sandbox or the daemon, and
//! a caller that never reads never grows the store past its bound.

use std::io;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
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

    /// One read of at most `want` bytes by `read`, straight into the ring
    /// (no copy through a buffer of the pump's): into its free room while
    /// it grows (taken in doublings, never past the bound), else over the
    /// oldest bytes from the head, which are dropped as they are replaced.
    /// `read` writes only the bytes it reports filled (as `read(2)` does,
    /// and every `AsyncRead` that fills with `put_slice`), so a short read
    /// leaves the rest of the oldest bytes as they were.
    fn fill(
        &mut self,
        want: usize,
        read: impl FnOnce(&mut ReadBuf<'_>) -> Poll<io::Result<()>>,
    ) -> Poll<io::Result<usize>> {
        let len = self.ring.len();
        if len < self.capacity {
            let room = (self.capacity - len).min(want.max(1));
            if self.ring.capacity() - len < room {
                let target = (len * 2).max(len + room).min(self.capacity);
                self.ring.reserve_exact(target - len);
            }
            let spare = &mut self.ring.spare_capacity_mut()[..room];
            let start = spare.as_ptr() as *const u8;
            let mut buf = ReadBuf::uninit(spare);
            ready!(read(&mut buf))?;
            let count = filled_in_place(&buf, start)?;
            // SAFETY: the first `count` bytes of the spare room were
            // filled (initialized) by the read, in place.
            unsafe { self.ring.set_len(len + count) };
            return Poll::Ready(Ok(count));
        }
        let room = (self.capacity - self.head).min(want.max(1));
        let target = &mut self.ring[self.head..self.head + room];
        let start = target.as_ptr();
        let mut buf = ReadBuf::new(target);
        ready!(read(&mut buf))?;
        let count = filled_in_place(&buf, start)?;
        self.head = (self.head + count) % self.capacity;
        self.first += count as u64;
        Poll::Ready(Ok(count))
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

    /// Appends `data`, dropping the oldest bytes beyond the bound: the
    /// pump's own path ([`Kept::fill`]), fed from a slice.
    #[cfg(test)]
    pub fn write(&self, mut data: &[u8]) {
        {
            let mut kept = self.kept();
            while !data.is_empty() {
                let filled = kept.fill(data.len(), |buf| {
                    let count = buf.remaining().min(data.len());
                    buf.put_slice(&data[..count]);
                    Poll::Ready(Ok(()))
                });
                let Poll::Ready(Ok(count)) = filled else {
                    unreachable!("a slice is always ready")
                };
                data = &data[count..];
            }
        }
        self.grew.notify_waiters();
    }

    /// Reads at most `want` bytes from `reader` straight into the store
    /// (see `Kept::fill`): `Ready(Ok(0))` at its end. Readers of the store
    /// wait for the read (a copy of at most `want` bytes) under its lock.
    pub fn poll_fill(
        &self,
        cx: &mut Context<'_>,
        reader: Pin<&mut (dyn AsyncRead + Send)>,
        want: usize,
    ) -> Poll<io::Result<usize>> {
        let filled = self.kept().fill(want, |buf| reader.poll_read(cx, buf));
        if let Poll::Ready(Ok(1..)) = &filled {
            self.grew.notify_waiters();
        }
        filled
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

/// How many bytes `buf` holds, checked to be where it started (`start`):
/// a reader that swapped the buffer for another filled nothing of ours.
fn filled_in_place(buf: &ReadBuf<'_>, start: *const u8) -> io::Result<usize> {
    let filled = buf.filled();
    if !filled.is_empty() && filled.as_ptr() != start {
        return Err(io::Error::other(
            "a reader filled another buffer than the store's",
        ));
    }
    Ok(filled.len())
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

    /// A reader handing out `data` in the reads `sizes` ask for at most.
    struct Pieces {
        data: Vec<u8>,
        at: usize,
        sizes: Vec<usize>,
    }

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let most = if self.sizes.is_empty() {
                usize::MAX
            } else {
                self.sizes.remove(0)
            };
            let take = most.min(buf.remaining()).min(self.data.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.data[at..at + take]);
            self.at += take;
            Poll::Ready(Ok(()))
        }
    }

    /// Fills `store` from `reader` asking `want` a read, to its end.
    fn fill_all(store: &OutputStore, reader: Pieces, want: usize) {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut reader: Pin<Box<dyn AsyncRead + Send>> = Box::pin(reader);
        loop {
            match store.poll_fill(&mut cx, reader.as_mut(), want) {
                Poll::Ready(Ok(0)) => return,
                Poll::Ready(Ok(_)) => {}
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn reads_straight_into_the_ring_keep_every_byte_in_order_or_count_it_dropped() {
        let data: Vec<u8> = (0..1000u32).map(|n| (n % 251) as u8).collect();
        for capacity in [1, 7, 64, 999, 1000, 4096] {
            for want in [1, 5, 64, 512] {
                let store = OutputStore::new(capacity);
                // Short reads of every size, so reads stop short of the
                // room they were given, at and across the wrap.
                let sizes = (0..400).map(|n| 1 + n % 13).collect();
                fill_all(
                    &store,
                    Pieces {
                        data: data.clone(),
                        at: 0,
                        sizes,
                    },
                    want,
                );
                let kept_from = data.len().saturating_sub(capacity);
                let read = store.read(0, usize::MAX);
                let case = format!("capacity {capacity}, want {want}");
                assert_eq!(read.data, &data[kept_from..], "{case}");
                assert_eq!(
                    (read.start, read.dropped),
                    (kept_from as u64, kept_from as u64)
                );
                assert_eq!(store.figures(), (1000, kept_from as u64), "{case}");
            }
        }
    }

    #[test]
    fn a_growing_ring_takes_room_in_doublings_never_past_its_bound() {
        let store = OutputStore::new(10_000);
        let data = vec![7u8; 9_000];
        fill_all(
            &store,
            Pieces {
                data,
                at: 0,
                sizes: Vec::new(),
            },
            100,
        );
        let kept = store.kept();
        assert_eq!(kept.ring.len(), 9_000);
        assert!(kept.ring.capacity() <= 10_000, "{}", kept.ring.capacity());
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
