//! A sharded database's transaction between two of its batches: the next one stays on the
//! transaction's shard, spreads the transaction to another shard (ended with it by pgcorral,
//! [`crate::link::spanning`]), or the transaction fails as PostgreSQL fails it.

use bytes::{Buf, BytesMut};
use pgwire::backend::TxStatus;
use pgwire::encode;

use super::{request, LoggedIn};
use crate::client_conn::ClientConn;
use crate::cluster::{Shards, Target};
use crate::error::{Error, Kind, Result};
use crate::link::{spanning, Attach, Link};
use crate::route::{self, InTransaction};
use crate::session::exec;

/// A sharded database's batch inside a transaction, checked against the transaction's shard:
/// true when it was answered or refused here (the transaction then failed, as it would on
/// PostgreSQL), false when it goes to the server.
pub(super) async fn check_in_transaction(
    client: &mut ClientConn,
    router: &route::Router,
    session: &mut LoggedIn,
) -> Result<bool> {
    let Some(target) = session.route.as_ref().and_then(|r| r.target) else {
        return Ok(false);
    };
    let Shards::One(shard) = target.shards else {
        return Ok(false);
    };
    loop {
        let spanning = matches!(session.link, Link::Spanning(_));
        let server = session.link.pooled().expect("held in a transaction");
        let status = server.state.tx;
        match route::in_transaction(
            client,
            (&session.cluster, router),
            super::routing(&mut session.route),
            (shard, spanning),
            status,
        )
        .await?
        {
            InTransaction::Go => return Ok(false),
            InTransaction::Answered => return Ok(true),
            InTransaction::NeedMore => {
                if request::read_more(client).await?.is_none() {
                    return Err(Error::new(Kind::ClientIo, "client closed the connection"));
                }
            }
            InTransaction::Switch(_) if status == TxStatus::Failed => {
                // Failed where it is: every statement until its end is refused, as
                // PostgreSQL refuses them.
                let len = route::shard::request_len(client).unwrap_or(0);
                client.buf.advance(len);
                let mut out = BytesMut::new();
                route::tx::aborted(&mut out);
                encode::ready_for_query(&mut out, TxStatus::Failed);
                send(client, &out).await?;
                return Ok(true);
            }
            InTransaction::Switch(to) => {
                let route = super::routing(&mut session.route);
                let begin = route.tx_begin.clone().unwrap_or_default();
                let at = Attach {
                    cluster: &session.cluster,
                    slot: &session.slot,
                    worker: client.worker,
                    wait: session.wait,
                    settings: &session.settings,
                };
                spanning::switch(&mut session.link, &at, (shard, to), &begin, target.want).await?;
                let current = session.link.pooled().expect("switched");
                session.slot.set(Some(current.key.clone()));
                super::routing(&mut session.route).target = Some(Target {
                    shards: Shards::One(to),
                    ..target
                });
                return Ok(false);
            }
            InTransaction::End(cmd) => {
                if let Link::Spanning(s) = &mut session.link {
                    let ended = match cmd {
                        route::tx::TxCommand::Commit => spanning::before_commit(s).await?,
                        _ => {
                            spanning::rollback_others(s).await;
                            Ok(())
                        }
                    };
                    if let Err(error) = ended {
                        // Rolled back everywhere: the client's COMMIT is answered here.
                        let len = route::shard::request_len(client).unwrap_or(0);
                        client.buf.advance(len);
                        let mut out = error;
                        encode::ready_for_query(&mut out, TxStatus::Idle);
                        send(client, &out).await?;
                        session.slot.set(None);
                        session.link.release();
                        return Ok(true);
                    }
                }
                return Ok(false);
            }
            InTransaction::Fail(msg) => {
                let server = session.link.pooled().expect("held in a transaction");
                // The server's transaction fails too, so that it ends as the client sees it.
                let fail =
                    "DO $pgcorral$BEGIN RAISE EXCEPTION 'refused by pgcorral'; END$pgcorral$";
                let _ = exec::in_transaction(server, fail).await;
                let mut out = BytesMut::new();
                encode::error_response(&mut out, "ERROR", "0A000", &msg);
                encode::ready_for_query(&mut out, TxStatus::Failed);
                send(client, &out).await?;
                return Ok(true);
            }
        }
    }
}

async fn send(client: &mut ClientConn, out: &[u8]) -> Result<()> {
    client
        .stream
        .send(out)
        .await
        .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))
}
