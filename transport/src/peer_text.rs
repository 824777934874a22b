//! Text a peer chose (close reasons, advertised addresses), made safe to
//! log and to keep: truncated to [`MAX_PEER_TEXT`] characters and escaped,
//! so a peer can neither fill memory or logs with megabytes of reason nor
//! forge log lines with newlines, terminal escapes or bidirectional
//! overrides.
//!
//! ```
//! use transport::PeerText;
//! let shown = PeerText("bye\n2024-01-01 INFO forged line\u{1b}[2J").to_string();
//! assert_eq!(shown, r"bye\n2024-01-01 INFO forged line\u{1b}[2J");
//! assert_eq!(PeerText("duplicate connection").to_string(), "duplicate connection");
//! ```

use std::fmt;

/// The most characters of a peer's text that are kept or shown: 256.
/// Longer text is cut and followed by `… (N bytes)`, naming the length the
/// peer sent.
pub const MAX_PEER_TEXT: usize = 256;

/// Displays a peer's text truncated to [`MAX_PEER_TEXT`] characters and
/// escaped: control and other non-printable characters and backslashes as
/// by [`char::escape_debug`], quotes left as they are (they forge nothing,
/// and reasons quote addresses).
#[derive(Debug, Clone, Copy)]
pub struct PeerText<'a>(pub &'a str);

impl fmt::Display for PeerText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if write_escaped(f, self.0)? {
            write!(f, "… ({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

/// Writes the first [`MAX_PEER_TEXT`] characters of `s`, escaped; true if
/// `s` has more.
fn write_escaped(out: &mut impl fmt::Write, s: &str) -> Result<bool, fmt::Error> {
    let mut chars = s.chars();
    for c in chars.by_ref().take(MAX_PEER_TEXT) {
        if c == '"' || c == '\'' {
            out.write_char(c)?;
        } else {
            for e in c.escape_debug() {
                out.write_char(e)?;
            }
        }
    }
    Ok(chars.next().is_some())
}

/// A peer's text from raw bytes (invalid UTF-8 becomes U+FFFD), truncated
/// and escaped as by [`PeerText`]. Decodes only a prefix of `bytes`, so an
/// 8 MiB reason costs no 8 MiB string; a cut names the length of `bytes`.
pub fn peer_text_from_bytes(bytes: &[u8]) -> String {
    // A character takes at most 4 bytes, so this prefix holds more than
    // MAX_PEER_TEXT of them whenever it is a cut.
    let prefix = &bytes[..bytes.len().min(4 * (MAX_PEER_TEXT + 1))];
    let text = String::from_utf8_lossy(prefix);
    let mut out = String::with_capacity(text.len().min(2 * MAX_PEER_TEXT));
    use fmt::Write;
    // Writing to a String cannot fail.
    if write_escaped(&mut out, &text).unwrap_or(false) {
        let _ = write!(out, "… ({} bytes)", bytes.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_printable_text_is_unchanged() {
        for s in [
            "",
            "bye",
            "duplicate connection",
            "handshake refused: \"b@h:1\"",
        ] {
            assert_eq!(PeerText(s).to_string(), s);
        }
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(PeerText("a\nb\r\tc\\").to_string(), r"a\nb\r\tc\\");
        assert_eq!(PeerText("\u{202e}x").to_string(), r"\u{202e}x");
        assert_eq!(PeerText("\0").to_string(), r"\0");
    }

    #[test]
    fn long_text_is_cut_and_names_its_length() {
        let long = "x".repeat(10_000);
        let shown = PeerText(&long).to_string();
        assert_eq!(
            shown,
            format!("{}… (10000 bytes)", "x".repeat(MAX_PEER_TEXT))
        );
        let exact = "y".repeat(MAX_PEER_TEXT);
        assert_eq!(PeerText(&exact).to_string(), exact);
    }

    #[test]
    fn from_bytes_decodes_a_prefix_only() {
        let mut big = vec![b'z'; 8 << 20];
        big[0] = 0xff;
        let shown = peer_text_from_bytes(&big);
        assert!(shown.starts_with('\u{fffd}'), "{shown}");
        assert!(
            shown.ends_with(&format!("… ({} bytes)", 8 << 20)),
            "{shown}"
        );
        assert!(shown.len() < 2 * MAX_PEER_TEXT, "{}", shown.len());
        assert_eq!(peer_text_from_bytes(b"bye"), "bye");
        assert_eq!(peer_text_from_bytes(b"a\nb"), r"a\nb");
    }
}
