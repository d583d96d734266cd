//! Thin entry points for the cargo-fuzz targets in `fuzz/` into decoders that are not public
//! otherwise. Not an API: hidden from the docs, and nothing in pgcorral uses it.

/// `prepared::sql::parse`: the SQL `PREPARE`/`EXECUTE`/`DEALLOCATE`/`DISCARD ALL` recogniser.
pub use crate::prepared::sql::{parse as prepared_sql, prepared_query, Command as PreparedSql};

use crate::admin::command;

/// The admin console's command parser; `Some(read_only)` when `text` parses.
pub fn admin_command(text: &str) -> Option<bool> {
    command::parse(text).ok().map(|c| c.read_only())
}

#[cfg(fuzzing)]
use crate::session;

/// `session::lex` against PostgreSQL's own scanner (`session::lex::oracle`): `Err` says where
/// they disagree on a text PostgreSQL parses. Built only by cargo-fuzz (`--cfg fuzzing`).
#[cfg(fuzzing)]
pub fn session_lex_oracle(sql: &[u8]) -> Result<(), String> {
    session::lex_oracle(sql)
}
