//! PgBouncer's configuration file (pgbouncer.ini) read as it is: PgBouncer's sections, keys, units and defaults, converted to pgcorral's `Config`, with a warning naming each key pgcorral does not honour.

use std::collections::BTreeMap;
use std::path::Path;

use super::ini::{self, At, Item};
use super::pgbouncer_db::{database, peer, user};
use super::pgbouncer_general::{apply, finish, pgbouncer_general, Extra};
use super::pgbouncer_keys::known;
use super::pgcat::{Conv, Warning};
use super::validate::problems;
use super::{Config, ConfigError};

/// Is this file PgBouncer's? Its name ends with `.ini`, or it has a `[pgbouncer]` line, or it
/// starts with an `%include`.
pub fn is_pgbouncer(path: &Path, text: &str) -> bool {
    path.extension().is_some_and(|e| e == "ini")
        || text.lines().any(|l| l.trim() == "[pgbouncer]")
        || text
            .lines()
            .map(str::trim_start)
            .find(|l| !l.is_empty())
            .is_some_and(|l| l.starts_with("%include"))
}

/// Converts and validates a pgbouncer.ini text (`name` as the path was given; `%include`
/// files are read relative to the working directory, as PgBouncer reads them): the
/// configuration and a warning per key not honoured; or every error, one per line, each
/// starting with `file:line:` or the path and naming the key.
pub fn from_pgbouncer_str(name: &str, text: &str) -> Result<(Config, Vec<Warning>), ConfigError> {
    from_pgbouncer_with(name, text, &|f: &str| std::fs::read_to_string(f))
}

/// [`from_pgbouncer_str`] with the reader of `%include` files given.
pub(super) fn from_pgbouncer_with(
    name: &str,
    text: &str,
    read: &dyn Fn(&str) -> std::io::Result<String>,
) -> Result<(Config, Vec<Warning>), ConfigError> {
    let items = ini::parse(name, text, read).map_err(ConfigError)?;
    let mut c = Conv::default();
    let file = sections(&mut c, name, items);
    let cfg = convert(&mut c, file, name);
    if c.errors.is_empty() {
        // What the conversion could not foresee, in pgcorral's key names.
        c.errors
            .extend(problems(&cfg).iter().map(|p| format!("{name}: {p}")));
    }
    if c.errors.is_empty() {
        Ok((cfg, c.warnings))
    } else {
        Err(ConfigError(c.errors.join("\n")))
    }
}

/// A value and where it was written.
pub(super) type Line = (String, At);

/// The file's sections as PgBouncer keeps them: `[pgbouncer]` settings (each new
/// `[pgbouncer]` section starts from the defaults again; the last value of a key wins), and
/// the entries of `[databases]`, `[users]` and `[peers]` (a repeated name replaces the entry).
#[derive(Default)]
pub(super) struct Sections {
    pub pgbouncer: BTreeMap<String, Line>,
    pub databases: BTreeMap<String, Line>,
    pub users: BTreeMap<String, Line>,
    pub peers: BTreeMap<String, Line>,
}

fn sections(c: &mut Conv, name: &str, items: Vec<(Item, At)>) -> Sections {
    let mut s = Sections::default();
    let mut current: Option<String> = None;
    let mut main = false;
    for (item, at) in items {
        match item {
            Item::Section(sect) => {
                match sect.as_str() {
                    "pgbouncer" => {
                        s.pgbouncer.clear();
                        main = true;
                    }
                    "databases" | "users" | "peers" => {}
                    _ => c.errors.push(format!(
                        "{at}: invalid section \"{sect}\" in configuration (pgbouncer, databases, users or peers)"
                    )),
                }
                current = Some(sect);
            }
            Item::Pair { key, value } => {
                let map = match current.as_deref() {
                    None => {
                        c.errors.push(format!("{at}: value without section: {key}"));
                        continue;
                    }
                    Some("pgbouncer") => {
                        if !known(&key) {
                            c.errors
                                .push(format!("{at}: unknown parameter: pgbouncer/{key}"));
                            continue;
                        }
                        &mut s.pgbouncer
                    }
                    Some("databases") => &mut s.databases,
                    Some("users") => &mut s.users,
                    Some("peers") => &mut s.peers,
                    Some(_) => continue,
                };
                map.insert(key, (value, at));
            }
        }
    }
    if !main {
        c.errors.push(format!(
            "{name}: main section missing from config file: [pgbouncer]"
        ));
    }
    s
}

fn convert(c: &mut Conv, file: Sections, name: &str) -> Config {
    let mut cfg = Config {
        general: pgbouncer_general(),
        users: BTreeMap::new(),
        databases: BTreeMap::new(),
        peers: BTreeMap::new(),
    };
    let mut x = Extra::default();
    for (key, (value, at)) in &file.pgbouncer {
        apply(c, &mut cfg.general, &mut x, key, value, at);
    }
    for (name, (value, at)) in &file.databases {
        if let Some(db) = database(c, &cfg.general, &x, name, value, at) {
            cfg.databases.insert(name.clone(), db);
        }
    }
    for (name, (value, at)) in &file.users {
        if let Some(mut u) = user(c, name, value, at) {
            u.settings_only = true;
            cfg.users.insert(name.clone(), u);
        }
    }
    for (id, (value, at)) in &file.peers {
        if let Some((n, p)) = peer(c, id, value, at) {
            cfg.peers.insert(n.to_string(), p);
        }
    }
    finish(c, &mut cfg, &x, name);
    cfg
}

/// A value PgBouncer refused, as it says it: `pgbouncer.ini:12: invalid value "10s" for
/// parameter query_timeout: ...`.
pub(super) fn invalid(c: &mut Conv, at: &At, key: &str, value: &str, why: impl std::fmt::Display) {
    c.errors.push(format!(
        "{at}: invalid value \"{value}\" for parameter {key}: {why}"
    ));
}

/// A key pgcorral does not honour (or honours differently): `key` is the section and key
/// (`pgbouncer.tcp_keepalive`, `databases.app.connect_query`).
pub(super) fn warn(c: &mut Conv, at: &At, key: &str, why: impl std::fmt::Display) {
    c.warn(key, format!("{why} ({at})"));
}

/// An integer as C's `strtol(s, .., 0)` reads it, whole: `0x1F` hex, `0777` octal, `10`
/// decimal, an optional sign. `None` for anything else (`""`, `1.5`, `yes`, `10k`).
pub(super) fn strtol(s: &str) -> Option<i64> {
    let (neg, rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (radix, digits) = if let Some(h) = rest.strip_prefix("0x").or(rest.strip_prefix("0X")) {
        (16, h)
    } else if rest.len() > 1 && rest.starts_with('0') {
        (8, &rest[1..])
    } else {
        (10, rest)
    };
    if digits.is_empty() || !digits.chars().all(|ch| ch.is_digit(radix)) {
        return None;
    }
    let n = i64::from_str_radix(digits, radix).ok()?;
    Some(if neg { -n } else { n })
}

/// Seconds as C's `strtod` reads them (`0.5`, `120`, `1e2`), not negative, in milliseconds
/// (rounded), at most [`super::MAX_MS`] (more is for ever all the same, and could not be
/// written in pgcorral's own format). `None` for anything else (`10s`, `-1`, `""`).
pub(super) fn seconds_ms(s: &str) -> Option<u64> {
    let lower = s.to_ascii_lowercase();
    if lower.contains("inf") || lower.contains("nan") {
        return None;
    }
    let secs: f64 = s.parse().ok()?;
    let ms = (secs * 1000.0).round();
    (secs >= 0.0).then_some((ms as u64).min(super::MAX_MS))
}

/// An integer key's value that must not be negative (counts, sizes).
pub(super) fn count(s: &str) -> Result<usize, &'static str> {
    match strtol(s) {
        Some(n) if n >= 0 => usize::try_from(n).map_err(|_| "too large"),
        Some(_) => Err("must not be negative"),
        None => Err("not an integer (C's strtol: decimal, 0x hex or 0 octal)"),
    }
}
