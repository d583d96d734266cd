//! Recognises the SQL-level statement commands pgcorral handles itself when a simple Query holds
//! exactly one of them: `PREPARE name [(types)] AS ...`, `EXECUTE name [(args)]`,
//! `DEALLOCATE [PREPARE] name | ALL` and `DISCARD ALL`. Anything else (several statements, a
//! comment first, EXPLAIN EXECUTE, ...) is left to the server.

/// One recognised command.
#[derive(Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// `rest`: what follows the name, e.g. `(int) AS SELECT $1`.
    Prepare {
        name: String,
        rest: &'a str,
    },
    /// `rest`: what follows the name, e.g. `(1, 'x')`, or empty.
    Execute {
        name: String,
        rest: &'a str,
    },
    /// `None`: DEALLOCATE ALL.
    Deallocate {
        name: Option<String>,
    },
    DiscardAll,
}

/// Parses `sql` (one statement, an optional `;` at the end).
pub fn parse(sql: &str) -> Option<Command<'_>> {
    let s = sql.trim();
    let s = s.strip_suffix(';').unwrap_or(s).trim_end();
    if s.contains(';') || s.contains("--") || s.contains("/*") {
        return None;
    }
    let (kw, rest) = word(s)?;
    match kw.to_ascii_lowercase().as_str() {
        "prepare" => {
            let (name, rest) = name(rest)?;
            let r = rest.trim_start();
            let lower = r.get(..2)?.to_ascii_lowercase();
            if !(r.starts_with('(') || lower == "as") {
                return None;
            }
            Some(Command::Prepare { name, rest: r })
        }
        "execute" => {
            let (name, rest) = name(rest)?;
            let r = rest.trim_start();
            if !(r.is_empty() || r.starts_with('(')) {
                return None;
            }
            Some(Command::Execute { name, rest: r })
        }
        "deallocate" => {
            let (first, after) = name(rest)?;
            let (target, after) = if first == "prepare" && !after.trim().is_empty() {
                name(after)?
            } else {
                (first, after)
            };
            if !after.trim().is_empty() {
                return None;
            }
            let quoted_all = rest.trim_start().starts_with('"');
            Some(Command::Deallocate {
                name: (quoted_all || target != "all").then_some(target),
            })
        }
        "discard" => {
            let (w, after) = word(rest)?;
            (w.eq_ignore_ascii_case("all") && after.trim().is_empty())
                .then_some(Command::DiscardAll)
        }
        _ => None,
    }
}

/// The statement an SQL `PREPARE` prepares, from what follows its name (`rest` of
/// [`Command::Prepare`]): `(int, text) AS SELECT ...` → `SELECT ...`.
pub fn prepared_query(rest: &str) -> Option<&str> {
    let mut s = rest.trim_start();
    if s.starts_with('(') {
        // Parameter types, which may hold parentheses (numeric(10, 2)) and quoted names.
        let (mut depth, mut quoted, mut end) = (0usize, false, None);
        for (i, c) in s.char_indices() {
            match c {
                '"' => quoted = !quoted,
                '(' if !quoted => depth += 1,
                ')' if !quoted => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        s = s[end?..].trim_start();
    }
    let (kw, body) = word(s)?;
    (kw.eq_ignore_ascii_case("as") && body.starts_with(|c: char| c.is_whitespace()))
        .then(|| body.trim())
}

/// The next bare word of `s` (after white space) and the rest.
fn word(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
        .unwrap_or(s.len());
    (end > 0).then(|| (&s[..end], &s[end..]))
}

/// An SQL identifier: a bare word, case-folded, or a quoted one as written.
fn name(s: &str) -> Option<(String, &str)> {
    let t = s.trim_start();
    if let Some(q) = t.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = q.char_indices();
        while let Some((i, c)) = chars.next() {
            if c == '"' {
                if q[i + 1..].starts_with('"') {
                    out.push('"');
                    chars.next();
                } else {
                    return Some((out, &q[i + 1..]));
                }
            } else {
                out.push(c);
            }
        }
        return None;
    }
    let (w, rest) = word(t)?;
    if w.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some((w.to_ascii_lowercase(), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepared_queries() {
        assert_eq!(prepared_query("AS SELECT 1"), Some("SELECT 1"));
        assert_eq!(prepared_query(" as\n select $1 "), Some("select $1"));
        assert_eq!(
            prepared_query("(numeric(10, 2), \"My)Type\") AS SELECT $1, $2"),
            Some("SELECT $1, $2")
        );
        assert_eq!(prepared_query("(int AS SELECT 1"), None);
        assert_eq!(prepared_query("ASSELECT 1"), None);
    }

    #[test]
    fn commands() {
        assert_eq!(
            parse("PREPARE Foo (int) AS SELECT $1;"),
            Some(Command::Prepare {
                name: "foo".into(),
                rest: "(int) AS SELECT $1"
            })
        );
        assert_eq!(
            parse("prepare \"Q\"\"x\" as select 1"),
            Some(Command::Prepare {
                name: "Q\"x".into(),
                rest: "as select 1"
            })
        );
        assert_eq!(
            parse("  execute foo(1, 'a')"),
            Some(Command::Execute {
                name: "foo".into(),
                rest: "(1, 'a')"
            })
        );
        assert_eq!(
            parse("EXECUTE foo"),
            Some(Command::Execute {
                name: "foo".into(),
                rest: ""
            })
        );
        assert_eq!(
            parse("DEALLOCATE foo"),
            Some(Command::Deallocate {
                name: Some("foo".into())
            })
        );
        assert_eq!(
            parse("deallocate prepare foo"),
            Some(Command::Deallocate {
                name: Some("foo".into())
            })
        );
        assert_eq!(
            parse("DEALLOCATE ALL"),
            Some(Command::Deallocate { name: None })
        );
        assert_eq!(
            parse("deallocate prepare all"),
            Some(Command::Deallocate { name: None })
        );
        assert_eq!(
            parse("DEALLOCATE \"all\""),
            Some(Command::Deallocate {
                name: Some("all".into())
            })
        );
        assert_eq!(parse("discard all;"), Some(Command::DiscardAll));
    }

    #[test]
    fn left_to_the_server() {
        for s in [
            "prepare p as select 1; execute p",
            "prepare p",
            "prepare p select 1",
            "execute p 1",
            "discard temp",
            "explain execute p",
            "/* c */ prepare p as select 1",
            "deallocate a b",
            "select 1",
        ] {
            assert_eq!(parse(s), None, "{s}");
        }
    }
}
