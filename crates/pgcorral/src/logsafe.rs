//! Text from clients (and from servers, which echo it) made safe to log: [`Esc`] writes it
//! with control characters, Unicode line and paragraph separators, bidirectional overrides and
//! backslashes escaped, so that no user name, database name or error message can start a
//! forged log line or hide text.

use std::fmt::{self, Display, Write};

/// Displays `T` escaped; `tracing::info!(user = %Esc(user), error = %Esc(&e), ...)`.
pub struct Esc<T>(pub T);

impl<T: Display> Display for Esc<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(Escaping(f), "{}", self.0)
    }
}

/// Passes text on, escaping what [`needs_escape`] names.
struct Escaping<'a, 'b>(&'a mut fmt::Formatter<'b>);

impl Write for Escaping<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some((i, c)) = rest.char_indices().find(|&(_, c)| needs_escape(c)) {
            self.0.write_str(&rest[..i])?;
            if c == '\\' {
                self.0.write_str("\\\\")?;
            } else {
                write!(self.0, "{}", c.escape_default())?;
            }
            rest = &rest[i + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

/// Control characters (newlines, escape sequences, NUL), Unicode line and paragraph
/// separators, bidirectional embeddings, overrides and isolates, and the backslash that
/// introduces an escape.
fn needs_escape(c: char) -> bool {
    c == '\\'
        || c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::Esc;

    #[test]
    fn control_characters_are_escaped() {
        let cases = [
            ("alice", "alice"),
            ("a\nb", "a\\nb"),
            ("a\r\nINFO forged", "a\\r\\nINFO forged"),
            ("\u{1b}[31mred", "\\u{1b}[31mred"),
            ("nul\0", "nul\\u{0}"),
            ("back\\slash", "back\\\\slash"),
            ("ligne\u{2028}sep", "ligne\\u{2028}sep"),
            ("rtl\u{202e}x", "rtl\\u{202e}x"),
            ("é \"quoted\" ünïcode", "é \"quoted\" ünïcode"),
        ];
        for (raw, want) in cases {
            assert_eq!(Esc(raw).to_string(), want, "{raw:?}");
        }
    }

    #[test]
    fn any_display_is_escaped() {
        let e = crate::error::Error::new(
            crate::error::Kind::UnknownDatabase,
            "database \"x\ny\" does not exist",
        );
        assert_eq!(Esc(&e).to_string(), "database \"x\\ny\" does not exist");
    }
}
