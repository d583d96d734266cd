//! Session state in transaction and statement mode: each client's settings (startup parameters,
//! SET, RESET, set_config, SET ROLE, SET SESSION AUTHORIZATION) as the server reports them, and
//! bringing whatever server a client lands on in line with them before its request. State that
//! cannot move between servers pins the client to its server. In session mode, the startup
//! parameters a RESET lost are set again on the client's own server.

pub mod apply;
pub mod exec;
pub mod hooks;
mod lex;
/// For `crate::fuzzing` only.
#[cfg(fuzzing)]
pub(crate) use lex::oracle::check as lex_oracle;
pub mod scan;
pub mod startup;

use std::fmt::Write;
use std::sync::Arc;

pub use crate::server::Settings;

/// True when a server with `applied` already matches `desired`.
#[inline]
pub fn matches(applied: &Option<Settings>, desired: &Settings) -> bool {
    match applied {
        Some(a) => Arc::ptr_eq(a, desired) || a == desired,
        None => false,
    }
}

/// Quotes a string literal for SQL, read alike whatever the session's
/// standard_conforming_strings: a value with a backslash is an `E''` string with it doubled.
pub fn literal(out: &mut String, s: &str) {
    if s.contains('\\') {
        out.push('E');
    }
    out.push('\'');
    for ch in s.chars() {
        if ch == '\'' || ch == '\\' {
            out.push(ch);
        }
        out.push(ch);
    }
    out.push('\'');
}

/// Quotes an identifier.
pub fn ident(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        if ch == '"' {
            out.push('"');
        }
        out.push(ch);
    }
    out.push('"');
}

/// The setting that arms a timer as each statement starts: under a client's small value it
/// would cut pgcorral's own statements short (a capture or sync cancelled, its error taken
/// for the server's). pgcorral's statements turn it off first (the next statement of the
/// same Query starts without the timer) and set the client's value again last.
const TIMEOUT: &str = "statement_timeout";
const TIMEOUT_OFF: &str = "SET statement_timeout = 0;";

/// Whether a server with `applied` may have a statement_timeout (unknown settings may).
fn may_time_out(applied: &Option<Settings>) -> bool {
    match applied {
        None => true,
        Some(a) => a.iter().any(|(n, v)| n == TIMEOUT && v != "0"),
    }
}

/// True for the two settings that change who the session runs as.
fn is_identity(name: &str) -> bool {
    name == "session_authorization" || name == "role"
}

/// Applies the identity last (session user, then role), so that settings that need the login
/// user's privileges are set while the session still has them.
fn rank(name: &str) -> u8 {
    match name {
        "session_authorization" => 1,
        "role" => 2,
        _ => 0,
    }
}

/// Appends `SELECT set_config(...), ...` for `settings` (nothing when empty).
pub fn set_sql(out: &mut String, settings: &[(String, String)]) {
    let mut list: Vec<&(String, String)> = settings.iter().collect();
    list.sort_by_key(|(n, _)| rank(n));
    for (i, (name, value)) in list.iter().enumerate() {
        out.push_str(if i == 0 { "SELECT " } else { ", " });
        out.push_str("pg_catalog.set_config(");
        literal(out, name);
        out.push_str(", ");
        literal(out, value);
        out.push_str(", false)");
    }
    if !list.is_empty() {
        out.push(';');
    }
}

/// The statements that turn a server with `applied` into one with `desired`; `None` when it
/// already matches. A server running as another role or session user is first brought back to
/// its login identity, so that every setting is applied with the login user's privileges, and
/// the client's identity is set again last.
pub fn sync_sql(applied: &Option<Settings>, desired: &Settings) -> Option<String> {
    if matches(applied, desired) {
        return None;
    }
    let mut out = String::new();
    let off = may_time_out(applied);
    if off {
        out.push_str(TIMEOUT_OFF);
    }
    let empty = Vec::new();
    let (current, reset_all): (&Vec<(String, String)>, bool) = match applied {
        Some(a) => (a, false),
        None => (&empty, true),
    };
    let identity_set = reset_all || current.iter().any(|(n, _)| is_identity(n));
    if identity_set {
        out.push_str("RESET SESSION AUTHORIZATION;RESET ROLE;");
    }
    if reset_all {
        out.push_str("RESET ALL;");
    }
    for (name, _) in current {
        if !is_identity(name) && !desired.iter().any(|(d, _)| d == name) {
            out.push_str("RESET ");
            ident(&mut out, name);
            out.push(';');
        }
    }
    let changed: Vec<(String, String)> = desired
        .iter()
        .filter(|(n, v)| {
            (identity_set && is_identity(n))
                || (off && n == TIMEOUT)
                || !current.iter().any(|(an, av)| an == n && av == v)
        })
        .cloned()
        .collect();
    set_sql(&mut out, &changed);
    Some(out)
}

/// A query that reports the session's settings and any state bound to the server, as rows of
/// (kind, name, value): kind `s` is a setting, `p` a reason to pin. `login_user` is the user
/// the server connection logged in as (its default session authorization).
///
/// Two statements: the session's statement_timeout as the client has it (row `o`), turned off
/// in the same statement when it is not 0; then the capture (with the timeout's reset value,
/// row `r`, and its source, row `w`: `session` when the session set it, which matters only
/// for a 0, which was left alone). Their results are the last two of the Query (see
/// [`parse_capture`]).
pub fn capture_sql(login_user: &str, custom: &[String]) -> String {
    // Every operator and type is written qualified: the session may have a search_path that
    // puts a user's schema before pg_catalog, whose `=` would otherwise run here. The first
    // statement runs under the client's statement_timeout (1 ms, say), so it must be quick to
    // plan and run: no pg_settings, whose view alone takes a millisecond or more to plan on a
    // slow machine. The target list is evaluated in order: the value is read before it is
    // turned off.
    let mut q = String::from(
        "SELECT 'o', 'not read', pg_catalog.current_setting('statement_timeout'), \
         CASE WHEN pg_catalog.current_setting('statement_timeout') OPERATOR(pg_catalog.<>) '0' \
         THEN pg_catalog.set_config('statement_timeout', '0', false) END;",
    );
    q.push_str(
        "SELECT 'w', source, NULL FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) 'statement_timeout' \
         UNION ALL SELECT 's', name, setting FROM pg_catalog.pg_settings WHERE source OPERATOR(pg_catalog.=) 'session' \
         UNION ALL SELECT 'r', name, reset_val FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) 'statement_timeout' \
         UNION ALL SELECT 's', 'role', pg_catalog.current_setting('role') \
         WHERE pg_catalog.current_setting('role') OPERATOR(pg_catalog.<>) 'none' \
         UNION ALL SELECT 's', 'session_authorization', pg_catalog.current_setting('session_authorization') \
         WHERE pg_catalog.current_setting('session_authorization') OPERATOR(pg_catalog.<>) ",
    );
    literal(&mut q, login_user);
    if !custom.is_empty() {
        // Custom settings are not in pg_settings: read back the ones the client used.
        q.push_str(" UNION ALL SELECT 's', n, pg_catalog.current_setting(n, true) FROM pg_catalog.unnest(ARRAY[");
        for (i, n) in custom.iter().enumerate() {
            if i > 0 {
                q.push(',');
            }
            literal(&mut q, n);
        }
        q.push_str("]::pg_catalog.text[]) AS n WHERE pg_catalog.current_setting(n, true) OPERATOR(pg_catalog.<>) ''");
    }
    let _ = write!(
        q,
        " UNION ALL SELECT 'p', 'LISTEN', '' WHERE EXISTS (SELECT FROM pg_catalog.pg_listening_channels()) \
         UNION ALL SELECT 'p', 'session advisory lock', '' WHERE EXISTS (SELECT FROM pg_catalog.pg_locks \
         WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()) \
         UNION ALL SELECT 'p', 'temporary table', '' WHERE EXISTS (SELECT FROM pg_catalog.pg_class \
         WHERE relnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) \
         UNION ALL SELECT 'p', 'temporary object', '' WHERE EXISTS (SELECT FROM pg_catalog.pg_proc \
         WHERE pronamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) \
         OR EXISTS (SELECT FROM pg_catalog.pg_type t WHERE t.typnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema() \
         AND t.typrelid OPERATOR(pg_catalog.=) 0::pg_catalog.oid AND NOT EXISTS (SELECT FROM pg_catalog.pg_type e \
         WHERE e.oid OPERATOR(pg_catalog.=) t.typelem AND e.typrelid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid)) \
         OR EXISTS (SELECT FROM pg_catalog.pg_operator WHERE oprnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) \
         UNION ALL SELECT 'p', 'WITH HOLD cursor', '' WHERE EXISTS (SELECT FROM pg_catalog.pg_cursors WHERE is_holdable) \
         UNION ALL SELECT 'p', 'SQL PREPARE', '' WHERE EXISTS (SELECT FROM pg_catalog.pg_prepared_statements \
         WHERE from_sql AND NOT pg_catalog.starts_with(name, 'pgcorral_')) \
         UNION ALL SELECT 'q', name, '' FROM pg_catalog.pg_prepared_statements WHERE pg_catalog.starts_with(name, 'pgcorral_');"
    );
    q
}

/// What a capture found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Captured {
    /// The client's settings.
    pub settings: Settings,
    /// The server's settings, now that the capture turned its statement_timeout off.
    pub on_server: Settings,
    /// Why the session cannot leave its server; empty when it can.
    pub pins: Vec<String>,
    /// pgcorral's prepared statements present on the server.
    pub statements: Vec<String>,
}

/// The dotted (custom) names among `settings`.
pub fn custom_names_of(settings: &[(String, String)]) -> impl Iterator<Item = String> + '_ {
    settings
        .iter()
        .filter(|(n, _)| n.contains('.'))
        .map(|(n, _)| n.to_ascii_lowercase())
}

/// A client's settings after a capture: what the server has, plus the startup values of
/// parameters no longer set in the session (PostgreSQL's RESET returns to the startup value;
/// the server, which got them by set_config, would return to its default).
pub fn with_startup(captured: &Settings, startup: &[(String, String)]) -> Settings {
    let missing: Vec<&(String, String)> = startup
        .iter()
        .filter(|(n, _)| !captured.iter().any(|(c, _)| c.eq_ignore_ascii_case(n)))
        .collect();
    if missing.is_empty() {
        return captured.clone();
    }
    let mut all: Vec<(String, String)> = captured.iter().cloned().collect();
    all.extend(missing.into_iter().cloned());
    all.sort();
    Arc::new(all)
}

/// Reads a capture's rows (of its last two results: see [`capture_sql`]).
pub fn parse_capture(rows: Vec<Vec<Option<String>>>) -> Captured {
    let mut settings = Vec::new();
    let mut pins = Vec::new();
    let mut statements = Vec::new();
    let (mut timeout, mut reset, mut set_in_session) = (None, None, false);
    for row in rows {
        let mut it = row.into_iter();
        let (Some(Some(kind)), Some(Some(name)), Some(value)) = (it.next(), it.next(), it.next())
        else {
            continue;
        };
        match kind.as_str() {
            "s" => settings.push((name, value.unwrap_or_default())),
            "q" => statements.push(name),
            "o" => timeout = value,
            "w" => set_in_session = name == "session",
            "r" => reset = value,
            _ => pins.push(name),
        }
    }
    settings.sort();
    settings.dedup_by(|a, b| a.0 == b.0);
    let mut on_server = settings.clone();
    if let Some(t) = timeout {
        // The server's is off now (a session value of 0); the client's is what it was, kept
        // unless it is the server's own default of 0 (a 0 the session set is kept: it stands
        // in for a startup value, which PostgreSQL would not bring back).
        settings.retain(|(n, _)| n != TIMEOUT);
        on_server.retain(|(n, _)| n != TIMEOUT);
        on_server.push((TIMEOUT.into(), "0".into()));
        if t != "0" || reset.as_deref() != Some("0") || set_in_session {
            settings.push((TIMEOUT.into(), t));
        }
        settings.sort();
        on_server.sort();
    }
    let settings = Arc::new(settings);
    Captured {
        on_server: if on_server == *settings {
            settings.clone()
        } else {
            Arc::new(on_server)
        },
        settings,
        pins,
        statements,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[(&str, &str)]) -> Settings {
        Arc::new(
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        )
    }

    #[test]
    fn equal_settings_need_nothing() {
        let a = s(&[("TimeZone", "UTC")]);
        assert_eq!(sync_sql(&Some(a.clone()), &a), None);
        assert_eq!(sync_sql(&Some(s(&[])), &s(&[])), None);
    }

    #[test]
    fn differences_reset_and_set_in_order() {
        let applied = Some(s(&[
            ("search_path", "a"),
            ("role", "bob"),
            ("TimeZone", "UTC"),
        ]));
        let desired = s(&[
            ("TimeZone", "Asia/Tokyo"),
            ("session_authorization", "al'ice"),
        ]);
        let q = sync_sql(&applied, &desired).unwrap();
        assert_eq!(
            q,
            "RESET SESSION AUTHORIZATION;RESET ROLE;RESET \"search_path\";\
             SELECT pg_catalog.set_config('TimeZone', 'Asia/Tokyo', false), \
             pg_catalog.set_config('session_authorization', 'al''ice', false);"
        );
        // Unknown settings may hold a statement_timeout: off first.
        let q = sync_sql(&None, &s(&[])).unwrap();
        assert_eq!(
            q,
            "SET statement_timeout = 0;RESET SESSION AUTHORIZATION;RESET ROLE;RESET ALL;"
        );
        // No identity involved: only what differs.
        let q = sync_sql(&Some(s(&[("a.b", "1")])), &s(&[("TimeZone", "UTC")])).unwrap();
        assert_eq!(
            q,
            "RESET \"a.b\";SELECT pg_catalog.set_config('TimeZone', 'UTC', false);"
        );
    }

    /// pgcorral's own statements never run under a client's statement_timeout: it is turned
    /// off first and the desired value set again last, even when unchanged.
    #[test]
    fn a_statement_timeout_is_off_while_pgcorral_syncs() {
        let mine = s(&[("TimeZone", "UTC"), ("statement_timeout", "1")]);
        let other = s(&[("TimeZone", "Asia/Tokyo"), ("statement_timeout", "1")]);
        assert_eq!(
            sync_sql(&Some(mine.clone()), &other).unwrap(),
            "SET statement_timeout = 0;SELECT pg_catalog.set_config('TimeZone', 'Asia/Tokyo', false), \
             pg_catalog.set_config('statement_timeout', '1', false);"
        );
        assert_eq!(
            sync_sql(&Some(mine), &s(&[])).unwrap(),
            "SET statement_timeout = 0;RESET \"TimeZone\";RESET \"statement_timeout\";"
        );
        // A server whose timeout is off needs nothing more.
        let off = s(&[("statement_timeout", "0")]);
        assert_eq!(
            sync_sql(&Some(off), &s(&[("TimeZone", "UTC")])).unwrap(),
            "RESET \"statement_timeout\";SELECT pg_catalog.set_config('TimeZone', 'UTC', false);"
        );
    }

    /// The capture turns the timeout off: the server has 0, the client keeps its value, and a
    /// client that never set one gets none; a 0 the session set is kept (over a startup value).
    #[test]
    fn a_capture_keeps_the_clients_statement_timeout() {
        let row = |k: &str, n: &str, v: &str| vec![Some(k.into()), Some(n.into()), Some(v.into())];
        // The timeout as the first statement reads it, and its source from the second (rows
        // `o` and `w`, as capture_sql's statements return them).
        let timeout = |v: &str| row("o", "not read", v);
        let source = |n: &str| vec![Some("w".into()), Some(n.into()), None];
        let c = parse_capture(vec![
            timeout("1ms"),
            source("session"),
            row("s", "statement_timeout", "0"),
            row("r", "statement_timeout", "0"),
            row("s", "TimeZone", "UTC"),
        ]);
        assert_eq!(
            *c.settings,
            *s(&[("TimeZone", "UTC"), ("statement_timeout", "1ms")])
        );
        assert_eq!(
            *c.on_server,
            *s(&[("TimeZone", "UTC"), ("statement_timeout", "0")])
        );
        let c = parse_capture(vec![
            timeout("0"),
            source("default"),
            row("s", "statement_timeout", "0"),
            row("r", "statement_timeout", "0"),
        ]);
        assert_eq!(*c.settings, *s(&[]));
        assert_eq!(*c.on_server, *s(&[("statement_timeout", "0")]));
        // A server whose default is not 0: a client's 0 is kept.
        let c = parse_capture(vec![
            timeout("0"),
            source("configuration file"),
            row("r", "statement_timeout", "30000"),
        ]);
        assert_eq!(*c.settings, *s(&[("statement_timeout", "0")]));
        // SET statement_timeout = 0 in the session, the server's default being 0.
        let c = parse_capture(vec![
            timeout("0"),
            source("session"),
            row("r", "statement_timeout", "0"),
        ]);
        assert_eq!(*c.settings, *s(&[("statement_timeout", "0")]));
    }

    #[test]
    fn startup_values_come_back_after_reset() {
        let captured = s(&[("TimeZone", "UTC")]);
        let startup = vec![
            ("statement_timeout".to_string(), "5s".to_string()),
            ("timezone".to_string(), "Asia/Tokyo".to_string()),
        ];
        assert_eq!(
            *with_startup(&captured, &startup),
            *s(&[("TimeZone", "UTC"), ("statement_timeout", "5s")])
        );
    }

    #[test]
    fn capture_rows_split_into_settings_and_pins() {
        let row = |k: &str, n: &str, v: &str| {
            vec![
                Some(k.to_string()),
                Some(n.to_string()),
                Some(v.to_string()),
            ]
        };
        let c = parse_capture(vec![
            row("s", "TimeZone", "UTC"),
            row("p", "LISTEN", ""),
            row("s", "DateStyle", "ISO, DMY"),
        ]);
        assert_eq!(
            *c.settings,
            *s(&[("DateStyle", "ISO, DMY"), ("TimeZone", "UTC")])
        );
        assert_eq!(c.pins, vec!["LISTEN".to_string()]);
    }
}
