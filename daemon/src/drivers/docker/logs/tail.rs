//! A tail read: the last lines of the log within a budget, and the cursor
//! at its end.

use std::collections::VecDeque;
use std::ops::ControlFlow;

use super::position::{stamped, Ask, Position, Seen};
use super::DISORDER;

/// A read of the last lines: the newest entries asked for, the last
/// `lines` of them kept, and where the log ends.
pub(super) struct Tail {
    lines: usize,
    budget: usize,
    ask: Ask,
    entries: u64,
    /// The last entries' bytes, the oldest dropped once over the budget.
    kept: VecDeque<Vec<u8>>,
    pub(super) kept_bytes: usize,
    dropped: bool,
    seen: Seen,
    oldest: Option<u64>,
    malformed: Option<String>,
}

impl Tail {
    pub(super) fn new(lines: u32, budget: usize, ask: Ask) -> Tail {
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

    pub(super) fn take(&mut self, entry: &[u8]) -> ControlFlow<()> {
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
    pub(super) fn finish(self, container: u32) -> Result<Option<(Vec<u8>, Position)>, String> {
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
pub(super) fn last_within(lines: &[u8], whole: bool, budget: usize) -> &[u8] {
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
