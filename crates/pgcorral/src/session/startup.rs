//! A client's startup parameters as session settings: every GUC it sent (application_name,
//! client_encoding, DateStyle, search_path, ...) and those inside `options` (`-c name=value`,
//! `--name=value`), in the order the server should apply them.

use crate::error::{Error, Kind, Result};

/// Startup parameters that are not settings.
fn is_connection_param(name: &str) -> bool {
    matches!(name, "user" | "database" | "options" | "replication") || name.starts_with("_pq_.")
}

/// A replication connection a client asked for with its `replication` startup parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// `replication=database`: logical replication commands, and SQL.
    Logical,
    /// A true value: physical replication commands only. A value PostgreSQL does not take
    /// counts as this too: the server refuses it in its own words.
    Physical,
}

impl Replication {
    /// As SHOW CLIENTS and SHOW SERVERS name it (PgBouncer's words).
    pub fn name(self) -> &'static str {
        match self {
            Replication::Logical => "logical",
            Replication::Physical => "physical",
        }
    }
}

/// What the last `replication` parameter asks for: `None` when there is none or it is false
/// as PostgreSQL's `parse_bool` reads it (a prefix of `false`, `no`, `off` of at least two
/// letters, or `0`, in any case).
pub fn replication(params: &[(String, String)]) -> Option<Replication> {
    let (_, value) = params.iter().rfind(|(k, _)| k == "replication")?;
    if value == "database" {
        return Some(Replication::Logical);
    }
    (parse_bool(value.as_bytes()) != Some(false)).then_some(Replication::Physical)
}

/// A boolean as PostgreSQL's `parse_bool` reads one, in any case: a prefix of true, false, yes
/// or no; on; a prefix of off of two letters or more; 1; 0. `None` for anything else.
pub fn parse_bool(v: &[u8]) -> Option<bool> {
    let lower = v.to_ascii_lowercase();
    let prefix_of = |word: &[u8], min: usize| lower.len() >= min && word.starts_with(&lower);
    if v == b"1" || prefix_of(b"true", 1) || prefix_of(b"yes", 1) || prefix_of(b"on", 2) {
        Some(true)
    } else if v == b"0" || prefix_of(b"false", 1) || prefix_of(b"no", 1) || prefix_of(b"off", 2) {
        Some(false)
    } else {
        None
    }
}

/// The settings a client asked for at startup, later ones winning; those named in `ignore`
/// (any case) are dropped.
pub fn settings(params: &[(String, String)], ignore: &[String]) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut put = |name: String, value: String| {
        if ignore.iter().any(|i| i.eq_ignore_ascii_case(&name)) {
            return;
        }
        out.retain(|(n, _)| !n.eq_ignore_ascii_case(&name));
        out.push((name, value));
    };
    for (name, value) in params {
        if name == "options" {
            for (n, v) in options(value)? {
                put(n, v);
            }
            continue;
        }
        if !is_connection_param(name) {
            put(name.clone(), value.clone());
        }
    }
    Ok(out)
}

/// PostgreSQL's SQLSTATE for a refused command-line argument.
const SYNTAX_ERROR: &str = "42601";

/// The switches a backend's command line takes besides `-c` and `--` (PostgreSQL's
/// `process_postgres_switches`).
const POSTGRES_SWITCHES: &str = "BbCDdEeFfhijklNnOPprSsTtvW";

/// Splits `options` as PostgreSQL does: words separated by whitespace, `\` escaping the next
/// character; then `-c name=value`, `-cname=value` and `--name=value` (dashes in names become
/// underscores). Other switches are refused.
pub fn options(s: &str) -> Result<Vec<(String, String)>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                in_word = true;
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    // PostgreSQL's refusals (42601) where it refuses too; a switch it would take but pgcorral
    // does not (`-B`, `-S 1024`, ...) is refused in PgBouncer's words (0A000).
    let invalid = |w: &str| {
        Error::as_postgres(
            Kind::ClientProtocol,
            SYNTAX_ERROR,
            format!("invalid command-line argument for server process: {w}"),
            &[(b'H', "Try \"postgres --help\" for more information.")],
        )
    };
    let mut out = Vec::new();
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        let (assignment, switch) = if let Some(rest) = w.strip_prefix("--") {
            (rest.to_string(), "--")
        } else if w == "-c" {
            // PostgreSQL's getopt: `-c` without an argument is an unknown switch.
            (it.next().ok_or_else(|| invalid(&w))?, "-c ")
        } else if let Some(rest) = w.strip_prefix("-c") {
            (rest.to_string(), "-c ")
        } else if w.starts_with('-')
            && w.len() > 1
            && POSTGRES_SWITCHES.contains(w.as_bytes()[1] as char)
        {
            return Err(Error::new(
                Kind::NotSupported,
                // PgBouncer's words (PostgreSQL has none: it takes the switch).
                "unsupported options startup parameter: only '-c config=val' and '--config=val' are allowed",
            ));
        } else {
            return Err(invalid(&w));
        };
        let Some((name, value)) = assignment.split_once('=') else {
            return Err(Error::as_postgres(
                Kind::ClientProtocol,
                SYNTAX_ERROR,
                format!("{switch}{assignment} requires a value"),
                &[],
            ));
        };
        if name.is_empty() {
            return Err(invalid(&w));
        }
        out.push((name.replace('-', "_"), value.to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refused `options`: PostgreSQL's SQLSTATE and words where it refuses too, PgBouncer's
    /// where PostgreSQL would take the switch.
    #[test]
    fn refused_options_as_postgresql_refuses_them() {
        let refused = |o: &str| {
            let e = options(o).unwrap_err();
            (e.sqlstate().to_string(), e.message().to_string())
        };
        let invalid = |w: &str| {
            let m = format!("invalid command-line argument for server process: {w}");
            ("42601".to_string(), m)
        };
        assert_eq!(refused("-x"), invalid("-x"));
        assert_eq!(refused("-c"), invalid("-c"));
        assert_eq!(refused("plain"), invalid("plain"));
        let needs = |m: &str| ("42601".to_string(), m.to_string());
        assert_eq!(
            refused("-c work_mem"),
            needs("-c work_mem requires a value")
        );
        assert_eq!(refused("--work-mem"), needs("--work-mem requires a value"));
        let (code, m) = refused("-d 5");
        assert_eq!(code, "0A000");
        assert!(
            m.starts_with("unsupported options startup parameter"),
            "{m}"
        );
    }

    fn p(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn gucs_and_options_become_settings() {
        let got = settings_of(&p(&[
            ("user", "u"),
            ("database", "d"),
            ("application_name", "psql"),
            (
                "options",
                "-c statement_timeout=5s --search-path=a,b -csearch_path=x\\ y",
            ),
            ("TimeZone", "UTC"),
            ("_pq_.foo", "1"),
        ]))
        .unwrap();
        assert_eq!(
            got,
            p(&[
                ("application_name", "psql"),
                ("statement_timeout", "5s"),
                ("search_path", "x y"),
                ("TimeZone", "UTC"),
            ])
        );
    }

    fn settings_of(params: &[(String, String)]) -> Result<Vec<(String, String)>> {
        settings(params, &[])
    }

    #[test]
    fn ignored_parameters_are_dropped_wherever_sent() {
        let params = p(&[
            ("extra_float_digits", "3"),
            ("options", "-c Extra_Float_Digits=2 -c timezone=UTC"),
            ("application_name", "x"),
        ]);
        let got = settings(&params, &["extra_float_digits".into()]).unwrap();
        assert_eq!(got, p(&[("timezone", "UTC"), ("application_name", "x")]));
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(options("-x").is_err());
        assert!(options("-c").is_err());
        assert!(options("-c novalue").is_err());
    }

    #[test]
    fn replication_is_read_as_postgresql_reads_it() {
        let r = |v: &str| replication(&p(&[("replication", v)]));
        assert_eq!(r("database"), Some(Replication::Logical));
        for on in ["true", "t", "YES", "on", "1", "Database", "bogus"] {
            assert_eq!(r(on), Some(Replication::Physical), "{on}");
        }
        for off in ["false", "f", "No", "n", "off", "OF", "0"] {
            assert_eq!(r(off), None, "{off}");
        }
        // "o" is neither on nor off for PostgreSQL: it refuses it, so the server is asked.
        assert_eq!(r("o"), Some(Replication::Physical));
        assert_eq!(replication(&p(&[("application_name", "x")])), None);
        assert!(settings_of(&p(&[("replication", "database")]))
            .unwrap()
            .is_empty());
    }
}
