//! One server of each of several shards, each in a transaction, for a request pgcorral splits
//! between shards (a COPY, a multi-row INSERT): check out and begin, read answers, commit or
//! roll back everywhere, and answer the client.

use bytes::BytesMut;
use pgwire::backend::{self, TxStatus};
use pgwire::encode;

use super::state::restore;
use super::LoggedIn;
use crate::client_conn::ClientConn;
use crate::cluster::{Shards, Target, Want};
use crate::error::{Error, Kind, Result};
use crate::net::framed::read_message;
use crate::pool::Checkout;
use crate::session;
use crate::session::exec;

/// A primary of each of `shards`, with the client's settings, in a transaction.
pub(super) async fn open(
    client: &ClientConn,
    session: &LoggedIn,
    shards: impl IntoIterator<Item = usize>,
) -> Result<Vec<Checkout>> {
    let mut servers = Vec::new();
    for shard in shards {
        let target = Target {
            shards: Shards::One(shard),
            want: Want::Primary,
            writes: true,
        };
        let mut s = session
            .cluster
            .checkout(target, client.worker, 0, session.wait)
            .await?;
        if !session::matches(&s.applied, &session.settings) {
            restore(&mut s, &session.settings).await?;
        }
        exec::in_transaction(&mut s, "BEGIN").await?;
        servers.push(s);
    }
    Ok(servers)
}

/// Commits every shard's transaction, one after the other.
pub(super) async fn commit(servers: &mut [Checkout]) -> Result<()> {
    for s in servers.iter_mut() {
        exec::in_transaction(s, "COMMIT").await?;
    }
    Ok(())
}

/// Notes a server's transaction status from its ReadyForQuery body.
pub(super) fn note_ready(s: &mut Checkout, body: &[u8]) {
    s.state.tx = body
        .first()
        .copied()
        .and_then(TxStatus::from_byte)
        .unwrap_or(TxStatus::Failed);
}

/// Writes pgcorral's answer to the client.
pub(super) async fn reply(client: &mut ClientConn, out: &[u8]) -> Result<()> {
    client
        .stream
        .send(out)
        .await
        .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))
}

/// The row count of a CommandComplete tag (`COPY 5`, `INSERT 0 5`).
fn rows_of(tag: &[u8]) -> u64 {
    std::str::from_utf8(tag)
        .ok()
        .and_then(|t| t.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Reads a server's answers up to its ReadyForQuery: the last command's row count (`COPY n`,
/// `INSERT 0 n`), or its error.
pub(super) async fn until_ready(s: &mut Checkout) -> Result<std::result::Result<u64, BytesMut>> {
    let mut count = 0;
    let mut error = None;
    loop {
        let (tag, body) = read_server(s).await?;
        match tag {
            backend::COMMAND_COMPLETE => {
                let tag = body.strip_suffix(&[0]).unwrap_or(&body);
                count = rows_of(tag);
            }
            backend::ERROR_RESPONSE => {
                let mut whole = BytesMut::new();
                encode::message(&mut whole, tag, |b| b.extend_from_slice(&body));
                error.get_or_insert(whole);
            }
            backend::READY_FOR_QUERY => {
                note_ready(s, &body);
                return Ok(match error {
                    Some(e) => Err(e),
                    None => Ok(count),
                });
            }
            _ => {}
        }
    }
}

pub(super) async fn read_server(s: &mut Checkout) -> Result<(u8, BytesMut)> {
    let server = &mut **s;
    read_message(&mut server.stream, &mut server.rbuf, 1 << 30)
        .await
        .map_err(|e| {
            server.state.broken = true;
            Error::new(
                Kind::ServerIo,
                format!("a shard's server failed during COPY: {e}"),
            )
        })
}

pub(super) async fn send(s: &mut Checkout, bytes: &[u8]) -> Result<()> {
    s.stream.send(bytes).await.map_err(|e| {
        s.state.broken = true;
        Error::with_source(Kind::ServerIo, "write to a shard's server during COPY", e)
    })
}

/// Rolls back every shard's transaction (a server that cannot is closed, not reused).
pub(super) async fn abort(servers: &mut [Checkout]) {
    for s in servers.iter_mut() {
        if exec::in_transaction(s, "ROLLBACK").await.is_err() {
            s.state.broken = true;
        }
    }
}

pub(super) async fn answer_error(client: &mut ClientConn, code: &str, msg: &str) -> Result<()> {
    let mut e = BytesMut::new();
    encode::error_response(&mut e, "ERROR", code, msg);
    answer_raw(client, &e, true).await
}

/// An error (whole ErrorResponse) for the client, and its ReadyForQuery when `ready`.
pub(super) async fn answer_raw(client: &mut ClientConn, error: &[u8], ready: bool) -> Result<()> {
    let mut out = BytesMut::from(error);
    if ready {
        encode::ready_for_query(&mut out, TxStatus::Idle);
    }
    reply(client, &out).await
}
