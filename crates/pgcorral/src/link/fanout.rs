//! One server of each of several shards, each in a transaction of pgcorral's, for a request
//! split between shards (a COPY, a multi-row INSERT, a write to every shard): send, read
//! answers whole, commit (atomically, [`super::twophase`]) or roll back everywhere, and answer
//! the client.

use std::borrow::Borrow;

use bytes::BytesMut;
use pgwire::backend::{self, TxStatus};
use pgwire::encode;

use super::twophase::{self, Outcome};
use crate::cancel::CancelSlot;
use crate::client_conn::ClientConn;
use crate::cluster::Cluster;
use crate::error::{Error, Kind, Result};
use crate::net::framed::read_message;
use crate::pool::Checkout;
use crate::session::exec;

/// One server of each of several shards (in the order they were asked for), each in a
/// transaction begun by [`super::Attach::shards`]. Dropped without [`Fanout::commit`], each
/// server goes back through its checkout guard, which rolls its transaction back.
pub struct Fanout {
    servers: Vec<Checkout>,
    /// The shard of each server.
    shards: Vec<usize>,
    /// Where prepared transactions left by a failed commit are finished from.
    cluster: Cluster,
    worker: usize,
}

impl Fanout {
    pub(super) fn new(
        servers: Vec<Checkout>,
        shards: Vec<usize>,
        cluster: Cluster,
        worker: usize,
    ) -> Fanout {
        Fanout {
            servers,
            shards,
            cluster,
            worker,
        }
    }

    /// Its servers, in the order their shards were asked for.
    pub fn servers(&mut self) -> &mut [Checkout] {
        &mut self.servers
    }

    /// Commits every shard's transaction, atomically: with two-phase commit when there are
    /// several ([`twophase::commit`]). `Ok(Err(e))`: rolled back everywhere, `e` the client's
    /// error.
    pub async fn commit(&mut self) -> Result<std::result::Result<(), BytesMut>> {
        if let [one] = &mut self.servers[..] {
            return match exec::in_transaction(one, "COMMIT").await {
                Ok(()) => Ok(Ok(())),
                Err(e) if e.kind() == Kind::ServerError => {
                    let mut out = BytesMut::new();
                    e.write_response(&mut out, "ERROR");
                    Ok(Err(out))
                }
                Err(e) => Err(e),
            };
        }
        let outcome =
            twophase::commit(&mut self.servers, &self.shards, &self.cluster, self.worker).await?;
        Ok(match outcome {
            Outcome::Committed => Ok(()),
            Outcome::RolledBack(e) => Err(e),
        })
    }

    /// Rolls back every shard's transaction (a server that cannot is closed, not reused).
    pub async fn abort(&mut self) {
        for s in self.servers.iter_mut() {
            if exec::in_transaction(s, "ROLLBACK").await.is_err() {
                s.state.broken = true;
            }
        }
    }
}

/// The client's cancel requests aimed at several servers until dropped (which must be before
/// the servers go back: their checkout guards wait for cancels on their way).
pub(super) struct Aimed<'a>(&'a CancelSlot);

impl<'a> Aimed<'a> {
    /// Aims `slot` at every one of `servers`.
    pub(super) fn at<S: Borrow<Checkout>>(slot: &'a CancelSlot, servers: &[S]) -> Aimed<'a> {
        slot.set_many(servers.iter().map(|s| s.borrow().key.clone()).collect());
        Aimed(slot)
    }
}

impl Drop for Aimed<'_> {
    fn drop(&mut self) {
        self.0.set(None);
    }
}

/// A whole message of `tag` with `body`, as it came.
pub(super) fn whole(tag: u8, body: &[u8]) -> BytesMut {
    let mut m = BytesMut::new();
    encode::message(&mut m, tag, |b| b.extend_from_slice(body));
    m
}

/// Notes a server's transaction status from its ReadyForQuery body.
pub(super) fn note_ready(s: &mut Checkout, body: &[u8]) {
    s.state.tx = body
        .first()
        .copied()
        .and_then(TxStatus::from_byte)
        .unwrap_or(TxStatus::Failed);
}

/// A CommandComplete body (its NUL or not) split before its row count: `UPDATE 5` is
/// `("UPDATE", 5)`, `INSERT 0 5` is `("INSERT 0", 5)`; `None` for a tag without a count.
pub(super) fn counted(body: &[u8]) -> Option<(&str, u64)> {
    let tag = std::str::from_utf8(body.strip_suffix(&[0]).unwrap_or(body)).ok()?;
    let (prefix, n) = tag.rsplit_once(' ')?;
    Some((prefix, n.parse().ok()?))
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
                count = counted(&body).map_or(0, |(_, n)| n);
            }
            backend::ERROR_RESPONSE => {
                error.get_or_insert(whole(tag, &body));
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

/// A server's next message, whole (its tag and body); a failure marks the server broken.
pub(super) async fn read_server(s: &mut Checkout) -> Result<(u8, BytesMut)> {
    let server = &mut **s;
    read_message(&mut server.stream, &mut server.rbuf, 1 << 30)
        .await
        .map_err(|e| {
            server.state.broken = true;
            Error::new(Kind::ServerIo, format!("a shard's server failed: {e}"))
        })
}

/// Writes `bytes` to a server; a failure marks it broken.
pub(super) async fn send(s: &mut Checkout, bytes: &[u8]) -> Result<()> {
    s.stream.send(bytes).await.map_err(|e| {
        s.state.broken = true;
        Error::with_source(Kind::ServerIo, "write to a shard's server", e)
    })
}

/// An ErrorResponse of pgcorral's own (severity ERROR) with `code` and `msg`.
pub(super) fn error(code: &str, msg: &str) -> BytesMut {
    let mut e = BytesMut::new();
    encode::error_response(&mut e, "ERROR", code, msg);
    e
}

/// An ERROR with `code` and `msg` for the client, and its ReadyForQuery (idle).
pub(super) async fn answer_error(client: &mut ClientConn, code: &str, msg: &str) -> Result<()> {
    answer_raw(client, &error(code, msg), true).await
}

/// An error (whole ErrorResponse) for the client, and its ReadyForQuery when `ready`.
pub(super) async fn answer_raw(client: &mut ClientConn, error: &[u8], ready: bool) -> Result<()> {
    let mut out = BytesMut::from(error);
    if ready {
        encode::ready_for_query(&mut out, TxStatus::Idle);
    }
    client.reply(&out).await
}
