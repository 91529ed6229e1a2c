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

mod container_log;
mod forward;
mod position;
mod tail;

use std::ops::ControlFlow;

use bollard::query_parameters::LogsOptionsBuilder;
use sandboxd_protocol::{LogChunk, LogStart, SandboxError};

use super::containers;
use super::departed::{Departed, DEPARTED_ENTRIES};
use super::events::short;
use super::observed::{Lookup, Observed};
use super::Inner;
use crate::sandbox_key::SandboxKey;
use container_log::Log;
use forward::Forward;
use position::{identity, Ask, Position};

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
    let observed = ours(lookup, inner, key)?;
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

/// The sandbox's own container, or why there is no output to read.
fn ours(lookup: Lookup, inner: &Inner, key: &SandboxKey) -> Result<Observed, SandboxError> {
    match lookup {
        Lookup::Ours(observed) => Ok(observed),
        Lookup::Absent => Err(no_output(
            key,
            &format!(
                "there is no container {} on the engine at {}",
                key.base_name,
                inner.engine.address()
            ),
        )),
        Lookup::Foreign { id } => Err(no_output(
            key,
            &format!(
                "the container {} named {} is not one of sandboxd's",
                short(&id),
                key.base_name
            ),
        )),
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

#[cfg(test)]
mod tests;
