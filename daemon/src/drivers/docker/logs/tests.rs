//! The cursor against a test engine: entries out of stamp order, rotated
//! away, cut inside, tailed.

use std::time::UNIX_EPOCH;

use super::position::{fingerprint, run_cut_ns, stamped};
use super::tail::{last_within, Tail};
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
