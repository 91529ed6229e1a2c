//! Untrusted bytes made safe for a terminal: what `logs`, `exec` and
//! `attach` print when their stdout (or stderr) is one.
//!
//! A sandbox's output is written by whatever runs in it. On a terminal an
//! escape sequence in it could recolour, move the cursor, retitle the
//! window, or on some terminals answer back as if typed; a bare carriage
//! return could overwrite a line the admin should read. So every C0 and C1
//! control is shown escaped (`\u{1b}`, `\r`, `\x9b` for a byte that is not
//! UTF-8) except newline, tab, and a carriage return right before a
//! newline (a CRLF line end overwrites nothing). Into a pipe or a file the
//! bytes pass unchanged: that is the caller's choice, not this module's.

/// Escapes a stream of chunks, carrying a character (or a carriage
/// return) cut by a chunk boundary over to the next chunk, so the same
/// bytes show the same however they were split.
#[derive(Default)]
pub struct TerminalText {
    pending: Vec<u8>,
}

impl TerminalText {
    /// The safe text of `data`, less whatever must wait for the next chunk.
    pub fn escape(&mut self, data: &[u8]) -> String {
        self.pending.extend_from_slice(data);
        let mut ready = complete_utf8_prefix(&self.pending);
        // A carriage return at the very end: whether a newline follows
        // decides how it shows.
        if ready > 0 && ready == self.pending.len() && self.pending[ready - 1] == b'\r' {
            ready -= 1;
        }
        let bytes: Vec<u8> = self.pending.drain(..ready).collect();
        escaped(&bytes)
    }

    /// What was held back, escaped: the stream has ended.
    pub fn finish(&mut self) -> String {
        let bytes = std::mem::take(&mut self.pending);
        escaped(&bytes)
    }
}

/// `bytes` with every control but newline, tab and CRLF's carriage return
/// escaped, and every byte that is not UTF-8 shown as `\xNN`.
pub fn escaped(mut bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    loop {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                push_text(&mut out, text);
                return out;
            }
            Err(error) => {
                let (valid, rest) = bytes.split_at(error.valid_up_to());
                // The first `valid_up_to` bytes are UTF-8 by definition.
                push_text(&mut out, std::str::from_utf8(valid).unwrap_or_default());
                let bad = error.error_len().unwrap_or(rest.len());
                for byte in &rest[..bad] {
                    out.push_str(&format!("\\x{byte:02x}"));
                }
                bytes = &rest[bad..];
            }
        }
    }
}

fn push_text(out: &mut String, text: &str) {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let crlf = c == '\r' && chars.peek() == Some(&'\n');
        if c.is_control() && !matches!(c, '\n' | '\t') && !crlf {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
}

/// The length of the longest prefix that does not end inside a UTF-8
/// character (invalid bytes count as complete: they will never become valid).
pub fn complete_utf8_prefix(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(error) if error.error_len().is_none() => error.valid_up_to(),
        Err(_) => {
            // An invalid byte somewhere: only a cut character at the very
            // end is worth waiting for (at most 3 bytes of one).
            let tail_start = bytes.len().saturating_sub(3);
            (tail_start..bytes.len())
                .find(|&at| {
                    std::str::from_utf8(&bytes[at..])
                        .err()
                        .is_some_and(|error| {
                            error.valid_up_to() == 0 && error.error_len().is_none()
                        })
                })
                .unwrap_or(bytes.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(chunks: &[&[u8]]) -> String {
        let mut text = TerminalText::default();
        let mut out: String = chunks.iter().map(|chunk| text.escape(chunk)).collect();
        out.push_str(&text.finish());
        out
    }

    #[test]
    fn c0_and_c1_controls_are_escaped_but_newline_and_tab_pass() {
        assert_eq!(
            shown(&[b"red \x1b[31mtext\x07\n\tok\x7f"]),
            "red \\u{1b}[31mtext\\u{7}\n\tok\\u{7f}"
        );
        // U+009B (CSI as a character) and 0x9B alone (not UTF-8).
        assert_eq!(shown(&["a\u{9b}2J".as_bytes()]), "a\\u{9b}2J");
        assert_eq!(shown(&[b"a\x9b2J\xff"]), "a\\x9b2J\\xff");
    }

    #[test]
    fn a_bare_carriage_return_is_escaped_and_crlf_is_not() {
        assert_eq!(shown(&[b"secret\rshown\r\n"]), "secret\\rshown\r\n");
        // Split between the two: still a line end.
        assert_eq!(shown(&[b"line\r", b"\nnext"]), "line\r\nnext");
        assert_eq!(shown(&[b"50%\r", b"60%"]), "50%\\r60%");
        assert_eq!(shown(&[b"end\r"]), "end\\r");
    }

    #[test]
    fn a_character_cut_by_a_chunk_boundary_is_joined() {
        let text = "naïve ✓\n".as_bytes();
        let cut = text.len() - 3; // inside the three bytes of ✓
        assert_eq!(shown(&[&text[..cut], &text[cut..]]), "naïve ✓\n");
        assert_eq!(shown(&[b"x\xe2\x9c"]), "x\\xe2\\x9c");
    }
}
