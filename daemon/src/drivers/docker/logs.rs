//! Runner output, read back from the engine's log of the container.
//!
//! The engine keeps what a container writes to stdout and stderr as
//! entries (one per line, a line over its 16 KiB buffer as several), each
//! stamped with the time, in nanoseconds, it read it; asked for
//! timestamps, it starts every entry with its stamp and a space. Nothing
//! of sandboxd sits in the runner's output path, and the log lives as long
//! as the container does: across restarts of it, not across its removal.
//!
//! The log is in the order the engine wrote the entries, and that is not
//! the order of their stamps: stdout and stderr are read by two copiers,
//! each stamps a line and then hands it to the log writer, so a line of
//! one stream stamped a moment before a line of the other may land after
//! it. A cursor made of "the stamp of the last entry read" therefore
//! skipped an entry stamped before it that landed after it (the
//! stderr start line of a restarted runner went missing now and then).
//!
//! What is assumed instead is that the disorder is short: an entry lands
//! at most [`DISORDER`] after it was stamped, so an entry later in the log
//! is never stamped more than [`DISORDER`] before an earlier one. A
//! [`LogCursor`] is then a place among the log's entries, counted:
//! - an anchor, in whole milliseconds: the cursor counts only entries
//!   stamped at or after it (the cursor's *view*; the log's order within
//!   it is fixed, as entries are only appended). After each read the
//!   anchor moves up to [`DISORDER`] before the newest entry read, so
//!   every entry that lands later is in the view, and the count stays short;
//! - how many of the view's entries were read (`passed`), and how many
//!   bytes of the next (`done`: a chunk may end inside an entry);
//! - a fingerprint of the view's first entry (the low 22 bits of its
//!   stamp): when the engine's rotation (`log-opts` `max-size`) dropped it,
//!   the count no longer fits and the chunk says so as a gap;
//! - which container (24 bits of a hash of its id). A container removed and
//!   recreated is a new log, so a cursor into the old one goes on from the
//!   start of the new one, flagged as a gap: what the old one wrote after
//!   the cursor went with it.
//!
//! The json-file log has no index by time: reading "since" decodes the
//! whole log. So a read from a cursor first asks for the newest entries
//! only ([`RECENT_ENTRIES`], then more), and takes them when they provably
//! hold the cursor's whole view: fewer came than were asked for, or one of
//! them is stamped more than [`DISORDER`] before the anchor (nothing
//! before it can be in the view). Only when they do not is everything
//! since the anchor's second (less [`DISORDER`]) read.
//!
//! What this cursor cannot do, accepted:
//! - an entry that lands more than [`DISORDER`] after its stamp, or the
//!   engine's clock stepping back as far, may be skipped or read twice;
//! - `Tail` counts the engine's entries, and a line over 16 KiB is several;
//! - a rotation that dropped only entries of the view after its first may
//!   go unnoticed (the count then skips as many unread ones); after a gap
//!   the view is read from its start again, so a line may repeat;
//! - a container whose id hashes to the same 24 bits as a removed one's
//!   is taken for it (one in 16 million).

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::time::UNIX_EPOCH;

use bollard::query_parameters::LogsOptionsBuilder;
use sandboxd_protocol::{LogChunk, LogCursor, LogStart, SandboxError};

use super::containers;
use super::departed::{Departed, DEPARTED_ENTRIES};
use super::engine::CallError;
use super::events::short;
use super::observed::{Lookup, Observed, Phase};
use super::Inner;
use crate::sandbox_key::SandboxKey;

/// The longest an entry is taken to land after its stamp (see the module's
/// documentation). The engine stamps a line and hands it to its log writer
/// at once; two seconds is far more than the scheduling delay between.
const DISORDER: u64 = 2_000_000_000;

/// How many of the newest entries a read from a cursor asks for first;
/// each retry asks for [`WIDER`] times as many, up to [`WIDEST`], before
/// the whole log is read.
const RECENT_ENTRIES: u64 = 1024;
const WIDER: u64 = 16;
const WIDEST: u64 = 1 << 20;

const NS_PER_MS: u64 = 1_000_000;
const FINGERPRINT_BITS: u32 = 22;
const FINGERPRINT: u64 = (1 << FINGERPRINT_BITS) - 1;
const COUNT_BITS: u32 = 24;
const COUNT: u64 = (1 << COUNT_BITS) - 1;

/// At most `max_bytes` of the sandbox's output from `start`.
pub async fn read(
    inner: &Inner,
    key: &SandboxKey,
    start: LogStart,
    max_bytes: u32,
) -> Result<LogChunk, SandboxError> {
    // Any reader may be a follower on its first read (a tail, then polls).
    inner.departed.followed(&key.base_name);
    let following = match start {
        LogStart::Generation(cursor) => Some(cursor),
        _ => None,
    };
    let lookup = inner.inspect(key).await?;
    if let (Some(cursor), false) = (following, matches!(lookup, Lookup::Ours(_))) {
        // A follower's container went: its generation ended with it.
        return departed(inner, key, Position::of(cursor), max_bytes);
    }
    let observed = match lookup {
        Lookup::Ours(observed) => observed,
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
    let container = observed.id.clone();
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
        LogStart::Generation(cursor) => {
            let from = Position::of(cursor);
            if from.container != log.identity {
                // Its container was replaced: what is kept of it, if anything.
                return departed(inner, key, from, max_bytes);
            }
            log.follow(from, budget, &observed).await
        }
        LogStart::After(cursor) => {
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

/// Reads and keeps the newest entries of `container`, stopped and about
/// to be removed, for the followers of its generation (see
/// [`super::departed`]). Best effort: nothing kept when the engine fails.
pub async fn keep_departed(inner: &Inner, key: &SandboxKey, container: &str, how: String) {
    let options = LogsOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .timestamps(true)
        .tail(&DEPARTED_ENTRIES.to_string())
        .build();
    let mut entries = Vec::new();
    let read = containers::logs(&inner.engine, container, options, |entry| {
        entries.push(entry.to_vec());
        ControlFlow::Continue(())
    })
    .await;
    if read.is_ok() {
        inner.departed.keep(
            &key.base_name,
            Departed {
                identity: identity(container),
                entries,
                asked: DEPARTED_ENTRIES,
                how,
            },
        );
    }
}

/// A follower's read once its container is gone: the rest of what was kept
/// of it, then how its generation ended; with nothing kept, the end alone.
fn departed(
    inner: &Inner,
    key: &SandboxKey,
    from: Position,
    max_bytes: u32,
) -> Result<LogChunk, SandboxError> {
    let Some(departed) = inner.departed.get(&key.base_name, from.container) else {
        return Ok(LogChunk {
            data: Vec::new(),
            next: from.cursor(),
            gap: false,
            at_end: true,
            ended: Some("the sandbox's container is gone (deprovisioned or replaced)".to_string()),
        });
    };
    let budget = max_bytes as usize;
    let read = |from: Position| {
        let ask = Ask::Newest(departed.asked);
        let mut reader = Forward::new(from, budget, ask, None);
        for entry in &departed.entries {
            if reader.take(entry).is_break() {
                break;
            }
        }
        reader.finish()
    };
    let malformed = |message: String| {
        SandboxError::Internal(format!(
            "cannot read the kept output of {} '{}': {message}",
            key.scope, key.id
        ))
    };
    let mut chunk = match read(from).map_err(malformed)? {
        Some(chunk) => chunk,
        // The cursor's view is older than what was kept: what was kept.
        None => {
            let mut chunk = read(Position::start(from.container))
                .map_err(malformed)?
                .unwrap_or(LogChunk {
                    data: Vec::new(),
                    next: from.cursor(),
                    gap: true,
                    at_end: true,
                    ended: None,
                });
            chunk.gap = true;
            chunk
        }
    };
    if chunk.at_end {
        chunk.ended = Some(departed.how);
    }
    Ok(chunk)
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

/// Which entries to ask the engine for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// The newest `n`, whatever their stamps.
    Newest(u64),
    /// Every entry stamped in or after this second.
    Since(i32),
}

impl Ask {
    /// The next, wider ask after `self` did not reach back far enough.
    fn wider(self, since: i32) -> Ask {
        match self {
            Ask::Newest(n) if n < WIDEST => Ask::Newest(n * WIDER),
            _ => Ask::Since(since),
        }
    }
}

impl Log<'_> {
    /// Hands the entries asked for to `visit`, in the log's order.
    async fn entries(
        &self,
        ask: Ask,
        visit: impl FnMut(&[u8]) -> ControlFlow<()> + Send,
    ) -> Result<(), SandboxError> {
        let options = LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .timestamps(true);
        let options = match ask {
            Ask::Newest(n) => options.tail(&n.to_string()),
            Ask::Since(secs) => options.since(secs),
        };
        containers::logs(&self.inner.engine, self.container, options.build(), visit)
            .await
            .map_err(|error| self.failed(error))
    }

    /// What comes after `from`.
    async fn forward(&self, from: Position, budget: usize) -> Result<LogChunk, SandboxError> {
        self.forward_until(from, budget, None)
            .await
            .map(|(chunk, _)| chunk)
    }

    /// A follower's read: what comes after `from` in its generation, and
    /// how that generation ended once the chunk reaches its last byte.
    /// Entries stamped from the container's current run on (see
    /// [`run_cut_ns`]) are the next generation's, unless the cursor has
    /// read some of them already.
    async fn follow(
        &self,
        from: Position,
        budget: usize,
        observed: &Observed,
    ) -> Result<LogChunk, SandboxError> {
        let (mut chunk, cut) = self
            .forward_until(
                from,
                budget,
                run_cut_ns(observed.started_at_unix_ms, observed.finished_at_unix_ms),
            )
            .await?;
        let generation = self.inner.generation(self.key, Some(observed));
        let recorded = self
            .inner
            .exits
            .last(self.key)
            .map(|recorded| recorded.exit);
        if cut {
            // The cursor's run ended and the container started again.
            let previous = recorded
                .filter(|exit| {
                    observed
                        .started_at_unix_ms
                        .is_some_and(|start| exit.at_unix_ms <= start)
                })
                .map_or_else(
                    || "the runner ended and the sandbox was started again".to_string(),
                    |exit| format!("the runner exited ({exit})"),
                );
            chunk.ended = Some(format!(
                "generation {}: {previous}",
                generation.saturating_sub(1).max(1)
            ));
        } else if chunk.at_end && matches!(observed.phase, Phase::Stopped | Phase::Dead) {
            // Caught up with a run that is over: its output is complete.
            let exit = recorded
                .filter(|exit| {
                    observed
                        .started_at_unix_ms
                        .is_some_and(|start| exit.at_unix_ms >= start)
                })
                .or_else(|| observed.last_exit());
            if let Some(exit) = exit {
                chunk.ended = Some(format!(
                    "generation {generation}: the runner exited ({exit})"
                ));
            }
        }
        Ok(chunk)
    }

    /// What comes after `from`, stopping before the first entry stamped at
    /// or after `cut` when the cursor read only entries before it; true
    /// when it stopped there.
    async fn forward_until(
        &self,
        from: Position,
        budget: usize,
        cut: Option<u64>,
    ) -> Result<(LogChunk, bool), SandboxError> {
        let since = from.since_secs();
        let mut ask = from.first_ask();
        loop {
            let mut reader = Forward::new(from, budget, ask, cut);
            self.entries(ask, |entry| reader.take(entry)).await?;
            let cut = reader.reached_cut;
            match reader.finish().map_err(|message| self.malformed(message))? {
                Some(chunk) => return Ok((chunk, cut)),
                // The newest entries did not hold the whole view.
                None => ask = ask.wider(since),
            }
        }
    }

    /// The last `lines` entries within the budget, and a cursor at the end.
    async fn tail(&self, lines: u32, budget: usize) -> Result<LogChunk, SandboxError> {
        let mut ask = Ask::Newest(RECENT_ENTRIES.max(u64::from(lines)));
        loop {
            let mut reader = Tail::new(lines, budget, ask);
            self.entries(ask, |entry| reader.take(entry)).await?;
            let read = reader
                .finish(self.identity)
                .map_err(|message| self.malformed(message))?;
            if let Some((data, next)) = read {
                return Ok(LogChunk {
                    data,
                    next: next.cursor(),
                    gap: false,
                    at_end: true,
                    ended: None,
                });
            }
            // A tail reads all it needs with no `since`.
            ask = ask.wider(0);
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
    /// 24 bits.
    container: u32,
    /// The view: entries stamped at or after this, in ms since the epoch.
    anchor_ms: u64,
    /// 22 bits of the stamp of the view's first entry (when any was read).
    first: u32,
    /// Entries of the view read whole, 24 bits.
    passed: u32,
    /// Bytes of the next entry of the view read.
    done: u16,
}

impl Position {
    fn start(container: u32) -> Position {
        Position {
            container,
            anchor_ms: 0,
            first: 0,
            passed: 0,
            done: 0,
        }
    }

    fn of(cursor: LogCursor) -> Position {
        Position {
            container: (cursor.epoch >> 40) as u32,
            passed: ((cursor.epoch >> 16) & COUNT) as u32,
            done: cursor.epoch as u16,
            anchor_ms: cursor.offset >> FINGERPRINT_BITS,
            first: (cursor.offset & FINGERPRINT) as u32,
        }
    }

    fn cursor(self) -> LogCursor {
        LogCursor {
            epoch: (u64::from(self.container) << 40)
                | ((u64::from(self.passed) & COUNT) << 16)
                | u64::from(self.done),
            offset: (self.anchor_ms << FINGERPRINT_BITS) | (u64::from(self.first) & FINGERPRINT),
        }
    }

    fn anchor_ns(self) -> u64 {
        self.anchor_ms.saturating_mul(NS_PER_MS)
    }

    /// Something of the view was read, so its first entry must still be there.
    fn has_read(self) -> bool {
        self.passed > 0 || self.done > 0
    }

    /// `since` for the engine: whole seconds (the API takes no finer),
    /// [`DISORDER`] before the anchor, so that an engine that seeks to
    /// `since` rather than filtering by it still hands over the whole view.
    /// bollard's `i32` holds it until 2038; after that, 0 reads the whole
    /// log: slower, not wrong.
    /// The first read a forward read from here asks for: the newest
    /// entries, enough to cover what the cursor counted, when it has an
    /// anchor; else everything since its time.
    fn first_ask(self) -> Ask {
        if self.anchor_ms > 0 {
            Ask::Newest(RECENT_ENTRIES.max(2 * u64::from(self.passed)))
        } else {
            Ask::Since(self.since_secs())
        }
    }

    fn since_secs(self) -> i32 {
        i32::try_from(self.anchor_ns().saturating_sub(DISORDER) / 1_000_000_000).unwrap_or(0)
    }
}

/// Where the container's current run begins among the log's stamps. The
/// engine's `StartedAt` is set once the run's process is already going, so
/// its first lines may be stamped a little before it (seen under load:
/// a restarted runner's start line read as the run before's). While a run
/// goes, `FinishedAt` still holds the run before's end, and the engine
/// sets it only after that run's output copiers are done, while the next
/// run's process cannot start before it: the millisecond after it is the
/// clean cut. Without it (a first run, or a stopped container whose
/// `FinishedAt` is its current run's), `StartedAt`.
fn run_cut_ns(started_at_ms: Option<u64>, finished_at_ms: Option<u64>) -> Option<u64> {
    let started = started_at_ms?;
    let cut_ms = match finished_at_ms {
        Some(finished) if finished < started => finished + 1,
        _ => started,
    };
    Some(cut_ms.saturating_mul(NS_PER_MS))
}

/// A container's identity in a cursor: 32-bit FNV-1a of its id, folded to 24.
fn identity(container: &str) -> u32 {
    let hash = container.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    (hash >> 24) ^ (hash & 0x00ff_ffff)
}

fn fingerprint(at_ns: u64) -> u32 {
    (at_ns & FINGERPRINT) as u32
}

fn floor_ms(at_ns: u64) -> u64 {
    at_ns / NS_PER_MS
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

/// The stamps of the entries read whole up to some point, in the log's
/// order: what it takes to place a cursor there. Those stamped too long
/// before the newest to fall in any later view are let go.
#[derive(Debug, Default)]
struct Seen {
    stamps: VecDeque<u64>,
    newest: u64,
    /// How many stamps were kept after the last letting go.
    kept: usize,
}

impl Seen {
    fn push(&mut self, at_ns: u64) {
        self.newest = self.newest.max(at_ns);
        self.stamps.push_back(at_ns);
        if self.stamps.len() > 2 * self.kept + 1024 {
            // No later anchor is below this (see `place`).
            let floor = (floor_ms(self.newest.saturating_sub(DISORDER)) * NS_PER_MS)
                .saturating_sub(NS_PER_MS);
            self.stamps.retain(|&at| at >= floor);
            self.kept = self.stamps.len();
        }
    }

    /// The cursor after the entries seen, and `partial.1` bytes of one more
    /// stamped `partial.0`; `from` is where they were read from, its view
    /// the one they all belong to.
    fn place(&self, from: Position, partial: Option<(u64, usize)>) -> Result<Position, String> {
        let newest = match partial {
            Some((at, _)) => self.newest.max(at),
            None if self.stamps.is_empty() => return Ok(from),
            None => self.newest,
        };
        // Every entry still to land is stamped after `newest - DISORDER`;
        // a partly read one must stay in the view too.
        let mut anchor_ms = floor_ms(newest.saturating_sub(DISORDER)).max(from.anchor_ms);
        if let Some((at, _)) = partial {
            anchor_ms = anchor_ms.min(floor_ms(at));
        }
        let anchor_ns = anchor_ms * NS_PER_MS;
        let mut view = self.stamps.iter().filter(|&&at| at >= anchor_ns);
        let first = view
            .next()
            .copied()
            .or(partial.map(|(at, _)| at))
            .map_or(0, fingerprint);
        let passed = self.stamps.iter().filter(|&&at| at >= anchor_ns).count() as u64;
        if passed > COUNT {
            return Err(format!(
                "the engine logged {passed} entries within {} s, more than a cursor counts",
                DISORDER / 1_000_000_000
            ));
        }
        let done = partial.map_or(0, |(_, done)| done);
        let done = u16::try_from(done).map_err(|_| {
            format!(
                "the engine sent a log entry of more than {done} bytes, more than a cursor counts"
            )
        })?;
        Ok(Position {
            container: from.container,
            anchor_ms,
            first,
            passed: passed as u32,
            done,
        })
    }
}

/// One read from a position: the entries after it, up to the budget.
struct Forward {
    from: Position,
    budget: usize,
    ask: Ask,
    data: Vec<u8>,
    /// The index in the view of the next entry.
    view: u64,
    /// The view's entries read whole, before and in this chunk.
    seen: Seen,
    /// Where in an entry the chunk ended: its stamp and bytes read of it.
    partial: Option<(u64, usize)>,
    /// Entries the engine sent, in the view or not.
    entries: u64,
    /// One of them is stamped so far before the anchor that nothing of
    /// the view is before it: the entries sent hold the whole view.
    before_view: bool,
    /// The view's first entry is not the one the cursor read first.
    gap: bool,
    /// True once something did not fit.
    more: bool,
    /// Where the followed generation ends: the stamp its next run starts at.
    cut: Option<u64>,
    /// The newest stamp of the entries the cursor had read (some of).
    cursor_at: Option<u64>,
    /// True once the chunk stopped at the cut.
    reached_cut: bool,
    malformed: Option<String>,
}

impl Forward {
    fn new(from: Position, budget: usize, ask: Ask, cut: Option<u64>) -> Forward {
        Forward {
            from,
            budget,
            ask,
            data: Vec::new(),
            view: 0,
            seen: Seen::default(),
            partial: None,
            entries: 0,
            before_view: false,
            gap: false,
            more: false,
            cut,
            cursor_at: None,
            reached_cut: false,
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
        if at_ns < self.from.anchor_ns() {
            self.before_view |= at_ns.saturating_add(DISORDER) < self.from.anchor_ns();
            return ControlFlow::Continue(());
        }
        if self.more || self.reached_cut {
            return self.full();
        }
        let index = self.view;
        self.view += 1;
        if index == 0 && self.from.has_read() && fingerprint(at_ns) != self.from.first {
            // The entry the cursor counted from is gone (the engine
            // rotated it away): the count says nothing; read the view anew.
            self.gap = true;
        }
        let (passed, done) = if self.gap {
            (0, 0)
        } else {
            (u64::from(self.from.passed), usize::from(self.from.done))
        };
        if index < passed || (index == passed && done > 0) {
            self.cursor_at = Some(self.cursor_at.map_or(at_ns, |at| at.max(at_ns)));
        }
        if index < passed {
            self.seen.push(at_ns);
            return ControlFlow::Continue(());
        }
        let next_run = self
            .cut
            .filter(|&cut| at_ns >= cut && self.cursor_at.is_some_and(|read| read < cut));
        if next_run.is_some() {
            // The next generation's first entry: the followed one ended.
            self.reached_cut = true;
            return self.full();
        }
        let skipped = if index == passed {
            done.min(text.len())
        } else {
            0
        };
        text = &text[skipped..];
        if text.is_empty() {
            self.seen.push(at_ns);
            return ControlFlow::Continue(());
        }
        let room = self.budget - self.data.len();
        let taken = text.len().min(room);
        self.data.extend_from_slice(&text[..taken]);
        if taken < text.len() {
            self.more = true;
            if skipped + taken > 0 {
                self.partial = Some((at_ns, skipped + taken));
            }
            return self.full();
        }
        self.seen.push(at_ns);
        ControlFlow::Continue(())
    }

    /// The chunk is full: stop, unless the newest entries were asked for
    /// and must be counted to tell whether they hold the whole view.
    fn full(&self) -> ControlFlow<()> {
        if matches!(self.ask, Ask::Newest(_)) && !self.before_view {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    }

    /// The chunk; `None` when only the newest entries were asked for and
    /// they may not hold the whole view.
    fn finish(self) -> Result<Option<LogChunk>, String> {
        if let Some(message) = self.malformed {
            return Err(message);
        }
        if let Ask::Newest(asked) = self.ask {
            if self.entries >= asked && !self.before_view {
                return Ok(None);
            }
        }
        // Something was read of the view, and none of it is left.
        let gap = self.gap || (self.from.has_read() && self.view == 0);
        let from = if gap {
            Position {
                passed: 0,
                done: 0,
                first: 0,
                ..self.from
            }
        } else {
            self.from
        };
        let next = self.seen.place(from, self.partial)?;
        Ok(Some(LogChunk {
            data: self.data,
            next: next.cursor(),
            gap,
            at_end: !self.more,
            ended: None,
        }))
    }
}

/// A read of the last lines: the newest entries asked for, the last
/// `lines` of them kept, and where the log ends.
struct Tail {
    lines: usize,
    budget: usize,
    ask: Ask,
    entries: u64,
    /// The last entries' bytes, the oldest dropped once over the budget.
    kept: VecDeque<Vec<u8>>,
    kept_bytes: usize,
    dropped: bool,
    seen: Seen,
    oldest: Option<u64>,
    malformed: Option<String>,
}

impl Tail {
    fn new(lines: u32, budget: usize, ask: Ask) -> Tail {
        Tail {
            lines: lines as usize,
            budget,
            ask,
            entries: 0,
            kept: VecDeque::new(),
            kept_bytes: 0,
            dropped: false,
            seen: Seen::default(),
            oldest: None,
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
        self.oldest = Some(self.oldest.map_or(at_ns, |oldest| oldest.min(at_ns)));
        self.seen.push(at_ns);
        self.kept.push_back(text.to_vec());
        self.kept_bytes += text.len();
        while self.kept.len() > self.lines {
            self.drop_oldest();
        }
        while self.kept.len() > 1 && self.kept_bytes - self.kept[0].len() >= self.budget {
            self.drop_oldest();
            self.dropped = true;
        }
        ControlFlow::Continue(())
    }

    fn drop_oldest(&mut self) {
        if let Some(oldest) = self.kept.pop_front() {
            self.kept_bytes -= oldest.len();
        }
    }

    /// The lines and the cursor at the end of the log; `None` when the
    /// entries asked for may not hold the whole view that cursor counts.
    fn finish(self, container: u32) -> Result<Option<(Vec<u8>, Position)>, String> {
        if let Some(message) = self.malformed {
            return Err(message);
        }
        let next = self.seen.place(Position::start(container), None)?;
        let whole = match self.ask {
            Ask::Newest(asked) => {
                self.entries < asked
                    || self
                        .oldest
                        .is_some_and(|oldest| oldest.saturating_add(DISORDER) < next.anchor_ns())
            }
            Ask::Since(_) => true,
        };
        if !whole {
            return Ok(None);
        }
        let lines: Vec<u8> = self.kept.into_iter().flatten().collect();
        let data = last_within(&lines, !self.dropped, self.budget).to_vec();
        Ok(Some((data, next)))
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

    #[test]
    fn a_run_is_cut_just_after_the_run_before_ended_else_at_its_start() {
        // Running, the run before ended at 1_000 ms: its output copiers were
        // done by then, and the next run's first line may precede StartedAt.
        assert_eq!(
            run_cut_ns(Some(1_050), Some(1_000)),
            Some(1_001 * NS_PER_MS)
        );
        // A first run, or a stopped container (FinishedAt is its own end).
        assert_eq!(run_cut_ns(Some(1_050), None), Some(1_050 * NS_PER_MS));
        assert_eq!(
            run_cut_ns(Some(1_050), Some(2_000)),
            Some(1_050 * NS_PER_MS)
        );
        assert_eq!(
            run_cut_ns(Some(1_050), Some(1_050)),
            Some(1_050 * NS_PER_MS)
        );
        assert_eq!(run_cut_ns(None, Some(1_000)), None);
    }

    const SECOND: u64 = 1_700_000_000_000_000_000;
    const MS: u64 = NS_PER_MS;

    /// An entry as the engine sends it, stamped `SECOND + ns`.
    fn entry(ns: u64, text: &str) -> Vec<u8> {
        let time = UNIX_EPOCH + std::time::Duration::from_nanos(SECOND + ns);
        format!("{} {text}", humantime::format_rfc3339_nanos(time)).into_bytes()
    }

    /// What a test engine with `log` (in its order) sends for `ask`: the
    /// newest `n`, or those stamped in or after a second, as dockerd does.
    fn engine(log: &[Vec<u8>], ask: Ask) -> Vec<&Vec<u8>> {
        match ask {
            Ask::Newest(n) => log
                .iter()
                .skip(log.len().saturating_sub(n as usize))
                .collect(),
            Ask::Since(secs) => log
                .iter()
                .filter(|entry| stamped(entry).unwrap().0 >= secs as u64 * 1_000_000_000)
                .collect(),
        }
    }

    /// One read from `from`, asked as [`Log::forward`] asks.
    fn forward(from: Position, budget: usize, log: &[Vec<u8>]) -> LogChunk {
        let since = from.since_secs();
        let mut ask = from.first_ask();
        loop {
            let mut reader = Forward::new(from, budget, ask, None);
            for entry in engine(log, ask) {
                if reader.take(entry).is_break() {
                    break;
                }
            }
            match reader.finish().unwrap() {
                Some(chunk) => return chunk,
                None => ask = ask.wider(since),
            }
        }
    }

    /// One tail read, asked as [`Log::tail`] asks.
    fn tail(lines: u32, budget: usize, log: &[Vec<u8>]) -> (Vec<u8>, Position) {
        let mut ask = Ask::Newest(RECENT_ENTRIES.max(u64::from(lines)));
        loop {
            let mut reader = Tail::new(lines, budget, ask);
            for entry in engine(log, ask) {
                let _ = reader.take(entry);
            }
            match reader.finish(7).unwrap() {
                Some(read) => return read,
                None => ask = ask.wider(0),
            }
        }
    }

    /// Everything from `from` in chunks of `budget`, and the cursor after.
    fn read_to_end(mut from: Position, budget: usize, log: &[Vec<u8>]) -> (String, Position) {
        let mut all = String::new();
        loop {
            let chunk = forward(from, budget, log);
            assert!(!chunk.gap, "no gap in a log nothing was dropped from");
            assert!(chunk.data.len() <= budget);
            all.push_str(std::str::from_utf8(&chunk.data).unwrap());
            from = Position::of(chunk.next);
            if chunk.at_end {
                return (all, from);
            }
        }
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
            anchor_ms: (SECOND + 5 * MS) / MS,
            first: fingerprint(SECOND + 6 * MS + 3),
            passed: 0x00ab_cdef,
            done: 16385,
        };
        assert!(position.container <= 0x00ff_ffff);
        assert_eq!(Position::of(position.cursor()), position);
        assert_ne!(identity("c0ffee"), identity("c0ffef"));
        assert_eq!(position.since_secs(), 1_699_999_998, "DISORDER before");
        assert_eq!(
            Position::of(Position::start(9).cursor()),
            Position::start(9)
        );
    }

    #[test]
    fn a_chunk_ends_inside_an_entry_and_the_next_goes_on_from_there() {
        let log = [entry(1, "one\n"), entry(2, "two\n"), entry(3, "three\n")];
        let first = forward(Position::start(7), 6, &log);
        assert_eq!((text(&first), first.at_end), ("one\ntw", false));
        let next = Position::of(first.next);
        assert_eq!((next.passed, next.done), (1, 2));
        // The engine hands over the view again; the reader passes over what was read.
        let second = forward(next, 100, &log);
        assert_eq!(text(&second), "o\nthree\n");
        assert!(second.at_end && !second.gap);
        let last = forward(Position::of(second.next), 100, &log);
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
        assert_eq!(
            read_to_end(Position::start(7), 3, &log).0,
            "aaaabbbbcc\nd\n"
        );
    }

    #[test]
    fn exactly_full_is_at_the_end_only_when_nothing_follows() {
        let log = [entry(1, "ab"), entry(2, "cd")];
        let chunk = forward(Position::start(7), 2, &log);
        assert_eq!((text(&chunk), chunk.at_end), ("ab", false));
        let chunk = forward(Position::start(7), 4, &log);
        assert_eq!((text(&chunk), chunk.at_end), ("abcd", true));
    }

    /// A flake once seen: the engine's stderr copier stamped its line
    /// before the stdout copier stamped the others, but its line landed
    /// after them, and after a reader had read them. A cursor of "the stamp
    /// read last" passed over it.
    #[test]
    fn an_entry_stamped_before_the_cursor_that_lands_after_it_is_read() {
        let mut log = vec![entry(20 * MS, "out 1\n"), entry(30 * MS, "out 2\n")];
        let (read, at) = read_to_end(Position::start(7), 100, &log);
        assert_eq!(read, "out 1\nout 2\n");
        log.push(entry(10 * MS, "err: starting\n"));
        log.push(entry(40 * MS, "out 3\n"));
        let (rest, at) = read_to_end(at, 100, &log);
        assert_eq!(rest, "err: starting\nout 3\n");
        assert_eq!(read_to_end(at, 100, &log).0, "", "and nothing twice");
    }

    #[test]
    fn a_cursor_whose_first_entry_is_gone_is_a_gap() {
        let log = [entry(1, "one\n"), entry(2, "two\n")];
        let (_, at) = read_to_end(Position::start(7), 100, &log);
        // The engine rotated both away, and more was written.
        let rotated = [entry(5 * MS, "five\n")];
        let chunk = forward(at, 100, &rotated);
        assert_eq!(text(&chunk), "five\n");
        assert!(chunk.gap);
        // Rotated away, nothing new: a gap once, then an empty view.
        let chunk = forward(at, 100, &[]);
        assert!(chunk.gap);
        let again = forward(Position::of(chunk.next), 100, &[]);
        assert!(!again.gap && again.data.is_empty());
        // Still there: no gap.
        assert!(!forward(at, 100, &log).gap);
    }

    #[test]
    fn the_newest_entries_serve_only_when_they_hold_the_whole_view() {
        // 5000 entries 1 ms apart: the view of a cursor at the end spans
        // DISORDER, more than RECENT_ENTRIES entries.
        let log: Vec<Vec<u8>> = (0..5000u64).map(|n| entry(n * MS, "x\n")).collect();
        let (_, at) = read_to_end(Position::start(7), 1 << 20, &log);
        assert!(u64::from(at.passed) > RECENT_ENTRIES, "{at:?}");
        let mut reader = Forward::new(at, 100, Ask::Newest(RECENT_ENTRIES), None);
        for entry in engine(&log, Ask::Newest(RECENT_ENTRIES)) {
            let _ = reader.take(entry);
        }
        assert!(reader.finish().unwrap().is_none(), "asks again, wider");
        let mut grown = log.clone();
        grown.push(entry(5000 * MS, "new\n"));
        assert_eq!(forward(at, 100, &grown).data, b"new\n");
        // An entry stamped long before the view shows nothing before it is in it.
        let mut reader = Forward::new(at, 100, Ask::Newest(2), None);
        let _ = reader.take(&entry(0, "old\n"));
        let _ = reader.take(&entry(5001 * MS, "new\n"));
        let chunk = reader.finish().unwrap().expect("held the whole view");
        assert_eq!(text(&chunk), "new\n");
    }

    /// A small deterministic generator, so a failure repeats.
    struct Xorshift(u64);

    impl Xorshift {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Two streams stamped in order each, landing in the log interleaved
    /// with up to a second of disorder between them, read in chunks of every
    /// size while the log grows: every entry once, in the log's order.
    #[test]
    fn a_log_grown_out_of_stamp_order_is_read_whole_and_once_in_any_chunks() {
        for seed in 1..=12u64 {
            let mut random = Xorshift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut log = Vec::new();
            let mut expected = String::new();
            let mut clock = [0u64; 2];
            let mut at = Position::start(7);
            let mut read = String::new();
            for n in 0..600 {
                let stream = random.below(2) as usize;
                // Each stream's stamps rise; the other's may be up to 1 s behind.
                clock[stream] = clock[stream].max(clock[1 - stream].saturating_sub(1000 * MS))
                    + random.below(50 * MS);
                let line = format!("{stream}:{n}{}\n", "-".repeat(random.below(40) as usize));
                log.push(entry(clock[stream], &line));
                expected.push_str(&line);
                if random.below(7) == 0 {
                    let budget = 1 + random.below(128) as usize;
                    let (more, next) = read_to_end(at, budget, &log);
                    read.push_str(&more);
                    at = next;
                }
            }
            read.push_str(&read_to_end(at, 4096, &log).0);
            assert_eq!(read, expected, "seed {seed}");
        }
    }

    #[test]
    fn a_tail_takes_the_last_entries_within_the_budget() {
        let log: Vec<Vec<u8>> = (1..=5).map(|n| entry(n, &format!("line {n}\n"))).collect();
        let (data, at) = tail(3, 1000, &log);
        assert_eq!(data, b"line 3\nline 4\nline 5\n");
        assert_eq!(forward(at, 100, &log).data, b"", "the cursor is at the end");
        // Fewer entries than lines: all of them.
        assert_eq!(tail(10, 1000, &log).0.len(), 5 * 7);
        // Over the budget: from a line start within it.
        assert_eq!(tail(3, 10, &log).0, b"line 5\n");
        // No lines: just where the end is.
        let (data, at) = tail(0, 1000, &log);
        assert!(data.is_empty());
        let mut grown = log.clone();
        grown.push(entry(6, "line 6\n"));
        assert_eq!(forward(at, 100, &grown).data, b"line 6\n");
    }

    #[test]
    fn a_tail_of_a_busy_log_counts_its_cursor_from_a_wider_read() {
        // More entries within DISORDER of the end than a first tail asks for.
        let log: Vec<Vec<u8>> = (0..5000u64).map(|n| entry(n * MS / 2, "x\n")).collect();
        let (data, at) = tail(1, 1000, &log);
        assert_eq!(data, b"x\n");
        let mut grown = log.clone();
        // Stamped a second before the newest, so not among the newest 1024.
        grown.push(entry(1500 * MS, "late\n"));
        assert_eq!(forward(at, 100, &grown).data, b"late\n");
    }

    #[test]
    fn a_tail_cut_keeps_memory_bounded_and_starts_at_a_line() {
        let mut tail = Tail::new(10_000, 16, Ask::Since(0));
        for n in 0..10_000 {
            let _ = tail.take(&entry(n, &format!("{n:05}\n")));
            assert!(tail.kept_bytes <= 16 + 6);
        }
        assert_eq!(tail.finish(7).unwrap().unwrap().0, b"09998\n09999\n");
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
