//! Session state in transaction and statement mode: each client's settings (startup parameters,
//! SET, RESET, set_config, SET ROLE, SET SESSION AUTHORIZATION) as the server reports them, and
//! bringing whatever server a client lands on in line with them before its request. State that
//! cannot move between servers pins the client to its server.

pub mod apply;
pub mod exec;
pub mod scan;
pub mod startup;

use std::fmt::Write;
use std::sync::Arc;

/// Session-level settings, sorted by name, with canonical values as the server shows them;
/// `role` and `session_authorization` included when changed. Empty = the server's defaults.
pub type Settings = Arc<Vec<(String, String)>>;

/// True when a server with `applied` already matches `desired`.
#[inline]
pub fn matches(applied: &Option<Settings>, desired: &Settings) -> bool {
    match applied {
        Some(a) => Arc::ptr_eq(a, desired) || a == desired,
        None => false,
    }
}

/// Quotes a string literal for SQL (standard_conforming_strings on, as every server since 9.1).
pub fn literal(out: &mut String, s: &str) {
    out.push('\'');
    for ch in s.chars() {
        if ch == '\'' {
            out.push('\'');
        }
        out.push(ch);
    }
    out.push('\'');
}

/// Quotes an identifier.
fn ident(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        if ch == '"' {
            out.push('"');
        }
        out.push(ch);
    }
    out.push('"');
}

/// Orders the settings whose order matters first: the session user before the role.
fn rank(name: &str) -> u8 {
    match name {
        "session_authorization" => 0,
        "role" => 1,
        _ => 2,
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
/// already matches.
pub fn sync_sql(applied: &Option<Settings>, desired: &Settings) -> Option<String> {
    if matches(applied, desired) {
        return None;
    }
    let mut out = String::new();
    let resets: Vec<&str> = match applied {
        Some(a) => a
            .iter()
            .filter(|(n, _)| !desired.iter().any(|(d, _)| d == n))
            .map(|(n, _)| n.as_str())
            .collect(),
        // Unknown: back to the defaults first.
        None => vec!["session_authorization", "role", "*"],
    };
    let mut resets = resets;
    resets.sort_by_key(|n| rank(n));
    for name in resets {
        match name {
            "session_authorization" => out.push_str("RESET SESSION AUTHORIZATION;"),
            "role" => out.push_str("RESET ROLE;"),
            "*" => out.push_str("RESET ALL;"),
            n => {
                out.push_str("RESET ");
                ident(&mut out, n);
                out.push(';');
            }
        }
    }
    let changed: Vec<(String, String)> = desired
        .iter()
        .filter(|(n, v)| match applied {
            Some(a) => !a.iter().any(|(an, av)| an == n && av == v),
            None => true,
        })
        .cloned()
        .collect();
    set_sql(&mut out, &changed);
    Some(out)
}

/// A query that reports the session's settings and any state bound to the server, as rows of
/// (kind, name, value): kind `s` is a setting, `p` a reason to pin. `login_user` is the user
/// the server connection logged in as (its default session authorization).
pub fn capture_sql(login_user: &str) -> String {
    let mut q = String::from(
        "SELECT 's', name, setting FROM pg_catalog.pg_settings WHERE source = 'session' \
         UNION ALL SELECT 's', 'role', pg_catalog.current_setting('role') \
         WHERE pg_catalog.current_setting('role') <> 'none' \
         UNION ALL SELECT 's', 'session_authorization', pg_catalog.current_setting('session_authorization') \
         WHERE pg_catalog.current_setting('session_authorization') <> ",
    );
    literal(&mut q, login_user);
    let _ = write!(
        q,
        " UNION ALL SELECT 'p', 'LISTEN', '' WHERE EXISTS (SELECT FROM pg_catalog.pg_listening_channels()) \
         UNION ALL SELECT 'p', 'session advisory lock', '' WHERE EXISTS (SELECT FROM pg_catalog.pg_locks \
         WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid()) \
         UNION ALL SELECT 'p', 'temporary table', '' WHERE EXISTS (SELECT FROM pg_catalog.pg_class \
         WHERE relnamespace = pg_catalog.pg_my_temp_schema()) \
         UNION ALL SELECT 'p', 'WITH HOLD cursor', '' WHERE EXISTS (SELECT FROM pg_catalog.pg_cursors WHERE is_holdable) \
         UNION ALL SELECT 'p', 'SQL PREPARE', '' WHERE EXISTS (SELECT FROM pg_catalog.pg_prepared_statements WHERE from_sql);"
    );
    q
}

/// What a capture found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Captured {
    pub settings: Settings,
    /// Why the session cannot leave its server; empty when it can.
    pub pins: Vec<String>,
}

/// Reads a capture's rows.
pub fn parse_capture(rows: Vec<Vec<Option<String>>>) -> Captured {
    let mut settings = Vec::new();
    let mut pins = Vec::new();
    for row in rows {
        let mut it = row.into_iter();
        let (Some(Some(kind)), Some(Some(name)), Some(value)) = (it.next(), it.next(), it.next())
        else {
            continue;
        };
        match kind.as_str() {
            "s" => settings.push((name, value.unwrap_or_default())),
            _ => pins.push(name),
        }
    }
    settings.sort();
    Captured {
        settings: Arc::new(settings),
        pins,
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
            "RESET ROLE;RESET \"search_path\";SELECT pg_catalog.set_config('session_authorization', 'al''ice', false), \
             pg_catalog.set_config('TimeZone', 'Asia/Tokyo', false);"
        );
        let q = sync_sql(&None, &s(&[])).unwrap();
        assert_eq!(q, "RESET SESSION AUTHORIZATION;RESET ROLE;RESET ALL;");
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
