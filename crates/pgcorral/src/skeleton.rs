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

/// Whether `sql` has the shape of `template`, whose constants [`constants`] found at `spans`:
/// the text around the constants byte for byte the same, and where `template` has a constant,
/// one of the same kind, its end found by [`constants`]'s own rules. Then [`constants`] would
/// find `sql`'s constants just there, and [`hash_noting`] give it `template`'s hash; `found` is
/// told them. Comparing the text between (memcmp) is cheaper than scanning it. False when the
/// shapes differ or cannot be told apart this way (`found` may have been told some constants:
/// scan `sql` then).
pub fn same_shape(
    template: &str,
    spans: &[(usize, usize)],
    sql: &str,
    mut found: impl FnMut(usize, usize),
) -> bool {
    let (t, s) = (template.as_bytes(), sql.as_bytes());
    let (mut tp, mut sp) = (0, 0);
    for &(from, to) in spans {
        let Some(between) = t.get(tp..from) else {
            return false;
        };
        if s.get(sp..sp + between.len()) != Some(between) {
            return false;
        }
        sp += between.len();
        let end = match t.get(from) {
            Some(b'\'') => match quoted_end(s, sp) {
                Some(e) => e,
                None => return false,
            },
            Some(c) if c.is_ascii_digit() && s.get(sp).is_some_and(u8::is_ascii_digit) => {
                number_end(s, sp)
            }
            _ => return false,
        };
        found(sp, end);
        (tp, sp) = (to, end);
    }
    t.get(tp..) == s.get(sp..)
}

/// The end of the quoted constant that starts at `i` (a `'`), `''` inside it standing for one
/// quote, as [`constants`] reads it; `None` when it is not closed.
fn quoted_end(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    loop {
        match b.get(i)? {
            b'\'' if b.get(i + 1) == Some(&b'\'') => i += 2,
            b'\'' => return Some(i + 1),
            _ => i += 1,
        }
    }
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
                match quoted_end(b, i) {
                    Some(end) => i = end,
                    None => return false,
                }
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

    /// `same_shape` says yes only where the full scan agrees: the same hash and the same
    /// constants; and says no where the shapes differ.
    #[test]
    fn same_shape_agrees_with_the_scan() {
        let state = RandomState::new();
        let scan = |sql: &str| {
            let mut h = state.build_hasher();
            let mut spans = Vec::new();
            hash_noting(sql, &mut h, |a, b| spans.push((a, b))).then(|| (h.finish(), spans))
        };
        let templates = [
            "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;",
            "SELECT v FROM t WHERE k = 'a''b' AND n = 1.5e3",
            "INSERT INTO t VALUES (1, 'x'), (2, 'y')",
            "7",
            "'q'1",
            "SELECT 1 -- c\n, 2",
            "UPDATE t SET v = 'it''s' WHERE k = 9 RETURNING k",
        ];
        let texts = [
            "SELECT abalance FROM pgbench_accounts WHERE aid = 7;",
            "SELECT abalance FROM pgbench_accounts WHERE aid = 7.25e-3;",
            "SELECT abalance FROM pgbench_accounts WHERE aid = '7';",
            "SELECT abalance FROM pgbench_accounts WHERE aid = 7x;",
            "SELECT abalance FROM pgbench_accounts WHERE aid = 7",
            "SELECT abalance FROM pgbench_accounts WHERE aid = 1e;",
            "SELECT v FROM t WHERE k = '' AND n = 0",
            "SELECT v FROM t WHERE k = 'x' AND n = 'y'",
            "SELECT v FROM t WHERE k = 'unterminated AND n = 1",
            "INSERT INTO t VALUES (10, 'x''x'), (20, '')",
            "INSERT INTO t VALUES (10, 'x'), (20, 'y'), (30, 'z')",
            "12",
            "1a",
            "'x'",
            "''22",
            "SELECT 5 -- c\n, 6",
            "SELECT 5 -- d\n, 6",
            "UPDATE t SET v = E'\\'' WHERE k = 9 RETURNING k",
            "UPDATE t SET v = 'a' WHERE k = 10 RETURNING k",
        ];
        let mut agreed = 0;
        for t in templates {
            let (tkey, tspans) = scan(t).expect("a template scans");
            for sql in texts.iter().chain(templates.iter()) {
                let mut got = Vec::new();
                let same = same_shape(t, &tspans, sql, |a, b| got.push((a, b)));
                let full = scan(sql);
                let full_same = full.as_ref().is_some_and(|(k, _)| *k == tkey);
                if same {
                    agreed += 1;
                    assert_eq!(full, Some((tkey, got)), "{t:?} / {sql:?}");
                } else if let (true, Some((_, spans))) = (full_same, &full) {
                    // A string where the template has a number (or the reverse) hashes alike
                    // and is told "no" (the caller scans it): only those.
                    let quoted = |text: &str, at: usize| text.as_bytes()[at] == b'\'';
                    assert!(
                        tspans
                            .iter()
                            .zip(spans)
                            .any(|(a, b)| quoted(t, a.0) != quoted(sql, b.0)),
                        "{t:?} / {sql:?}: the scan says same shape"
                    );
                }
            }
        }
        assert!(agreed >= 12, "{agreed}");
    }
}
