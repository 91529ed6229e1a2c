//! Reading a bounded chunk: from an offset, or the last lines.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use sandboxd_protocol::{LogChunk, LogCursor};

use super::{Files, LogError};

/// How much is read at a time when scanning backwards for line breaks.
const SCAN_BLOCK: u64 = 8 * 1024;

impl Files {
    /// Up to `budget` bytes of the current file from `offset`.
    pub(super) fn read_current(
        &self,
        offset: u64,
        budget: u64,
        epoch: u64,
    ) -> Result<LogChunk, LogError> {
        let end = self.current_len.min(offset.saturating_add(budget));
        let data = match &self.current {
            Some(file) => read_range(file, &self.current_path, offset, end)?,
            None => Vec::new(),
        };
        let next = offset + data.len() as u64;
        Ok(LogChunk {
            data,
            next: LogCursor {
                epoch,
                offset: next,
            },
            gap: false,
            at_end: next >= self.current_len,
            ended: None,
        })
    }

    /// Up to `budget` bytes of the rotated file from `position` (its own
    /// offset; `rotated_from` maps it back to the incarnation's offsets).
    /// Once it is used up, the next cursor is `then`: the current file.
    pub(super) fn read_rotated(
        &self,
        position: u64,
        rotated_from: u64,
        budget: u64,
        epoch: u64,
        then: LogCursor,
    ) -> Result<LogChunk, LogError> {
        let Some(file) = &self.rotated else {
            return Ok(LogChunk {
                data: Vec::new(),
                next: then,
                gap: true,
                at_end: false,
                ended: None,
            });
        };
        let len = file_len(file, &self.rotated_path)?;
        let end = len.min(position.saturating_add(budget));
        let data = read_range(file, &self.rotated_path, position.min(end), end)?;
        let next = if end >= len {
            then
        } else {
            LogCursor {
                epoch,
                offset: rotated_from + end,
            }
        };
        Ok(LogChunk {
            data,
            next,
            gap: false,
            // There is always the current file after this one.
            at_end: false,
            ended: None,
        })
    }

    /// The last `lines` lines within `budget` bytes: from the current file,
    /// and from the end of the rotated one when the current file has fewer.
    /// When the lines do not fit, the chunk starts at the first line break
    /// inside the budget.
    pub(super) fn tail(
        &self,
        lines: u32,
        budget: u64,
        next: LogCursor,
    ) -> Result<LogChunk, LogError> {
        let mut data = Vec::new();
        let mut from_current = Vec::new();
        let mut remaining = (lines, budget);
        if let Some(file) = &self.current {
            let found = tail_start(file, self.current_len, lines, budget)
                .map_err(|source| io_error(&self.current_path, source))?;
            from_current = read_range(file, &self.current_path, found.start, self.current_len)?;
            remaining = (
                lines - found.lines,
                budget - (self.current_len - found.start),
            );
            if found.start > 0 {
                remaining.0 = 0;
            }
        }
        if let (Some(file), (lines @ 1.., budget @ 1..)) = (&self.rotated, remaining) {
            let len = file_len(file, &self.rotated_path)?;
            let found = tail_start(file, len, lines, budget)
                .map_err(|source| io_error(&self.rotated_path, source))?;
            data = read_range(file, &self.rotated_path, found.start, len)?;
        }
        data.extend_from_slice(&from_current);
        Ok(LogChunk {
            data,
            next,
            gap: false,
            at_end: true,
            ended: None,
        })
    }
}

/// Where the last lines of a file start.
#[derive(Debug, PartialEq, Eq)]
struct TailStart {
    start: u64,
    /// How many lines lie from `start` to the end.
    lines: u32,
}

/// The offset at which the last `lines` lines of the first `len` bytes of
/// `file` start, looking back at most `budget` bytes. A final line break
/// ends the last line rather than starting an empty one; a last line
/// without one still counts.
fn tail_start(file: &File, len: u64, lines: u32, budget: u64) -> io::Result<TailStart> {
    if lines == 0 || len == 0 || budget == 0 {
        return Ok(TailStart {
            start: len,
            lines: 0,
        });
    }
    let floor = len.saturating_sub(budget);
    let mut breaks = 0;
    let mut earliest_break = None;
    let mut end = len;
    let mut block = Vec::new();
    while end > floor {
        let begin = floor.max(end.saturating_sub(SCAN_BLOCK));
        block.resize((end - begin) as usize, 0);
        file.read_exact_at(&mut block, begin)?;
        for (index, &byte) in block.iter().enumerate().rev() {
            let at = begin + index as u64;
            if byte != b'\n' || at == len - 1 {
                continue;
            }
            breaks += 1;
            earliest_break = Some(at);
            if breaks == lines {
                return Ok(TailStart {
                    start: at + 1,
                    lines,
                });
            }
        }
        end = begin;
    }
    if floor == 0 {
        // The whole file: its first line counts too.
        return Ok(TailStart {
            start: 0,
            lines: breaks + 1,
        });
    }
    // Out of budget: start at a line boundary inside it, if there is one.
    Ok(match earliest_break {
        Some(at) => TailStart {
            start: at + 1,
            lines: breaks,
        },
        None => TailStart {
            start: floor,
            lines: 1,
        },
    })
}

fn file_len(file: &File, path: &Path) -> Result<u64, LogError> {
    file.metadata()
        .map(|metadata| metadata.len())
        .map_err(|source| io_error(path, source))
}

/// The bytes in `[from, to)`, or fewer if the file is shorter by now.
fn read_range(file: &File, path: &Path, from: u64, to: u64) -> Result<Vec<u8>, LogError> {
    let mut data = vec![0; to.saturating_sub(from) as usize];
    let mut filled = 0;
    while filled < data.len() {
        match file.read_at(&mut data[filled..], from + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(io_error(path, source)),
        }
    }
    data.truncate(filled);
    Ok(data)
}

fn io_error(path: &Path, source: io::Error) -> LogError {
    LogError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(name: &str, contents: &[u8]) -> (File, std::path::PathBuf) {
        let path =
            std::env::temp_dir().join(format!("sandboxd-tail-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        (File::open(&path).unwrap(), path)
    }

    fn tail_of(contents: &[u8], lines: u32, budget: u64) -> (String, u32) {
        let (file, path) = file_with(&format!("{lines}-{budget}-{}", contents.len()), contents);
        let found = tail_start(&file, contents.len() as u64, lines, budget).unwrap();
        std::fs::remove_file(path).unwrap();
        (
            String::from_utf8_lossy(&contents[found.start as usize..]).into_owned(),
            found.lines,
        )
    }

    #[test]
    fn the_last_lines_with_and_without_a_final_break() {
        assert_eq!(tail_of(b"a\nb\nc\n", 2, 100), ("b\nc\n".into(), 2));
        assert_eq!(tail_of(b"a\nb\nc", 2, 100), ("b\nc".into(), 2));
        assert_eq!(tail_of(b"a\nb\nc\n", 5, 100), ("a\nb\nc\n".into(), 3));
        assert_eq!(tail_of(b"a\nb\nc\n", 0, 100), (String::new(), 0));
        assert_eq!(tail_of(b"", 3, 100), (String::new(), 0));
    }

    #[test]
    fn a_tight_budget_starts_at_a_line_boundary() {
        // 10 lines of "lineNN\n" (7 bytes each); 20 bytes hold 2 whole lines.
        let contents: String = (10..20).map(|n| format!("line{n}\n")).collect();
        assert_eq!(
            tail_of(contents.as_bytes(), 5, 20),
            ("line18\nline19\n".into(), 2)
        );
        assert_eq!(tail_of(b"0123456789", 1, 4), ("6789".into(), 1));
    }

    #[test]
    fn scanning_crosses_blocks() {
        let contents: String = (0..5000).map(|n| format!("{n:06}\n")).collect();
        let (text, lines) = tail_of(contents.as_bytes(), 3000, 1 << 20);
        assert_eq!(lines, 3000);
        assert!(text.starts_with("002000\n") && text.ends_with("004999\n"));
    }
}
