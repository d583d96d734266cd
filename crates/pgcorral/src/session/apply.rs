//! Applying and reading session state on a server: the sync before a client's request, the
//! capture after a transaction that may have changed it, and the startup parameters at login.

use std::sync::Arc;

use super::exec;
use super::{capture_sql, parse_capture, set_sql, sync_sql, Captured, Settings, TIMEOUT};
use crate::error::{Error, Kind, Result};
use crate::server::ServerConn;

/// How many more times one of pgcorral's own Queries runs after a cancel ended it.
const CANCEL_RETRIES: usize = 3;

/// Runs one of pgcorral's own Queries, again when a cancel ended it (57014). Its first
/// statement always starts under the session's statement_timeout (the client's, 1 ms say;
/// `SET statement_timeout = 0` only spares the statements after it), and a timer that fires
/// there cancels that statement or, left pending, the next one. Each of these Queries is one
/// implicit transaction of transactional statements (SET, RESET, set_config, SELECT): a
/// cancelled one left the session as it was, so running it again is safe.
async fn own_query(server: &mut ServerConn, sql: &str) -> Result<Vec<exec::Rows>> {
    let mut left = CANCEL_RETRIES;
    loop {
        match exec::query_sets(server, sql).await {
            Err(e) if left > 0 && cancelled(&e) && !server.state.broken => left -= 1,
            done => return done,
        }
    }
}

fn cancelled(e: &Error) -> bool {
    e.kind() == Kind::ServerError && e.sqlstate() == "57014"
}

/// Brings `server` in line with `desired`; nothing is sent when it already matches.
pub async fn sync(server: &mut ServerConn, desired: &Settings) -> Result<()> {
    let Some(sql) = sync_sql(&server.applied, desired) else {
        return Ok(());
    };
    server.applied = None;
    own_query(server, &sql).await?;
    server.applied = Some(desired.clone());
    Ok(())
}

/// Reads the session's settings and server-bound state after the client changed them;
/// `custom` names the custom (dotted) settings to read back.
pub async fn capture(
    server: &mut ServerConn,
    login_user: &str,
    custom: &[String],
) -> Result<Captured> {
    server.applied = None;
    let sets = own_query(server, &capture_sql(login_user, custom)).await?;
    let captured = parse_capture(last_two(sets));
    // After a statement pgcorral could not see through, the session may hold more than the
    // capture reads (a custom setting whose name was never in the text): the server's settings
    // count as unknown, so the next checkout resets them all before applying its client's.
    server.applied = (!server.state.taint).then(|| captured.on_server.clone());
    server.statements.retain_names(&captured.statements);
    server.state.dirty = false;
    server.state.taint = false;
    server.state.catalog = false;
    read_hooks(server).await?;
    Ok(captured)
}

/// Reads the database's user code from its catalog when its pools no longer trust what they
/// know (never read, read before a statement that may have changed it, expired) or soon will
/// not (due), unless another server is reading it. A server error leaves it as it was (unknown:
/// every transaction that names anything is then captured and its server reset), and is
/// logged. The session is left as it was (the read's settings are its transaction's own).
pub async fn read_hooks(server: &mut ServerConn) -> Result<()> {
    server.read_hooks = false;
    let Some(watch) = server.hooks.clone() else {
        return Ok(());
    };
    let Some(_claim) = watch.claim_read() else {
        return Ok(());
    };
    let generation = watch.generation();
    match own_query(server, super::hooks::READ_SQL).await {
        Ok(mut sets) => {
            watch.offer(
                generation,
                super::hooks::read_rows(&sets.pop().unwrap_or_default()),
            );
            Ok(())
        }
        Err(e) if e.kind() == Kind::ServerError && !server.state.broken => {
            tracing::warn!(error = %e, "could not read the database's catalog for user code; every transaction that names anything is reset after it");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Applies a client's startup settings on top of `base` and reads back their canonical values.
pub async fn login(
    server: &mut ServerConn,
    base: &Settings,
    startup: &[(String, String)],
    login_user: &str,
) -> Result<Captured> {
    sync(server, base).await?;
    let mut sql = String::new();
    set_sql(&mut sql, startup);
    let custom: Vec<String> = super::custom_names_of(startup).collect();
    sql.push_str(&capture_sql(login_user, &custom));
    server.applied = None;
    let sets = own_query(server, &sql).await?;
    let captured = parse_capture(last_two(sets));
    server.applied = Some(captured.on_server.clone());
    Ok(captured)
}

/// On a server its client keeps (session mode, or pinned): sets again what the client has
/// (`desired`) but the server, as a capture or login read it (`on_server`), does not: the
/// client's statement_timeout, which pgcorral's own query turned off, and startup values a
/// RESET returned to the server's defaults (PostgreSQL returns to the startup value); the
/// capture's own statement_timeout of 0, where the client has none, is reset. Nothing else is:
/// the rest of the session stays as the client made it.
pub async fn reinstate(
    server: &mut ServerConn,
    on_server: &Settings,
    desired: &Settings,
) -> Result<()> {
    let missing: Vec<(String, String)> = desired
        .iter()
        .filter(|d| !on_server.contains(d))
        .cloned()
        .collect();
    // The capture's own 0, where the client has no statement_timeout of its session.
    let own_off =
        !desired.iter().any(|(n, _)| n == TIMEOUT) && on_server.iter().any(|(n, _)| n == TIMEOUT);
    if missing.is_empty() && !own_off {
        return Ok(());
    }
    let mut sql = String::new();
    if own_off {
        sql.push_str("RESET statement_timeout;");
    }
    set_sql(&mut sql, &missing);
    let known = server.applied.take().is_some();
    own_query(server, &sql).await?;
    if known {
        let mut now: Vec<(String, String)> = (on_server.iter())
            .filter(|(n, _)| !(missing.iter().any(|(m, _)| m == n) || own_off && n == TIMEOUT))
            .cloned()
            .collect();
        now.extend(missing);
        now.sort();
        server.applied = Some(Arc::new(now));
    }
    Ok(())
}

/// The rows of a capture's results, the last two of its Query (see [`super::capture_sql`]).
fn last_two(mut sets: Vec<exec::Rows>) -> exec::Rows {
    let tail = sets.split_off(sets.len().saturating_sub(2));
    tail.into_iter().flatten().collect()
}
