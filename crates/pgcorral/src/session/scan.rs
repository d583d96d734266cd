//! Which queries may change session state: a conservative classifier over a client's SQL and
//! the database's catalog. A query is clean only when its text shows that it cannot change the
//! session (its statements start with a known word, and it calls no function outside a short
//! list of built-ins) and it names nothing through which the database runs user code (the
//! [`HookMap`]: a relation with a trigger, a user function, a domain with a CHECK, ...); every
//! other query is followed by a capture of the session and has the server reset before another
//! client gets it. A miss costs a reset, never a leak.

use super::hooks::HookMap;
use super::lex::{catalog_name, Lexer, Token, CLASS, SPACE, WORD};

/// What a query may do to the session, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Effect {
    /// Provably nothing session-wide.
    None,
    /// Changes settings in a way the capture reads back whole (SET, RESET, DISCARD,
    /// `set_config` with a literal name, ...): capture after the transaction.
    Dirty,
    /// Changes the session in a way the capture may not read back whole (a custom setting whose
    /// name is computed or quoted, `pg_settings`), or names something that may reach user code
    /// while the database's catalog is not known (not read yet, or read again after a catalog
    /// change): as `Taint` for the session, but it runs no code its text or a known catalog
    /// shows, so it changes no catalog pgcorral reads.
    Unsure,
    /// May change the session in ways pgcorral cannot see from the text (a call of a function
    /// it does not know, `DO`, `EXECUTE`, `CALL`, `pg_settings`, DDL, an unknown statement, a
    /// name the catalog says reaches user code): capture after the transaction for the client,
    /// and reset the server's settings before another client gets it. Such code may also change
    /// the catalog, so the database's [`HookMap`] is read again after it.
    Taint,
    /// Creates state that cannot move to another server (and taints, as the capture decides
    /// whether the state is still there).
    Pins(&'static str),
}

/// Classifies every statement of `sql` (a Query text or a Parse's statement) in a database whose
/// user code `hooks` maps, and returns the strongest effect found.
pub fn classify(sql: &[u8], hooks: &HookMap) -> Effect {
    if hooks.silent() && !worth_lexing(sql) {
        return Effect::None;
    }
    let e = lex_classify(sql, hooks);
    if e < Effect::Taint && hooks.operator_in(sql) {
        return Effect::Taint;
    }
    e
}

/// What a statement's first word says about it. The quick look and the lexer both ask
/// [`start_of`], so that they cannot disagree on which statements matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Matters whatever follows (LISTEN, PREPARE, SET, RESET, DISCARD, ...).
    Matters(Effect),
    /// DECLARE: a cursor declared WITH HOLD outlives the transaction.
    Declare,
    /// A statement that changes no session state by itself: what it calls decides. With
    /// `temp` (CREATE, SELECT, WITH), TEMP or TEMPORARY in it makes a temporary table.
    Clean { temp: bool },
    /// A statement that may add user code to the catalog (CREATE, ALTER) or run the code a
    /// table's indexes hold (ANALYZE, VACUUM): taints, and `temp` as for `Clean`.
    Catalog { temp: bool },
    /// Any other statement (DO, CALL, EXECUTE, LOAD, ...): pgcorral cannot see through it.
    Other,
}

const CLEAN: Start = Start::Clean { temp: false };
const CLEAN_TEMP: Start = Start::Clean { temp: true };
const CATALOG: Start = Start::Catalog { temp: false };
const CATALOG_TEMP: Start = Start::Catalog { temp: true };

/// The first words pgcorral knows (lower-case ASCII letters, checked at compile time).
const STARTS: [(&str, Start); 41] = [
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
    ("create", CATALOG_TEMP),
    ("select", CLEAN_TEMP),
    ("with", CLEAN_TEMP),
    ("insert", CLEAN),
    ("update", CLEAN),
    ("delete", CLEAN),
    ("values", CLEAN),
    ("table", CLEAN),
    ("begin", CLEAN),
    ("start", CLEAN),
    ("commit", CLEAN),
    ("end", CLEAN),
    ("rollback", CLEAN),
    ("abort", CLEAN),
    ("savepoint", CLEAN),
    ("release", CLEAN),
    ("fetch", CLEAN),
    ("move", CLEAN),
    ("show", CLEAN),
    ("explain", CLEAN),
    ("lock", CLEAN),
    ("notify", CLEAN),
    ("copy", CLEAN),
    ("truncate", CLEAN),
    ("alter", CATALOG),
    ("comment", CLEAN),
    ("grant", CLEAN),
    ("revoke", CLEAN),
    ("analyze", CATALOG),
    ("vacuum", CATALOG),
    ("checkpoint", CLEAN),
];

/// What a statement's first word says, the word given as the number `word` (its bytes in
/// order from the lowest, zeros after it; 16 bytes at most): a look-up in a hash table of
/// [`STARTS`] built at compile time (one multiply, one compare).
#[inline(always)]
fn start_of(word: u128) -> Start {
    let k = key(word);
    let i = SLOTS[slot(k)] as usize;
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

/// Where a key goes in [`SLOTS`]: the top eight bits of its first eight bytes times a
/// multiplier chosen so that every word of [`STARTS`] has a slot of its own (checked at
/// compile time).
const fn slot(key: u128) -> usize {
    ((key as u64).wrapping_mul(0x9b9d_5f76_1934_8bd1) >> 56) as usize
}

/// For each slot, 1 + the index in [`STARTS`] of the word there, 0 for none.
static SLOTS: [u8; 256] = {
    let mut slots = [0u8; 256];
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
const KEYS: [u128; 64] = {
    assert!(STARTS.len() < 64, "STARTS: 63 words at most");
    let mut keys = [0; 64];
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
const BY_INDEX: [Start; 64] = {
    let mut by = [Start::Other; 64];
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

/// A quick look that rules out most queries before the lexer runs (it runs on every query of
/// every pooled client): false only where [`lex_classify`] would find nothing, i.e. one
/// statement whose first word is a known clean one ([`start_of`]), with no parenthesis (so no
/// call), no double quote, no `pg_settings`, and no `temp` in a CREATE, SELECT or WITH.
/// Anything else (an unknown first word, a comment or parenthesis first, a second statement)
/// goes to the lexer.
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
    if letters == 0 || i - start < 2 || (i < sql.len() && CLASS[sql[i] as usize] & WORD != 0) {
        // Not a plain keyword first (E'' strings are one letter; more than letters, or 16 of
        // them, is no word of STARTS).
        return true;
    }
    // The bits below the lowest of `not_letter`: the word's bytes.
    let word = (not_letter ^ not_letter.wrapping_sub(1)) >> 1;
    match start_of(u128::from_le_bytes(chunk) & word) {
        Start::Clean { temp } => rest_matters(sql, i, temp),
        _ => true,
    }
}

/// The rest of the quick look, over `sql[from..]`: true at a `;` followed by more than white
/// space (another statement), at `(` or `"`, at `\\'`, at `pg_settings`, and with `temp` at
/// `temp`, in any case.
///
/// One pass, 16 bytes at a time: a step marks the bytes that may end one of these ([`marks`])
/// and only marked bytes get a closer look. The words are found by letters rarer in SQL than
/// their first (the last `g` of `pg_settings`, the `p` of `temp`), so that most steps mark
/// nothing.
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
            // Before the end: another statement follows. A call, or a quoted name.
            b';' | b'(' | b'"' => true,
            // `\'`: a string the lexer cannot read one way only (see `Lexer::ambiguous`).
            b'\\' => sql.get(i + 1) == Some(&b'\''),
            b'g' | b'G' => ends(sql, from, i + 1, b"pg_settings"),
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
/// bytes: `;`, `(`, `"`, `\\`, and `g` and `p` (unless 0) in either case. Written byte by byte for
/// the compiler to compare all 16 at once (SSE2 on x86-64).
#[inline(always)]
fn marks(chunk: [u8; 16], p: u8) -> u128 {
    let mut m = [0u8; 16];
    for (k, &b) in chunk.iter().enumerate() {
        // ORed with 0x20, a byte is a lower-case letter only if it was a letter.
        let l = b | 0x20;
        m[k] = u8::from(
            (b == b';') | (b == b'(') | (b == b'"') | (b == b'\\') | (l == b'g') | (l == p),
        )
        .wrapping_neg();
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

/// Keywords that may stand right before a `(` anywhere without calling anything: reserved
/// words and those PostgreSQL's grammar lets name a column but never a function (lower
/// case). Non-reserved keywords (FILTER, OVER, CONFLICT, ...) can name a user's function, so
/// they pass only where the grammar gives them another meaning (see [`not_a_call`]).
const NOT_CALLS: &[&str] = &[
    "all",
    "and",
    "any",
    "array",
    "as",
    "between",
    "by",
    "case",
    "cast",
    "coalesce",
    "distinct",
    "else",
    "except",
    "exists",
    "from",
    "greatest",
    "group",
    "having",
    "in",
    "intersect",
    "lateral",
    "least",
    "limit",
    "not",
    "nullif",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "returning",
    "row",
    "select",
    "some",
    "then",
    "union",
    "using",
    "values",
    "when",
    "where",
    "window",
    "with",
];

/// Built-in functions that change no session state, callable unqualified or as
/// `pg_catalog.name` (lower case). Unqualified names are taken to be PostgreSQL's own, which
/// they are unless a search_path names `pg_catalog` after a schema holding a function of the
/// same name (docs/architecture/session-state.md).
const PURE_CALLS: &[&str] = &[
    "abs",
    "age",
    "array_agg",
    "array_append",
    "array_length",
    "array_position",
    "array_positions",
    "array_remove",
    "array_to_string",
    "avg",
    "bool_and",
    "bool_or",
    "btrim",
    "cardinality",
    "ceil",
    "ceiling",
    "char_length",
    "character_length",
    "clock_timestamp",
    "concat",
    "concat_ws",
    "count",
    "current_date",
    "current_setting",
    "current_time",
    "current_timestamp",
    "date_part",
    "date_trunc",
    "decode",
    "dense_rank",
    "encode",
    "every",
    "extract",
    "first_value",
    "floor",
    "format",
    "gen_random_uuid",
    "generate_series",
    "initcap",
    "json_agg",
    "json_build_array",
    "json_build_object",
    "jsonb_agg",
    "jsonb_build_array",
    "jsonb_build_object",
    "jsonb_set",
    "lag",
    "last_value",
    "lead",
    "left",
    "length",
    "localtime",
    "localtimestamp",
    "lower",
    "lpad",
    "ltrim",
    "make_date",
    "make_interval",
    "max",
    "md5",
    "min",
    "mod",
    // A sequence's next value: its currval and lastval are the server session's, which
    // pooling cannot hide (docs/architecture/pooled-clients.md).
    "nextval",
    "now",
    "nth_value",
    "ntile",
    "octet_length",
    "overlay",
    "percent_rank",
    "pg_advisory_xact_lock",
    "pg_advisory_xact_lock_shared",
    "pg_backend_pid",
    "pg_current_xact_id",
    "pg_notify",
    "pg_try_advisory_xact_lock",
    "pg_try_advisory_xact_lock_shared",
    "position",
    "power",
    "random",
    "rank",
    "regexp_match",
    "regexp_matches",
    "regexp_replace",
    "repeat",
    "replace",
    "reverse",
    "right",
    "round",
    "row_number",
    "row_to_json",
    "rpad",
    "rtrim",
    "split_part",
    "sqrt",
    "starts_with",
    "statement_timestamp",
    "string_agg",
    "strpos",
    "substr",
    "substring",
    "sum",
    "timezone",
    "to_char",
    "to_date",
    "to_json",
    "to_jsonb",
    "to_number",
    "to_timestamp",
    "transaction_timestamp",
    "trim",
    "trunc",
    "txid_current",
    "unnest",
    "upper",
    "version",
];

fn is(w: &[u8], kw: &str) -> bool {
    w.eq_ignore_ascii_case(kw.as_bytes())
}

fn listed(list: &[&str], w: &[u8]) -> bool {
    w.len() <= 32 && list.iter().any(|k| is(w, k))
}

/// `w` starts with `kw`, in any case.
fn prefix(w: &[u8], kw: &str) -> bool {
    w.get(..kw.len()).is_some_and(|p| is(p, kw))
}

/// What a call of the function `name` (unqualified or in `pg_catalog`) does; `set_config` is
/// decided by its first argument (see [`SetConfig`]).
fn call(name: &[u8]) -> Effect {
    match name.len() {
        16.. if prefix(name, "pg_advisory_lock") || prefix(name, "pg_try_advisory_lock") => {
            Effect::Pins("session advisory lock")
        }
        // Releases a lock that the capture looks for.
        18.. if prefix(name, "pg_advisory_unlock") => Effect::Dirty,
        _ if listed(PURE_CALLS, name) => Effect::None,
        _ => Effect::Taint,
    }
}

/// The last tokens of a statement, as much of them as the rules look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Last {
    Nothing,
    /// A bare word, as [`word_key`] (0 for a long one).
    Word(u64),
    Quoted,
    Dot,
    Cast,
    Close,
    Other,
}

/// A short word as a number (lower case, up to 8 bytes; 0 for longer ones), to remember the
/// last words without borrowing the text.
fn word_key(w: &[u8]) -> u64 {
    if w.len() > 8 {
        return 0;
    }
    let mut b = [0u8; 8];
    for (i, c) in w.iter().enumerate() {
        b[i] = c.to_ascii_lowercase();
    }
    u64::from_le_bytes(b)
}

/// [`word_key`] of a keyword, at compile time.
const fn kw(w: &str) -> u64 {
    let s = w.as_bytes();
    let mut b = [0u8; 8];
    let mut i = 0;
    while i < s.len() {
        b[i] = s[i];
        i += 1;
    }
    u64::from_le_bytes(b)
}

/// Where a `set_config(` call is: its first argument decides whether the capture can read the
/// setting back (a plain string literal naming it) or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetConfig {
    No,
    /// Right after `set_config(`.
    First,
    /// After a plain literal first argument: a `,` must follow.
    Comma,
}

/// Where a table's name, whose `(` opens a column list, may come: after INTO or COPY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    No,
    /// Right after INTO or COPY.
    Next,
    /// After (part of) its name.
    Named,
}

/// One statement's walk.
struct Walk {
    start: Start,
    effect: Effect,
    /// The last token but one, and the last.
    before: Last,
    last: Last,
    /// The name being read is qualified by a schema other than `pg_catalog`.
    qualified: bool,
    table: Table,
    set_config: SetConfig,
}

impl Walk {
    fn new(first: Token<'_>) -> Walk {
        let start = match first {
            Token::Word(word) => start_of_word(word),
            // `(SELECT ...) UNION ...`
            Token::Open => CLEAN_TEMP,
            _ => Start::Other,
        };
        Walk {
            start,
            effect: match start {
                Start::Matters(e) => e,
                Start::Other | Start::Catalog { .. } => Effect::Taint,
                _ => Effect::None,
            },
            before: Last::Nothing,
            last: Last::Nothing,
            qualified: false,
            table: Table::No,
            set_config: SetConfig::No,
        }
    }

    /// Takes the next token; `word` is the last bare word seen (the name before a `(`).
    fn step(&mut self, tok: Token<'_>, word: &[u8], hooks: &HookMap, trusted: bool) {
        let mut e = Effect::None;
        // Any name but the statement's first word may name a relation, type or function whose
        // use runs user code (the first is a keyword: a statement pgcorral does not know
        // taints anyway).
        if self.last != Last::Nothing
            && matches!(
                tok,
                Token::Word(_) | Token::Quoted(_) | Token::UQuoted { .. }
            )
        {
            if !trusted {
                e = Effect::Unsure;
            } else if named_loud(hooks, &tok) {
                e = Effect::Taint;
            }
        }
        match (self.set_config, tok) {
            (SetConfig::No, _) => {}
            // A NUL ends the text PostgreSQL reads: a literal holding one is not the name.
            (SetConfig::First, Token::Str(v))
                if !v.iter().any(|b| matches!(b, b'\\' | b'\'' | 0)) =>
            {
                self.set_config = SetConfig::Comma;
            }
            (SetConfig::Comma, Token::Comma) => {
                self.set_config = SetConfig::No;
                e = Effect::Dirty;
            }
            _ => {
                // A name the capture cannot read back: PostgreSQL's own set_config (a user's
                // function of that name is in the map) runs no other code.
                self.set_config = SetConfig::No;
                e = e.max(Effect::Unsure);
            }
        }
        let this = match tok {
            Token::Word(w) => {
                if is(w, "pg_settings") {
                    // Its UPDATE rule calls set_config, with a name the capture may not know.
                    e = e.max(Effect::Unsure);
                }
                e = e.max(inside(self.start, self.last, w));
                if self.last != Last::Dot {
                    self.qualified = false;
                }
                let k = word_key(w);
                self.table = match self.table {
                    Table::Next => Table::Named,
                    Table::Named if self.last == Last::Dot => Table::Named,
                    _ if k == kw("into") || k == kw("copy") => Table::Next,
                    _ => Table::No,
                };
                Last::Word(k)
            }
            Token::Quoted(q) | Token::UQuoted { body: q, .. } => {
                // A `U&` name is looked at decoded too; one PostgreSQL rejects taints.
                let decoded = match tok {
                    Token::UQuoted { .. } => Some(catalog_name(&tok)),
                    _ => None,
                };
                if decoded == Some(None) {
                    e = e.max(Effect::Taint);
                }
                let decoded = decoded.flatten();
                for q in std::iter::once(q).chain(decoded.as_deref()) {
                    if is(q, "pg_settings") {
                        e = e.max(Effect::Unsure);
                    }
                    if matches!(self.start, Start::Matters(Effect::Dirty))
                        && (q.contains(&b'.') || q.contains(&b'\\'))
                    {
                        // A custom setting's name the capture may not know how to read back.
                        e = e.max(Effect::Unsure);
                    }
                }
                if self.last != Last::Dot {
                    self.qualified = false;
                }
                self.table = match self.table {
                    Table::Next => Table::Named,
                    Table::Named if self.last == Last::Dot => Table::Named,
                    _ => Table::No,
                };
                Last::Quoted
            }
            Token::Dot => {
                // A schema before a name: only pg_catalog's functions are known.
                self.qualified = !(matches!(self.last, Last::Word(_)) && is(word, "pg_catalog"));
                Last::Dot
            }
            Token::Open => {
                e = e.max(self.open(word));
                self.table = Table::No;
                Last::Other
            }
            Token::Cast => Last::Cast,
            Token::Close => Last::Close,
            Token::Str(_)
            | Token::UStr { .. }
            | Token::Bits(_)
            | Token::Comma
            | Token::Other
            | Token::Semicolon => Last::Other,
        };
        if !matches!(
            tok,
            Token::Word(_) | Token::Quoted(_) | Token::UQuoted { .. } | Token::Dot | Token::Open
        ) {
            self.table = Table::No;
        }
        self.before = self.last;
        self.last = this;
        if e != Effect::None {
            self.effect = self.effect.max(e);
        }
    }

    /// A `(` after the last token: a call, or one of the grammar's other parentheses.
    fn open(&mut self, word: &[u8]) -> Effect {
        match self.last {
            Last::Word(_) if self.table == Table::Named => Effect::None,
            Last::Quoted if self.table == Table::Named => Effect::None,
            Last::Word(_) if self.not_a_call(word) => Effect::None,
            Last::Word(_) if self.qualified => Effect::Taint,
            Last::Word(_) if is(word, "set_config") => {
                self.set_config = SetConfig::First;
                Effect::None
            }
            Last::Word(_) => call(word),
            // A quoted name called: no spelling of a function's name is trusted.
            Last::Quoted => Effect::Taint,
            _ => Effect::None,
        }
    }

    /// The word before a `(` does not name a function there.
    fn not_a_call(&self, word: &[u8]) -> bool {
        if self.qualified {
            return false;
        }
        match self.before {
            // The statement's first word: `VALUES (`, `EXPLAIN (ANALYZE)`, `VACUUM (FULL)`.
            Last::Nothing => true,
            // A type's modifiers: `::numeric(10, 2)`, `CAST(x AS varchar(10))`; a CTE's body
            // after `AS [NOT] MATERIALIZED`; an alias's column list.
            Last::Cast => true,
            Last::Word(k) if k == kw("as") => true,
            // `agg(...) FILTER (WHERE ...)`, `f(...) OVER (...)`.
            Last::Close => is(word, "filter") || is(word, "over") || listed(NOT_CALLS, word),
            // `ON CONFLICT (a, b)`.
            Last::Word(k) if k == kw("on") && is(word, "conflict") => true,
            _ => listed(NOT_CALLS, word),
        }
    }

    /// The statement's effect once its text ends.
    fn end(self) -> Effect {
        match self.set_config {
            // The text ends inside set_config's arguments.
            SetConfig::No => self.effect,
            // PostgreSQL's own set_config, whose name is not known (a user's function of that
            // name is in the map): as an unreadable name, so that more text never reads weaker.
            _ => self.effect.max(Effect::Unsure),
        }
    }
}

/// Whether an identifier token names something a trusted `hooks` says may reach user code, by the
/// name PostgreSQL's catalog holds for it ([`catalog_name`]); a `U&` name PostgreSQL would
/// reject (a syntax error: nothing runs) names nothing.
fn named_loud(hooks: &HookMap, tok: &Token<'_>) -> bool {
    catalog_name(tok).is_some_and(|name| hooks.names(&name))
}

/// [`classify`] by the lexer, statement by statement.
fn lex_classify(sql: &[u8], hooks: &HookMap) -> Effect {
    let trusted = hooks.trusted();
    let mut effect = Effect::None;
    let mut lex = Lexer::new(sql, false);
    let mut walk: Option<Walk> = None;
    // The last bare word: the name before a `(`, the schema before a `.`.
    let mut word: &[u8] = b"";
    while let Some(tok) = lex.next() {
        if tok == Token::Semicolon {
            if let Some(w) = walk.take() {
                effect = effect.max(w.end());
            }
            continue;
        }
        let w = walk.get_or_insert_with(|| Walk::new(tok));
        w.step(tok, word, hooks, trusted);
        if let Token::Word(t) = tok {
            word = t;
        }
    }
    if let Some(w) = walk {
        effect = effect.max(w.end());
    }
    if lex.ambiguous {
        // Read the other way (standard_conforming_strings off), the text may hold more.
        effect = effect.max(Effect::Taint);
    }
    effect
}

/// What word `w` does inside a statement, after `last`, where the first word said `start`.
fn inside(start: Start, last: Last, w: &[u8]) -> Effect {
    match w.len() {
        4 if start == Start::Declare && is(w, "hold") && last == Last::Word(kw("with")) => {
            Effect::Pins("WITH HOLD cursor")
        }
        4 | 9
            if matches!(
                start,
                Start::Clean { temp: true } | Start::Catalog { temp: true }
            ) && (is(w, "temp") || is(w, "temporary")) =>
        {
            Effect::Pins("temporary table")
        }
        _ => Effect::None,
    }
}

/// Custom (dotted) setting names that `sql` sets or resets: `SET [SESSION|LOCAL] a.b ...`,
/// `RESET a.b`, `set_config('a.b', ...)`. PostgreSQL does not list custom settings in
/// pg_settings, so pgcorral must know their names to read them back. Lower-cased.
pub fn custom_names(sql: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut lex = Lexer::new(sql, true);
    // What the last tokens say the next one is: 0 = nothing, 1 = a SET/RESET name (after an
    // optional SESSION/LOCAL), 2 = set_config's `(`, 3 = its first argument.
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
            Token::Open if expect == 2 => expect = 3,
            Token::Str(v) => {
                if expect == 3 && v.contains(&b'.') {
                    names.push(String::from_utf8_lossy(v).to_ascii_lowercase());
                }
                expect = 0;
                at_start = false;
            }
            _ => {
                expect = 0;
                at_start = false;
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Effect {
        classify(s.as_bytes(), &HookMap::quiet())
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

    /// Every spelling of a call pgcorral does not know, and every statement it cannot see
    /// through, taints: the session is read back and the server reset before anyone else.
    #[test]
    fn what_pgcorral_cannot_see_through_taints() {
        for sql in [
            "select \"set_config\"('role', 'r', false)",
            "select pg_catalog.\"set_config\"('role', 'r', false)",
            "select U&\"set\\005fconfig\"('role', 'r', false)",
            "EXECUTE p",
            "DO $$BEGIN PERFORM set_config('role', 'r', false); END$$",
            "do 'begin set role r; end'",
            "CALL p()",
            "select leak()",
            "select public.now()",
            "select \"now\"()",
            "select myschema.count(*) from t",
            // A NUL inside the name (found by fuzzing): the text PostgreSQL reads ends there.
            "select * from t where f(a) > 1",
            "insert into t select f(1)",
            "insert into t (a) select f(a) from u",
            "select 1; select g()",
            "select x filter (where true)",
            "select over(1)",
            "select conflict(1)",
            "LOAD 'x'",
            "\"select\" 1",
            "select a from t join (select g()) s on true",
            "select 'a\\''; set role r1; select 'b'",
            "select 'a\\'', f() --'",
        ] {
            assert_eq!(c(sql), Effect::Taint, "{sql}");
        }
        // What only PostgreSQL's own set_config or pg_settings' rule can do: the session is
        // read back and reset, but no catalog changes.
        for sql in [
            "UPDATE pg_settings SET setting = 'x' WHERE name = 'search_path'",
            "update pg_catalog.\"pg_settings\" set setting = 'x'",
            "select set_config($1, $2, false)",
            "select set_config('app.' || 'x', '1', false)",
            "select set_config(E'app\\x2ex', '1', false)",
            "select set_config('app\0x', '1', false)",
            "SET \"my.x\" = 1",
            "select set_config(",
        ] {
            assert_eq!(c(sql), Effect::Unsure, "{sql}");
        }
        // Found by fuzzing: a literal name holding a NUL reads no weaker than the text cut there.
        let full = "select pg_cog\x1eset_config('\u{9a}\0\0?\0pp.u' , '1', false)";
        let cut = &full[..full.find('\0').expect("a NUL")];
        assert!(c(full) >= c(cut), "{full:?}");
        // Pins stay the strongest.
        assert_eq!(
            c("select leak(); select pg_advisory_lock(1)"),
            Effect::Pins("session advisory lock")
        );
    }

    /// A name through which the database runs user code taints, however it is spelled; with the
    /// catalog unknown, any name but a statement's first word is unsure.
    #[test]
    fn names_that_reach_user_code_taint() {
        let long = "a".repeat(63);
        let map = HookMap::naming(&["trig", "lower", "evil", "Mixed", &long], &["==="]);
        let m = |sql: &str| classify(sql.as_bytes(), &map);
        for sql in [
            "insert into trig values (1)",
            "INSERT INTO public.TRIG VALUES (1)",
            "update \"trig\" set a = 1",
            "select lower(1)",
            "select t.lower from t",
            "select 1::evil",
            "select cast(1 as public.evil)",
            "select * from \"Mixed\"",
            "select 1 === 1",
            "select * from U&\"\\0074rig\"",
            &format!("select * from {long}bbbb"),
            &format!("select * from \"{long}é\""),
        ] {
            assert_eq!(m(sql), Effect::Taint, "{sql}");
        }
        for sql in [
            "insert into plain values (1)",
            "select * from mixed",
            "select upper(b) from t where a = $1",
            "select 'trig', $$lower$$ -- trig\n",
            "BEGIN",
        ] {
            assert_eq!(m(sql), Effect::None, "{sql}");
        }
        let unknown = HookMap::unknown(0);
        let u = |sql: &str| classify(sql.as_bytes(), &unknown);
        assert_eq!(u("select abalance from pgbench_accounts"), Effect::Unsure);
        assert_eq!(u("SET search_path = a"), Effect::Dirty.max(Effect::Unsure));
        for sql in ["BEGIN", "COMMIT", "select 1", "rollback; select 2"] {
            assert_eq!(u(sql), Effect::None, "{sql}");
        }
        assert_eq!(u("select f()"), Effect::Taint);
    }

    /// DDL may add user code to the catalog: it taints, whatever it names.
    #[test]
    fn ddl_taints() {
        for sql in [
            "create table t (a int)",
            "CREATE TRIGGER t BEFORE INSERT ON x EXECUTE FUNCTION f()",
            "alter table t alter a set default 1",
            "analyze",
            "vacuum (verbose) t",
        ] {
            assert_eq!(c(sql), Effect::Taint, "{sql}");
        }
        assert_eq!(
            c("create temp table t (a int)"),
            Effect::Pins("temporary table")
        );
    }

    /// What pgbench and applications send most: no call, or calls of built-ins only.
    #[test]
    fn plain_statements_and_built_ins_are_clean() {
        for sql in [
            "BEGIN;",
            "UPDATE pgbench_accounts SET abalance = abalance + 12 WHERE aid = 34;",
            "SELECT abalance FROM pgbench_accounts WHERE aid = 34;",
            "UPDATE pgbench_tellers SET tbalance = tbalance + 12 WHERE tid = 5;",
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (5, 1, 34, 12, CURRENT_TIMESTAMP);",
            "END;",
            "insert into public.t (a, \"B\") values ($1, $2) on conflict (a) do update set b = excluded.b",
            "select count(*), max(a), now(), pg_catalog.lower(b) from t where a in (1, 2) group by b",
            "select a::numeric(10, 2), cast(b as varchar(10)) from t",
            "with x as (select 1) select * from x",
            "with x as materialized (select 1) select * from x",
            "select row_number() over (partition by a order by b) from t",
            "select count(*) filter (where a > 1) from t",
            "select exists (select 1) and a = any (array[1, 2])",
            "(select 1) union (select 2)",
            "explain (analyze, costs off) select 1",
            "copy t (a, b) from stdin",
            "select set_config('app.tenant', $1, true)",
            "select 'f(x)', $$ g() $$, \"col\" from t",
        ] {
            let want = if sql.contains("set_config") {
                Effect::Dirty
            } else {
                Effect::None
            };
            assert_eq!(c(sql), want, "{sql}");
        }
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
            // A comment that ends at \r, a dollar quote with a non-ASCII tag, U& names.
            "--\r",
            "$é$ ( $é$",
            "U&\"a\" UESCAPE '!'",
            "1.5e10",
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
            let full = lex_classify(text.as_bytes(), &HookMap::quiet());
            let worth = worth_lexing(text.as_bytes());
            assert!(
                worth || full == Effect::None,
                "{text:?} skipped, but the lexer says {full:?}"
            );
            skipped += usize::from(!worth);
        }
        // Not a test that passes by sending everything to the lexer (most generated texts
        // hold a parenthesis, a quote or an unknown first word, which the lexer must see).
        assert!(skipped > corpus.len() / 40, "{skipped} skipped");
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
            ("select", "f(1)"),
            ("select", "'a\\' ; set role r'"),
            ("update", "pg_settings set setting = 1"),
            ("update", "PG_CATALOG.PG_SETTINGS set setting = 1"),
        ];
        let misses = [
            ("select", "pg_advisor_lock"),
            ("select", "Set_Confi"),
            ("select", "xset_confi"),
            ("select", "pg_setting"),
            ("select", "tem"),
            ("with", "TEM"),
            ("update", "t set temp = 1"),
            ("delete", "from temp"),
            ("select", "1;"),
            ("select", ";"),
            ("select", "tem + 1"),
            ("select", "1 ;  \r\n\t"),
            ("select", "é日本\u{a0}"),
        ];
        let filler = " a = 1 and".repeat(5);
        let after = " or b = 2".repeat(3);
        let blank = " \t\r\n".repeat(6);
        // Right after the first word only if the word starts with punctuation.
        let joins = |off: usize, word: &str| {
            off == 0 && (word.as_bytes()[0].is_ascii_alphanumeric() || word.as_bytes()[0] >= 0x80)
        };
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
                    let full = lex_classify(text.as_bytes(), &HookMap::quiet());
                    assert_ne!(full, Effect::None, "{text:?}");
                    assert!(worth_lexing(text.as_bytes()), "{text:?} skipped");
                    assert_eq!(
                        classify(text.as_bytes(), &HookMap::quiet()),
                        full,
                        "{text:?}"
                    );
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
                    matches!(
                        says,
                        Start::Matters(_) | Start::Declare | Start::Catalog { .. }
                    ),
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
