//! A small SQL lexer for the session scan: words, quoted identifiers, string literals, `(`,
//! `.`, `::` and statement ends; comments, dollar quotes, numbers and parameters skipped.

/// Bits of [`CLASS`]: continues a word (ASCII letters and digits, `_`, `$`, non-ASCII bytes).
pub(super) const WORD: u8 = 1;
/// Starts a word (ASCII letters, `_`, non-ASCII bytes).
pub(super) const WORD_START: u8 = 2;
/// ASCII white space (as [`u8::is_ascii_whitespace`]).
pub(super) const SPACE: u8 = 4;
/// Starts something else the lexer looks at: `;`, a quote, a comment, a dollar quote, `(`,
/// `)`, `.`, `,`, `:`.
const SPECIAL: u8 = 8;

/// The class of each byte, one table look-up instead of a chain of comparisons.
pub(super) static CLASS: [u8; 256] = classes();

const fn classes() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80 {
            t[i] |= WORD;
        }
        if b.is_ascii_alphabetic() || b == b'_' || b >= 0x80 {
            t[i] |= WORD_START;
        }
        if b.is_ascii_whitespace() {
            t[i] |= SPACE;
        }
        if matches!(
            b,
            b';' | b'\'' | b'"' | b'-' | b'/' | b'$' | b'(' | b')' | b'.' | b',' | b':'
        ) {
            t[i] |= SPECIAL;
        }
        i += 1;
    }
    t
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Token<'a> {
    /// A keyword or unquoted identifier (with `dotted`, possibly qualified: `a.b`).
    Word(&'a [u8]),
    /// A quoted identifier's text (`"..."`, also the part of `U&"..."` in quotes), escapes
    /// not undone.
    Quoted(&'a [u8]),
    /// A string literal's text, escapes not undone.
    Str(&'a [u8]),
    /// `(`
    Open,
    /// `.` (between words when not `dotted`)
    Dot,
    /// `::`
    Cast,
    /// `,`
    Comma,
    /// `)`
    Close,
    Semicolon,
    /// Anything else that separates words: an operator, a number, a parameter.
    Other,
}

/// Yields the tokens of a text; skips white space and comments.
pub(super) struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
    /// Words may be qualified (`a.b`), as one word.
    dotted: bool,
    /// A plain string held `\'`: with `standard_conforming_strings` off PostgreSQL reads the
    /// quote as escaped and the string as going on, so what follows may be code the tokens
    /// here took for a string, or the other way round.
    pub(super) ambiguous: bool,
}

impl<'a> Lexer<'a> {
    pub(super) fn new(s: &'a [u8], dotted: bool) -> Self {
        Lexer {
            s,
            i: 0,
            dotted,
            ambiguous: false,
        }
    }

    pub(super) fn next(&mut self) -> Option<Token<'a>> {
        let s = self.s;
        while self.i < s.len() {
            let c = s[self.i];
            let class = CLASS[c as usize];
            if class & WORD_START != 0 {
                let start = self.i;
                self.i += 1;
                while let Some(&b) = s.get(self.i) {
                    if CLASS[b as usize] & WORD == 0
                        && !(self.dotted
                            && b == b'.'
                            && s.get(self.i + 1)
                                .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_'))
                    {
                        break;
                    }
                    self.i += 1;
                }
                // E'...': a string with backslash escapes.
                if self.i == start + 1 && c | 0x20 == b'e' && s.get(self.i) == Some(&b'\'') {
                    return Some(Token::Str(self.string(true)));
                }
                return Some(Token::Word(&s[start..self.i]));
            }
            if class & SPACE != 0 {
                self.i += 1;
                continue;
            }
            if class & SPECIAL == 0 {
                self.i += 1;
                return Some(Token::Other);
            }
            match c {
                b';' => {
                    self.i += 1;
                    return Some(Token::Semicolon);
                }
                b'(' => {
                    self.i += 1;
                    return Some(Token::Open);
                }
                b'.' => {
                    self.i += 1;
                    return Some(Token::Dot);
                }
                b',' => {
                    self.i += 1;
                    return Some(Token::Comma);
                }
                b')' => {
                    self.i += 1;
                    return Some(Token::Close);
                }
                b':' if s.get(self.i + 1) == Some(&b':') => {
                    self.i += 2;
                    return Some(Token::Cast);
                }
                b'\'' => return Some(Token::Str(self.string(false))),
                b'"' => return Some(Token::Quoted(self.quoted())),
                b'-' if s.get(self.i + 1) == Some(&b'-') => {
                    while self.i < s.len() && s[self.i] != b'\n' {
                        self.i += 1;
                    }
                }
                b'/' if s.get(self.i + 1) == Some(&b'*') => self.skip_block_comment(),
                b'$' => {
                    if let Some(body) = self.dollar() {
                        return Some(Token::Str(body));
                    }
                    return Some(Token::Other);
                }
                _ => {
                    self.i += 1;
                    return Some(Token::Other);
                }
            }
        }
        None
    }

    /// At an opening quote: the string's text, moving to after the closing quote ('' is a
    /// quote inside; with `escapes`, so is \').
    fn string(&mut self, escapes: bool) -> &'a [u8] {
        let s = self.s;
        self.i += 1;
        let start = self.i;
        while self.i < s.len() {
            match s[self.i] {
                b'\\' if escapes => self.i += 2,
                b'\'' if !escapes && s[self.i - 1] == b'\\' => {
                    self.ambiguous = true;
                    self.i += 1;
                    return &s[start..self.i - 1];
                }
                b'\'' if s.get(self.i + 1) == Some(&b'\'') => self.i += 2,
                b'\'' => {
                    self.i += 1;
                    return &s[start..self.i - 1];
                }
                _ => self.i += 1,
            }
        }
        self.i = s.len();
        &s[start.min(s.len())..]
    }

    /// At an opening double quote: the identifier's text ("" is a quote inside).
    fn quoted(&mut self) -> &'a [u8] {
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

    fn skip_block_comment(&mut self) {
        let s = self.s;
        let mut depth = 0usize;
        while self.i < s.len() {
            if s[self.i] == b'/' && s.get(self.i + 1) == Some(&b'*') {
                depth += 1;
                self.i += 2;
            } else if s[self.i] == b'*' && s.get(self.i + 1) == Some(&b'/') {
                depth -= 1;
                self.i += 2;
                if depth == 0 {
                    return;
                }
            } else {
                self.i += 1;
            }
        }
    }

    /// `$tag$ ... $tag$` (tag possibly empty): its body; `None` for a `$1` parameter or a lone
    /// `$`, which are skipped.
    fn dollar(&mut self) -> Option<&'a [u8]> {
        let s = self.s;
        let start = self.i;
        let mut j = self.i + 1;
        while j < s.len() && (s[j].is_ascii_alphanumeric() || s[j] == b'_') {
            j += 1;
        }
        if j >= s.len() || s[j] != b'$' || s[start + 1..j].first().is_some_and(u8::is_ascii_digit) {
            self.i = j;
            return None;
        }
        let tag = &s[start..=j];
        let body = j + 1;
        match s[body..].windows(tag.len()).position(|w| w == tag) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(s: &str) -> Vec<Token<'_>> {
        let mut l = Lexer::new(s.as_bytes(), false);
        std::iter::from_fn(|| l.next()).collect()
    }

    #[test]
    fn tokens() {
        use Token::*;
        assert_eq!(
            all("select \"a\"\"b\"(x::int) -- c\n; E'\\'' $q$ ; $q$ /* ( */ pg.f $1"),
            vec![
                Word(b"select"),
                Quoted(b"a\"\"b"),
                Open,
                Word(b"x"),
                Cast,
                Word(b"int"),
                Close,
                Semicolon,
                Str(b"\\'"),
                Str(b" ; "),
                Word(b"pg"),
                Dot,
                Word(b"f"),
                Other,
            ]
        );
        assert_eq!(
            all("U&\"a\" 'x''y' 1.5"),
            vec![
                Word(b"U"),
                Other,
                Quoted(b"a"),
                Str(b"x''y"),
                Other,
                Dot,
                Other
            ]
        );
        // Unterminated pieces end the text, never panic.
        for s in ["'abc", "\"abc", "$a$ x", "/* x", "E'\\", "$", "::", ":"] {
            let _ = all(s);
        }
    }
}
