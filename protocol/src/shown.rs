//! Ids as a person should see them.
//!
//! Ids are opaque: any string of the allowed length without NUL is
//! accepted, and kept byte for byte. But a right-to-left override (U+202E),
//! a zero-width space or a byte-order mark makes two different ids look
//! identical on a terminal, or makes one look like another. So wherever a
//! human reads an id (`sandboxctl list` and `describe`, the daemon's log),
//! it goes through [`Shown`], which writes such characters, and every
//! other control or invisible formatting character, as `\u{…}` (and a
//! backslash as `\\`, so the escaped form reads back unambiguously).
//! Machine output (`--json`) keeps the id exactly as it is.

use std::fmt;

/// Displays a string with its invisible and direction-changing characters escaped.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(pub &'a str);

/// True for characters that must not reach a terminal as themselves:
/// controls (C0, DEL, C1), and the invisible format characters — bidi
/// marks, embeddings, overrides and isolates, zero-width characters, the
/// BOM, soft hyphen, line and paragraph separators, interlinear
/// annotation, tag characters.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF0}'..='\u{FFFB}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c == '\\' {
                f.write_str("\\\\")?;
            } else if is_hidden(c) {
                write!(f, "\\u{{{:x}}}", c as u32)?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

impl Shown<'_> {
    /// True when the display differs from the string itself.
    pub fn is_escaped(&self) -> bool {
        self.0.chars().any(|c| c == '\\' || is_hidden(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidi_zero_width_bom_and_controls_are_escaped_and_the_rest_kept() {
        assert_eq!(Shown("abc\u{202E}fed").to_string(), "abc\\u{202e}fed");
        assert_eq!(Shown("a\u{200B}b").to_string(), "a\\u{200b}b");
        assert_eq!(Shown("\u{FEFF}id").to_string(), "\\u{feff}id");
        assert_eq!(Shown("tab\there").to_string(), "tab\\u{9}here");
        assert_eq!(Shown("back\\slash").to_string(), "back\\\\slash");
        assert_eq!(
            Shown("ses_1 ünïcødé 会话").to_string(),
            "ses_1 ünïcødé 会话"
        );
        assert!(!Shown("ses_1").is_escaped());
        assert!(Shown("a\u{2066}b").is_escaped());
        // Two ids that look the same raw are told apart once shown.
        assert_ne!(Shown("abc").to_string(), Shown("ab\u{200D}c").to_string());
    }
}
