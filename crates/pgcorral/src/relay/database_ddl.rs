//! Statements that PostgreSQL refuses while another session is connected to a database
//! (`DROP DATABASE x`, `CREATE DATABASE y TEMPLATE x`, `ALTER DATABASE x RENAME TO z` and
//! `ALTER DATABASE x SET TABLESPACE t`): recognised in a Query or Parse so that pgcorral's own
//! idle server connections to `x` are closed before the statement reaches the server. The
//! relay asks [`maybe`] of every Query and Parse (the first letter of the first word, usually);
//! only a text starting with DROP, CREATE or ALTER is read further, by [`target`].

use pgwire::frontend;
use pgwire::header::HEADER_LEN;
use pgwire::Header;

/// Whether the Query or Parse at the start of `msg` (header included), wholly buffered, starts
/// with the word DROP, CREATE or ALTER. One byte compared for most texts.
#[inline]
pub fn maybe(h: Header, msg: &[u8]) -> bool {
    let Some(body) = msg.get(HEADER_LEN..h.total_len()) else {
        return false;
    };
    let text = match (h.tag, body) {
        (frontend::QUERY, _) => body,
        (frontend::PARSE, [0, rest @ ..]) => rest,
        (frontend::PARSE, _) => match memchr::memchr(0, body) {
            Some(i) => &body[i + 1..],
            None => return false,
        },
        _ => return false,
    };
    match text.first() {
        Some(b'a' | b'A' | b'c' | b'C' | b'd' | b'D') => first_word_is_ddl(text),
        Some(c) if c.is_ascii_whitespace() => first_word_is_ddl(text),
        _ => false,
    }
}

#[cold]
fn first_word_is_ddl(text: &[u8]) -> bool {
    let mut lex = Lexer { s: text, i: 0 };
    matches!(lex.next(), Some(Tok::Word(w)) if ["drop", "create", "alter"].contains(&w.as_str()))
}

/// The database whose other sessions would make the statement in `sql` fail: `x` of `DROP
/// DATABASE [IF EXISTS] x`, `CREATE DATABASE y ... TEMPLATE [=] x`, `ALTER DATABASE x RENAME TO
/// z` and `ALTER DATABASE x SET TABLESPACE t`, as PostgreSQL names it (unquoted names folded to
/// lower case, quoted ones kept, both cut to 63 bytes). `None` for anything else.
pub fn target(sql: &[u8]) -> Option<String> {
    let mut lex = Lexer { s: sql, i: 0 };
    let verb = lex.word()?;
    if lex.word()? != "database" {
        return None;
    }
    match verb.as_str() {
        "drop" => {
            let name = lex.next()?;
            match name {
                Tok::Word(w) if w == "if" => {
                    (lex.word()? == "exists").then_some(())?;
                    lex.name()
                }
                t => name_of(t),
            }
        }
        "alter" => {
            let name = lex.name()?;
            match lex.word()?.as_str() {
                "rename" => Some(name),
                "set" if lex.word()? == "tablespace" => Some(name),
                _ => None,
            }
        }
        "create" => {
            lex.name()?;
            while let Some(t) = lex.next() {
                if t == Tok::Word("template".into()) {
                    let mut t = lex.next()?;
                    if t == Tok::Punct(b'=') {
                        t = lex.next()?;
                    }
                    return match t {
                        Tok::Word(w) if w == "default" => Some("template1".into()),
                        t => name_of(t),
                    };
                }
                if t == Tok::Punct(b';') {
                    return None;
                }
            }
            None
        }
        _ => None,
    }
}

fn name_of(t: Tok) -> Option<String> {
    match t {
        Tok::Word(w) | Tok::Quoted(w) => Some(clip(w)),
        Tok::Punct(_) | Tok::Other => None,
    }
}

/// Cuts a name to PostgreSQL's 63 bytes (NAMEDATALEN - 1), on a character boundary.
fn clip(mut s: String) -> String {
    let mut n = s.len().min(63);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    s.truncate(n);
    s
}

#[derive(Debug, PartialEq, Eq)]
enum Tok {
    /// An unquoted word, folded to lower case.
    Word(String),
    /// A double-quoted identifier, as written.
    Quoted(String),
    Punct(u8),
    /// A string constant, a number or anything else: never a database name here.
    Other,
}

/// Just enough of PostgreSQL's lexer for these statements: words, quoted identifiers, string
/// constants, punctuation, whitespace and comments.
struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
}

impl Lexer<'_> {
    fn word(&mut self) -> Option<String> {
        match self.next()? {
            Tok::Word(w) => Some(w),
            _ => None,
        }
    }

    fn name(&mut self) -> Option<String> {
        let t = self.next()?;
        name_of(t)
    }

    fn skip_blank(&mut self) {
        loop {
            let rest = &self.s[self.i..];
            match rest {
                [c, ..] if c.is_ascii_whitespace() => self.i += 1,
                [b'-', b'-', ..] => {
                    self.i += memchr::memchr(b'\n', rest).unwrap_or(rest.len());
                }
                [b'/', b'*', ..] => {
                    // Block comments nest.
                    let mut depth = 0usize;
                    let mut j = 0;
                    while j < rest.len() {
                        match &rest[j..] {
                            [b'/', b'*', ..] => (depth, j) = (depth + 1, j + 2),
                            [b'*', b'/', ..] => {
                                (depth, j) = (depth - 1, j + 2);
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => j += 1,
                        }
                    }
                    self.i += j;
                }
                _ => return,
            }
        }
    }

    fn next(&mut self) -> Option<Tok> {
        self.skip_blank();
        let rest = &self.s[self.i..];
        let c = *rest.first()?;
        if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            let n = rest
                .iter()
                .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80))
                .unwrap_or(rest.len());
            self.i += n;
            let w = String::from_utf8_lossy(&rest[..n]).to_ascii_lowercase();
            return Some(Tok::Word(w));
        }
        if c == b'"' || c == b'\'' {
            let mut j = 1;
            let mut text = Vec::new();
            loop {
                match rest.get(j..)? {
                    [q, q2, ..] if *q == c && *q2 == c => {
                        text.push(c);
                        j += 2;
                    }
                    [q, ..] if *q == c => break,
                    [b, ..] => {
                        text.push(*b);
                        j += 1;
                    }
                    [] => return None,
                }
            }
            self.i += j + 1;
            return Some(match c {
                b'"' => Tok::Quoted(String::from_utf8_lossy(&text).into_owned()),
                _ => Tok::Other,
            });
        }
        self.i += 1;
        if c.is_ascii_punctuation() {
            Some(Tok::Punct(c))
        } else {
            Some(Tok::Other)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(sql: &str) -> Vec<u8> {
        let mut m = vec![frontend::QUERY];
        m.extend_from_slice(&((sql.len() + 5) as u32).to_be_bytes());
        m.extend_from_slice(sql.as_bytes());
        m.push(0);
        m
    }

    fn parse(name: &str, sql: &str) -> Vec<u8> {
        let mut m = vec![frontend::PARSE];
        let len = 4 + name.len() + 1 + sql.len() + 1 + 2;
        m.extend_from_slice(&(len as u32).to_be_bytes());
        m.extend_from_slice(name.as_bytes());
        m.push(0);
        m.extend_from_slice(sql.as_bytes());
        m.extend_from_slice(&[0, 0, 0]);
        m
    }

    fn maybe_msg(m: &[u8]) -> bool {
        let h = Header::parse(m, 1 << 20).unwrap().unwrap();
        maybe(h, m)
    }

    #[test]
    fn only_drop_create_and_alter_are_looked_at() {
        for sql in [
            "DROP DATABASE x",
            "  create database y",
            "Alter database x rename to z",
        ] {
            assert!(maybe_msg(&query(sql)), "{sql}");
            assert!(maybe_msg(&parse("", sql)), "{sql}");
            assert!(maybe_msg(&parse("s1", sql)), "{sql}");
        }
        for sql in [
            "SELECT 1",
            "DELETE FROM t",
            "COMMIT",
            "alternative",
            "",
            "dropped",
        ] {
            assert!(!maybe_msg(&query(sql)), "{sql}");
        }
        // Not wholly buffered: not looked at.
        let m = query("DROP DATABASE x");
        let h = Header::parse(&m, 1 << 20).unwrap().unwrap();
        assert!(!maybe(h, &m[..m.len() - 1]));
    }

    #[test]
    fn the_database_in_use_is_named() {
        let cases = [
            ("DROP DATABASE x", Some("x")),
            ("drop database if exists \"My DB\";", Some("My DB")),
            ("DROP DATABASE Mixed WITH (FORCE)", Some("mixed")),
            ("/* c */ DROP -- c\n DATABASE x", Some("x")),
            ("CREATE DATABASE y TEMPLATE x", Some("x")),
            (
                "CREATE DATABASE y WITH OWNER = a TEMPLATE = \"x\"\"q\"",
                Some("x\"q"),
            ),
            ("CREATE DATABASE y LOCALE 'template' TEMPLATE=x", Some("x")),
            ("CREATE DATABASE y TEMPLATE DEFAULT", Some("template1")),
            ("CREATE DATABASE y", None),
            ("CREATE DATABASE y; SELECT template", None),
            ("ALTER DATABASE x RENAME TO z", Some("x")),
            ("ALTER DATABASE x SET TABLESPACE t", Some("x")),
            ("ALTER DATABASE x SET work_mem = 1", None),
            ("DROP TABLE x", None),
            ("CREATE TABLE database (template int)", None),
            ("DROP DATABASE", None),
            ("DROP DATABASE \"unterminated", None),
        ];
        for (sql, want) in cases {
            assert_eq!(target(sql.as_bytes()).as_deref(), want, "{sql}");
        }
        let long = "d".repeat(70);
        assert_eq!(
            target(format!("DROP DATABASE {long}").as_bytes())
                .unwrap()
                .len(),
            63
        );
    }
}
