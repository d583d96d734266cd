//! Quoted things as scan.l reads them: string literals of each kind (`''`, backslash escapes,
//! a string continued after white space holding a newline), quoted and `U&` identifiers with
//! their `UESCAPE`, and dollar quotes.

use super::{line_comment_end, skip_blank, Lexer, Token, CLASS, SPACE, WORD, WORD_START};

/// The kinds of string literal, as scan.l's states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// `'...'`, also after `N`: `''` is a quote (`xq`).
    Plain,
    /// `E'...'`: `''` and backslash escapes (`xe`).
    Escaped,
    /// `U&'...'`: as plain, its escapes undone later (`xus`).
    Unicode,
    /// `B'...'`, `X'...'`: no quote inside (`xb`, `xh`).
    Bits,
}

/// `s[i..]` starts a literal with a one-letter prefix (`E'`, `B'`, `X'`, `N'`, `U&'`, `U&"`,
/// in either case).
pub(super) fn prefix_at(s: &[u8], i: usize) -> bool {
    // ORed with 0x20 only a letter becomes a lower-case one.
    matches!(
        (s.get(i).map(|c| c | 0x20), s.get(i + 1), s.get(i + 2)),
        (Some(b'e' | b'b' | b'x' | b'n'), Some(b'\''), _)
            | (Some(b'u'), Some(b'&'), Some(b'\'' | b'"'))
    )
}

impl<'a> Lexer<'a> {
    /// At a word's first byte `c`: the token when the word is one letter that prefixes a
    /// quote (scan.l's `xestart`, `xbstart`, `xhstart`, `xnstart`, `xusstart`, `xuistart`).
    pub(super) fn prefixed(&mut self, c: u8) -> Option<Token<'a>> {
        let s = self.s;
        if !prefix_at(s, self.i) {
            return None;
        }
        self.i += 1;
        Some(match c | 0x20 {
            b'e' => Token::Str(self.literal(Kind::Escaped)),
            b'b' | b'x' => Token::Bits(self.literal(Kind::Bits)),
            // The keyword NCHAR, then a plain string.
            b'n' => Token::Word(&s[self.start..self.i]),
            _ => {
                self.i += 1;
                if s[self.i] == b'"' {
                    let body = self.quoted();
                    Token::UQuoted {
                        body,
                        escape: self.uescape(),
                    }
                } else {
                    let body = self.literal(Kind::Unicode);
                    Token::UStr {
                        body,
                        escape: self.uescape(),
                    }
                }
            }
        })
    }

    /// At an opening quote: moves past the string, and past the strings that continue it (a
    /// quote after white space that holds a newline), and returns its text from after the
    /// opening quote to before the closing one.
    pub(super) fn literal(&mut self, kind: Kind) -> &'a [u8] {
        let s = self.s;
        self.i += 1;
        let start = self.i;
        while self.i < s.len() {
            match s[self.i] {
                b'\\' if kind == Kind::Escaped => self.i += 2,
                b'\'' => {
                    if kind == Kind::Plain && s[self.i - 1] == b'\\' {
                        self.ambiguous = true;
                    }
                    if kind != Kind::Bits && s.get(self.i + 1) == Some(&b'\'') {
                        self.i += 2;
                        continue;
                    }
                    let end = self.i;
                    match continued(s, end + 1) {
                        Some(quote) => self.i = quote + 1,
                        None => {
                            self.i = end + 1;
                            return &s[start..end];
                        }
                    }
                }
                _ => self.i += 1,
            }
        }
        self.i = s.len();
        &s[start.min(s.len())..]
    }

    /// At an opening double quote: the identifier's text (`""` is a quote inside).
    pub(super) fn quoted(&mut self) -> &'a [u8] {
        let s = self.s;
        self.i += 1;
        let start = self.i;
        while self.i < s.len() {
            if s[self.i] == b'"' {
                if s.get(self.i + 1) == Some(&b'"') {
                    self.i += 2;
                    continue;
                }
                self.i += 1;
                return &s[start..self.i - 1];
            }
            self.i += 1;
        }
        &s[start..]
    }

    /// At `$`: a dollar quote's body (`$tag$...$tag$`, the tag empty or an identifier without
    /// `$`, non-ASCII bytes included); `None` for a parameter (`$1`) or a `$` that stands
    /// alone, which are skipped (after a lone `$`, what follows is read anew).
    pub(super) fn dollar(&mut self) -> Option<&'a [u8]> {
        let s = self.s;
        let start = self.i;
        let mut j = start + 1;
        let class = |j: usize| s.get(j).map_or(0, |&b| CLASS[b as usize]);
        if s.get(j).is_some_and(u8::is_ascii_digit) {
            while s.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
            // An identifier right after a parameter is trailing junk, an error.
            if class(j) & WORD_START != 0 {
                while class(j) & WORD != 0 {
                    j += 1;
                }
            }
            self.i = j;
            return None;
        }
        if class(j) & WORD_START != 0 {
            while class(j) & WORD != 0 && s[j] != b'$' {
                j += 1;
            }
        }
        if s.get(j) != Some(&b'$') {
            self.i = start + 1;
            return None;
        }
        let tag = &s[start..=j];
        let body = j + 1;
        match memchr::memmem::find(&s[body..], tag) {
            Some(p) => {
                self.i = body + p + tag.len();
                Some(&s[body..body + p])
            }
            None => {
                self.i = s.len();
                Some(&s[body..])
            }
        }
    }

    /// After a `U&` identifier or string: moves past its `UESCAPE 'c'` (after white space or
    /// comments; the literal any string PostgreSQL's grammar takes there, whose value is one
    /// character it allows) and returns the escape character; `\` without one.
    fn uescape(&mut self) -> u8 {
        let s = self.s;
        let end = self.i;
        let j = skip_blank(s, end);
        let keyword = s
            .get(j..j + 7)
            .is_some_and(|w| w.eq_ignore_ascii_case(b"uescape"))
            && s.get(j + 7).is_none_or(|&b| CLASS[b as usize] & WORD == 0);
        if keyword {
            self.i = skip_blank(s, j + 7);
            let value = match (s.get(self.i), s.get(self.i + 1)) {
                (Some(b'\''), _) => Some(value(self.literal(Kind::Plain), false)),
                (Some(b'e' | b'E'), Some(b'\'')) => {
                    self.i += 1;
                    Some(value(self.literal(Kind::Escaped), true))
                }
                (Some(b'$'), _) => self.dollar().map(<[u8]>::to_vec),
                _ => None,
            };
            if let Some(&[c]) = value.as_deref() {
                if escape_allowed(c) {
                    return c;
                }
            }
        }
        // None there, or one PostgreSQL rejects (a syntax error).
        self.i = end;
        b'\\'
    }
}

/// After a string's closing quote, from `j`: where the quote that continues the string is,
/// if one does (white space and `--` comments holding a newline, then a quote).
fn continued(s: &[u8], mut j: usize) -> Option<usize> {
    let mut newline = false;
    while j < s.len() {
        match (s[j], s.get(j + 1)) {
            (b'\n' | b'\r', _) => {
                newline = true;
                j += 1;
            }
            (b, _) if CLASS[b as usize] & SPACE != 0 => j += 1,
            (b'-', Some(b'-')) => j = line_comment_end(s, j),
            (b'\'', _) if newline => return Some(j),
            _ => return None,
        }
    }
    None
}

/// A string literal's value from its text as [`Lexer::literal`] gives it: `''` undone,
/// continuations dropped and, with `escapes` (`E'...'`), backslash escapes undone. Only
/// whether it is one byte, and which, matters: a `\u` escape beyond ASCII gives two bytes.
fn value(text: &[u8], escapes: bool) -> Vec<u8> {
    let mut v = Vec::new();
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'\'' if text.get(i + 1) == Some(&b'\'') => {
                v.push(b'\'');
                i += 2;
            }
            b'\'' => i = continued(text, i + 1).map_or(text.len(), |q| q + 1),
            b'\\' if escapes => i = unescape(text, i, &mut v),
            b => {
                v.push(b);
                i += 1;
            }
        }
    }
    v
}

/// At a backslash in an `E'...'` string's text: pushes what the escape stands for and returns
/// where the text goes on.
fn unescape(text: &[u8], i: usize, v: &mut Vec<u8>) -> usize {
    let Some(&c) = text.get(i + 1) else {
        v.push(b'\\');
        return text.len();
    };
    let run = |from: usize, max: usize, digit: fn(&u8) -> bool| {
        let rest = text.get(from..).unwrap_or(&[]);
        rest.iter().take(max).take_while(|d| digit(d)).count()
    };
    let number = |from: usize, n: usize, radix: u32| {
        let digits = std::str::from_utf8(&text[from..from + n]).unwrap_or("0");
        u32::from_str_radix(digits, radix).unwrap_or(0)
    };
    match c {
        b'0'..=b'7' => {
            let n = run(i + 1, 3, |d| (b'0'..=b'7').contains(d));
            v.push(number(i + 1, n, 8) as u8);
            i + 1 + n
        }
        b'x' if run(i + 2, 2, u8::is_ascii_hexdigit) > 0 => {
            let n = run(i + 2, 2, u8::is_ascii_hexdigit);
            v.push(number(i + 2, n, 16) as u8);
            i + 2 + n
        }
        b'u' | b'U' => {
            let want = if c == b'u' { 4 } else { 8 };
            let n = run(i + 2, want, u8::is_ascii_hexdigit);
            match number(i + 2, n, 16) {
                // An invalid escape is an error: two bytes say "not one character".
                cp if n < want || cp == 0 || cp >= 0x80 => v.extend_from_slice(b"??"),
                cp => v.push(cp as u8),
            }
            i + 2 + n
        }
        _ => {
            v.push(match c {
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'v' => 0x0b,
                c => c,
            });
            i + 2
        }
    }
}

/// A `UESCAPE` character PostgreSQL takes (parser.c's check_uescapechar): not a hex digit,
/// `+`, a quote, white space; and one byte of UTF-8 text, so ASCII and not NUL.
fn escape_allowed(c: u8) -> bool {
    c.is_ascii()
        && c != 0
        && !c.is_ascii_hexdigit()
        && !matches!(c, b'+' | b'\'' | b'"')
        && CLASS[c as usize] & SPACE == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_values() {
        assert_eq!(value(b"a''b", false), b"a'b");
        assert_eq!(value(b"a'\n'b", false), b"ab");
        assert_eq!(value(b"a' -- c\r\n  'b", false), b"ab");
        assert_eq!(value(b"\\!", true), b"!");
        assert_eq!(value(b"\\x21", true), b"!");
        assert_eq!(value(b"\\041", true), b"!");
        assert_eq!(value(b"\\u0021", true), b"!");
        assert_eq!(value(b"\\U00000021", true), b"!");
        assert_eq!(value(b"\\u00e9", true).len(), 2);
        assert_eq!(value(b"\\u00", true).len(), 2);
        assert_eq!(value(b"\\'", true), b"'");
        assert_eq!(value(b"\\", true), b"\\");
        assert_eq!(value(b"\\n", true), b"\n");
    }

    #[test]
    fn escapes_postgresql_allows() {
        for c in [b'!', b'#', b'&', b'\\', b'g', b'Z', b'*', 0x08] {
            assert!(escape_allowed(c), "{c}");
        }
        for c in [
            b'a', b'F', b'0', b'+', b'\'', b'"', b' ', b'\n', 0x0b, 0, 0xc3,
        ] {
            assert!(!escape_allowed(c), "{c}");
        }
    }
}
