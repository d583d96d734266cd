//! Running pgcorral's own simple-protocol queries on a server between clients' requests: rows
//! are collected, ParameterStatus updates the server's known parameters, notifications are
//! kept for the client, and an error is returned as the server's own
//! ErrorResponse (after its ReadyForQuery has been read).

use std::sync::Arc;

use bytes::{Buf, BytesMut};
use corral_rt::timer;
use pgwire::backend::{self, TxStatus};

use crate::error::{Error, Kind, Result};
use crate::net::framed::read_message;
use crate::server;
use crate::server::ServerConn;

/// How long one of pgcorral's own queries may take before the server is given up.
pub const EXEC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The most bytes of notifications kept for a client while one of pgcorral's own
/// queries runs (see [`ServerConn::held`]); beyond it the server is given up rather than
/// lose one or buffer without bound.
const MAX_HELD: usize = 16 << 20;

/// Rows of text values (NULL as `None`).
pub type Rows = Vec<Vec<Option<String>>>;

/// Runs `sql` (one or more statements) and returns the rows of the last result. On an I/O error
/// or timeout the server is marked broken.
pub async fn query(server: &mut ServerConn, sql: &str) -> Result<Rows> {
    Ok(query_sets(server, sql).await?.pop().unwrap_or_default())
}

/// [`query`], returning the rows of each statement that returned rows, in order.
pub async fn query_sets(server: &mut ServerConn, sql: &str) -> Result<Vec<Rows>> {
    timed(server, sql, false).await
}

/// [`query`] inside a transaction of pgcorral's (the server is left in it).
pub async fn query_in_transaction(server: &mut ServerConn, sql: &str) -> Result<Rows> {
    Ok(timed(server, sql, true).await?.pop().unwrap_or_default())
}

/// Runs `sql` for the client inside its transaction (a deferred BEGIN, a statement that fails
/// the transaction): the server may be left in a transaction.
pub async fn in_transaction(server: &mut ServerConn, sql: &str) -> Result<()> {
    timed(server, sql, true).await.map(drop)
}

async fn timed(server: &mut ServerConn, sql: &str, in_tx: bool) -> Result<Vec<Rows>> {
    match timer::timeout(EXEC_TIMEOUT, run(server, sql, in_tx)).await {
        Ok(Ok(sets)) => Ok(sets),
        Ok(Err(e)) => {
            if e.kind() != Kind::ServerError {
                server.state.broken = true;
            }
            Err(e)
        }
        Err(_) => {
            server.state.broken = true;
            Err(Error::new(
                Kind::ServerIo,
                "server did not answer pgcorral's session query in time",
            ))
        }
    }
}

async fn run(server: &mut ServerConn, sql: &str, in_tx: bool) -> Result<Vec<Rows>> {
    let mut out = BytesMut::with_capacity(sql.len() + 8);
    pgwire::encode::query(&mut out, sql);
    server
        .stream
        .send(&out)
        .await
        .map_err(|e| Error::with_source(Kind::ServerIo, "write to server", e))?;
    let mut sets: Vec<Rows> = Vec::new();
    let mut failed: Option<Error> = None;
    loop {
        let (tag, body) = read_message(&mut server.stream, &mut server.rbuf, 1 << 30)
            .await
            .map_err(|e| Error::with_source(Kind::ServerIo, "server closed the connection", e))?;
        match tag {
            backend::ROW_DESCRIPTION => sets.push(Vec::new()),
            backend::DATA_ROW => {
                if let Some(rows) = sets.last_mut() {
                    rows.push(data_row(&body));
                }
            }
            backend::PARAMETER_STATUS => {
                if let Some((k, v)) = backend::parameter_status(&body) {
                    set_param(&mut server.params, k, v);
                }
            }
            backend::ERROR_RESPONSE => {
                let fields = backend::ErrorFields::parse(&body).unwrap_or_default();
                if fields.is_fatal() {
                    server.state.broken = true;
                }
                let mut raw = BytesMut::new();
                pgwire::encode::message(&mut raw, tag, |b| b.extend_from_slice(&body));
                failed.get_or_insert(Error::server(
                    format!("{} ({})", fields.message, fields.code),
                    raw.freeze(),
                    fields.code,
                ));
            }
            backend::NOTIFICATION_RESPONSE => {
                // Meant for the client that holds the server: kept for it, not dropped. (A
                // NoticeResponse here answers pgcorral's own statement, as PostgreSQL sends
                // notices only about the session's own commands: the client sent none of it.)
                if server.held.len() + body.len() > MAX_HELD {
                    server.state.broken = true;
                    return Err(Error::new(
                        Kind::ServerIo,
                        "too many notifications arrived during pgcorral's session query",
                    ));
                }
                pgwire::encode::message(&mut server.held, tag, |b| b.extend_from_slice(&body));
            }
            backend::READY_FOR_QUERY => {
                server.state.tx = body
                    .first()
                    .copied()
                    .and_then(TxStatus::from_byte)
                    .unwrap_or(TxStatus::Failed);
                if server.state.tx != TxStatus::Idle && !in_tx {
                    server.state.broken = true;
                }
                return match failed {
                    Some(e) => Err(e),
                    None => Ok(sets),
                };
            }
            _ => {}
        }
    }
}

/// Records a ParameterStatus value in a server's parameter list.
pub fn set_param(params: &mut server::ServerParams, name: &str, value: &str) {
    let list = Arc::make_mut(params);
    match list.iter_mut().find(|(k, _)| k == name) {
        Some((_, v)) => {
            if v != value {
                *v = value.to_string();
            }
        }
        None => list.push((name.to_string(), value.to_string())),
    }
}

pub(crate) fn data_row(body: &[u8]) -> Vec<Option<String>> {
    let mut b = body;
    if b.len() < 2 {
        return Vec::new();
    }
    let n = b.get_i16().max(0) as usize;
    let mut row = Vec::with_capacity(n);
    for _ in 0..n {
        if b.len() < 4 {
            break;
        }
        let len = b.get_i32();
        if len < 0 {
            row.push(None);
            continue;
        }
        let len = (len as usize).min(b.len());
        row.push(Some(String::from_utf8_lossy(&b[..len]).into_owned()));
        b.advance(len);
    }
    row
}
