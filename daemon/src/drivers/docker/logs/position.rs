//! A place in one container's log, and what it takes to find one: the
//! engine's asks, the entries' stamps, the stamps seen so far.

use std::collections::VecDeque;
use std::time::UNIX_EPOCH;

use sandboxd_protocol::LogCursor;

use super::{
    COUNT, DISORDER, FINGERPRINT, FINGERPRINT_BITS, NS_PER_MS, RECENT_ENTRIES, WIDER, WIDEST,
};

/// Which entries to ask the engine for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ask {
    /// The newest `n`, whatever their stamps.
    Newest(u64),
    /// Every entry stamped in or after this second.
    Since(i32),
}

impl Ask {
    /// The next, wider ask after `self` did not reach back far enough.
    pub(super) fn wider(self, since: i32) -> Ask {
        match self {
            Ask::Newest(n) if n < WIDEST => Ask::Newest(n * WIDER),
            _ => Ask::Since(since),
        }
    }
}

/// A place in one container's log; see the module's documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    /// 24 bits.
    pub(super) container: u32,
    /// The view: entries stamped at or after this, in ms since the epoch.
    pub(super) anchor_ms: u64,
    /// 22 bits of the stamp of the view's first entry (when any was read).
    pub(super) first: u32,
    /// Entries of the view read whole, 24 bits.
    pub(super) passed: u32,
    /// Bytes of the next entry of the view read.
    pub(super) done: u16,
}

impl Position {
    pub(super) fn start(container: u32) -> Position {
        Position {
            container,
            anchor_ms: 0,
            first: 0,
            passed: 0,
            done: 0,
        }
    }

    pub(super) fn of(cursor: LogCursor) -> Position {
        Position {
            container: (cursor.epoch >> 40) as u32,
            passed: ((cursor.epoch >> 16) & COUNT) as u32,
            done: cursor.epoch as u16,
            anchor_ms: cursor.offset >> FINGERPRINT_BITS,
            first: (cursor.offset & FINGERPRINT) as u32,
        }
    }

    pub(super) fn cursor(self) -> LogCursor {
        LogCursor {
            epoch: (u64::from(self.container) << 40)
                | ((u64::from(self.passed) & COUNT) << 16)
                | u64::from(self.done),
            offset: (self.anchor_ms << FINGERPRINT_BITS) | (u64::from(self.first) & FINGERPRINT),
        }
    }

    pub(super) fn anchor_ns(self) -> u64 {
        self.anchor_ms.saturating_mul(NS_PER_MS)
    }

    /// Something of the view was read, so its first entry must still be there.
    pub(super) fn has_read(self) -> bool {
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
    pub(super) fn first_ask(self) -> Ask {
        if self.anchor_ms > 0 {
            Ask::Newest(RECENT_ENTRIES.max(2 * u64::from(self.passed)))
        } else {
            Ask::Since(self.since_secs())
        }
    }

    pub(super) fn since_secs(self) -> i32 {
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
pub(super) fn run_cut_ns(started_at_ms: Option<u64>, finished_at_ms: Option<u64>) -> Option<u64> {
    let started = started_at_ms?;
    let cut_ms = match finished_at_ms {
        Some(finished) if finished < started => finished + 1,
        _ => started,
    };
    Some(cut_ms.saturating_mul(NS_PER_MS))
}

/// A container's identity in a cursor: 32-bit FNV-1a of its id, folded to 24.
pub(super) fn identity(container: &str) -> u32 {
    let hash = container.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    (hash >> 24) ^ (hash & 0x00ff_ffff)
}

pub(super) fn fingerprint(at_ns: u64) -> u32 {
    (at_ns & FINGERPRINT) as u32
}

pub(super) fn floor_ms(at_ns: u64) -> u64 {
    at_ns / NS_PER_MS
}

/// An entry's stamp in ns since the epoch, and its bytes after the stamp.
pub(super) fn stamped(entry: &[u8]) -> Result<(u64, &[u8]), String> {
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
pub(super) struct Seen {
    stamps: VecDeque<u64>,
    newest: u64,
    /// How many stamps were kept after the last letting go.
    kept: usize,
}

impl Seen {
    pub(super) fn push(&mut self, at_ns: u64) {
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
    pub(super) fn place(
        &self,
        from: Position,
        partial: Option<(u64, usize)>,
    ) -> Result<Position, String> {
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
