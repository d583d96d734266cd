//! A sharded database's transaction between two of its batches: the next one stays on the
//! transaction's shard, spreads the transaction to another shard (ended with it by pgcorral,
//! [`crate::link::spanning`]), or the transaction fails as PostgreSQL fails it.

use bytes::{Buf, BytesMut};
use pgwire::backend::TxStatus;
use pgwire::encode;

use super::{request, LoggedIn};
use crate::client_conn::ClientConn;
use crate::cluster::{Shards, Target, Want};
use crate::error::{Error, Kind, Result};
use crate::link::{copy_in, gather, insert, pipeline, scatter, spanning, Attach, Link};
use crate::route::{self, InTransaction};
use crate::services::Services;
use crate::session::exec;

/// A sharded database's batch inside a transaction, checked against the transaction's shard:
/// true when it was answered or refused here (the transaction then failed, as it would on
/// PostgreSQL), false when it goes to the server.
pub(super) async fn check_in_transaction(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
) -> Result<bool> {
    let router = &services.router;
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
            InTransaction::Switch(_)
            | InTransaction::Pipeline(_)
            | InTransaction::SplitInsert(_)
            | InTransaction::Scatter(_)
            | InTransaction::Gather(_)
            | InTransaction::CopyIn(_)
                if status == TxStatus::Failed =>
            {
                // Failed where it is: every statement until its end is refused, as
                // PostgreSQL refuses them.
                let len = route::shard::request_len(client).unwrap_or(0);
                client.buf.advance(len);
                let mut out = BytesMut::new();
                route::tx::aborted(&mut out);
                encode::ready_for_query(&mut out, TxStatus::Failed);
                client.reply(&out).await?;
                return Ok(true);
            }
            InTransaction::Pipeline(shards) => {
                run_split(client, services, session, Split::Pipeline(shards), shard).await?;
                return Ok(true);
            }
            InTransaction::SplitInsert(rows) => {
                run_split(client, services, session, Split::Insert(rows), shard).await?;
                return Ok(true);
            }
            InTransaction::Scatter(w) => {
                run_split(client, services, session, Split::Scatter(w), shard).await?;
                return Ok(true);
            }
            InTransaction::Gather(g) => {
                run_split(client, services, session, Split::Gather(g), shard).await?;
                return Ok(true);
            }
            InTransaction::CopyIn(table) => {
                run_split(client, services, session, Split::Copy(table), shard).await?;
                return Ok(true);
            }
            InTransaction::Switch(to) => {
                let route = super::routing(&mut session.route);
                let begin = route.tx_begin.clone().unwrap_or_default();
                let (at, link) = attach_and_link(services, session, client.worker);
                spanning::switch(link, &at, (shard, to), &begin, target.want).await?;
                let current = session.link.pooled().expect("switched");
                session.slot.set(Some(current.key.clone()));
                super::routing(&mut session.route).target = Some(Target {
                    shards: Shards::One(to),
                    ..target
                });
                return Ok(false);
            }
            InTransaction::Prepare(gid) => {
                if let Link::Spanning(s) = &mut session.link {
                    match spanning::before_prepare(s, &gid).await? {
                        Ok(shards) => {
                            if let (Some(sharding), false) =
                                (session.cluster.sharding(), shards.is_empty())
                            {
                                sharding.gids.note_together(&gid, shards);
                            }
                        }
                        Err(error) => {
                            // Rolled back everywhere: the client's PREPARE is answered here.
                            return rolled_back(client, session, error).await;
                        }
                    }
                }
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
                        return rolled_back(client, session, error).await;
                    }
                }
                return Ok(false);
            }
            InTransaction::Fail(msg) => {
                spanning::refuse(client, &mut session.link, "0A000", &msg).await?;
                return Ok(true);
            }
        }
    }
}

/// The end of a transaction across shards that pgcorral rolled back everywhere (a shard
/// refused to prepare): the client's request is answered with `error`, and its servers go.
async fn rolled_back(
    client: &mut ClientConn,
    session: &mut LoggedIn,
    error: BytesMut,
) -> Result<bool> {
    let len = route::shard::request_len(client).unwrap_or(0);
    client.buf.advance(len);
    let mut out = error;
    encode::ready_for_query(&mut out, TxStatus::Idle);
    client.reply(&out).await?;
    session.slot.set(None);
    session.link.release();
    Ok(true)
}

/// The client's cancel slot, cluster and settings to acquire servers with, beside its link.
fn attach_and_link<'a>(
    services: &Services,
    session: &'a mut LoggedIn,
    worker: usize,
) -> (Attach<'a>, &'a mut Link) {
    let at = Attach {
        max_prepared: services.config.load().general.max_prepared_statements,
        cluster: &session.cluster,
        slot: &session.slot,
        worker,
        wait: session.wait,
        settings: &session.settings,
    };
    (at, &mut session.link)
}

/// A request split between shards inside the client's transaction.
pub(super) enum Split {
    /// An extended-protocol batch: each Bind's shards, in order.
    Pipeline(Vec<Vec<usize>>),
    /// A multi-row INSERT: each row's shard, in order.
    Insert(Vec<usize>),
    /// A write run on several shards.
    Scatter(Box<route::Scattered>),
    /// A read asked of several shards.
    Gather(Box<route::Gathered>),
    /// A `COPY ... FROM STDIN` into sharded table `n`, split between every shard.
    Copy(usize),
}

impl Split {
    /// The first shard it runs on.
    fn first(&self) -> usize {
        let shards: &[usize] = match self {
            Split::Pipeline(binds) => {
                return binds.iter().flatten().copied().min().unwrap_or(0);
            }
            Split::Insert(s) => s,
            Split::Scatter(s) => &s.shards,
            Split::Gather(g) => &g.shards,
            Split::Copy(_) => &[0],
        };
        shards.iter().copied().min().unwrap_or(0)
    }
}

/// The first request of the client's transaction (begun by a lone BEGIN) split between
/// shards: the transaction begins on the first of them and spreads to the others.
pub(super) async fn begin_split(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
    split: Split,
) -> Result<()> {
    let begin = super::routing(&mut session.route)
        .tx_begin
        .clone()
        .unwrap_or_default();
    let first = split.first();
    let (at, link) = attach_and_link(services, session, client.worker);
    let mut s = at.checkout(first, Want::Primary, true).await?;
    exec::in_transaction(&mut s, &begin).await?;
    at.slot.set(Some(s.key.clone()));
    *link = Link::Pooled(s);
    super::routing(&mut session.route).target = Some(Target {
        shards: Shards::One(first),
        want: Want::Primary,
        writes: true,
    });
    run_split(client, services, session, split, first).await?;
    super::routing(&mut session.route).check_next = true;
    Ok(())
}

/// Runs `split` inside the client's transaction, now on `shard`; the transaction's target
/// follows the shard it is on after it.
async fn run_split(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
    split: Split,
    shard: usize,
) -> Result<()> {
    let route = super::routing(&mut session.route);
    let begin = route.tx_begin.clone().unwrap_or_default();
    let escapes = route.escapes;
    let (at, link) = attach_and_link(services, session, client.worker);
    let registry = &services.statements;
    let link = (link, &*begin);
    let now = match split {
        Split::Pipeline(shards) => {
            pipeline::in_transaction(client, &at, registry, (&shards, shard), link).await?
        }
        Split::Insert(rows) => {
            insert::in_transaction(client, &at, (registry, escapes), (rows, shard), link).await?
        }
        Split::Copy(table) => copy_in::in_transaction(client, &at, (table, shard), link).await?,
        Split::Scatter(w) => {
            scatter::in_transaction(client, &at, (&w, registry), shard, link).await?
        }
        Split::Gather(g) => {
            gather::in_transaction(client, &at, (&g, registry), shard, link).await?
        }
    };
    let route = super::routing(&mut session.route);
    if let Some(t) = &mut route.target {
        t.shards = Shards::One(now);
    }
    Ok(())
}
