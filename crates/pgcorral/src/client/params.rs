//! A StartupMessage's parameters as pgcorral takes them. PostgreSQL 15 takes any bytes there;
//! pgcorral's names are text, and it applies settings to pooled servers in SQL, which carries
//! only valid UTF-8. So a user or database that is not UTF-8 is kept as sent, names nothing,
//! and is quoted as sent in the error that refuses it; application_name is cleaned as
//! PostgreSQL cleans it; any other parameter that is not UTF-8 refuses the login (22021).

use pgwire::startup::Param;

use crate::error::{Error, Kind};

/// A user or database name: its text, and the bytes sent when they are not UTF-8 (the text
/// then holds them replaced lossily, for the log and for errors, which quote the bytes).
#[derive(Clone, Debug, Default)]
pub(super) struct Name {
    pub text: String,
    pub raw: Option<Vec<u8>>,
}

impl Name {
    fn of(b: &[u8]) -> Name {
        match std::str::from_utf8(b) {
            Ok(t) => Name {
                text: t.to_string(),
                raw: None,
            },
            Err(_) => Name {
                text: String::from_utf8_lossy(b).into_owned(),
                raw: Some(b.to_vec()),
            },
        }
    }

    /// Whether the name is the text it holds (valid UTF-8), so may name something.
    pub fn is_text(&self) -> bool {
        self.raw.is_none()
    }
}

/// The parameters of a StartupMessage, taken.
#[derive(Debug, Default)]
pub(super) struct Params {
    /// The user, empty when none was given.
    pub user: Name,
    /// The database; the user's name when none (or an empty one) was given.
    pub database: Name,
    /// Every parameter that is text, in order; application_name always (cleaned).
    pub text: Vec<(String, String)>,
    /// Why the login is refused: the first parameter other than the above that is not UTF-8.
    pub unusable: Option<Error>,
}

/// Takes a StartupMessage's parameters. A later user or database wins, as in PostgreSQL.
pub(super) fn take(params: &[(Param, Param)]) -> Params {
    let mut out = Params::default();
    let mut database = None;
    for (name, value) in params {
        match &name[..] {
            b"user" => out.user = Name::of(truncated(value)),
            b"database" => database = Some(Name::of(truncated(value))),
            _ => {}
        }
        let text = match (std::str::from_utf8(name), std::str::from_utf8(value)) {
            (Ok(n), Ok(v)) => Some((n.to_string(), v.to_string())),
            (Ok(n @ "application_name"), Err(_)) => Some((n.to_string(), clean_ascii(value))),
            _ => None,
        };
        match text {
            Some(t) => out.text.push(t),
            // A name or value pgcorral takes only to quote it, or announces as unknown.
            None if matches!(&name[..], b"user" | b"database") || name.starts_with(b"_pq_.") => {}
            None if out.unusable.is_none() => {
                let bad = if std::str::from_utf8(name).is_err() {
                    name
                } else {
                    value
                };
                out.unusable = Some(invalid_utf8(bad));
            }
            None => {}
        }
    }
    out.database = database
        .filter(|d| !d.text.is_empty())
        .unwrap_or_else(|| out.user.clone());
    out
}

/// A user or database name cut to a PostgreSQL name's length (NAMEDATALEN - 1 bytes), as
/// PostgreSQL cuts them in the startup packet (bytes, not characters), so that an overlong name
/// finds, or is refused as, what PostgreSQL would find.
fn truncated(b: &[u8]) -> &[u8] {
    &b[..b.len().min(NAME_MAX_BYTES)]
}

/// NAMEDATALEN - 1.
const NAME_MAX_BYTES: usize = 63;

/// application_name as PostgreSQL 15 keeps it: each byte outside printable ASCII becomes `?`.
fn clean_ascii(b: &[u8]) -> String {
    b.iter()
        .map(|&c| {
            if (32..=126).contains(&c) {
                c as char
            } else {
                '?'
            }
        })
        .collect()
}

/// PostgreSQL's error for bytes that are not UTF-8 (where it meets them in a query): 22021,
/// naming the bytes of the first bad character, as many as its first byte announces.
fn invalid_utf8(b: &[u8]) -> Error {
    let at = match std::str::from_utf8(b) {
        Err(e) => e.valid_up_to(),
        Ok(_) => 0,
    };
    let rest = &b[at..];
    let first = rest.first().copied().unwrap_or(0);
    let len = match first {
        c if c & 0xe0 == 0xc0 => 2,
        c if c & 0xf0 == 0xe0 => 3,
        c if c & 0xf8 == 0xf0 => 4,
        _ => 1,
    };
    let shown: Vec<String> = rest
        .iter()
        .take(len)
        .map(|c| format!("0x{c:02x}"))
        .collect();
    Error::new(
        Kind::InvalidEncoding,
        format!(
            "invalid byte sequence for encoding \"UTF8\": {}",
            shown.join(" ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[(&[u8], &[u8])]) -> Vec<(Param, Param)> {
        v.iter().map(|(a, b)| (a.to_vec(), b.to_vec())).collect()
    }

    #[test]
    fn long_names_are_cut_as_postgresql_cuts_them() {
        let long = "d".repeat(70);
        let t = take(&[
            (b"user".to_vec(), "u".repeat(64).into_bytes()),
            (b"database".to_vec(), long.clone().into_bytes()),
        ]);
        assert_eq!(t.user.text, "u".repeat(63));
        assert_eq!(t.database.text, long[..63]);
    }

    #[test]
    fn text_is_taken_as_it_is() {
        let t = take(&p(&[
            (b"user", b"app"),
            (b"database", b"db"),
            (b"search_path", b"x"),
        ]));
        assert_eq!(
            (t.user.text.as_str(), t.database.text.as_str()),
            ("app", "db")
        );
        assert!(t.user.is_text() && t.database.is_text() && t.unusable.is_none());
        assert_eq!(t.text.len(), 3);
        // No database, or an empty one: the user's name. Later ones win.
        let t = take(&p(&[(b"user", b"a"), (b"database", b""), (b"user", b"b")]));
        assert_eq!((t.user.text.as_str(), t.database.text.as_str()), ("b", "b"));
    }

    #[test]
    fn bytes_that_are_not_utf8() {
        let t = take(&p(&[
            (b"user", b"p\xffx"),
            (b"application_name", b"caf\xe9 \x01"),
            (b"_pq_.a\xff", b"1"),
            (b"search_path", b"a\xe9 b"),
            (b"x\xff", b"1"),
        ]));
        assert_eq!(t.user.raw.as_deref(), Some(&b"p\xffx"[..]));
        assert_eq!(t.user.text, "p\u{fffd}x");
        assert!(!t.database.is_text(), "the user's name");
        assert_eq!(
            t.text,
            [("application_name".to_string(), "caf? ?".to_string())]
        );
        let e = t.unusable.unwrap();
        assert_eq!((e.sqlstate(), e.kind()), ("22021", Kind::InvalidEncoding));
        // 0xe9 announces three bytes.
        assert_eq!(
            e.message(),
            "invalid byte sequence for encoding \"UTF8\": 0xe9 0x20 0x62"
        );
        for (bytes, shown) in [
            (&b"\xff"[..], "0xff"),
            (b"ok\xc3", "0xc3"),
            (b"\xf0\x9f\x98", "0xf0 0x9f 0x98"),
            (b"\x80abc", "0x80"),
        ] {
            let e = take(&p(&[(b"TimeZone", bytes)])).unusable.unwrap();
            assert!(e.message().ends_with(&format!(": {shown}")), "{e}");
        }
    }
}
