//! Thin entry points for the cargo-fuzz targets in `fuzz/` into decoders that are not public
//! otherwise. Not an API: hidden from the docs, and nothing in pgcorral uses it.

/// `prepared::sql::parse`: the SQL `PREPARE`/`EXECUTE`/`DEALLOCATE`/`DISCARD ALL` recogniser.
pub use crate::prepared::sql::{parse as prepared_sql, prepared_query, Command as PreparedSql};

use crate::admin::command;

/// The admin console's command parser; `Some(read_only)` when `text` parses.
pub fn admin_command(text: &str) -> Option<bool> {
    command::parse(text).ok().map(|c| c.read_only())
}
