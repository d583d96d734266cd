//! PgBouncer's ini grammar (libusual's `cfparser.c`) and its connection-string lexer for `[databases]` values, each error naming file and line.

use std::fmt;

/// `%include` nesting PgBouncer allows (`MAX_INCLUDE`).
const MAX_INCLUDE: usize = 10;

/// Where a line is: the file as named (the command line's path, or an `%include`'s) and its
/// line, 1-based. Shown as `pgbouncer.ini:12`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct At {
    pub file: String,
    pub line: usize,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// One thing the file says, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// `[name]`: the name between the brackets, as written (not trimmed).
    Section(String),
    /// `key = value`: the value is the rest of the line with trailing blanks removed.
    Pair { key: String, value: String },
}

/// Reads `text` (the file `name`) as PgBouncer does: every section start and pair, with its
/// place. `%include FILE` reads `read(FILE)` (PgBouncer: a path relative to the working
/// directory) in place, the current section carrying into and out of it.
pub fn parse(
    name: &str,
    text: &str,
    read: &dyn Fn(&str) -> std::io::Result<String>,
) -> Result<Vec<(Item, At)>, String> {
    let mut out = Vec::new();
    parse_into(name, text, read, 0, &mut out)?;
    Ok(out)
}

fn parse_into(
    name: &str,
    text: &str,
    read: &dyn Fn(&str) -> std::io::Result<String>,
    depth: usize,
    out: &mut Vec<(Item, At)>,
) -> Result<(), String> {
    let b = text.as_bytes();
    let at = |p: usize| At {
        file: name.to_string(),
        line: 1 + b[..p.min(b.len())].iter().filter(|&&c| c == b'\n').count(),
    };
    let syntax = |p: usize| format!("{}: syntax error in configuration", at(p));
    let line_end = |p: usize| {
        b[p..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(b.len(), |n| p + n)
    };
    let blank = |c: u8| c == b' ' || c == b'\t';
    let mut p = 0;
    loop {
        while p < b.len() && b[p].is_ascii_whitespace() {
            p += 1;
        }
        if p >= b.len() {
            return Ok(());
        }
        if b[p..].starts_with(b"%include") && b.get(p + 8).is_some_and(|&c| blank(c)) {
            if depth >= MAX_INCLUDE {
                return Err(format!("{}: include nesting level too deep", at(p)));
            }
            let end = line_end(p);
            let file = text[p + 8..end].trim_matches(|c: char| c.is_ascii_whitespace());
            let included = read(file).map_err(|e| format!("{}: cannot read {file}: {e}", at(p)))?;
            parse_into(file, &included, read, depth + 1, out)?;
            p = end;
            continue;
        }
        if b[p] == b'#' || b[p] == b';' {
            p = line_end(p);
            continue;
        }
        if b[p] == b'[' {
            let start = p + 1;
            let end = line_end(start);
            let Some(close) = b[start..end].iter().position(|&c| c == b']') else {
                return Err(syntax(p));
            };
            out.push((Item::Section(text[start..start + close].into()), at(p)));
            // As PgBouncer: what follows `]` on the line is read as the next line.
            p = start + close + 1;
            continue;
        }
        let line = at(p);
        let key = match b[p] {
            q @ (b'\'' | b'"') => {
                let (key, next) = quoted_key(text, p, q).ok_or_else(|| syntax(p))?;
                p = next;
                key
            }
            _ => {
                let start = p;
                while p < b.len() && (b[p].is_ascii_alphanumeric() || b"_.-*".contains(&b[p])) {
                    p += 1;
                }
                text[start..p].to_string()
            }
        };
        while p < b.len() && blank(b[p]) {
            p += 1;
        }
        if b.get(p) != Some(&b'=') {
            return Err(syntax(p));
        }
        p += 1;
        while p < b.len() && blank(b[p]) {
            p += 1;
        }
        let end = line_end(p);
        let value = text[p..end].trim_end_matches(|c: char| c.is_ascii_whitespace());
        out.push((
            Item::Pair {
                key,
                value: value.into(),
            },
            line,
        ));
        p = end;
    }
}

/// A key in quotes from `p`: `'…'` as PgBouncer (no escape, not empty), or `"…"` with `""`
/// for a quote (SQL identifier quoting, as pgbouncer(5) documents database names). The key
/// and where it ends; `None` when unclosed (at the end of the line) or empty.
fn quoted_key(text: &str, p: usize, quote: u8) -> Option<(String, usize)> {
    let b = text.as_bytes();
    let mut key = Vec::new();
    let mut i = p + 1;
    loop {
        match b.get(i) {
            None | Some(b'\n') => return None,
            Some(&c) if c == quote => {
                if quote == b'"' && b.get(i + 1) == Some(&b'"') {
                    key.push(c);
                    i += 2;
                } else {
                    break;
                }
            }
            Some(&c) => {
                key.push(c);
                i += 1;
            }
        }
    }
    if key.is_empty() {
        return None;
    }
    // Split only at ASCII bytes, so the key is whole UTF-8.
    Some((String::from_utf8(key).ok()?, i + 1))
}

/// A `[databases]`, `[users]` or `[peers]` value: space-separated `key=value` pairs, in order.
/// A value may be in single quotes (`''` for a quote, no backslash escapes); spaces only
/// separate (not tabs); an empty value is refused, as PgBouncer's `cstr_get_pair`.
pub fn connstr(s: &str) -> Result<Vec<(String, String)>, String> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut p = 0;
    let skip = |mut p: usize| {
        while b.get(p) == Some(&b' ') {
            p += 1;
        }
        p
    };
    loop {
        p = skip(p);
        if p >= b.len() {
            return Ok(out);
        }
        let start = p;
        while p < b.len() && b[p] != b'=' && b[p] != b' ' {
            p += 1;
        }
        let key = &s[start..p];
        p = skip(p);
        if key.is_empty() || b.get(p) != Some(&b'=') {
            return Err(format!(
                "syntax error in connection string {s:?}: {key:?} has no \"=value\""
            ));
        }
        p = skip(p + 1);
        let mut value = String::new();
        if b.get(p) == Some(&b'\'') {
            p += 1;
            loop {
                match b.get(p) {
                    None => {
                        return Err(format!(
                            "syntax error in connection string {s:?}: the quoted value of {key} is not closed"
                        ))
                    }
                    Some(b'\'') if b.get(p + 1) == Some(&b'\'') => {
                        value.push('\'');
                        p += 2;
                    }
                    Some(b'\'') => break,
                    Some(_) => {
                        let n = s[p..].chars().next().map_or(1, char::len_utf8);
                        value.push_str(&s[p..p + n]);
                        p += n;
                    }
                }
            }
            p += 1;
            if p < b.len() && b[p] != b' ' {
                return Err(format!(
                    "syntax error in connection string {s:?}: a space must follow the quoted value of {key}"
                ));
            }
        } else {
            let start = p;
            while p < b.len() && b[p] != b' ' {
                p += 1;
            }
            value.push_str(&s[start..p]);
        }
        if value.is_empty() {
            return Err(format!(
                "syntax error in connection string {s:?}: {key} has an empty value"
            ));
        }
        out.push((key.to_string(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_files(name: &str) -> std::io::Result<String> {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            name.to_string(),
        ))
    }

    fn pairs(text: &str) -> Vec<(Item, usize)> {
        parse("t.ini", text, &no_files)
            .unwrap()
            .into_iter()
            .map(|(i, at)| (i, at.line))
            .collect()
    }

    fn pair(k: &str, v: &str) -> Item {
        Item::Pair {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn lines_comments_sections_and_values() {
        let text =
            "\n  # comment\n; also\n[databases]\n\tapp = host=db port=5433 ; not a comment\n\
                    'my db'=dbname=x\n\"q \"\"d\"\"\" = \nfoo.bar-1* =  v  \r\n[ odd name ]k=v\n";
        assert_eq!(
            pairs(text),
            vec![
                (Item::Section("databases".into()), 4),
                (pair("app", "host=db port=5433 ; not a comment"), 5),
                (pair("my db", "dbname=x"), 6),
                (pair("q \"d\"", ""), 7),
                (pair("foo.bar-1*", "v"), 8),
                (Item::Section(" odd name ".into()), 9),
                (pair("k", "v"), 9),
            ]
        );
    }

    #[test]
    fn syntax_errors_name_file_and_line() {
        for (text, line) in [
            ("[pgbouncer\nx = 1\n", 1),
            ("[pgbouncer]\nlisten_port 6432\n", 2),
            ("[pgbouncer]\n\n'' = 1\n", 3),
            ("[pgbouncer]\n'open = 1\n", 2),
            ("[pgbouncer]\nkey:x = 1\n", 2),
        ] {
            let err = parse("pgbouncer.ini", text, &no_files).unwrap_err();
            assert_eq!(
                err,
                format!("pgbouncer.ini:{line}: syntax error in configuration"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn includes_read_in_place_with_the_section_carried() {
        let read = |name: &str| match name {
            "more.ini" => Ok("a = 1\n[users]\nbob = pool_size=2\n".to_string()),
            "self.ini" => Ok("%include self.ini\n".to_string()),
            other => no_files(other),
        };
        let got = parse(
            "main.ini",
            "[databases]\n%include   more.ini  \nb = 2\n",
            &read,
        )
        .unwrap();
        let got: Vec<(Item, String)> = got.into_iter().map(|(i, at)| (i, at.to_string())).collect();
        assert_eq!(
            got,
            vec![
                (Item::Section("databases".into()), "main.ini:1".into()),
                (pair("a", "1"), "more.ini:1".into()),
                (Item::Section("users".into()), "more.ini:2".into()),
                (pair("bob", "pool_size=2"), "more.ini:3".into()),
                (pair("b", "2"), "main.ini:3".into()),
            ]
        );
        let err = parse("main.ini", "%include self.ini\n", &read).unwrap_err();
        assert_eq!(err, "self.ini:1: include nesting level too deep");
        let err = parse("main.ini", "\n%include gone.ini\n", &read).unwrap_err();
        assert!(err.starts_with("main.ini:2: cannot read gone.ini"), "{err}");
        // `%includex` or `%include` alone is not an include: a syntax error.
        assert!(parse("m.ini", "%include\n", &read).is_err());
    }

    #[test]
    fn connection_strings() {
        let got = connstr("  host=db  port = 5433 password='it''s a \\secret' dbname=été").unwrap();
        let want = [
            ("host", "db"),
            ("port", "5433"),
            ("password", "it's a \\secret"),
            ("dbname", "été"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(got, want);
        assert!(connstr("").unwrap().is_empty());
        assert_eq!(
            connstr("connect_query='set a=1; set b=2'").unwrap()[0].1,
            "set a=1; set b=2"
        );
        for bad in [
            "host=",
            "host=''",
            "host",
            "=x",
            "host='db",
            "host='db'x",
            "a=1 b",
        ] {
            let err = connstr(bad).unwrap_err();
            assert!(
                err.starts_with("syntax error in connection string"),
                "{bad}: {err}"
            );
        }
    }
}
