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

/// A quick look that rules out most queries before the lexer runs (it runs on every query of
/// every pooled client): false only where [`lex_classify`] would find nothing, i.e. one
/// statement whose first word starts no statement of interest, with no `_advisory` or
/// `set_config` in it, and no `temp` in a CREATE, SELECT or WITH. Anything unusual (a comment
/// or parenthesis first, a second statement) goes to the lexer.
fn worth_lexing(sql: &[u8]) -> bool {
    let word_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80;
    let mut i = 0;
    while i < sql.len() && sql[i].is_ascii_whitespace() {
        i += 1;
    }
    let rest = &sql[i..];
    let mut len = 0;
    while len < rest.len() && word_byte(rest[len]) {
        len += 1;
    }
    // Not a plain keyword first (E'' strings are one letter).
    if len < 2 || !rest[0].is_ascii_alphabetic() {
        return true;
    }
    let mut lower = [0u8; 10];
    let temp_matters = match rest.get(..len).filter(|w| w.len() <= lower.len()) {
        None => false,
        Some(w) => {
            for (l, b) in lower.iter_mut().zip(w) {
                *l = b.to_ascii_lowercase();
            }
            match &lower[..len] {
                // What statement_start and DECLARE's WITH HOLD look at.
                b"listen" | b"prepare" | b"set" | b"reset" | b"discard" | b"unlisten"
                | b"deallocate" | b"close" | b"drop" | b"declare" => return true,
                b"create" | b"select" | b"with" => true,
                _ => false,
            }
        }
    };
    // The rest: a `;` followed by anything but white space starts another statement; `_`
    // and `t` are where the words looked at inside a statement can start (SIMD searches).
    let tail = &rest[len..];
    if let Some(p) = memchr::memchr(b';', tail) {
        if tail[p + 1..].iter().any(|b| !b.is_ascii_whitespace()) {
            return true;
        }
    }
    // `kw` (lower case) at `i`, in either case.
    let at = |i: usize, kw: &[u8]| {
        tail.get(i..i + kw.len())
            .is_some_and(|w| w.iter().zip(kw).all(|(b, k)| b.to_ascii_lowercase() == *k))
    };
    if memchr::memchr_iter(b'_', tail)
        .any(|i| at(i + 1, b"advisory") || (i >= 3 && at(i - 3, b"set") && at(i + 1, b"config")))
    {
        return true;
    }
    temp_matters && memchr::memchr2_iter(b't', b'T', tail).any(|i| at(i, b"temp"))
}

/// [`classify`] by the lexer, statement by statement.
fn lex_classify(sql: &[u8]) -> Effect {
    let mut effect = Effect::None;
    let mut lex = Lexer {
        s: sql,
        i: 0,
        dotted: false,
    };
    let mut first: Option<&[u8]> = None;
    let mut prev: Option<&[u8]> = None;
    while let Some(tok) = lex.next() {
        let word = match tok {
            Token::Semicolon => {
                first = None;
                prev = None;
                continue;
            }
            Token::Word(w) => w,
            Token::Str(_) => continue,
        };
        let e = match first {
            None => {
                first = Some(word);
                statement_start(word)
            }
            Some(f) => inside(f, prev, word),
        };
        effect = effect.max(e);
        prev = Some(word);
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

fn statement_start(w: &[u8]) -> Effect {
    if is(w, "listen") {
        Effect::Pins("LISTEN")
    } else if is(w, "prepare") {
        Effect::Pins("SQL PREPARE")
    } else if [
        "set",
        "reset",
        "discard",
        "unlisten",
        "deallocate",
        "close",
        "drop",
    ]
    .iter()
    .any(|k| is(w, k))
    {
        Effect::Dirty
    } else {
        Effect::None
    }
}

fn inside(first: &[u8], prev: Option<&[u8]>, w: &[u8]) -> Effect {
    let lower = |k: &str| is(w, k);
    if lower("set_config") || w.len() >= 18 && w[..18].eq_ignore_ascii_case(b"pg_advisory_unlock") {
        return Effect::Dirty;
    }
    if (w.len() >= 16 && w[..16].eq_ignore_ascii_case(b"pg_advisory_lock"))
        || (w.len() >= 20 && w[..20].eq_ignore_ascii_case(b"pg_try_advisory_lock"))
    {
        return Effect::Pins("session advisory lock");
    }
    if is(first, "declare") && lower("hold") && prev.is_some_and(|p| is(p, "with")) {
        return Effect::Pins("WITH HOLD cursor");
    }
    if (is(first, "create") || is(first, "select") || is(first, "with"))
        && (lower("temp") || lower("temporary"))
    {
        return Effect::Pins("temporary table");
    }
    Effect::None
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
                c if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => {
                    let start = self.i;
                    while self.i < s.len()
                        && (s[self.i].is_ascii_alphanumeric()
                            || s[self.i] == b'_'
                            || s[self.i] == b'$'
                            || s[self.i] >= 0x80
                            || (self.dotted
                                && s[self.i] == b'.'
                                && s.get(self.i + 1)
                                    .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')))
                    {
                        self.i += 1;
                    }
                    let w = &s[start..self.i];
                    if (w == b"E" || w == b"e") && s.get(self.i) == Some(&b'\'') {
                        self.skip_string(true);
                        continue;
                    }
                    return Some(Token::Word(w));
                }
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
