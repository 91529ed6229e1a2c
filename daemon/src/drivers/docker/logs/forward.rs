//! A forward read: the entries after a position, up to a budget, and the
//! cursor after them.

use std::ops::ControlFlow;

use sandboxd_protocol::LogChunk;

use super::position::{fingerprint, stamped, Ask, Position, Seen};
use super::DISORDER;

/// One read from a position: the entries after it, up to the budget.
pub(super) struct Forward {
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
    pub(super) reached_cut: bool,
    malformed: Option<String>,
}

impl Forward {
    pub(super) fn new(from: Position, budget: usize, ask: Ask, cut: Option<u64>) -> Forward {
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

    pub(super) fn take(&mut self, entry: &[u8]) -> ControlFlow<()> {
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
    pub(super) fn full(&self) -> ControlFlow<()> {
        if matches!(self.ask, Ask::Newest(_)) && !self.before_view {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    }

    /// The chunk; `None` when only the newest entries were asked for and
    /// they may not hold the whole view.
    pub(super) fn finish(self) -> Result<Option<LogChunk>, String> {
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
