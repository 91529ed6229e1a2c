//! Runner output, read back from the engine's log of the container.
//!
//! The engine keeps what a container writes to stdout and stderr as
//! entries (one per line, in the order it read them), each stamped with
//! the time, in nanoseconds, it read it; asked for timestamps, it starts
//! every entry with its stamp and a space. Nothing of sandboxd sits in the
//! runner's output path, and the log lives as long as the container does:
//! across restarts of it, not across its removal.
//!
//! A [`LogCursor`] is a place among those stamps:
//! - `offset`: the stamp of the last entry read from (0: nothing read yet);
//! - `epoch`, high 32 bits: which container (a hash of its id). A container
//!   removed and recreated is a new log, so a cursor into the old one goes
//!   on from the start of the new one, flagged as a gap: what the old one
//!   wrote after the cursor went with it;
//! - `epoch`, low 32 bits: how many bytes of the entries stamped `offset`
//!   were read. A chunk may end inside an entry, and a line longer than the
//!   engine's 16 KiB buffer is several entries with one stamp (its first
//!   piece's).
//!
//! A read from a cursor asks for the entries since the cursor's second
//! (the API takes whole seconds) and passes over those before the cursor
//! by their stamps. The json-file log has no index by time: reading "since"
//! decodes the whole log. So a read from a cursor first asks for the newest
//! [`RECENT_ENTRIES`] only — what a follower polling twice a second needs —
//! and for everything since only when they do not reach back to the cursor.
//!
//! What a cursor made of stamps cannot do, accepted:
//! - an entry stamped before one already read is taken as read. The engine
//!   stamps each stream's lines as it reads them, so that takes its clock
//!   stepping back, a stdout and a stderr line landing in the same instant,
//!   or a line of one stream landing between two pieces of an over-16-KiB
//!   line of the other that a follower had read the first piece of;
//! - `Tail` counts the engine's entries, and a line over 16 KiB is several;
//! - when the engine's own rotation (`log-opts` `max-size`) dropped the
//!   entry a cursor points at, output may have gone unread: the chunk says
//!   so as a gap, even if the reader had in fact read all of it.

use std::cmp::Ordering;
use std::ops::ControlFlow;
use std::time::UNIX_EPOCH;

use bollard::query_parameters::LogsOptionsBuilder;
use sandboxd_protocol::{LogChunk, LogCursor, LogStart, SandboxError};

use super::containers;
use super::engine::CallError;
use super::events::short;
use super::observed::Lookup;
use super::Inner;
use crate::provisioner::SandboxKey;

/// How many of the newest entries a read from a cursor asks for first.
const RECENT_ENTRIES: u64 = 1024;

/// At most `max_bytes` of the sandbox's output from `start`.
pub async fn read(
    inner: &Inner,
    key: &SandboxKey,
    start: LogStart,
    max_bytes: u32,
) -> Result<LogChunk, SandboxError> {
    let container = match inner.inspect(key).await? {
        Lookup::Ours(observed) => observed.id,
        Lookup::Absent => {
            return Err(no_output(
                key,
                &format!(
                    "there is no container {} on the engine at {}",
                    key.base_name,
                    inner.engine.address()
                ),
            ))
        }
        Lookup::Foreign { id } => {
            return Err(no_output(
                key,
                &format!(
                    "the container {} named {} is not one of sandboxd's",
                    short(&id),
                    key.base_name
                ),
            ))
        }
    };
    let log = Log {
        inner,
        key,
        identity: identity(&container),
        container: &container,
    };
    let budget = max_bytes as usize;
    match start {
        LogStart::Tail { lines } => log.tail(lines, budget).await,
        LogStart::Beginning => log.forward(Position::start(log.identity), budget).await,
        // Container restarts are not told apart as generations here yet.
        LogStart::After(cursor) | LogStart::Generation(cursor) => {
            let from = Position::of(cursor);
            if from.container == log.identity {
                log.forward(from, budget).await
            } else {
                // Another container's cursor: this one's log is all new.
                let mut chunk = log.forward(Position::start(log.identity), budget).await?;
                chunk.gap = true;
                Ok(chunk)
            }
        }
    }
}

/// The error for a sandbox with no log to read, worded as the process tier's.
fn no_output(key: &SandboxKey, why: &str) -> SandboxError {
    SandboxError::FailedPrecondition(format!(
        "{} '{}' has no output to show: {why}",
        key.scope, key.id
    ))
}

/// One container's log, for one call.
struct Log<'a> {
    inner: &'a Inner,
    key: &'a SandboxKey,
    container: &'a str,
    /// What cursors into this container's log carry.
    identity: u32,
}

impl Log<'_> {
    /// Hands the entries since `since_secs` (the newest `recent` of them,
    /// when given) to `visit`.
    async fn entries(
        &self,
        since_secs: i32,
        recent: Option<u64>,
        visit: impl FnMut(&[u8]) -> ControlFlow<()> + Send,
    ) -> Result<(), SandboxError> {
        let mut options = LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .timestamps(true)
            .since(since_secs);
        if let Some(recent) = recent {
            options = options.tail(&recent.to_string());
        }
        containers::logs(&self.inner.engine, self.container, options.build(), visit)
            .await
            .map_err(|error| self.failed(error))
    }

    /// What comes after `from`.
    async fn forward(&self, from: Position, budget: usize) -> Result<LogChunk, SandboxError> {
        let mut recent = (from.at_ns > 0).then_some(RECENT_ENTRIES);
        loop {
            let mut reader = Forward::new(from, budget, recent);
            self.entries(from.since_secs(), recent, |entry| reader.take(entry))
                .await?;
            match reader.finish().map_err(|message| self.malformed(message))? {
                Some(chunk) => return Ok(chunk),
                // The newest entries did not reach back to the cursor.
                None => recent = None,
            }
        }
    }

    /// The last `lines` entries within the budget, and a cursor at the end.
    async fn tail(&self, lines: u32, budget: usize) -> Result<LogChunk, SandboxError> {
        let mut reader = Tail::new(lines, budget);
        let asked = reader.asked;
        self.entries(0, Some(asked), |entry| reader.take(entry))
            .await?;
        let tail = reader.finish().map_err(|message| self.malformed(message))?;
        let next = match tail.last {
            None => Position::start(self.identity),
            Some(last) => {
                let done = if tail.last_may_start_earlier {
                    self.bytes_stamped(last).await?
                } else {
                    tail.last_bytes
                };
                Position {
                    container: self.identity,
                    at_ns: last,
                    done: u32::try_from(done).unwrap_or(u32::MAX),
                }
            }
        };
        Ok(LogChunk {
            data: tail.data,
            next: next.cursor(),
            gap: false,
            at_end: true,
            ended: None,
        })
    }

    /// How many bytes the entries stamped `at_ns` hold: the pieces of one
    /// long line, when a tail saw only the last of them.
    async fn bytes_stamped(&self, at_ns: u64) -> Result<u64, SandboxError> {
        let (mut total, mut malformed) = (0u64, None);
        self.entries(Position::since_secs_of(at_ns), None, |entry| {
            match stamped(entry) {
                Ok((at, text)) if at == at_ns => total += text.len() as u64,
                Ok(_) => {}
                Err(message) => {
                    malformed = Some(message);
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        })
        .await?;
        match malformed {
            Some(message) => Err(self.malformed(message)),
            None => Ok(total),
        }
    }

    fn failed(&self, error: CallError) -> SandboxError {
        match error {
            error if error.is_not_found() => no_output(
                self.key,
                &format!(
                    "its container {} was removed while its output was read",
                    short(self.container)
                ),
            ),
            // The container's logging driver keeps nothing to read back (`none`).
            CallError::Refused {
                status: 501,
                message,
            } => SandboxError::FailedPrecondition(format!(
                "the engine keeps no output of {} '{}' to read ({}): {message}",
                self.key.scope, self.key.id, self.key.base_name
            )),
            other => other.into_sandbox_error(&format!(
                "cannot read the output of {} '{}' ({})",
                self.key.scope, self.key.id, self.key.base_name
            )),
        }
    }

    fn malformed(&self, message: String) -> SandboxError {
        SandboxError::Internal(format!(
            "cannot read the output of {} '{}' ({}): {message}",
            self.key.scope, self.key.id, self.key.base_name
        ))
    }
}

/// A place in one container's log; see the module's documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    container: u32,
    at_ns: u64,
    done: u32,
}

impl Position {
    fn start(container: u32) -> Position {
        Position {
            container,
            at_ns: 0,
            done: 0,
        }
    }

    fn of(cursor: LogCursor) -> Position {
        Position {
            container: (cursor.epoch >> 32) as u32,
            at_ns: cursor.offset,
            done: cursor.epoch as u32,
        }
    }

    fn cursor(self) -> LogCursor {
        LogCursor {
            epoch: (u64::from(self.container) << 32) | u64::from(self.done),
            offset: self.at_ns,
        }
    }

    /// Where a reader stands after `bytes` more of an entry stamped `at_ns`.
    fn past(self, at_ns: u64, bytes: usize) -> Position {
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        match at_ns.cmp(&self.at_ns) {
            Ordering::Greater => Position {
                at_ns,
                done: bytes,
                ..self
            },
            Ordering::Equal => Position {
                done: self.done.saturating_add(bytes),
                ..self
            },
            // Stamped before what was read already: the cursor stays.
            Ordering::Less => self,
        }
    }

    fn since_secs(self) -> i32 {
        Position::since_secs_of(self.at_ns)
    }

    /// `since` for the engine: the whole second `at_ns` falls in (the API
    /// takes no finer). bollard's `i32` holds it until 2038; after that, 0
    /// reads the whole log: slower, not wrong.
    fn since_secs_of(at_ns: u64) -> i32 {
        i32::try_from(at_ns / 1_000_000_000).unwrap_or(0)
    }
}

/// A container's identity in a cursor: 32-bit FNV-1a of its id.
fn identity(container: &str) -> u32 {
    container.bytes().fold(0x811c_9dc5, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// An entry's stamp in ns since the epoch, and its bytes after the stamp.
fn stamped(entry: &[u8]) -> Result<(u64, &[u8]), String> {
    let unstamped = || {
        format!(
            "the engine sent a log entry without a timestamp: {:?}",
            String::from_utf8_lossy(&entry[..entry.len().min(48)])
        )
    };
    let space = entry
        .iter()
        .position(|&byte| byte == b' ')
        .ok_or_else(unstamped)?;
    let stamp = std::str::from_utf8(&entry[..space]).map_err(|_| unstamped())?;
    let at_ns = humantime::parse_rfc3339(stamp)
        .ok()
        .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
        .and_then(|since| u64::try_from(since.as_nanos()).ok())
        .filter(|&ns| ns > 0)
        .ok_or_else(unstamped)?;
    Ok((at_ns, &entry[space + 1..]))
}

/// One read from a position: the entries after it, up to the budget.
struct Forward {
    from: Position,
    budget: usize,
    /// `Some(n)` when only the newest `n` entries were asked for.
    recent: Option<u64>,
    data: Vec<u8>,
    next: Position,
    /// Bytes of the entries stamped `from.at_ns` still to pass over: read before.
    skip: u32,
    entries: u64,
    /// The stamp of the first entry, and of the first at or after the cursor.
    oldest: Option<u64>,
    reached: Option<u64>,
    /// True once something did not fit.
    more: bool,
    malformed: Option<String>,
}

impl Forward {
    fn new(from: Position, budget: usize, recent: Option<u64>) -> Forward {
        Forward {
            from,
            budget,
            recent,
            data: Vec::new(),
            next: from,
            skip: from.done,
            entries: 0,
            oldest: None,
            reached: None,
            more: false,
            malformed: None,
        }
    }

    fn take(&mut self, entry: &[u8]) -> ControlFlow<()> {
        let (at_ns, mut text) = match stamped(entry) {
            Ok(stamped) => stamped,
            Err(message) => {
                self.malformed = Some(message);
                return ControlFlow::Break(());
            }
        };
        self.entries += 1;
        self.oldest.get_or_insert(at_ns);
        if self.more {
            return self.full();
        }
        if at_ns < self.from.at_ns {
            return ControlFlow::Continue(());
        }
        self.reached.get_or_insert(at_ns);
        if at_ns == self.from.at_ns {
            let passed = text.len().min(self.skip as usize);
            self.skip -= passed as u32;
            text = &text[passed..];
        }
        if text.is_empty() {
            return ControlFlow::Continue(());
        }
        let room = self.budget - self.data.len();
        if room == 0 {
            self.more = true;
            return self.full();
        }
        let taken = text.len().min(room);
        self.data.extend_from_slice(&text[..taken]);
        self.next = self.next.past(at_ns, taken);
        if taken < text.len() {
            self.more = true;
            return self.full();
        }
        ControlFlow::Continue(())
    }

    /// The chunk is full: stop, unless the newest entries were asked for
    /// and must be counted to tell whether they reach back to the cursor.
    fn full(&self) -> ControlFlow<()> {
        if self.recent.is_some() && !self.oldest_before_cursor() {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    }

    /// Entries stamped at the cursor itself may be a long line's later
    /// pieces only, so they do not show that the read reaches back to it.
    fn oldest_before_cursor(&self) -> bool {
        self.oldest.is_some_and(|oldest| oldest < self.from.at_ns)
    }

    /// The chunk; `None` when only the newest entries were asked for and
    /// the engine had more than those, none of them before the cursor.
    fn finish(self) -> Result<Option<LogChunk>, String> {
        if let Some(message) = self.malformed {
            return Err(message);
        }
        if let Some(asked) = self.recent {
            if self.entries >= asked && !self.oldest_before_cursor() {
                return Ok(None);
            }
        }
        // The entry the cursor points at is gone (the engine rotated it
        // away), so what followed it may be too.
        let gap = self.from.at_ns > 0 && self.reached.is_some_and(|at| at > self.from.at_ns);
        Ok(Some(LogChunk {
            data: self.data,
            next: self.next.cursor(),
            gap,
            at_end: !self.more,
            ended: None,
        }))
    }
}

/// A read of the last lines: the newest `lines` entries, asked for with
/// one or two more before them, to tell whether the newest stamp's entries
/// (a long line's pieces) began before them.
struct Tail {
    lines: u64,
    /// How many entries the engine is asked for.
    asked: u64,
    budget: usize,
    entries: u64,
    /// The first entries' bytes, as many as are asked for beyond `lines`:
    /// they are before the lines wanted, unless fewer entries came.
    head: Vec<Vec<u8>>,
    /// The bytes of the rest, the oldest dropped once far over the budget.
    rest: Vec<u8>,
    dropped: bool,
    /// The newest stamp, how many bytes carry it, and whether every entry does.
    last: Option<u64>,
    last_bytes: u64,
    one_stamp: bool,
    malformed: Option<String>,
}

/// What a tail read found.
struct TailRead {
    data: Vec<u8>,
    last: Option<u64>,
    last_bytes: u64,
    /// Every entry read carries the newest stamp, and there may be more
    /// before them: its bytes must be counted from the whole log.
    last_may_start_earlier: bool,
}

impl Tail {
    fn new(lines: u32, budget: usize) -> Tail {
        let lines = u64::from(lines);
        let before = if lines == 0 { 2 } else { 1 };
        Tail {
            lines,
            asked: lines + before,
            budget,
            entries: 0,
            head: Vec::new(),
            rest: Vec::new(),
            dropped: false,
            last: None,
            last_bytes: 0,
            one_stamp: true,
            malformed: None,
        }
    }

    fn take(&mut self, entry: &[u8]) -> ControlFlow<()> {
        let (at_ns, text) = match stamped(entry) {
            Ok(stamped) => stamped,
            Err(message) => {
                self.malformed = Some(message);
                return ControlFlow::Break(());
            }
        };
        self.entries += 1;
        if (self.head.len() as u64) < self.asked - self.lines {
            self.head.push(text.to_vec());
        } else {
            self.rest.extend_from_slice(text);
            if self.rest.len() > 2 * self.budget {
                self.rest.drain(..self.rest.len() - self.budget);
                self.dropped = true;
            }
        }
        match self.last.map(|last| at_ns.cmp(&last)) {
            None | Some(Ordering::Greater) => {
                self.one_stamp &= self.last.is_none();
                self.last = Some(at_ns);
                self.last_bytes = text.len() as u64;
            }
            Some(Ordering::Equal) => self.last_bytes += text.len() as u64,
            Some(Ordering::Less) => self.one_stamp = false,
        }
        ControlFlow::Continue(())
    }

    fn finish(self) -> Result<TailRead, String> {
        if let Some(message) = self.malformed {
            return Err(message);
        }
        let mut lines = Vec::new();
        if !self.dropped {
            let before = self.entries.saturating_sub(self.lines) as usize;
            for piece in self.head.iter().skip(before) {
                lines.extend_from_slice(piece);
            }
        }
        lines.extend_from_slice(&self.rest);
        Ok(TailRead {
            data: last_within(&lines, !self.dropped, self.budget).to_vec(),
            last: self.last,
            last_bytes: self.last_bytes,
            last_may_start_earlier: self.one_stamp && self.entries >= self.asked,
        })
    }
}

/// The end of `lines` within `budget` bytes, cut as the process tier cuts
/// a tail: all of it when it fits (and is `whole`: nothing before it was
/// dropped), else its last `budget` bytes from just after the first line
/// break among them (a final one aside), so it starts at a line if it can.
fn last_within(lines: &[u8], whole: bool, budget: usize) -> &[u8] {
    if whole && lines.len() <= budget {
        return lines;
    }
    let last = &lines[lines.len().saturating_sub(budget)..];
    let body = &last[..last.len().saturating_sub(1)];
    match body.iter().position(|&byte| byte == b'\n') {
        Some(at) => &last[at + 1..],
        None => last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_700_000_000_000_000_000;

    /// An entry as the engine sends it, stamped `SECOND + ns`.
    fn entry(ns: u64, text: &str) -> Vec<u8> {
        let time = UNIX_EPOCH + std::time::Duration::from_nanos(SECOND + ns);
        format!("{} {text}", humantime::format_rfc3339_nanos(time)).into_bytes()
    }

    fn at(ns: u64, done: u32) -> Position {
        Position {
            container: 7,
            at_ns: SECOND + ns,
            done,
        }
    }

    /// Reads `entries` from `from` as the engine would hand them over.
    fn forward(
        from: Position,
        budget: usize,
        recent: Option<u64>,
        entries: &[Vec<u8>],
    ) -> Option<LogChunk> {
        let mut reader = Forward::new(from, budget, recent);
        for entry in entries {
            if reader.take(entry).is_break() {
                break;
            }
        }
        reader.finish().unwrap()
    }

    fn text(chunk: &LogChunk) -> &str {
        std::str::from_utf8(&chunk.data).unwrap()
    }

    #[test]
    fn stamps_are_read_to_the_nanosecond() {
        let (at_ns, text) = stamped(b"2023-11-14T22:13:20.000000042Z hello world\n").unwrap();
        assert_eq!((at_ns, text), (SECOND + 42, &b"hello world\n"[..]));
        assert_eq!(stamped(b"2023-11-14T22:13:20Z x").unwrap().0, SECOND);
        assert!(stamped(b"no stamp here").is_err());
        assert!(stamped(b"nospace").is_err());
    }

    #[test]
    fn cursors_round_trip_and_name_the_container() {
        let position = Position {
            container: identity("c0ffee"),
            at_ns: SECOND + 5,
            done: 12,
        };
        assert_eq!(Position::of(position.cursor()), position);
        assert_ne!(identity("c0ffee"), identity("c0ffef"));
        assert_eq!(position.since_secs(), 1_700_000_000);
    }

    #[test]
    fn a_chunk_ends_inside_an_entry_and_the_next_goes_on_from_there() {
        let log = [entry(1, "one\n"), entry(2, "two\n"), entry(3, "three\n")];
        let first = forward(Position::start(7), 6, None, &log).unwrap();
        assert_eq!((text(&first), first.at_end), ("one\ntw", false));
        let next = Position::of(first.next);
        assert_eq!(next, at(2, 2));
        // The engine hands over the whole second again; the reader passes over what was read.
        let second = forward(next, 100, None, &log).unwrap();
        assert_eq!(text(&second), "o\nthree\n");
        assert!(second.at_end && !second.gap);
        let last = forward(Position::of(second.next), 100, None, &log).unwrap();
        assert_eq!((text(&last), last.at_end), ("", true));
        assert_eq!(last.next, second.next, "nothing new: the cursor stays");
    }

    #[test]
    fn the_pieces_of_a_long_line_share_a_stamp_and_are_never_read_twice() {
        let log = [
            entry(1, "aaaa"),
            entry(1, "bbbb"),
            entry(1, "cc\n"),
            entry(2, "d\n"),
        ];
        let mut from = Position::start(7);
        let mut all = String::new();
        loop {
            let chunk = forward(from, 3, None, &log).unwrap();
            all.push_str(text(&chunk));
            from = Position::of(chunk.next);
            if chunk.at_end {
                break;
            }
        }
        assert_eq!(all, "aaaabbbbcc\nd\n");
    }

    #[test]
    fn exactly_full_is_at_the_end_only_when_nothing_follows() {
        let log = [entry(1, "ab"), entry(2, "cd")];
        let chunk = forward(Position::start(7), 2, None, &log).unwrap();
        assert_eq!((text(&chunk), chunk.at_end), ("ab", false));
        let chunk = forward(Position::start(7), 4, None, &log).unwrap();
        assert_eq!((text(&chunk), chunk.at_end), ("abcd", true));
    }

    #[test]
    fn a_cursor_whose_entry_is_gone_is_a_gap() {
        // The entry at 2 was rotated away by the engine.
        let log = [entry(5, "five\n")];
        let chunk = forward(at(2, 4), 100, None, &log).unwrap();
        assert_eq!(text(&chunk), "five\n");
        assert!(chunk.gap);
        // Still there: no gap.
        let log = [entry(2, "two\n"), entry(5, "five\n")];
        assert!(!forward(at(2, 4), 100, None, &log).unwrap().gap);
    }

    #[test]
    fn the_newest_entries_serve_when_they_reach_back_past_the_cursor() {
        let log = [entry(1, "one\n"), entry(2, "two\n"), entry(3, "three\n")];
        // All three asked for and they reach back before the cursor.
        let chunk = forward(at(2, 4), 100, Some(3), &log).unwrap();
        assert_eq!(text(&chunk), "three\n");
        // Fewer than asked came: that is everything.
        assert!(forward(at(1, 4), 100, Some(10), &log[1..]).is_some());
        // As many as asked, none before the cursor: maybe more unseen.
        assert!(forward(at(1, 4), 100, Some(2), &log[1..]).is_none());
        // Only pieces stamped at the cursor itself: maybe more of them unseen.
        assert!(forward(at(2, 4), 100, Some(2), &log[1..]).is_none());
    }

    #[test]
    fn a_tail_takes_the_last_entries_within_the_budget() {
        let log: Vec<Vec<u8>> = (1..=5).map(|n| entry(n, &format!("line {n}\n"))).collect();
        let mut tail = Tail::new(3, 1000);
        assert_eq!(tail.asked, 4);
        // The engine sends the newest `asked`.
        for entry in &log[1..] {
            let _ = tail.take(entry);
        }
        let read = tail.finish().unwrap();
        assert_eq!(read.data, b"line 3\nline 4\nline 5\n");
        assert_eq!((read.last, read.last_bytes), (Some(SECOND + 5), 7));
        assert!(!read.last_may_start_earlier);

        // Fewer entries than lines: all of them.
        let mut tail = Tail::new(10, 1000);
        for entry in &log {
            let _ = tail.take(entry);
        }
        assert_eq!(tail.finish().unwrap().data.len(), 5 * 7);

        // Over the budget: from a line start within it.
        let mut tail = Tail::new(3, 10);
        for entry in &log[1..] {
            let _ = tail.take(entry);
        }
        assert_eq!(tail.finish().unwrap().data, b"line 5\n");

        // No lines: just where the end is.
        let mut tail = Tail::new(0, 1000);
        assert_eq!(tail.asked, 2);
        for entry in &log[3..] {
            let _ = tail.take(entry);
        }
        let read = tail.finish().unwrap();
        assert!(read.data.is_empty());
        assert_eq!(read.last, Some(SECOND + 5));
    }

    #[test]
    fn a_tail_inside_one_long_line_counts_its_pieces_from_the_whole_log() {
        let mut tail = Tail::new(1, 1000);
        for piece in [entry(9, "bbbb"), entry(9, "cc\n")] {
            let _ = tail.take(&piece);
        }
        let read = tail.finish().unwrap();
        assert_eq!(read.data, b"cc\n");
        assert!(
            read.last_may_start_earlier,
            "the line may have begun earlier"
        );
    }

    #[test]
    fn a_tail_cut_keeps_memory_bounded_and_starts_at_a_line() {
        let mut tail = Tail::new(10_000, 16);
        for n in 0..10_000 {
            let _ = tail.take(&entry(n, &format!("{n:05}\n")));
            assert!(tail.rest.len() <= 2 * 16);
        }
        assert_eq!(tail.finish().unwrap().data, b"09998\n09999\n");
    }

    #[test]
    fn last_within_mirrors_the_process_tier() {
        assert_eq!(last_within(b"a\nb\nc\n", true, 100), b"a\nb\nc\n");
        assert_eq!(last_within(b"line18\nline19\n", true, 10), b"line19\n");
        assert_eq!(last_within(b"0123456789", true, 4), b"6789");
        assert_eq!(
            last_within(b"x\ny\n", false, 4),
            b"y\n",
            "cut: from a line start"
        );
    }
}
