//! What every subcommand's output is made of: JSON or the human text, the
//! aligned tables, ids cut to fit the terminal, and `key: value` lines.
//! Each subcommand renders its own answer in its file under
//! `subcommands/`, from these.
//!
//! Every function returns the text rather than printing it, so the output
//! is testable and the caller decides how a failed write to stdout ends.
//! Strings that came from callers (ids, queues) are shown with control
//! characters escaped: the daemon validates them, but an admin tool should
//! not trust that a terminal escape sequence can never reach it.

use std::fmt::Write as _;

use serde::Serialize;
use unicode_width::{UnicodeWidthChar as _, UnicodeWidthStr as _};

use sandboxd_client::{EgressStatus, SandboxInfo, Shown};

use crate::failure::Failure;
use crate::time::{ago, rfc3339_utc};

/// What a cell with nothing to show holds.
pub const MISSING: &str = "-";

/// The narrowest an id column is squeezed to.
const MIN_ID_WIDTH: usize = 8;

/// JSON when asked for, else the human rendering.
pub fn emit<T: Serialize>(
    json: bool,
    value: &T,
    human: impl FnOnce(&T) -> String,
) -> Result<String, Failure> {
    if !json {
        return Ok(human(value));
    }
    serde_json::to_string_pretty(value)
        .map(|mut text| {
            text.push('\n');
            text
        })
        .map_err(|error| Failure::Output(format!("cannot encode the answer as JSON: {error}")))
}

/// How a table of sandboxes (`list`, `workspaces`) is laid out.
#[derive(Debug, Clone, Copy)]
pub struct ListStyle {
    /// Every column, ids in full (`-o wide`).
    pub wide: bool,
    /// The header line (off with `--no-headers`).
    pub headers: bool,
    /// The terminal width the narrow table must fit.
    pub width: usize,
}

impl ListStyle {
    /// `-o wide` or the columns that fit this terminal.
    pub fn new(wide: bool, headers: bool) -> ListStyle {
        ListStyle {
            wide,
            headers,
            width: terminal_width(),
        }
    }

    /// Every column and every id in full, with headers.
    #[cfg(test)]
    pub const WIDE: ListStyle = ListStyle {
        wide: true,
        headers: true,
        width: usize::MAX,
    };
}

/// The width the narrow tables fit: `$COLUMNS` when a shell exports it,
/// else the classic 80.
pub fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|columns| columns.parse::<usize>().ok())
        .filter(|&columns| columns >= 40)
        .unwrap_or(80)
}

/// Cuts the id column (the second) of a six-column table so the whole
/// fits `width` terminal columns (two spaces between columns), never to
/// less than [`MIN_ID_WIDTH`]: the other columns are short and fixed.
pub fn fit_id_column(header: &[String; 6], rows: &mut [[String; 6]], width: usize) {
    let width_of = |column: usize, rows: &[[String; 6]]| {
        rows.iter()
            .map(|row| row[column].width())
            .chain(std::iter::once(header[column].width()))
            .max()
            .unwrap_or(0)
    };
    let others: usize = (0..6)
        .filter(|&column| column != 1)
        .map(|column| width_of(column, rows))
        .sum();
    let id_width = id_width(width, others);
    for row in rows.iter_mut() {
        row[1] = ellipsized(&row[1], id_width);
    }
}

/// What `width` leaves an id column beside five others `others` wide
/// (two spaces between columns), never less than [`MIN_ID_WIDTH`].
pub fn id_width(width: usize, others: usize) -> usize {
    width.saturating_sub(others + 2 * 5).max(MIN_ID_WIDTH)
}

/// `text` cut to `width` terminal columns, its last one an ellipsis, when
/// wider. Columns, not characters: a CJK character takes two.
pub fn ellipsized(text: &str, width: usize) -> String {
    if text.width() <= width {
        return text.to_string();
    }
    let room = width.saturating_sub(1);
    let mut cut = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > room {
            break;
        }
        used += w;
        cut.push(c);
    }
    cut.push('…');
    cut
}

/// Rows of cells, each column padded to its widest cell (in terminal
/// columns), two spaces apart; the last column is not padded.
pub fn table<const N: usize>(rows: Vec<[String; N]>) -> String {
    let mut widths = [0; N];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.width());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (column, (cell, width)) in row.iter().zip(widths).enumerate() {
            if column + 1 == N {
                line.push_str(cell);
            } else {
                let pad = width - cell.width() + 2;
                let _ = write!(line, "{cell}{:pad$}", "");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `key: value` lines, the values aligned.
pub fn key_values(lines: &[(&str, String)]) -> String {
    let width = lines.iter().map(|(key, _)| key.len()).max().unwrap_or(0) + 1;
    let mut out = String::new();
    for (key, value) in lines {
        let _ = writeln!(out, "{:width$} {value}", format!("{key}:"));
    }
    out
}

/// `value` with control characters, bidi controls and invisible
/// characters escaped (see [`Shown`]), so it can neither drive the terminal
/// nor pass for another.
pub fn shown(value: &str) -> String {
    Shown(value).to_string()
}

/// `value` shown, or [`MISSING`] when empty.
pub fn or_missing(value: &str) -> String {
    if value.is_empty() {
        MISSING.to_string()
    } else {
        shown(value)
    }
}

/// `2024-05-01T12:29:56Z (5m 0s ago)`.
pub fn instant(unix_ms: u64, now_unix_ms: u64) -> String {
    format!("{} ({})", rfc3339_utc(unix_ms), ago(unix_ms, now_unix_ms))
}

/// The state `list` and `describe` show: `paused` for a paused sandbox
/// (which `probe` calls `stopped`), else the state.
pub fn state_word(info: &SandboxInfo) -> String {
    if info.paused_since_unix_ms.is_some() {
        "paused".to_string()
    } else {
        info.state.to_string()
    }
}

/// `strict (nftables table …)`: the posture, then how it is held.
pub fn egress(egress: &EgressStatus) -> String {
    format!("{} ({})", shown(&egress.posture), shown(&egress.mechanism))
}

/// What the subcommands' rendering tests render.
#[cfg(test)]
pub mod samples {
    use sandboxd_client::{EgressStatus, ExitInfo, ProbeState, SandboxInfo, Scope};

    /// The present the samples are rendered at.
    pub const NOW: u64 = 1_714_566_896_000;

    /// A sandbox running on the process tier, restarted twice, its last
    /// runner killed by signal 9.
    pub fn info() -> SandboxInfo {
        SandboxInfo {
            name: "sbx-ses-ba7816bf8f01".into(),
            scope: Scope::Session,
            id: "abc".into(),
            state: ProbeState::Running,
            pid: Some(4242),
            container_id: None,
            image: None,
            generation: 3,
            started_at_unix_ms: Some(NOW - 300_000),
            restarts: 2,
            last_exit: Some(ExitInfo {
                code: None,
                signal: Some(9),
                at_unix_ms: NOW - 301_000,
                oom_killed: false,
                oom_limit_bytes: None,
                pids_refused: 0,
                pids_limit: None,
                disk_limit_bytes: None,
                reason: sandboxd_client::ExitReason::Signaled { signal: 9 },
            }),
            task_queue: "session:abc".into(),
            caller_class: "user".into(),
            egress: Some(EgressStatus {
                posture: "relaxed".into(),
                enforced: true,
                mechanism: "nftables table inet sandboxd_0123456789ab".into(),
            }),
            cluster: None,
            isolation: Vec::new(),
            uid: String::new(),
            usage: None,
            paused_since_unix_ms: None,
            view: Vec::new(),
        }
    }
}
