//! A small SQL lexer for the session scan that reads a text as PostgreSQL's scanner (scan.l)
//! does: words, quoted identifiers, string literals, `(`, `.`, `::` and statement ends;
//! comments, dollar quotes, numbers and parameters skipped.

mod name;
#[cfg(any(test, fuzzing))]
pub(super) mod oracle;
mod quoted;

use std::borrow::Cow;
use std::ops::Range;

/// Bits of [`CLASS`]: continues a word (ASCII letters and digits, `_`, `$`, non-ASCII bytes:
/// scan.l's `ident_cont`).
pub(super) const WORD: u8 = 1;
/// Starts a word (ASCII letters, `_`, non-ASCII bytes: scan.l's `ident_start`).
pub(super) const WORD_START: u8 = 2;
/// White space as scan.l's `space` (PostgreSQL 16+): space, `\t`, `\n`, `\r`, `\f`, `\v`.
pub(super) const SPACE: u8 = 4;
/// Starts something else the lexer looks at: `;`, a quote, a comment, a dollar quote or
/// parameter, a number, `(`, `)`, `.`, `,`, `:`.
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
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0c | 0x0b) {
            t[i] |= SPACE;
        }
        if b.is_ascii_digit()
            || matches!(
                b,
                b';' | b'\'' | b'"' | b'-' | b'/' | b'$' | b'(' | b')' | b'.' | b',' | b':'
            )
        {
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
    /// A quoted identifier's text (`"..."`), `""` not undone.
    Quoted(&'a [u8]),
    /// A `U&"..."` identifier's text, `""` and escapes not undone, and its escape character
    /// (`\`, or the one its `UESCAPE 'c'` gives, which is part of the token).
    UQuoted {
        body: &'a [u8],
        escape: u8,
    },
    /// A string literal's text (`'...'`, `E'...'`, `$tag$...$tag$`; the `'...'` after the word
    /// `N` of `N'...'`), escapes and continuations not undone.
    Str(&'a [u8]),
    /// A `U&'...'` string's text, escapes not undone, and its escape character.
    UStr {
        body: &'a [u8],
        escape: u8,
    },
    /// A bit string's text (`B'...'`, `X'...'`).
    Bits(&'a [u8]),
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

/// The name PostgreSQL's catalog holds for an identifier token: an unquoted word downcased
/// (ASCII A-Z only, as PostgreSQL does for a UTF8 database), a quoted one with "" undone, a
/// U&"..." one decoded (with its UESCAPE), each truncated to 63 bytes (NAMEDATALEN - 1) at a
/// UTF-8 character boundary as PostgreSQL truncates. None for a token that is no identifier.
pub(super) fn catalog_name<'a>(tok: &Token<'a>) -> Option<std::borrow::Cow<'a, [u8]>> {
    let name: Cow<'a, [u8]> = match *tok {
        // A `dotted` word is more than one name.
        Token::Word(w) if w.contains(&b'.') => return None,
        Token::Word(w) if w.iter().any(u8::is_ascii_uppercase) => {
            Cow::Owned(w.to_ascii_lowercase())
        }
        Token::Word(w) => Cow::Borrowed(w),
        // PostgreSQL rejects `""` (a zero-length delimited identifier).
        Token::Quoted([]) => return None,
        Token::Quoted(q) => name::undouble(q, b'"'),
        Token::UQuoted { body, escape } if !body.is_empty() => {
            Cow::Owned(name::unicode(&name::undouble(body, b'"'), escape)?)
        }
        _ => return None,
    };
    Some(name::truncate(name))
}

/// Yields the tokens of a text; skips white space and comments.
pub(super) struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
    /// Where the last token returned starts.
    start: usize,
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
            start: 0,
            dotted,
            ambiguous: false,
        }
    }

    /// Where the last token returned lies in the text (a `U&` token with its `UESCAPE`).
    #[cfg_attr(not(any(test, fuzzing)), allow(dead_code))]
    pub(super) fn span(&self) -> Range<usize> {
        self.start..self.i
    }

    pub(super) fn next(&mut self) -> Option<Token<'a>> {
        let s = self.s;
        while self.i < s.len() {
            let c = s[self.i];
            let class = CLASS[c as usize];
            self.start = self.i;
            if class & WORD_START != 0 {
                if let Some(tok) = self.prefixed(c) {
                    return Some(tok);
                }
                return Some(self.word());
            }
            if class & SPACE != 0 {
                self.i += 1;
                continue;
            }
            if class & SPECIAL == 0 {
                self.i += 1;
                return Some(Token::Other);
            }
            let next = s.get(self.i + 1).copied();
            match c {
                b';' => {
                    self.i += 1;
                    return Some(Token::Semicolon);
                }
                b'(' => {
                    self.i += 1;
                    return Some(Token::Open);
                }
                b',' => {
                    self.i += 1;
                    return Some(Token::Comma);
                }
                b')' => {
                    self.i += 1;
                    return Some(Token::Close);
                }
                b'0'..=b'9' => {
                    self.number();
                    return Some(Token::Other);
                }
                b'.' if next.is_some_and(|d| d.is_ascii_digit()) => {
                    self.number();
                    return Some(Token::Other);
                }
                // `..` (DOT_DOT)
                b'.' if next == Some(b'.') => {
                    self.i += 2;
                    return Some(Token::Other);
                }
                b'.' => {
                    self.i += 1;
                    return Some(Token::Dot);
                }
                b':' if next == Some(b':') => {
                    self.i += 2;
                    return Some(Token::Cast);
                }
                // `:=`
                b':' if next == Some(b'=') => {
                    self.i += 2;
                    return Some(Token::Other);
                }
                b'\'' => return Some(Token::Str(self.literal(quoted::Kind::Plain))),
                b'"' => return Some(Token::Quoted(self.quoted())),
                b'-' if next == Some(b'-') => self.i = line_comment_end(s, self.i),
                b'/' if next == Some(b'*') => self.i = block_comment_end(s, self.i),
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

    /// At the first byte of a word: an unquoted identifier or keyword (`ident_start
    /// ident_cont*`), with `dotted` its qualified parts too.
    fn word(&mut self) -> Token<'a> {
        let s = self.s;
        self.i += 1;
        while let Some(&b) = s.get(self.i) {
            if CLASS[b as usize] & WORD == 0
                && !(self.dotted
                    && b == b'.'
                    && s.get(self.i + 1)
                        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
                    && !quoted::prefix_at(s, self.i + 1))
            {
                break;
            }
            self.i += 1;
        }
        Token::Word(&s[self.start..self.i])
    }

    /// At a digit, or a `.` before one: moves past the number as scan.l reads it
    /// (`decinteger`, `hexinteger`, `octinteger`, `bininteger`, `numeric`, `real`, with
    /// `_` between digits; `1..2` is 1, `..`, 2). A number an identifier follows directly
    /// (trailing junk), an `e` without digits or `0x` without hex digits is an error in
    /// PostgreSQL 15+; the lexer then moves past the identifier too.
    fn number(&mut self) {
        let s = self.s;
        let i = self.i;
        let mut j = i;
        let radix: Option<fn(&u8) -> bool> = match (s[i], s.get(i + 1)) {
            (b'0', Some(b'x' | b'X')) => Some(u8::is_ascii_hexdigit),
            (b'0', Some(b'o' | b'O')) => Some(|d| (b'0'..=b'7').contains(d)),
            (b'0', Some(b'b' | b'B')) => Some(|d| matches!(d, b'0' | b'1')),
            _ => None,
        };
        // What may not follow the number: an identifier (after `0x1F`, as after `0`, its
        // `x1F` counts, digits and `$` too).
        let mut junk = WORD_START;
        let mut error = false;
        if let Some(digit) = radix {
            j = digits(s, i + 2, digit);
            error = j == i + 2;
            junk = WORD;
        } else {
            if s[i] != b'.' {
                j = digits(s, i, u8::is_ascii_digit);
                if s.get(j) == Some(&b'.') && s.get(j + 1) == Some(&b'.') {
                    // `1..2`
                    self.i = j;
                    return;
                }
            }
            if s.get(j) == Some(&b'.') {
                j = digits(s, j + 1, u8::is_ascii_digit);
            }
            if matches!(s.get(j), Some(b'e' | b'E')) {
                let mut k = j + 1;
                if matches!(s.get(k), Some(b'+' | b'-')) {
                    k += 1;
                }
                let end = digits(s, k, u8::is_ascii_digit);
                error = end == k;
                j = end;
            }
        }
        if error || s.get(j).is_some_and(|&b| CLASS[b as usize] & junk != 0) {
            while s.get(j).is_some_and(|&b| CLASS[b as usize] & WORD != 0) {
                j += 1;
            }
        }
        self.i = j;
    }
}

/// Past the digits (`digit` ones, single `_`s between them allowed, as in `1_000`) from `j`;
/// `j` when none is there.
fn digits(s: &[u8], mut j: usize, digit: fn(&u8) -> bool) -> usize {
    loop {
        match s.get(j) {
            Some(d) if digit(d) => j += 1,
            Some(b'_') if s.get(j + 1).is_some_and(digit) => j += 2,
            _ => return j,
        }
    }
}

/// At `--`: where the comment ends (at a `\n` or `\r`, which PostgreSQL both take for a
/// newline, or at the end of the text).
fn line_comment_end(s: &[u8], i: usize) -> usize {
    memchr::memchr2(b'\n', b'\r', &s[i..]).map_or(s.len(), |n| i + n)
}

/// At `/*`: past the comment, which nests (`/* /* */ */`), or the end of the text.
fn block_comment_end(s: &[u8], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < s.len() {
        if s[i] == b'/' && s.get(i + 1) == Some(&b'*') {
            depth += 1;
            i += 2;
        } else if s[i] == b'*' && s.get(i + 1) == Some(&b'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    s.len()
}

/// Past the white space and comments from `i`.
fn skip_blank(s: &[u8], mut i: usize) -> usize {
    while i < s.len() {
        match (s[i], s.get(i + 1)) {
            (b, _) if CLASS[b as usize] & SPACE != 0 => i += 1,
            (b'-', Some(b'-')) => i = line_comment_end(s, i),
            (b'/', Some(b'*')) => i = block_comment_end(s, i),
            _ => break,
        }
    }
    i
}

#[cfg(test)]
mod tests;
