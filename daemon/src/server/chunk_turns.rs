//! The order of one connection's file chunks. A client keeps a few chunks
//! of one upload or download in flight on its connection (a round trip
//! per MiB would otherwise idle the disk and the socket between them), and
//! a connection's calls run concurrently, so chunk k+1 may reach its tier
//! before chunk k. Each stream (the call, the sandbox and the path) has a
//! turn here: a chunk whose offset is ahead of the stream's next by at
//! most [`AHEAD`] waits until the chunks before it are answered. A chunk
//! further ahead, at the next offset, or behind it (a stale one, or offset
//! 0, which starts over) goes on at once. The tiers thus see a stream's
//! chunks in order and keep their own rules and errors (a chunk refused
//! leaves the stream's next offset where it was).
//!
//! A stream's first chunk on a connection goes on at once whatever its
//! offset: it is where the caller starts (a resume after a reconnect, say),
//! and the client sends it alone, opening its window only once it is
//! answered.
//!
//! How long a chunk ahead waits: while a chunk of its stream is under way;
//! else, for an upload (where ahead can only mean early) or a read past a
//! stream's end or its refusal (a client's read-ahead, which it drops),
//! until [`QUIET`] passes with nothing of the stream answered. A read ahead
//! of a stream with nothing under way goes on at once: it is a skip. What
//! waits here is bounded by the connection's `max_requests_per_connection`
//! and holds no more than the chunks' own frames.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sandboxd_protocol::files::MAX_FILE_CHUNK;
use tokio::sync::watch;

use crate::sandbox_key::SandboxKey;

/// How far ahead of its stream a chunk may arrive and wait: a client's
/// window of chunks in flight.
pub const AHEAD: u64 = 4 * MAX_FILE_CHUNK as u64;
/// How long a chunk ahead waits with nothing of its stream happening.
pub const QUIET: Duration = Duration::from_secs(2);
/// Streams kept per connection before the finished ones are dropped.
const KEPT: usize = 32;

/// One stream: the call, the sandbox, the path.
pub type StreamKey = (&'static str, SandboxKey, String);

#[derive(Clone, Copy, Default)]
struct Turn {
    /// The offset the stream's next chunk is expected at.
    next: u64,
    /// Chunks past their turn, not yet answered.
    busy: usize,
    /// The last answer was the stream's end, or a refusal.
    ended: bool,
    /// A chunk of the stream has been answered on this connection.
    started: bool,
}

type Stream = Arc<watch::Sender<Turn>>;

/// The streams of one connection.
#[derive(Default)]
pub struct ChunkTurns {
    streams: Mutex<HashMap<StreamKey, Stream>>,
}

/// A chunk whose turn came. Dropped unanswered (its call cancelled), it
/// leaves the stream's next offset as it was.
pub struct Turned {
    stream: Stream,
}

impl ChunkTurns {
    /// Waits for the turn of the chunk at `offset` of `key`'s stream, an
    /// upload's (`early`: a chunk ahead can only be early) or a read's.
    pub async fn wait(&self, key: StreamKey, offset: u64, early: bool) -> Turned {
        let stream = self.stream(key);
        let mut seen = stream.subscribe();
        loop {
            let turn = *seen.borrow_and_update();
            let ahead = offset.saturating_sub(turn.next);
            let skip = !early && !turn.ended && turn.busy == 0;
            let first = !turn.started && turn.busy == 0;
            if ahead == 0 || ahead > AHEAD || skip || first {
                break;
            }
            match tokio::time::timeout(QUIET, seen.changed()).await {
                Ok(_) => continue,
                Err(_) if stream.borrow().busy > 0 => continue,
                Err(_) => break,
            }
        }
        stream.send_modify(|turn| turn.busy += 1);
        Turned { stream }
    }

    /// The stream of `key`, made if new (registered at once, so chunks
    /// that arrive in order take their turns in order).
    fn stream(&self, key: StreamKey) -> Stream {
        let mut streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        if !streams.contains_key(&key) && streams.len() >= KEPT {
            streams.retain(|_, stream| stream.borrow().busy > 0 || stream.receiver_count() > 0);
        }
        streams.entry(key).or_default().clone()
    }
}

impl Turned {
    /// The chunk was answered: the stream goes on at `next`, or `ended`
    /// there (`None`: it was refused, so it stopped where it was; a read
    /// ahead of it is a read-ahead to drop, not a skip).
    pub fn answered(self, next: Option<u64>, ended: bool) {
        self.stream.send_modify(|turn| {
            turn.started = true;
            match next {
                Some(next) => (turn.next, turn.ended) = (next, ended),
                None => turn.ended = true,
            }
        });
    }
}

impl Drop for Turned {
    fn drop(&mut self) {
        self.stream.send_modify(|turn| turn.busy -= 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_protocol::Scope;
    use std::time::Instant;

    const MIB: u64 = MAX_FILE_CHUNK as u64;

    fn key() -> StreamKey {
        let sandbox = SandboxKey::new(Scope::Session, "s-1");
        ("put_tar", sandbox, "dir".into())
    }

    /// Chunks arriving in the order `arrivals` (offsets in MiB) take their
    /// turns in offset order; answers the order they took them in.
    async fn turns_of(arrivals: &[u64]) -> Vec<u64> {
        let turns = Arc::new(ChunkTurns::default());
        // The stream starts at 0, alone, as the client sends it.
        turns.wait(key(), 0, true).await.answered(Some(MIB), false);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut calls = Vec::new();
        for &at in arrivals {
            let (turns, order) = (turns.clone(), order.clone());
            calls.push(tokio::spawn(async move {
                let turned = turns.wait(key(), at * MIB, true).await;
                order.lock().unwrap().push(at);
                tokio::task::yield_now().await;
                turned.answered(Some((at + 1) * MIB), false);
            }));
            tokio::task::yield_now().await;
        }
        for call in calls {
            call.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        order
    }

    #[tokio::test]
    async fn chunks_ahead_within_the_window_wait_for_those_before_them() {
        let started = Instant::now();
        assert_eq!(turns_of(&[4, 2, 3, 1, 5]).await, [1, 2, 3, 4, 5]);
        assert!(started.elapsed() < QUIET, "none waited for quiet");
    }

    #[tokio::test]
    async fn a_streams_first_chunk_on_a_connection_goes_on_at_once() {
        let turns = ChunkTurns::default();
        let started = Instant::now();
        // A resume after a reconnect starts where the caller left off.
        turns
            .wait(key(), 3 * MIB, true)
            .await
            .answered(Some(4 * MIB), false);
        assert!(started.elapsed() < QUIET);
    }

    #[tokio::test]
    async fn far_ahead_stale_next_and_skipping_reads_go_on_at_once() {
        let turns = ChunkTurns::default();
        let started = Instant::now();
        turns
            .wait(key(), 0, true)
            .await
            .answered(Some(3 * MIB), false);
        let far = turns.wait(key(), 3 * MIB + AHEAD + 1, true).await;
        far.answered(None, false);
        turns.wait(key(), MIB, true).await.answered(None, false);
        turns.wait(key(), 0, true).await.answered(Some(MIB), false);
        turns
            .wait(key(), MIB, true)
            .await
            .answered(Some(MIB + 1), false);
        // A read ahead of a stream with nothing under way is a skip.
        drop(turns.wait(key(), 2 * MIB, false).await);
        assert!(started.elapsed() < QUIET);
    }

    #[tokio::test]
    async fn a_chunk_waits_while_the_one_before_is_under_way_then_for_quiet() {
        let turns = ChunkTurns::default();
        turns.wait(key(), 0, true).await.answered(Some(0), false);
        let busy = turns.wait(key(), 0, true).await;
        let read_ahead = turns.wait(key(), MIB, false);
        let early = turns.wait(key(), MIB, true);
        tokio::pin!(read_ahead, early);
        // The chunk before them is under way: both keep waiting past quiet.
        let past_quiet = tokio::time::sleep(QUIET + QUIET / 2);
        tokio::select! {
            _ = &mut read_ahead => panic!("a read went on past a chunk under way"),
            _ = &mut early => panic!("an upload went on past a chunk under way"),
            _ = past_quiet => {}
        }
        let started = Instant::now();
        drop(busy);
        // Refused (dropped unanswered): the read goes on as a skip at once,
        // the upload's chunk after quiet.
        drop(read_ahead.await);
        assert!(started.elapsed() < QUIET);
        drop(early.await);
        assert!(started.elapsed() >= QUIET);
    }

    #[tokio::test]
    async fn a_read_past_the_end_or_a_refusal_waits_for_quiet() {
        let turns = ChunkTurns::default();
        turns.wait(key(), 0, false).await.answered(Some(10), true);
        let started = Instant::now();
        turns.wait(key(), MIB, false).await.answered(None, false);
        assert!(started.elapsed() >= QUIET);
        turns.wait(key(), 0, false).await.answered(Some(MIB), false);
        turns.wait(key(), MIB, false).await.answered(None, false);
        let started = Instant::now();
        drop(turns.wait(key(), 2 * MIB, false).await);
        assert!(started.elapsed() >= QUIET);
    }
}
