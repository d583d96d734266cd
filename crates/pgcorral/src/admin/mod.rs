//! The admin console: clients that connect to database `pgbouncer` or `pgcorral` as one of
//! `admin_users` (everything) or `stats_users` (SHOW only) get PgBouncer's console, over the
//! simple and the extended protocol. [`command`] parses, [`show`] answers SHOW, [`crate::rows`]
//! encodes result sets.

mod actions;
pub(crate) mod command;
mod show;
mod show_conns;
mod show_shards;
mod show_stats;
mod show_tenants;

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use actions::Refusal;
use bytes::{Buf, BytesMut};
use command::Command;
use pgwire::backend::{self as be, TxStatus};
use pgwire::frontend as fe;

use crate::client_conn::ClientConn;
use crate::logsafe::Esc;
use crate::net::framed::{read_message, ReadError};
use crate::pool::stats::Totals;
use crate::reload;
use crate::rows::Table;
use crate::services::{Services, Stop};

/// What SHOW VERSION answers and the first line of `pgcorral --version`: one string, so that
/// tools reading either see the same (PgBouncer's test suite compares them). Monitoring tools
/// read `PgBouncer (\d+)\.(\d+)` out of it to pick their SHOW columns: the release named is
/// the one whose columns pgcorral's SHOW commands have.
pub const VERSION: &str = concat!(
    "pgcorral ",
    env!("CARGO_PKG_VERSION"),
    " (PgBouncer 1.18.0 compatible)"
);

/// SIGUSR1: PAUSE of every database, as the console's PAUSE (waits until the servers are back,
/// then closes the idle ones).
pub async fn pause_all(services: &Services) {
    let _ = actions::pause(services, None).await;
}

/// The console's database as SHOW DATABASES lists it, and as its clients are counted.
pub const CONSOLE_DB: &str = "pgbouncer";

/// Database names that open the console.
pub fn is_console(database: &str) -> bool {
    database == "pgbouncer" || database == "pgcorral"
}

/// What a console user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Admin,
    Stats,
}

/// The role `user` has in the console, if any.
pub fn role(services: &Services, user: &str) -> Option<Role> {
    let config = services.config.load();
    let g = &config.general;
    if g.admin_users.iter().any(|u| u == user) {
        Some(Role::Admin)
    } else if g.stats_users.iter().any(|u| u == user) {
        Some(Role::Stats)
    } else {
        None
    }
}

/// What running one command produced.
enum Answer {
    Table(Table),
    /// A command tag, with a notice before it (SHOW HELP).
    Done {
        tag: &'static str,
        notice: Option<(String, String)>,
    },
}

/// Serves a logged-in console client until it leaves.
pub async fn serve(client: &mut ClientConn, services: &Services, role: Role) {
    services.consoles.fetch_add(1, Ordering::Relaxed);
    let _ = session(client, services, role).await;
    services.consoles.fetch_sub(1, Ordering::Relaxed);
}

async fn session(
    client: &mut ClientConn,
    services: &Services,
    role: Role,
) -> Result<(), ReadError> {
    let mut out = BytesMut::new();
    // Extended protocol: statement and portal texts by name; skipping after an error.
    let mut named = Named::default();
    let mut skipping = false;
    loop {
        if !out.is_empty() && client.buf.is_empty() {
            client.stream.send(&out).await.map_err(ReadError::Io)?;
            out.clear();
        }
        let (tag, mut body) =
            match read_message(&mut client.stream, &mut client.buf, client.max_len).await {
                Ok(m) => m,
                Err(ReadError::Closed) => return Ok(()),
                Err(e) => return Err(e),
            };
        if skipping && tag != fe::SYNC && tag != fe::QUERY && tag != fe::TERMINATE {
            continue;
        }
        match tag {
            fe::QUERY => {
                skipping = false;
                let text = fe::query_text(&body).unwrap_or_default().to_string();
                if text.trim().trim_end_matches(';').trim().is_empty() {
                    pgwire::encode::empty(&mut out, be::EMPTY_QUERY_RESPONSE);
                } else {
                    counted(services);
                    match run(services, role, &text).await {
                        Ok(a) => answer(&mut out, &a, true),
                        Err(e) => error(&mut out, &e),
                    }
                }
                pgwire::encode::ready_for_query(&mut out, TxStatus::Idle);
            }
            fe::PARSE => {
                let name = cstr(&mut body);
                let text = String::from_utf8_lossy(&cstr(&mut body)).into_owned();
                named.statements.insert(name, text);
                pgwire::encode::empty(&mut out, be::PARSE_COMPLETE);
            }
            fe::BIND => skipping = !named.bind(&mut body, &mut out),
            fe::DESCRIBE => skipping = !named.describe(services, &mut body, &mut out),
            fe::EXECUTE => {
                let portal = cstr(&mut body);
                match named.portals.get(&portal) {
                    None => {
                        skipping = true;
                        error_code(&mut out, "34000", "portal does not exist");
                    }
                    Some(text) => {
                        counted(services);
                        match run(services, role, text).await {
                            Ok(a) => answer(&mut out, &a, false),
                            Err(e) => {
                                skipping = true;
                                error(&mut out, &e);
                            }
                        }
                    }
                }
            }
            fe::CLOSE => named.close(&mut body, &mut out),
            fe::SYNC => {
                skipping = false;
                named.portals.remove(&Vec::new());
                pgwire::encode::ready_for_query(&mut out, TxStatus::Idle);
            }
            fe::FLUSH => {
                client.stream.send(&out).await.map_err(ReadError::Io)?;
                out.clear();
            }
            fe::TERMINATE => return Ok(()),
            other => {
                error_code(
                    &mut out,
                    "08P01",
                    &format!(
                        "message type {} is not supported by the admin console",
                        other as char
                    ),
                );
                pgwire::encode::ready_for_query(&mut out, TxStatus::Idle);
            }
        }
    }
}

/// A console session's extended-protocol statements and portals: their texts by name.
#[derive(Default)]
struct Named {
    statements: HashMap<Vec<u8>, String>,
    portals: HashMap<Vec<u8>, String>,
}

impl Named {
    /// Bind: the portal takes its statement's text. False after an error (skip to Sync).
    fn bind(&mut self, body: &mut BytesMut, out: &mut BytesMut) -> bool {
        let portal = cstr(body);
        let stmt = cstr(body);
        match self.statements.get(&stmt) {
            Some(text) => {
                self.portals.insert(portal, text.clone());
                pgwire::encode::empty(out, be::BIND_COMPLETE);
                true
            }
            None => {
                error_code(out, "26000", "prepared statement does not exist");
                false
            }
        }
    }

    /// Describe of a statement (no parameters, then its rows) or a portal (its rows). False
    /// after an error.
    fn describe(&self, services: &Services, body: &mut BytesMut, out: &mut BytesMut) -> bool {
        let kind = if body.has_remaining() {
            body.get_u8()
        } else {
            0
        };
        let name = cstr(body);
        let text = if kind == b'S' {
            self.statements.get(&name)
        } else {
            self.portals.get(&name)
        };
        let Some(text) = text else {
            error_code(out, "26000", "prepared statement or portal does not exist");
            return false;
        };
        if kind == b'S' {
            // No parameters.
            pgwire::encode::message(out, be::PARAMETER_DESCRIPTION, |b| {
                bytes::BufMut::put_i16(b, 0)
            });
        }
        match describe(services, text) {
            Some(t) => t.describe(out),
            None => pgwire::encode::empty(out, be::NO_DATA),
        }
        true
    }

    /// Close of a statement or a portal (closing one that does not exist is no error).
    fn close(&mut self, body: &mut BytesMut, out: &mut BytesMut) {
        let kind = if body.has_remaining() {
            body.get_u8()
        } else {
            0
        };
        let name = cstr(body);
        if kind == b'S' {
            self.statements.remove(&name);
        } else {
            self.portals.remove(&name);
        }
        pgwire::encode::empty(out, be::CLOSE_COMPLETE);
    }
}

/// Counts a console command as PgBouncer counts its admin pool's: a transaction of one query.
fn counted(services: &Services) {
    let one = Totals {
        xact_count: 1,
        query_count: 1,
        ..Totals::default()
    };
    // From a worker's client task: the shared shard (usize::MAX owns none).
    services.console_stats.record(usize::MAX, &one);
}

/// The NUL-terminated string at the front of `body`, consumed.
fn cstr(body: &mut BytesMut) -> Vec<u8> {
    let end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
    let s = body.split_to(end).to_vec();
    if body.has_remaining() {
        body.advance(1);
    }
    s
}

/// The columns a command would answer with (None: it answers no rows).
fn describe(services: &Services, text: &str) -> Option<Table> {
    match command::parse(text) {
        Ok(Command::Show(what)) if what != "HELP" => show::table(services, &what).ok(),
        Ok(Command::ShowShardFor { value, database }) => {
            show_shards::shard_for(&services.config.load(), &value, database.as_deref()).ok()
        }
        _ => None,
    }
}

/// Runs one command for a user of `role`.
async fn run(services: &Services, role: Role, text: &str) -> Result<Answer, Refusal> {
    let cmd = command::parse(text).map_err(|e| ("42601", e))?;
    if role == Role::Stats && !cmd.read_only() {
        return Err(("42501", "admin access needed".to_string()));
    }
    let tag = cmd.name();
    let done = |notice: Option<(String, String)>| Answer::Done { tag, notice };
    match cmd {
        Command::Show(what) if what == "HELP" => Ok(done(Some((
            "Console usage".to_string(),
            format!("\n\tSHOW {}\n{HELP}", show::TOPICS),
        )))),
        Command::Show(what) => show::table(services, &what)
            .map(Answer::Table)
            .map_err(|e| ("0A000", e)),
        Command::ShowShardFor { value, database } => {
            show_shards::shard_for(&services.config.load(), &value, database.as_deref())
                .map(Answer::Table)
                .map_err(|e| ("22023", e))
        }
        Command::Pause(db) => actions::pause(services, db.as_deref())
            .await
            .map(|()| done(None)),
        Command::Resume(_) if services.shutdown.is_stopping() => {
            Err(("08P01", "pooler is shutting down".to_string()))
        }
        Command::Resume(db) => actions::resume(services, db.as_deref()).map(|()| done(None)),
        Command::Disable(db) => actions::disable(services, &db).map(|()| done(None)),
        Command::Enable(db) => actions::enable(services, &db).map(|()| done(None)),
        Command::Reconnect(db) => actions::reconnect(services, db.as_deref()).map(|()| done(None)),
        Command::Kill(db) => actions::kill(services, db.as_deref()).map(|()| done(None)),
        Command::KillClient(id) => actions::kill_client(services, &id).map(|()| done(None)),
        Command::WaitClose(db) => actions::wait_close(services, db.as_deref())
            .await
            .map(|()| done(None)),
        Command::Reload => match reload::reload(services) {
            Ok(a) => Ok(done(kept_notice(&a))),
            Err(e) => {
                // PgBouncer's words first (scripts match them), then why.
                tracing::warn!(error = %Esc(&e), "RELOAD failed");
                Err((
                    "F0000",
                    format!("RELOAD failed, see logs for additional details: {e}"),
                ))
            }
        },
        Command::Set { key, .. } if show::fake_param(&key).is_some() => {
            Ok(done(Some(("SET ignored".to_string(), String::new()))))
        }
        Command::Set { key, value } => match reload::set(services, &key, &value) {
            Ok(a) => Ok(done(kept_notice(&a))),
            Err(e) => Err(("22023", e)),
        },
        Command::Shutdown(mode) => {
            // PgBouncer's words, for the scripts that read its log.
            tracing::info!(
                "{}",
                match mode {
                    Stop::Immediate => "SHUTDOWN command issued",
                    Stop::WaitForServers => "SHUTDOWN WAIT_FOR_SERVERS command issued",
                    Stop::WaitForClients => "SHUTDOWN WAIT_FOR_CLIENTS command issued",
                }
            );
            services.shutdown.begin(mode);
            Ok(done(None))
        }
        Command::Suspend => actions::suspend(services).await.map(|()| done(None)),
        Command::ClearCache(table) => {
            services.cache.clear(table.as_deref());
            Ok(done(None))
        }
    }
}

/// The commands that act, for SHOW HELP.
const HELP: &str = "\tSET key = arg\n\tRELOAD\n\tPAUSE [<db>]\n\tRESUME [<db>]\n\tDISABLE <db>\n\tENABLE <db>\n\tRECONNECT [<db>]\n\tKILL [<db>]\n\tSUSPEND\n\tKILL_CLIENT <id>\n\tWAIT_CLOSE [<db>]\n\tSHUTDOWN\n\tSHUTDOWN WAIT_FOR_SERVERS|WAIT_FOR_CLIENTS\n\tCLEAR CACHE [<table>]";

/// A notice naming the settings a reload could not change, or saying that the TLS settings a
/// SET took are not in force yet.
fn kept_notice(a: &reload::Applied) -> Option<(String, String)> {
    if let Some(e) = &a.hba_kept {
        return Some((
            "hba file could not be used, still using the old rules".into(),
            e.clone(),
        ));
    }
    if let Some(e) = &a.tls_kept {
        return Some((
            "TLS settings could not be applied, still using old configuration".into(),
            e.clone(),
        ));
    }
    (!a.kept.is_empty()).then(|| {
        (
            format!(
                "needs a restart (running value kept): {}",
                a.kept.join(", ")
            ),
            String::new(),
        )
    })
}

/// Writes an answer; `described`: the RowDescription goes first (simple protocol).
fn answer(out: &mut BytesMut, a: &Answer, described: bool) {
    match a {
        Answer::Table(t) => {
            if described {
                t.describe(out);
            }
            t.rows(out);
        }
        Answer::Done { tag, notice } => {
            if let Some((msg, detail)) = notice {
                pgwire::encode::message(out, be::NOTICE_RESPONSE, |b| {
                    for (k, v) in [
                        (b'S', "NOTICE"),
                        (b'V', "NOTICE"),
                        (b'C', "00000"),
                        (b'M', msg.as_str()),
                        (b'D', detail.as_str()),
                    ] {
                        bytes::BufMut::put_u8(b, k);
                        bytes::BufMut::put_slice(b, v.as_bytes());
                        bytes::BufMut::put_u8(b, 0);
                    }
                    bytes::BufMut::put_u8(b, 0);
                });
            }
            pgwire::encode::command_complete(out, tag);
        }
    }
}

fn error(out: &mut BytesMut, (code, msg): &(&'static str, String)) {
    error_code(out, code, msg);
}

fn error_code(out: &mut BytesMut, code: &str, msg: &str) {
    pgwire::encode::error_response(out, "ERROR", code, msg);
}
