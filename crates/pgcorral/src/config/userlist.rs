//! PgBouncer's `auth_file` (userlist.txt) read as its `load_auth_file` reads it, and merged into the users of a `Config`.

use super::{Config, ConfigError, Warning};

/// Longest user name PgBouncer keeps (`MAX_USERNAME`, terminator included).
pub const MAX_USERNAME: usize = 128;
/// Longest password PgBouncer keeps (`MAX_PASSWORD` on its master branch, terminator
/// included; 1.24 has 2048).
pub const MAX_PASSWORD: usize = 65531;

/// What a userlist.txt holds: `(user, password)` in file order (a later line for the same
/// user wins), and why loading stopped early, if it did (what came before stays, as PgBouncer).
#[derive(Debug, Default, PartialEq)]
pub struct Userlist {
    pub entries: Vec<(String, String)>,
    pub stopped: Option<String>,
    /// Lines read but not used (a name or password that is not UTF-8), and why.
    pub skipped: Vec<String>,
}

/// Parses a userlist.txt: blank space skipped, a line starting with `;` is a comment, each
/// entry is `"user" "password"` with `""` for a quote inside a field and anything after the
/// second field ignored. A line that does not start with `"`, an unterminated field, or a
/// field too long stops the reading there ("broken auth file").
pub fn parse(text: &[u8]) -> Userlist {
    let mut list = Userlist::default();
    let mut p = 0;
    let line_of = |at: usize| {
        1 + text[..at.min(text.len())]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
    };
    let stop = |list: &mut Userlist, at: usize, why: &str| {
        list.stopped = Some(format!("{why} (line {})", line_of(at)));
    };
    while p < text.len() {
        while p < text.len() && text[p].is_ascii_whitespace() {
            p += 1;
        }
        if p >= text.len() {
            break;
        }
        if text[p] == b';' {
            while p < text.len() && text[p] != b'\n' {
                p += 1;
            }
            continue;
        }
        let start = p;
        if text[p] != b'"' {
            stop(&mut list, start, "broken auth file");
            break;
        }
        let (user, end) = match field(text, p + 1, MAX_USERNAME, "username too long in auth file") {
            Ok(f) => f,
            Err(why) => {
                stop(&mut list, start, why);
                break;
            }
        };
        p = find_quote(text, end + 1, true);
        if p >= text.len() {
            stop(&mut list, start, "broken auth file");
            break;
        }
        let (password, end) =
            match field(text, p + 1, MAX_PASSWORD, "password too long in auth file") {
                Ok(f) => f,
                Err(why) => {
                    stop(&mut list, start, why);
                    break;
                }
            };
        p = end + 1;
        while p < text.len() && text[p] != b'\n' {
            p += 1;
        }
        // A name that is not UTF-8 names no user pgcorral can see: skipped (PgBouncer takes
        // its bytes), and said.
        match (String::from_utf8(user), String::from_utf8(password)) {
            (Ok(u), Ok(pw)) => list.entries.push((u, pw)),
            _ => list
                .skipped
                .push(format!("line {}: not UTF-8, skipped", line_of(start))),
        }
    }
    list
}

/// The quoted field whose text starts at `at`: its text unquoted, and where its closing quote
/// is; else why the reading stops (unterminated, or `max` bytes or more: `too_long`).
fn field(
    text: &[u8],
    at: usize,
    max: usize,
    too_long: &'static str,
) -> Result<(Vec<u8>, usize), &'static str> {
    let end = find_quote(text, at, false);
    if end >= text.len() {
        return Err("broken auth file");
    }
    if end - at >= max {
        return Err(too_long);
    }
    Ok((unquote(&text[at..end]), end))
}

/// The next `"` from `p` (`text.len()` when none); inside a field (`start` false) a doubled
/// `""` is skipped as an escaped quote, as PgBouncer's `find_quote`.
fn find_quote(text: &[u8], mut p: usize, start: bool) -> usize {
    loop {
        while p < text.len() && text[p] != b'"' {
            p += 1;
        }
        if !start && p + 1 < text.len() && text[p + 1] == b'"' {
            p += 2;
            continue;
        }
        return p;
    }
}

/// A field's text with each `""` made `"` (PgBouncer's `copy_quoted`).
fn unquote(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'"' {
            i += 1;
        }
        if let Some(&b) = field.get(i) {
            out.push(b);
        }
        i += 1;
    }
    out
}

/// Reads `general.auth_file` (when set) into `cfg.users`: a user of the file not in
/// `[users]` is added with its password; a `[users]` entry without a password takes the
/// file's; a `[users]` password wins over the file's. An empty password is no password (the
/// user exists, and goes to auth_query or fails a password login). A file that cannot be read
/// is an error (at a reload, the running users stay); a broken line is a warning, and the
/// lines before it are used.
pub fn merge(
    cfg: &mut Config,
    read: &dyn Fn(&str) -> std::io::Result<Vec<u8>>,
) -> Result<Vec<Warning>, ConfigError> {
    let path = cfg.general.auth_file.clone();
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let text = read(&path).map_err(|e| {
        ConfigError(format!(
            "general.auth_file: could not open auth_file {path}: {e}"
        ))
    })?;
    let list = parse(&text);
    let mut warnings = Vec::new();
    // By file and line, never the line's text (a password).
    for why in &list.skipped {
        warnings.push(Warning {
            key: "general.auth_file".into(),
            message: format!("{path}: {why}"),
        });
    }
    if let Some(why) = list.stopped {
        warnings.push(Warning {
            key: "general.auth_file".into(),
            message: format!("{path}: {why}: the lines after it are not read"),
        });
    }
    // A later line for the same user wins.
    let file: std::collections::BTreeMap<String, String> = list.entries.into_iter().collect();
    for (name, password) in file {
        let password = (!password.is_empty()).then_some(password);
        let user = cfg.users.entry(name).or_default();
        user.settings_only = false;
        if user.password.is_none() {
            user.password = password;
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(text: &str) -> Vec<(String, String)> {
        parse(text.as_bytes()).entries
    }

    #[test]
    fn reads_pgbouncer_test_userlist() {
        // PgBouncer's test/userlist.txt, shortened: comments, empty passwords, md5, SCRAM.
        let text = concat!(
            ";commented out line\n",
            "\"muser1\" \"foo\"\n",
            "\"muser2\" \"md5bd0d1f1e1d4d3b5a9fa1b5c51fa1c3e3\"\n",
            "  \"puser1\" \"\"\n",
            "\"scramuser1\" \"SCRAM-SHA-256$4096:D76gvGUVj9Z4DNiGoabOBg==$RukL0Xo3Ql/2F9FsD7mcQ3GATG2fD3PA71qY1JagGDs=:BhKUwyyivFm7Tq2jDJVXSVRbRDgTWyBilZKgg6DDuYU=\"\n",
            "\"longpass\" \"aaaa\" trailing third field\n",
        );
        let e = entries(text);
        let names: Vec<&str> = e.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(
            names,
            ["muser1", "muser2", "puser1", "scramuser1", "longpass"]
        );
        assert_eq!(e[0].1, "foo");
        assert_eq!(e[2].1, "");
        assert!(e[3].1.starts_with("SCRAM-SHA-256$4096:"));
        assert_eq!(e[4].1, "aaaa");
        assert_eq!(parse(text.as_bytes()).stopped, None);
    }

    /// PgBouncer's own test/userlist.txt (tag pgbouncer_1_24_1), where the mirror of its
    /// repository is (PGBOUNCER_REPO, a git directory); skipped elsewhere.
    #[test]
    fn pgbouncers_own_userlist() {
        let repo = std::env::var("PGBOUNCER_REPO")
            .unwrap_or_else(|_| "/work/.mirror/pgbouncer+pgbouncer/repo".into());
        let out = std::process::Command::new("git")
            .args([
                "--git-dir",
                &repo,
                "show",
                "pgbouncer_1_24_1:test/userlist.txt",
            ])
            .output();
        let Some(text) = out.ok().filter(|o| o.status.success()).map(|o| o.stdout) else {
            eprintln!("skipped: no PgBouncer repository at {repo}");
            return;
        };
        let list = parse(&text);
        assert_eq!(list.stopped, None);
        let pw = |u: &str| list.entries.iter().find(|e| e.0 == u).map(|e| e.1.as_str());
        assert_eq!(list.entries.len(), 20);
        assert_eq!(pw("marko"), Some("kama"));
        assert_eq!(pw("maxedout"), Some(""));
        // "the following pairs of passwords are "foo" and "bar"".
        let md5 = pw("muser1").unwrap();
        assert_eq!(md5, pgwire::auth::md5::stored_hash("muser1", "foo"));
        assert!(pgwire::auth::scram::ScramSecret::parse(pw("scramuser1").unwrap()).is_some());
        assert_eq!(pw("scramuser3"), Some("baz"));
    }

    #[test]
    fn doubled_quotes_and_gaps() {
        assert_eq!(
            entries("\"a\"\"b\"   x  \"p\"\"w\"\"\"\n"),
            [("a\"b".to_string(), "p\"w\"".to_string())]
        );
        // Anything between the two fields is skipped; no newline at the end.
        assert_eq!(entries("\"u\"\t,=\"pw\""), [("u".into(), "pw".into())]);
        // A backslash is an ordinary character.
        assert_eq!(entries("\"u\" \"a\\\"\n"), [("u".into(), "a\\".into())]);
    }

    #[test]
    fn broken_line_stops_but_keeps_what_was_read() {
        for (text, line) in [
            ("\"a\" \"1\"\n# not a comment\n\"b\" \"2\"\n", 2),
            ("\"a\" \"1\"\n\"b\" \"2\n", 2),
            ("\"a\" \"1\"\n\n\"b\"\n", 3),
            ("\"a\" \"1\"\nb \"2\"\n", 2),
        ] {
            let list = parse(text.as_bytes());
            assert_eq!(
                list.entries,
                [("a".to_string(), "1".to_string())],
                "{text:?}"
            );
            let why = list.stopped.unwrap();
            assert_eq!(why, format!("broken auth file (line {line})"), "{text:?}");
        }
        let long = format!("\"{}\" \"x\"\n", "u".repeat(MAX_USERNAME));
        assert!(parse(long.as_bytes())
            .stopped
            .unwrap()
            .starts_with("username too long"));
        let ok = format!("\"{}\" \"x\"\n", "u".repeat(MAX_USERNAME - 1));
        assert_eq!(parse(ok.as_bytes()).entries.len(), 1);
        let long = format!("\"u\" \"{}\"\n", "p".repeat(MAX_PASSWORD));
        assert!(parse(long.as_bytes())
            .stopped
            .unwrap()
            .starts_with("password too long"));
        let ok = format!("\"u\" \"{}\"\n", "p".repeat(MAX_PASSWORD - 1));
        assert_eq!(parse(ok.as_bytes()).entries[0].1.len(), MAX_PASSWORD - 1);
    }

    #[test]
    fn a_line_that_is_not_utf8_is_skipped_and_said() {
        let list = parse(b"\"a\" \"1\"\n\"b\xff\" \"2\"\n\"c\" \"3\"\n");
        assert_eq!(
            list.entries,
            [("a".into(), "1".into()), ("c".into(), "3".into())]
        );
        assert_eq!(list.skipped, ["line 2: not UTF-8, skipped"]);
        assert_eq!(list.stopped, None);
    }

    #[test]
    fn empty_and_odd_input_never_panics() {
        for text in [
            "",
            "\n\n",
            ";",
            "\"",
            "\"\"",
            "\"\" \"",
            "\"a\"\"",
            "\"a\" \"\"\"",
            ";x\n\"",
        ] {
            let _ = parse(text.as_bytes());
        }
        assert_eq!(entries("\"u\" \"\""), [("u".into(), "".into())]);
    }

    #[test]
    fn merge_fills_users() {
        let mut cfg: Config = toml::from_str(
            "[general]\nauth_file = \"userlist.txt\"\n[users.a]\npassword = \"mine\"\n[users.b]\npool_size = 3\n",
        )
        .unwrap();
        let file = b"\"a\" \"theirs\"\n\"b\" \"bpw\"\n\"c\" \"md5pass\"\n\"d\" \"\"\n\"c\" \"later\"\nbroken\n";
        let read = |p: &str| {
            assert_eq!(p, "userlist.txt");
            Ok(file.to_vec())
        };
        let w = merge(&mut cfg, &read).unwrap();
        assert_eq!(w.len(), 1);
        assert!(
            w[0].message.contains("broken auth file (line 6)"),
            "{:?}",
            w[0]
        );
        let pw = |n: &str| cfg.users[n].password.clone();
        assert_eq!(pw("a").as_deref(), Some("mine"));
        assert_eq!(pw("b").as_deref(), Some("bpw"));
        assert_eq!(cfg.users["b"].pool_size, Some(3));
        assert_eq!(pw("c").as_deref(), Some("later"));
        assert_eq!(pw("d"), None);
        let missing = |_: &str| Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        let err = merge(&mut cfg, &missing).unwrap_err().to_string();
        assert!(
            err.starts_with("general.auth_file: could not open auth_file userlist.txt"),
            "{err}"
        );
    }
}
