//! A lexical pre-filter over a client's SQL: does a query possibly change session state
//! (SET, RESET, DISCARD, set_config, ...) or create state bound to one server (LISTEN, SQL
//! PREPARE, WITH HOLD cursors, temporary tables, session advisory locks)? It only decides
//! whether pgcorral asks the server afterwards; the server's answer is the truth.

/// What a query may do to the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Effect {
    /// Nothing session-wide.
    None,
    /// May change settings or release server-bound state: capture after the transaction.
    Dirty,
    /// Creates state that cannot move to another server.
    Pins(&'static str),
}

/// Classifies every statement of `sql` (a Query text or a Parse's statement) and returns the
/// strongest effect found.
pub fn classify(sql: &[u8]) -> Effect {
    if !worth_lexing(sql) {
        return Effect::None;
    }
    lex_classify(sql)
}

/// What a statement's first word says about it. The quick look and the lexer both ask
/// [`start_of`], so that they cannot disagree on which statements matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Matters whatever follows (LISTEN, PREPARE, SET, RESET, DISCARD, ...).
    Matters(Effect),
    /// DECLARE: a cursor declared WITH HOLD outlives the transaction.
    Declare,
    /// CREATE, SELECT or WITH: TEMP or TEMPORARY in it makes a temporary table.
    MayCreateTemp,
    /// Starts nothing of interest.
    Other,
}

/// The first words of the statements of interest (lower-case ASCII letters, checked at
/// compile time).
const STARTS: [(&str, Start); 13] = [
    ("listen", Start::Matters(Effect::Pins("LISTEN"))),
    ("prepare", Start::Matters(Effect::Pins("SQL PREPARE"))),
    ("set", Start::Matters(Effect::Dirty)),
    ("reset", Start::Matters(Effect::Dirty)),
    ("discard", Start::Matters(Effect::Dirty)),
    ("unlisten", Start::Matters(Effect::Dirty)),
    ("deallocate", Start::Matters(Effect::Dirty)),
    ("close", Start::Matters(Effect::Dirty)),
    ("drop", Start::Matters(Effect::Dirty)),
    ("declare", Start::Declare),
    ("create", Start::MayCreateTemp),
    ("select", Start::MayCreateTemp),
    ("with", Start::MayCreateTemp),
];

/// What a statement's first word says, the word given as the number `word` (its bytes in
/// order from the lowest, zeros after it; 16 bytes at most): a look-up in a hash table of
/// [`STARTS`] built at compile time (one multiply, one compare).
#[inline(always)]
fn start_of(word: u128) -> Start {
    let k = key(word);
    let i = SLOTS[slot(k)] as usize & 15;
    if KEYS[i] == k {
        BY_INDEX[i]
    } else {
        Start::Other
    }
}

/// [`start_of`] a word anywhere.
fn start_of_word(word: &[u8]) -> Start {
    match word.len() {
        0..=16 => start_of(u128::from_le_bytes(sixteen(word, 0))),
        _ => Start::Other,
    }
}

/// A word (as [`start_of`] takes it) as a number to compare with the words of [`STARTS`] in
/// any case: each byte ORed with 0x20, which lower-cases ASCII letters and turns no other byte
/// into one, and the zeros after the word turn into spaces (0x20, in no word).
const fn key(word: u128) -> u128 {
    word | u128::from_le_bytes([0x20; 16])
}

/// Where a key goes in [`SLOTS`]: the top six bits of its first eight bytes times 2^64/φ
/// (Fibonacci hashing), a different slot for each word of [`STARTS`] (checked at compile
/// time).
const fn slot(key: u128) -> usize {
    ((key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize
}

/// For each slot, 1 + the index in [`STARTS`] of the word there, 0 for none.
static SLOTS: [u8; 64] = {
    let mut slots = [0u8; 64];
    let mut i = 0;
    while i < STARTS.len() {
        let s = slot(KEYS[i + 1]);
        assert!(
            slots[s] == 0,
            "STARTS: two words in one slot (change slot())"
        );
        slots[s] = i as u8 + 1;
        i += 1;
    }
    slots
};

/// The [`key`] of each word of [`STARTS`], from index 1 (0 matches no word, as no key is 0).
const KEYS: [u128; 16] = {
    assert!(STARTS.len() < 16, "STARTS: 15 words at most");
    let mut keys = [0; 16];
    let mut i = 0;
    while i < STARTS.len() {
        let w = STARTS[i].0.as_bytes();
        assert!(w.len() <= 16, "STARTS: 16 bytes at most");
        let mut chunk = [0; 16];
        let mut j = 0;
        while j < w.len() {
            assert!(w[j].is_ascii_lowercase(), "STARTS: lower-case letters only");
            chunk[j] = w[j];
            j += 1;
        }
        keys[i + 1] = key(u128::from_le_bytes(chunk));
        i += 1;
    }
    keys
};

/// What each word of [`STARTS`] says, from index 1 as in [`KEYS`].
const BY_INDEX: [Start; 16] = {
    let mut by = [Start::Other; 16];
    let mut i = 0;
    while i < STARTS.len() {
        by[i + 1] = STARTS[i].1;
        i += 1;
    }
    by
};

/// The 16 bytes of `s` from `i`, zeros past its end.
#[inline(always)]
fn sixteen(s: &[u8], i: usize) -> [u8; 16] {
    match s[i..].first_chunk() {
        Some(c) => *c,
        None => {
            let mut c = [0; 16];
            c[..s.len() - i].copy_from_slice(&s[i..]);
            c
        }
    }
}

/// Bits of [`CLASS`]: continues a word (ASCII letters and digits, `_`, `$`, non-ASCII bytes).
const WORD: u8 = 1;
/// Starts a word (ASCII letters, `_`, non-ASCII bytes).
const WORD_START: u8 = 2;
/// ASCII white space (as [`u8::is_ascii_whitespace`]).
const SPACE: u8 = 4;
/// Starts something else the lexer looks at: `;`, a quote, a comment, a dollar quote.
const SPECIAL: u8 = 8;

/// The class of each byte, one table look-up instead of a chain of comparisons.
static CLASS: [u8; 256] = classes();

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
        if matches!(b, b';' | b'\'' | b'"' | b'-' | b'/' | b'$') {
            t[i] |= SPECIAL;
        }
        i += 1;
    }
    t
}

/// A quick look that rules out most queries before the lexer runs (it runs on every query of
/// every pooled client): false only where [`lex_classify`] would find nothing, i.e. one
/// statement whose first word starts no statement of interest ([`start_of`]), with no
/// `_advisory` or `set_config` in it, and no `temp` in a CREATE, SELECT or WITH. Anything
/// unusual (a comment or parenthesis first, a second statement) goes to the lexer.
///
/// One pass over the text, 16 bytes at a time after leading white space: the first 16 give
/// the first word, the rest go to [`rest_matters`].
fn worth_lexing(sql: &[u8]) -> bool {
    let mut i = 0;
    while i < sql.len() && CLASS[sql[i] as usize] & SPACE != 0 {
        i += 1;
    }
    // The first word, as far as it is made of letters (the zeros past the end are none).
    let start = i;
    let chunk = sixteen(sql, start);
    let mut not_letter = [0u8; 16];
    for (k, &b) in chunk.iter().enumerate() {
        not_letter[k] = u8::from((b | 0x20).wrapping_sub(b'a') >= 26).wrapping_neg();
    }
    let not_letter = u128::from_le_bytes(not_letter);
    let letters = (not_letter.trailing_zeros() / 8) as usize;
    i += letters;
    let says = if i < sql.len() && CLASS[sql[i] as usize] & WORD != 0 {
        // More than letters (or 16 of them): no statement of interest starts so.
        while i < sql.len() && CLASS[sql[i] as usize] & WORD != 0 {
            i += 1;
        }
        Start::Other
    } else {
        // The bits below the lowest of `not_letter`: the word's bytes.
        let word = (not_letter ^ not_letter.wrapping_sub(1)) >> 1;
        start_of(u128::from_le_bytes(chunk) & word)
    };
    // Not a plain keyword first (E'' strings are one letter).
    if letters == 0 || i - start < 2 {
        return true;
    }
    let temp = match says {
        Start::Matters(_) | Start::Declare => return true,
        Start::MayCreateTemp => true,
        Start::Other => false,
    };
    rest_matters(sql, i, temp)
}

/// The rest of the quick look, over `sql[from..]`: true at a `;` followed by more than white
/// space (another statement), at `_advisory` or `set_config`, and with `temp` at `temp`, in
/// any case.
///
/// One pass, 16 bytes at a time: a step marks the bytes that may end one of these words
/// ([`marks`]) and only marked bytes get a closer look. The words are found by letters rarer
/// in SQL than their first (the `v` of `_advisory`, the `g` of `set_config`, the `p` of
/// `temp`), so that most steps mark nothing.
fn rest_matters(sql: &[u8], from: usize, temp: bool) -> bool {
    // A `;` that ends the text, but for white space, ends the pass early.
    let mut end = sql.len();
    while end > from && CLASS[sql[end - 1] as usize] & SPACE != 0 {
        end -= 1;
    }
    if end > from && sql[end - 1] == b';' {
        end -= 1;
    }
    // No byte ORed with 0x20 is 0: without `temp`, `p` marks nothing.
    let p = if temp { b'p' } else { 0 };
    let mut i = from;
    while let Some(chunk) = sql[i..end].first_chunk() {
        if look(sql, from, i, marks(*chunk, p), temp) {
            return true;
        }
        i += 16;
    }
    if i == end {
        return false;
    }
    // The last 16 bytes (or all, padded with zeros, which mark nothing), less those before `i`.
    let base = end.saturating_sub(16);
    let chunk = sixteen(&sql[..end], base);
    look(
        sql,
        from,
        base,
        marks(chunk, p) & u128::MAX << (8 * (i - base)),
        temp,
    )
}

/// The closer look at the bytes `marks` marks in `sql[base..base + 16]` (see [`rest_matters`]).
#[inline(always)]
fn look(sql: &[u8], from: usize, base: usize, mut marks: u128, temp: bool) -> bool {
    while marks != 0 {
        let i = base + (marks.trailing_zeros() / 8) as usize;
        marks &= marks - 1;
        let found = match sql[i] {
            // Before the end: another statement follows.
            b';' => true,
            b'v' | b'V' => ends(sql, from, i + 5, b"_advisory"),
            b'g' | b'G' => ends(sql, from, i, b"set_config"),
            b'p' | b'P' => temp && ends(sql, from, i, b"temp"),
            _ => false,
        };
        if found {
            return true;
        }
    }
    false
}

/// The bytes of `chunk` that [`rest_matters`] looks at closer, as the high bits of a u128's
/// bytes: `;`, and `v`, `g` and `p` (unless 0) in either case. Written byte by byte for the
/// compiler to compare all 16 at once (SSE2 on x86-64).
#[inline(always)]
fn marks(chunk: [u8; 16], p: u8) -> u128 {
    let mut m = [0u8; 16];
    for (k, &b) in chunk.iter().enumerate() {
        // ORed with 0x20, a byte is a lower-case letter only if it was a letter.
        let l = b | 0x20;
        m[k] = u8::from((b == b';') | (l == b'v') | (l == b'g') | (l == p)).wrapping_neg();
    }
    u128::from_le_bytes(m) & u128::from_le_bytes([0x80; 16])
}

/// `kw` (lower case) ends at `sql[i]`, after `from`, its letters in either case.
#[inline(always)]
fn ends<const N: usize>(sql: &[u8], from: usize, i: usize, kw: &[u8; N]) -> bool {
    let Some(start) = (i + 1).checked_sub(N).filter(|&s| s >= from) else {
        return false;
    };
    match sql.get(start..).and_then(<[u8]>::first_chunk::<N>) {
        Some(w) => {
            let differ = |(b, k): (&u8, &u8)| (b | (u8::from(k.is_ascii_lowercase()) << 5)) ^ k;
            w.iter().zip(kw).map(differ).fold(0, |d, x| d | x) == 0
        }
        None => false,
    }
}

/// [`classify`] by the lexer, statement by statement.
fn lex_classify(sql: &[u8]) -> Effect {
    let mut effect = Effect::None;
    let mut lex = Lexer {
        s: sql,
        i: 0,
        dotted: false,
    };
    // What the statement's first word said (None before it), and the word before this one.
    let mut start = None;
    let mut prev: &[u8] = b"";
    while let Some(tok) = lex.next() {
        let word = match tok {
            Token::Semicolon => {
                start = None;
                prev = b"";
                continue;
            }
            Token::Word(w) => w,
            Token::Str(_) => continue,
        };
        let e = match start {
            None => {
                let s = start_of_word(word);
                start = Some(s);
                match s {
                    Start::Matters(e) => e,
                    _ => Effect::None,
                }
            }
            Some(s) => inside(s, prev, word),
        };
        // Most words do nothing (and comparing effects compares the names of pins).
        if e != Effect::None {
            effect = effect.max(e);
        }
        prev = word;
    }
    effect
}

/// Custom (dotted) setting names that `sql` sets or resets: `SET [SESSION|LOCAL] a.b ...`,
/// `RESET a.b`, `set_config('a.b', ...)`. PostgreSQL does not list custom settings in
/// pg_settings, so pgcorral must know their names to read them back. Lower-cased.
pub fn custom_names(sql: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut lex = Lexer {
        s: sql,
        i: 0,
        dotted: true,
    };
    // What the last tokens say the next one is: 0 = nothing, 1 = a SET/RESET name (after an
    // optional SESSION/LOCAL), 2 = set_config's first argument.
    let mut expect = 0u8;
    let mut at_start = true;
    while let Some(tok) = lex.next() {
        match tok {
            Token::Semicolon => {
                at_start = true;
                expect = 0;
            }
            Token::Word(w) => {
                let base = w.rsplit(|&b| b == b'.').next().unwrap_or(w);
                if at_start && (is(w, "set") || is(w, "reset")) {
                    expect = 1;
                } else if expect == 1 && (is(w, "session") || is(w, "local")) {
                    // SET SESSION x / SET LOCAL x
                } else if expect == 1 && w.contains(&b'.') {
                    names.push(String::from_utf8_lossy(w).to_ascii_lowercase());
                    expect = 0;
                } else if is(base, "set_config") {
                    expect = 2;
                } else {
                    expect = 0;
                }
                at_start = false;
            }
            Token::Str(v) => {
                if expect == 2 && v.contains(&b'.') {
                    names.push(String::from_utf8_lossy(v).to_ascii_lowercase());
                }
                expect = 0;
                at_start = false;
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

fn is(w: &[u8], kw: &str) -> bool {
    w.eq_ignore_ascii_case(kw.as_bytes())
}

/// `w` starts with `kw`, in any case.
fn prefix(w: &[u8], kw: &str) -> bool {
    w.get(..kw.len()).is_some_and(|p| is(p, kw))
}

/// What word `w` does inside a statement, after `prev`, where the first word said `start`.
/// Most words are told apart by their length alone.
fn inside(start: Start, prev: &[u8], w: &[u8]) -> Effect {
    match w.len() {
        4 if start == Start::Declare && is(w, "hold") && is(prev, "with") => {
            Effect::Pins("WITH HOLD cursor")
        }
        4 | 9 if start == Start::MayCreateTemp && (is(w, "temp") || is(w, "temporary")) => {
            Effect::Pins("temporary table")
        }
        10 if is(w, "set_config") => Effect::Dirty,
        16.. if prefix(w, "pg_advisory_lock") || prefix(w, "pg_try_advisory_lock") => {
            Effect::Pins("session advisory lock")
        }
        18.. if prefix(w, "pg_advisory_unlock") => Effect::Dirty,
        _ => Effect::None,
    }
}

enum Token<'a> {
    Word(&'a [u8]),
    /// A string literal's text (only with `dotted`).
    Str(&'a [u8]),
    Semicolon,
}

/// Yields identifiers/keywords and statement ends; skips strings, quoted identifiers, dollar
/// quotes, comments, numbers and operators.
struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
    /// Words may be qualified (`a.b`) and string literals are returned.
    dotted: bool,
}

impl<'a> Lexer<'a> {
    fn next(&mut self) -> Option<Token<'a>> {
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
                    self.skip_string(true);
                    continue;
                }
                return Some(Token::Word(&s[start..self.i]));
            }
            if class & SPECIAL == 0 {
                self.i += 1;
                continue;
            }
            match c {
                b';' => {
                    self.i += 1;
                    return Some(Token::Semicolon);
                }
                b'\'' => {
                    let start = self.i + 1;
                    self.skip_string(false);
                    if self.dotted {
                        let end = self.i.saturating_sub(1).max(start);
                        return Some(Token::Str(&s[start..end]));
                    }
                }
                b'"' => self.skip_until(b'"'),
                b'-' if s.get(self.i + 1) == Some(&b'-') => {
                    while self.i < s.len() && s[self.i] != b'\n' {
                        self.i += 1;
                    }
                }
                b'/' if s.get(self.i + 1) == Some(&b'*') => self.skip_block_comment(),
                b'$' => self.skip_dollar(),
                _ => self.i += 1,
            }
        }
        None
    }

    /// At an opening quote: skips to after the closing one ('' is a quote inside; with
    /// `escapes`, so is \').
    fn skip_string(&mut self, escapes: bool) {
        let s = self.s;
        self.i += 1;
        while self.i < s.len() {
            match s[self.i] {
                b'\\' if escapes => self.i += 2,
                b'\'' if s.get(self.i + 1) == Some(&b'\'') => self.i += 2,
                b'\'' => {
                    self.i += 1;
                    return;
                }
                _ => self.i += 1,
            }
        }
    }

    fn skip_until(&mut self, close: u8) {
        self.i += 1;
        while self.i < self.s.len() && self.s[self.i] != close {
            self.i += 1;
        }
        self.i += 1;
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

    /// `$tag$ ... $tag$` (tag possibly empty); a `$1` parameter is skipped as a word would be.
    fn skip_dollar(&mut self) {
        let s = self.s;
        let start = self.i;
        let mut j = self.i + 1;
        while j < s.len() && (s[j].is_ascii_alphanumeric() || s[j] == b'_') {
            j += 1;
        }
        if j >= s.len() || s[j] != b'$' || s[start + 1..j].first().is_some_and(u8::is_ascii_digit) {
            self.i = j;
            return;
        }
        let tag = &s[start..=j];
        let body = j + 1;
        match s[body..].windows(tag.len()).position(|w| w == tag) {
            Some(p) => self.i = body + p + tag.len(),
            None => self.i = s.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Effect {
        classify(s.as_bytes())
    }

    #[test]
    fn plain_queries_are_clean() {
        assert_eq!(
            c("SELECT abalance FROM pgbench_accounts WHERE aid = $1"),
            Effect::None
        );
        assert_eq!(c("UPDATE t SET a = 1 OFFSET"), Effect::None);
        assert_eq!(c("select 'set search_path = x; listen y'"), Effect::None);
        assert_eq!(c("select $$; prepare x$$, \"set\""), Effect::None);
        assert_eq!(
            c("insert into settings values (E'\\'; set x')"),
            Effect::None
        );
        assert_eq!(c("select 1 -- ; set x = 1\n"), Effect::None);
        assert_eq!(c("select /* /* nested */ ; set */ 1"), Effect::None);
        assert_eq!(c("select pg_advisory_xact_lock(1)"), Effect::None);
        assert_eq!(c("declare c cursor for select 1"), Effect::None);
    }

    #[test]
    fn session_changes_are_dirty() {
        assert_eq!(c("SET search_path = a"), Effect::Dirty);
        assert_eq!(c("  /* hi */ reset all"), Effect::Dirty);
        assert_eq!(
            c("BEGIN; SET LOCAL TimeZone = 'UTC'; COMMIT"),
            Effect::Dirty
        );
        assert_eq!(
            c("select pg_catalog.set_config('a.b', 'x', false)"),
            Effect::Dirty
        );
        assert_eq!(c("DISCARD ALL"), Effect::Dirty);
        assert_eq!(c("select pg_advisory_unlock(1)"), Effect::Dirty);
        assert_eq!(c("drop table t"), Effect::Dirty);
    }

    /// A xorshift generator: the same texts on every run.
    fn rng() -> impl FnMut() -> u64 {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    /// The quick look never skips a text the lexer would classify: the tests' texts, and 40,000
    /// generated from keywords, the words it searches for (whole and cut short), separators,
    /// strings, comments and non-ASCII bytes, some with their letters' case scrambled.
    #[test]
    fn the_quick_look_skips_only_clean_texts() {
        let mut corpus: Vec<String> = [
            "SELECT abalance FROM pgbench_accounts WHERE aid = $1;",
            "select pg_catalog.set_config('a.b', 'x', false)",
            "select pg_try_advisory_lock_shared(1)",
            "SELECT * INTO TEMP t FROM x",
            "with x as (select 1) select * into temporary t from x",
            "select 1;  \n ",
            "select 1; set x = 1",
            "E'x'",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let pieces = [
            "select",
            "SELECT",
            "Set",
            "reset",
            "set_config",
            "SET_CONFIG",
            "set_confi",
            "xset_config",
            "pg_advisory_lock",
            "pg_Try_Advisory_Lock",
            "pg_advisory_unlock",
            "pg_advisory_xact_lock",
            "_advisory",
            "_advisor",
            "advisory",
            "temp",
            "TEMPORARY",
            "tem",
            "tempo",
            "create",
            "with",
            "declare",
            "hold",
            "WITH HOLD",
            "listen",
            "prepare",
            "discard",
            "drop",
            "close",
            "unlisten",
            "deallocate",
            "update",
            "x",
            "t.y",
            "pg_catalog.",
            "1",
            "$1",
            "$",
            "$$;set$$",
            "$a$ temp $a$",
            ";",
            ";;",
            " ; ",
            "'a;b'",
            "'",
            "E'\\'; set'",
            "\"set\"",
            "\"",
            "-- c\n",
            "--",
            "/* ; set */",
            "/*",
            "*/",
            "(",
            ")",
            ",",
            "  ",
            "\n",
            "\t",
            "\r\n",
            "\x0b",
            "\x0c",
            "_",
            "e'",
            "é",
            "日本",
            "\u{a0}",
            "$x$ drop $x$",
            "begin;",
            "commit",
        ];
        let mut next = rng();
        for _ in 0..40_000 {
            let n = 1 + next() % 8;
            let mut text = String::new();
            let sep = if next().is_multiple_of(3) { "" } else { " " };
            for k in 0..n {
                if k > 0 {
                    text.push_str(sep);
                }
                let piece = pieces[(next() % pieces.len() as u64) as usize];
                if next().is_multiple_of(4) {
                    let bits = next();
                    text.extend(piece.chars().enumerate().map(|(i, ch)| {
                        if bits >> (i % 64) & 1 == 1 {
                            ch.to_ascii_uppercase()
                        } else {
                            ch.to_ascii_lowercase()
                        }
                    }));
                } else {
                    text.push_str(piece);
                }
            }
            corpus.push(text);
        }
        let mut skipped = 0;
        for text in &corpus {
            let full = lex_classify(text.as_bytes());
            let worth = worth_lexing(text.as_bytes());
            assert!(
                worth || full == Effect::None,
                "{text:?} skipped, but the lexer says {full:?}"
            );
            skipped += usize::from(!worth);
        }
        // Not a test that passes by sending everything to the lexer.
        assert!(skipped > corpus.len() / 10, "{skipped} skipped");
        assert!(!worth_lexing(
            b"SELECT abalance FROM pgbench_accounts WHERE aid = 12345;"
        ));
        assert!(!worth_lexing(
            b"UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 7"
        ));
    }

    /// Each word the quick look searches for, at every offset from 0 to 40 after the first word
    /// and with 0 to 20 bytes after it, so that it lies across every boundary of the quick look's
    /// 16-byte steps: such a text always reaches the lexer, and one with the word cut short (or
    /// where it does not matter) never does.
    #[test]
    fn the_quick_look_sees_words_at_every_offset() {
        let hits = [
            ("select", "pg_advisory_lock(1)"),
            ("select", "PG_TRY_ADVISORY_LOCK_SHARED(1)"),
            ("select", "pg_advisory_unlock(1)"),
            ("select", "set_config('a', 'b', false)"),
            ("select", "pg_catalog.SET_CONFIG('a', 'b', false)"),
            ("create", "temp table t (a int)"),
            ("CREATE", "TEMPORARY TABLE t (a int)"),
            ("with", "Temp"),
            ("SELECT", "1 into temp t"),
            ("select", "1;set x = 1"),
            ("select", ";set x = 1"),
            ("select", "(pg_advisory_lock(1))"),
            ("select", "1; LISTEN x"),
            ("select", "1;\n\tdrop table x"),
            ("update", "t set a = 1; discard all"),
        ];
        let misses = [
            ("select", "pg_advisor_lock(1)"),
            ("select", "Set_Confi('a', 'b', false)"),
            ("select", "xset_confi"),
            ("select", "tem"),
            ("create", "TEM"),
            ("update", "t set temp = 1"),
            ("delete", "from temp"),
            ("select", "1;"),
            ("select", ";"),
            ("select", "(tem)"),
            ("select", "1 ;  \r\n\t"),
            ("select", "é日本\u{a0}"),
        ];
        let filler = " a = 1 and".repeat(5);
        let after = " or b = 2".repeat(3);
        let blank = " \t\r\n".repeat(6);
        // Right after the first word only if the word starts with punctuation.
        let joins = |off: usize, word: &str| off == 0 && word.as_bytes()[0].is_ascii_alphanumeric();
        for off in 0..=40 {
            // `off` bytes between the first word and the word, the last a space.
            let before = match off {
                0 => String::new(),
                _ => format!("{} ", &filler[..off - 1]),
            };
            for n in 0..=20 {
                for (first, word) in hits {
                    if joins(off, word) {
                        continue;
                    }
                    let text = format!("{first}{before}{word}{}", &after[..n]);
                    let full = lex_classify(text.as_bytes());
                    assert_ne!(full, Effect::None, "{text:?}");
                    assert!(worth_lexing(text.as_bytes()), "{text:?} skipped");
                    assert_eq!(classify(text.as_bytes()), full, "{text:?}");
                }
                for (first, word) in misses {
                    if joins(off, word) {
                        continue;
                    }
                    // Only white space after a statement's end.
                    let after = if word.contains(';') { &blank } else { &after };
                    let text = format!("{first}{before}{word}{}", &after[..n]);
                    assert!(!worth_lexing(text.as_bytes()), "{text:?} lexed");
                }
            }
        }
    }

    /// The words of [`STARTS`] in any case, and nothing else: not one longer or shorter, not
    /// one of 16 bytes or more.
    #[test]
    fn first_words_are_looked_up_in_any_case() {
        for (w, says) in STARTS {
            let mixed: String = w
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    if i % 2 == 0 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    }
                })
                .collect();
            for word in [w.to_string(), w.to_ascii_uppercase(), mixed] {
                assert_eq!(start_of_word(word.as_bytes()), says, "{word}");
                assert_eq!(start_of_word(format!("{word}s").as_bytes()), Start::Other);
                assert_eq!(start_of_word(format!("{word}_").as_bytes()), Start::Other);
                assert_eq!(start_of_word(&word.as_bytes()[1..]), Start::Other);
                assert_eq!(start_of_word(&word.as_bytes()[..w.len() - 1]), Start::Other);
                let quick = worth_lexing(format!("  {word} 1").as_bytes());
                assert_eq!(
                    quick,
                    matches!(says, Start::Matters(_) | Start::Declare),
                    "{word}"
                );
            }
        }
        for word in ["", "x", "selectselectselec", "sélect", "se1ect", "_set"] {
            assert_eq!(start_of_word(word.as_bytes()), Start::Other, "{word}");
        }
    }

    #[test]
    fn custom_setting_names_are_found() {
        let n = |s: &str| custom_names(s.as_bytes());
        assert_eq!(n("SET myapp.tenant = 'acme'"), vec!["myapp.tenant"]);
        assert_eq!(
            n("set session MyApp.X to 1; reset a.b"),
            vec!["a.b", "myapp.x"]
        );
        assert_eq!(
            n("select pg_catalog.set_config('app.user', 'x', false), set_config('plain', 'y', false)"),
            vec!["app.user"]
        );
        assert!(n("SET search_path = a.b; select 'x.y'").is_empty());
    }

    #[test]
    fn server_bound_state_pins() {
        assert_eq!(c("LISTEN chan"), Effect::Pins("LISTEN"));
        assert_eq!(
            c("select 1; prepare p as select 1"),
            Effect::Pins("SQL PREPARE")
        );
        assert_eq!(
            c("DECLARE c CURSOR WITH HOLD FOR SELECT 1"),
            Effect::Pins("WITH HOLD cursor")
        );
        assert_eq!(
            c("create temp table t (a int)"),
            Effect::Pins("temporary table")
        );
        assert_eq!(
            c("CREATE GLOBAL TEMPORARY TABLE t (a int)"),
            Effect::Pins("temporary table")
        );
        assert_eq!(
            c("select pg_advisory_lock(1)"),
            Effect::Pins("session advisory lock")
        );
        assert_eq!(
            c("SELECT pg_try_advisory_lock_shared(1)"),
            Effect::Pins("session advisory lock")
        );
    }
}
