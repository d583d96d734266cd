//! The cache key of a query text for routing: the text with its numeric and string constants
//! replaced by `?`, hashed without copying. Constants never change whether a query reads or
//! writes, so `SELECT v FROM t WHERE id = 1` and `... id = 2` share one parse.

use std::hash::Hasher;

/// Feeds `sql`'s skeleton to `h`. Returns false (and feeds nothing useful) for texts whose
/// constants cannot be told apart safely by this scan: backslashes (escape strings, or
/// `standard_conforming_strings = off`) or dollar quoting; those are keyed by their whole text.
pub fn hash(sql: &str, h: &mut impl Hasher) -> bool {
    hash_noting(sql, h, |_, _| {})
}

/// [`hash`], also calling `found(start, end)` for each constant as [`constants`] does: one scan
/// of the text for both.
pub fn hash_noting(sql: &str, h: &mut impl Hasher, mut found: impl FnMut(usize, usize)) -> bool {
    let b = sql.as_bytes();
    let mut start = 0;
    let whole = constants(sql, |from, to| {
        h.write(&b[start..from]);
        h.write(b"?");
        start = to;
        found(from, to);
    });
    h.write(&b[start.min(b.len())..]);
    whole
}

/// Calls `found(start, end)` for each string (`'…'`, quotes included) and numeric constant of
/// `sql`, in order. Returns false, part-way, where [`hash`] would: the constants of such a text
/// cannot be told apart by this scan.
pub fn constants(sql: &str, mut found: impl FnMut(usize, usize)) -> bool {
    let b = sql.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => return false,
            b'$' => {
                // `$1` is a parameter; anything else opens a dollar-quoted string.
                if !b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                    return false;
                }
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            b'\'' => {
                let from = i;
                i += 1;
                loop {
                    match b.get(i) {
                        None => return false,
                        Some(b'\'') if b.get(i + 1) == Some(&b'\'') => i += 2,
                        Some(b'\'') => break,
                        Some(_) => i += 1,
                    }
                }
                i += 1;
                found(from, i);
            }
            b'"' => {
                // A quoted name: part of the skeleton.
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += 1;
                }
                i += 1;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                // Comments stay in the key (nested ones too).
                let mut depth = 0;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit() && (i == 0 || !is_ident(b[i - 1])) => {
                let from = i;
                i = number_end(b, i);
                found(from, i);
            }
            c if is_ident(c) => {
                while i < b.len() && is_ident(b[i]) {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    true
}

/// Bytes of a word (keyword, name, or a number's digits): ASCII letters and digits, `_`, and
/// every byte of a multibyte character. A table, as the scan asks it of almost every byte.
const IDENT: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80;
        c += 1;
    }
    t
};

fn is_ident(c: u8) -> bool {
    IDENT[usize::from(c)]
}

/// The end of a numeric constant starting at `i`: digits, a fraction, an exponent.
pub fn number_end(b: &[u8], mut i: usize) -> usize {
    let digits = |b: &[u8], mut i: usize| {
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    i = digits(b, i);
    if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        i = digits(b, i + 1);
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
        if b.get(i + 1 + sign).is_some_and(u8::is_ascii_digit) {
            i = digits(b, i + 1 + sign);
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, RandomState};

    fn key(sql: &str) -> Option<u64> {
        let s = RandomState::new();
        let mut h = s.build_hasher();
        hash(sql, &mut h).then(|| h.finish())
    }

    /// Keys under one hasher seed, to compare.
    fn keys(a: &str, b: &str) -> (Option<u64>, Option<u64>) {
        let s = RandomState::new();
        let k = |sql: &str| {
            let mut h = s.build_hasher();
            hash(sql, &mut h).then(|| h.finish())
        };
        (k(a), k(b))
    }

    #[test]
    fn constants_do_not_change_the_key() {
        for (a, b) in [
            (
                "SELECT v FROM t WHERE id = 1",
                "SELECT v FROM t WHERE id = 98765",
            ),
            ("SELECT 'a'", "SELECT 'it''s longer'"),
            ("SELECT 1.5e-3, x", "SELECT 2, x"),
            ("SELECT nextval('s')", "SELECT nextval('other')"),
        ] {
            let (ka, kb) = keys(a, b);
            assert!(ka.is_some() && ka == kb, "{a} / {b}");
        }
    }

    #[test]
    fn words_change_the_key() {
        for (a, b) in [
            ("SELECT v FROM t", "SELECT v FROM t FOR UPDATE"),
            ("SELECT t1 FROM t", "SELECT t2 FROM t"),
            ("SELECT \"1\" FROM t", "SELECT \"2\" FROM t"),
            ("SELECT $1", "SELECT $2"),
            ("SELECT 1 -- x\n", "SELECT 1 -- y\n"),
            ("/* a */ SELECT 1", "/* b */ SELECT 1"),
        ] {
            let (ka, kb) = keys(a, b);
            assert_ne!(ka, kb, "{a} / {b}");
        }
    }

    #[test]
    fn unsafe_texts_are_keyed_whole() {
        assert_eq!(key("SELECT E'\\''"), None);
        assert_eq!(key("SELECT $$x$$"), None);
        assert_eq!(key("SELECT 'unterminated"), None);
        assert!(key("SELECT $1::int").is_some());
    }
}
