//! A sharded database's transaction between two of its batches: the next one stays on the
//! transaction's shard, or the transaction fails as PostgreSQL fails it.

use bytes::BytesMut;
use pgwire::backend::TxStatus;
use pgwire::encode;

use super::{request, LoggedIn};
use crate::client_conn::ClientConn;
use crate::cluster::Shards;
use crate::error::{Error, Kind, Result};
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
    let Some(Shards::One(shard)) = session
        .route
        .as_ref()
        .and_then(|r| r.target)
        .map(|t| t.shards)
    else {
        return Ok(false);
    };
    let server = session.link.pooled().expect("held in a transaction");
    loop {
        let status = server.state.tx;
        match route::in_transaction(
            client,
            (&session.cluster, router),
            super::routing(&mut session.route),
            shard,
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
            InTransaction::Fail(msg) => {
                // The server's transaction fails too, so that it ends as the client sees it.
                let fail =
                    "DO $pgcorral$BEGIN RAISE EXCEPTION 'refused by pgcorral'; END$pgcorral$";
                let _ = exec::in_transaction(server, fail).await;
                let mut out = BytesMut::new();
                encode::error_response(&mut out, "ERROR", "0A000", &msg);
                encode::ready_for_query(&mut out, TxStatus::Failed);
                client
                    .stream
                    .send(&out)
                    .await
                    .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))?;
                return Ok(true);
            }
        }
    }
}
