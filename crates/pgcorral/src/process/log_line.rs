//! PgBouncer's log line (`log_format = "pgbouncer"`): `2026-01-02 03:04:05.678 UTC [pid] LOG
//! C-7: db/user@addr message (other=fields)`, for the scripts that read PgBouncer's logs.

use std::fmt::{self, Write as _};

use time::format_description::FormatItem;
use time::macros::format_description;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The fields an event names its connection by: `conn` ("C-7", "S-3"), `db`, `user`, `addr`.
/// Events that have them are prefixed as PgBouncer's are; other fields follow the message.
pub const CONN_FIELDS: [&str; 4] = ["conn", "db", "user", "addr"];

const STAMP: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:3] UTC");

/// Writes events as PgBouncer does (times in UTC; PgBouncer's are in local time).
pub struct PgbouncerLine {
    /// Without time, pid and level: syslog adds its own.
    bare: bool,
}

impl PgbouncerLine {
    pub fn new() -> PgbouncerLine {
        PgbouncerLine { bare: false }
    }

    /// The connection prefix and message only, as PgBouncer sends syslog.
    pub fn bare() -> PgbouncerLine {
        PgbouncerLine { bare: true }
    }
}

impl Default for PgbouncerLine {
    fn default() -> Self {
        PgbouncerLine::new()
    }
}

/// PgBouncer's level words.
fn level_word(level: Level) -> &'static str {
    match level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARNING",
        Level::INFO => "LOG",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "NOISE",
    }
}

impl<S, N> FormatEvent<S, N> for PgbouncerLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut f = Fields::default();
        event.record(&mut f);
        if !self.bare {
            let now = time::OffsetDateTime::now_utc();
            let stamp = now.format(STAMP).map_err(|_| fmt::Error)?;
            let level = level_word(*event.metadata().level());
            // Asked at each line, not when the log was set up: `-d` forks after that, and the
            // lines are the daemon's (the pidfile's pid).
            write!(w, "{stamp} [{}] {level} ", std::process::id())?;
        }
        w.write_str(&f.line())?;
        writeln!(w)
    }
}

/// An event's fields, as the line needs them.
#[derive(Default)]
struct Fields {
    message: String,
    /// `conn`, `db`, `user`, `addr`, when given.
    conn: [Option<String>; 4],
    rest: String,
}

impl Fields {
    /// `C-7: db/user@addr message (k=v, ...)`; without a `conn`, the message alone.
    fn line(&self) -> String {
        let mut out = String::with_capacity(self.message.len() + self.rest.len() + 48);
        if let Some(conn) = &self.conn[0] {
            let part = |i: usize, none: &'static str| self.conn[i].as_deref().unwrap_or(none);
            let _ = write!(
                out,
                "{conn}: {}/{}@{} ",
                part(1, "(nodb)"),
                part(2, "(nouser)"),
                part(3, "(noaddr)")
            );
        }
        out.push_str(&self.message);
        // Without a connection, its parts (a pool's database and user) go with the rest.
        let loose = match self.conn[0] {
            Some(_) => None,
            None => Some(CONN_FIELDS.iter().zip(&self.conn).skip(1)),
        };
        let mut fields: Vec<String> = loose
            .into_iter()
            .flatten()
            .filter_map(|(name, v)| Some(format!("{name}={}", v.as_deref()?)))
            .collect();
        if !self.rest.is_empty() {
            fields.push(self.rest.clone());
        }
        if !fields.is_empty() {
            let _ = write!(out, " ({})", fields.join(", "));
        }
        out
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record(field, format_args!("{value:?}"));
    }
}

impl Fields {
    fn record(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        let name = field.name();
        if name == "message" {
            let _ = self.message.write_fmt(value);
        } else if let Some(i) = CONN_FIELDS.iter().position(|&c| c == name) {
            self.conn[i] = Some(value.to_string());
        } else {
            if !self.rest.is_empty() {
                self.rest.push_str(", ");
            }
            let _ = write!(self.rest, "{name}={value}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Fields;

    #[test]
    fn a_connection_is_prefixed_and_other_fields_follow() {
        let f = Fields {
            message: "closing because: client close request (age=3s)".into(),
            conn: [
                Some("C-7".into()),
                Some("p0".into()),
                Some("bob".into()),
                Some("127.0.0.1:5000".into()),
            ],
            rest: String::new(),
        };
        assert_eq!(
            f.line(),
            "C-7: p0/bob@127.0.0.1:5000 closing because: client close request (age=3s)"
        );
        let f = Fields {
            message: "stats: 0 xacts/s".into(),
            conn: Default::default(),
            rest: "key=auth_type".into(),
        };
        assert_eq!(f.line(), "stats: 0 xacts/s (key=auth_type)");
        let f = Fields {
            message: "login attempt".into(),
            conn: [Some("C-1".into()), None, None, Some("unix:6432".into())],
            rest: String::new(),
        };
        assert_eq!(f.line(), "C-1: (nodb)/(nouser)@unix:6432 login attempt");
        let f = Fields {
            message: "taking connection from reserve_pool".into(),
            conn: [None, Some("p0".into()), Some("bob".into()), None],
            rest: "n=1".into(),
        };
        assert_eq!(
            f.line(),
            "taking connection from reserve_pool (db=p0, user=bob, n=1)"
        );
    }
}
