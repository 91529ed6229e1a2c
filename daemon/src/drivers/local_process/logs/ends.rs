//! Where each runner generation's output ends, so `logs --follow` stops
//! after the last byte its generation wrote and never reads on into the
//! next one.
//!
//! All generations of a sandbox write one output file, one after another:
//! a generation's pump is drained ([`super::RunnerLogs::finish`]) before
//! the next runner can start, so the file's length at that moment is where
//! the generation ends. That position is recorded with one line on how it
//! ended, and a [`LogStart::Generation`](sandboxd_protocol::LogStart) read
//! is cut there.
//!
//! A removed sandbox's files go at once (the workspace and its output are
//! removed together), but a follower polls: the end of the output (the
//! last [`DEPARTED_TAIL`] bytes) and the ends are kept in memory for
//! [`DEPARTED_FOR`], until a runner of the same name starts again, so the
//! follower still gets the runner's last lines and how it ended.
//!
//! A cursor exactly at an end belongs to the generation before it: a
//! follower that caught up there, in the instant between the next
//! runner's start and its first byte, is told the previous generation
//! ended (it never reads into the next one; it may stop too early there).
//!
//! Ends live in memory: after a daemon restart, a follower whose cursor
//! came from the old daemon reads on as before (its cursor's epoch is not
//! one whose ends this daemon knows).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use sandboxd_protocol::{LogChunk, LogCursor};

/// Ends kept per sandbox: followers are near the newest ones.
const KEPT: usize = 16;

/// How long a removed sandbox's last output stays readable by followers.
pub const DEPARTED_FOR: Duration = Duration::from_secs(60);

/// How much of a removed sandbox's output is kept for its followers.
pub const DEPARTED_TAIL: u64 = 256 * 1024;

/// One generation's end: the position after its last byte, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    pub at: LogCursor,
    pub how: String,
}

/// The ends of every sandbox's generations, newest last.
#[derive(Debug, Default)]
pub struct Ends(HashMap<String, VecDeque<End>>);

impl Ends {
    pub fn record(&mut self, base: &str, end: End) {
        let ends = self.0.entry(base.to_string()).or_default();
        ends.push_back(end);
        if ends.len() > KEPT {
            ends.pop_front();
        }
    }

    pub fn take(&mut self, base: &str) -> VecDeque<End> {
        self.0.remove(base).unwrap_or_default()
    }

    /// The first end at or after `from`, in the same epoch.
    pub fn next_end(&self, base: &str, from: LogCursor) -> Option<End> {
        first_end(self.0.get(base)?, from)
    }
}

fn first_end(ends: &VecDeque<End>, from: LogCursor) -> Option<End> {
    ends.iter()
        .find(|end| end.at.epoch == from.epoch && end.at.offset >= from.offset)
        .cloned()
}

/// What a removed sandbox leaves its followers.
#[derive(Debug)]
pub struct Departed {
    /// The end of its output: bytes `[tail_from, tail_from + tail.len())`
    /// of the last incarnation, `epoch`.
    pub epoch: u64,
    pub tail_from: u64,
    pub tail: Vec<u8>,
    pub ends: VecDeque<End>,
    pub since: Instant,
}

impl Departed {
    /// A follower's next chunk from the kept tail, or `None` when `from`
    /// is not a position of this output (another epoch, or past its end).
    pub fn read(&self, from: LogCursor, budget: u64) -> Option<LogChunk> {
        let len = self.tail_from + self.tail.len() as u64;
        if from.epoch != self.epoch || from.offset > len {
            return None;
        }
        let end = first_end(&self.ends, from);
        let stop = end.as_ref().map_or(len, |end| end.at.offset.min(len));
        // Older than what was kept: what is kept, flagged as a gap.
        let (start, gap) = if from.offset < self.tail_from {
            (self.tail_from, true)
        } else {
            (from.offset, false)
        };
        let until = stop.min(start.saturating_add(budget)).max(start);
        let data = self.tail[(start - self.tail_from) as usize..(until - self.tail_from) as usize]
            .to_vec();
        let reached = until >= stop;
        Some(LogChunk {
            data,
            next: LogCursor {
                epoch: self.epoch,
                offset: until,
            },
            gap,
            at_end: reached,
            ended: match (reached, end) {
                (true, Some(end)) => Some(end.how),
                // Removed with no end recorded (its runner never ran under
                // this daemon): the output still ends here.
                (true, None) => Some("the sandbox was removed".to_string()),
                (false, _) => None,
            },
        })
    }
}

/// Removed sandboxes' last output, by base name, dropped after
/// [`DEPARTED_FOR`] or when a runner of the same name starts.
#[derive(Debug, Default)]
pub struct DepartedLogs(HashMap<String, Departed>);

impl DepartedLogs {
    pub fn insert(&mut self, base: &str, departed: Departed) {
        self.expire();
        self.0.insert(base.to_string(), departed);
    }

    pub fn forget(&mut self, base: &str) {
        self.0.remove(base);
    }

    pub fn read(&mut self, base: &str, from: LogCursor, budget: u64) -> Option<LogChunk> {
        self.expire();
        self.0.get(base)?.read(from, budget)
    }

    fn expire(&mut self) {
        self.0
            .retain(|_, departed| departed.since.elapsed() < DEPARTED_FOR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: u64) -> LogCursor {
        LogCursor { epoch: 7, offset }
    }

    fn end(offset: u64, how: &str) -> End {
        End {
            at: at(offset),
            how: how.to_string(),
        }
    }

    #[test]
    fn the_first_end_at_or_after_the_cursor_is_the_one_that_counts() {
        let mut ends = Ends::default();
        ends.record("b", end(10, "one"));
        ends.record("b", end(25, "two"));
        assert_eq!(ends.next_end("b", at(0)).unwrap().how, "one");
        assert_eq!(ends.next_end("b", at(10)).unwrap().how, "one");
        assert_eq!(ends.next_end("b", at(11)).unwrap().how, "two");
        assert_eq!(ends.next_end("b", at(26)), None);
        assert_eq!(
            ends.next_end(
                "b",
                LogCursor {
                    epoch: 8,
                    offset: 0
                }
            ),
            None
        );
        for n in 0..40 {
            ends.record("c", end(n, "x"));
        }
        assert_eq!(ends.take("c").len(), KEPT);
    }

    #[test]
    fn a_departed_sandbox_serves_its_last_bytes_then_how_it_ended() {
        let departed = Departed {
            epoch: 7,
            tail_from: 100,
            tail: b"0123456789got SIGTERM, bye\n".to_vec(),
            ends: [
                end(110, "generation 1: the runner exited (code 0)"),
                end(127, "generation 2: the runner exited (code 0)"),
            ]
            .into(),
            since: Instant::now(),
        };
        let first = departed.read(at(105), 3).unwrap();
        assert_eq!(
            (first.data.as_slice(), first.ended.as_deref()),
            (&b"567"[..], None)
        );
        let rest = departed.read(first.next, 100).unwrap();
        assert_eq!(rest.data, b"89");
        assert_eq!(
            rest.ended.as_deref(),
            Some("generation 1: the runner exited (code 0)")
        );
        // A cursor right at an end belongs to the generation before it.
        let at_the_end = departed.read(at(110), 100).unwrap();
        assert!(at_the_end.data.is_empty() && at_the_end.at_end);
        assert_eq!(
            at_the_end.ended.as_deref(),
            Some("generation 1: the runner exited (code 0)")
        );
        let second = departed.read(at(111), 100).unwrap();
        assert_eq!(second.data, b"ot SIGTERM, bye\n");
        assert_eq!(
            second.ended.as_deref(),
            Some("generation 2: the runner exited (code 0)")
        );
        let old = departed.read(at(3), 4).unwrap();
        assert!(old.gap && old.data == b"0123");
        assert!(departed
            .read(
                LogCursor {
                    epoch: 8,
                    offset: 0
                },
                4
            )
            .is_none());
        assert!(departed.read(at(500), 4).is_none());
    }
}
