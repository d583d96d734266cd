//! A client's transaction that spread to several shards: the server of the shard its current
//! request runs on, and the others' servers in the same transaction, until its COMMIT (two
//! phases, the current server's commit the decision) or ROLLBACK.

use std::mem;

use bytes::BytesMut;
use pgwire::backend::TxStatus;

use super::twophase;
use super::{Attach, Link};
use crate::cancel::CancelSlot;
use crate::client_conn::ClientConn;
use crate::cluster::{Cluster, Want};
use crate::error::{Error, Kind, Result};
use crate::logsafe::Esc;
use crate::pool::Checkout;
use crate::session::{self, exec};

/// The transaction's servers.
pub struct Spanning {
    /// The server of the shard the client's requests now go to.
    pub current: Checkout,
    /// Its shard.
    pub shard: usize,
    /// The other shards' servers, each in the transaction.
    others: Vec<(usize, Checkout)>,
    /// Set once the others are prepared for the client's COMMIT.
    prepared: Option<Prepared>,
    /// The gid of the client's own PREPARE TRANSACTION, once the others are prepared with it.
    client_gid: Option<String>,
    cluster: Cluster,
    worker: usize,
}

/// The others' parts, prepared: their gid, and the current server's transaction id (whose
/// commit decides them).
struct Prepared {
    gid: String,
    xid: u64,
    /// Dropped unfinished (the client or a server gone before the decision was read): the
    /// prepared parts are finished in the background from the current server's outcome.
    recover: Option<(Cluster, usize)>,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some((cluster, worker)) = self.recover.take() {
            twophase::spawn_recovery(cluster, worker);
        }
    }
}

/// The transaction in `link` (now on `shard`) as one that spans shards: its one pooled server
/// becomes the current one.
fn spanning_of<'l>(link: &'l mut Link, at: &Attach<'_>, shard: usize) -> Result<&'l mut Spanning> {
    if let Link::Pooled(_) = link {
        let Link::Pooled(current) = mem::take(link) else {
            unreachable!("matched above")
        };
        *link = Link::Spanning(Box::new(Spanning {
            current,
            shard,
            others: Vec::new(),
            prepared: None,
            client_gid: None,
            cluster: at.cluster.clone(),
            worker: at.worker,
        }));
    }
    match link {
        Link::Spanning(spanning) => Ok(spanning),
        _ => Err(Error::new(
            Kind::ServerIo,
            "a transaction across shards without its server",
        )),
    }
}

/// Moves the client's transaction to shard `to` for its next request: a server of that shard
/// joins it (its `begin` run there first), unless it has one already. `link` holds the
/// transaction's server(s), now on shard `shard`.
pub async fn switch(
    link: &mut Link,
    at: &Attach<'_>,
    (shard, to): (usize, usize),
    begin: &str,
    want: Want,
) -> Result<()> {
    let spanning = spanning_of(link, at, shard)?;
    let next = match spanning.others.iter().position(|(n, _)| *n == to) {
        Some(i) => spanning.others.swap_remove(i).1,
        None => {
            let mut s = at.checkout(to, want, true).await?;
            exec::in_transaction(&mut s, begin).await?;
            s
        }
    };
    let previous = mem::replace(&mut spanning.current, next);
    spanning.others.push((spanning.shard, previous));
    spanning.shard = to;
    Ok(())
}

/// The transaction in `link` (now on `shard`) with a server of each of `shards` (`begin`
/// run on each that joins), its current server unchanged.
pub async fn join<'l>(
    link: &'l mut Link,
    at: &Attach<'_>,
    shard: usize,
    (shards, begin): (&[usize], &str),
) -> Result<&'l mut Spanning> {
    let spanning = spanning_of(link, at, shard)?;
    for &to in shards {
        if to == spanning.shard || spanning.others.iter().any(|(n, _)| *n == to) {
            continue;
        }
        let mut s = at.checkout(to, Want::Primary, true).await?;
        exec::in_transaction(&mut s, begin).await?;
        spanning.others.push((to, s));
    }
    Ok(spanning)
}

impl Spanning {
    /// The servers of `shards` (each one the transaction has), in that order.
    pub fn servers(&mut self, shards: &[usize]) -> Vec<&mut Checkout> {
        let mut all: Vec<(usize, &mut Checkout)> = self
            .others
            .iter_mut()
            .map(|(n, s)| (*n, s))
            .chain(std::iter::once((self.shard, &mut self.current)))
            .filter(|(n, _)| shards.contains(n))
            .collect();
        all.sort_by_key(|(n, _)| shards.iter().position(|s| s == n));
        all.into_iter().map(|(_, s)| s).collect()
    }

    /// The shard of a server whose transaction failed, if one did.
    pub fn failed_shard(&self) -> Option<usize> {
        if self.current.state.tx == TxStatus::Failed {
            return Some(self.shard);
        }
        self.others
            .iter()
            .find(|(_, s)| s.state.tx == TxStatus::Failed)
            .map(|(n, _)| *n)
    }

    /// Answers a request split between the transaction's shards: `out`, then (when `ready`)
    /// its ReadyForQuery. After an error (`failed`) a failed server becomes the current one
    /// (or the current one is made to fail), so that the client's next requests are refused
    /// as PostgreSQL refuses them. Returns the shard the transaction is now on.
    pub async fn answer(
        &mut self,
        client: &mut ClientConn,
        slot: &CancelSlot,
        mut out: BytesMut,
        (failed, ready): (bool, bool),
    ) -> Result<usize> {
        let status = if failed {
            match self.failed_shard() {
                Some(n) => self.make_current(n),
                None => fail(&mut self.current).await,
            }
            TxStatus::Failed
        } else {
            TxStatus::InTransaction
        };
        slot.set(Some(self.current.key.clone()));
        if ready {
            pgwire::encode::ready_for_query(&mut out, status);
        }
        client.reply(&out).await?;
        Ok(self.shard)
    }

    /// Makes `shard`'s server the one the client's requests go to.
    pub fn make_current(&mut self, shard: usize) {
        if let Some(i) = self.others.iter().position(|(n, _)| *n == shard) {
            let (n, s) = self.others.swap_remove(i);
            let previous = mem::replace(&mut self.current, s);
            self.others.push((self.shard, previous));
            self.shard = n;
        }
    }
}

/// Refuses the client's request inside its transaction (`link`) with `code` and `msg`: the
/// current server's transaction fails too, so that it ends as the client is told.
pub async fn refuse(client: &mut ClientConn, link: &mut Link, code: &str, msg: &str) -> Result<()> {
    if let Some(s) = link.pooled() {
        fail(s).await;
    }
    let mut out = super::fanout::error(code, msg);
    pgwire::encode::ready_for_query(&mut out, TxStatus::Failed);
    client.reply(&out).await
}

/// Fails `server`'s transaction (a `DO` that raises).
pub async fn fail(server: &mut Checkout) {
    let fail = "DO $pgcorral$BEGIN RAISE EXCEPTION 'refused by pgcorral'; END$pgcorral$";
    let _ = exec::in_transaction(server, fail).await;
}

/// Before the client's COMMIT goes to the current server: every other shard's part prepared
/// (a gid naming the current shard and its transaction id). `Ok(Err(e))`: a shard refused,
/// everything is rolled back, and `e` is the client's error. A transaction already failed on
/// its current server needs nothing (its COMMIT rolls back; the others are rolled back).
pub async fn before_commit(spanning: &mut Spanning) -> Result<std::result::Result<(), BytesMut>> {
    if spanning.current.state.tx != TxStatus::InTransaction {
        rollback_others(spanning).await;
        return Ok(Ok(()));
    }
    let xid = twophase::xact_id(&mut spanning.current).await?;
    let gid = twophase::gid(spanning.shard, xid, rand::random());
    if let Err(e) = prepare_others(spanning, &gid).await? {
        return Ok(Err(e));
    }
    twophase::test_stop("prepared");
    spanning.prepared = Some(Prepared {
        gid,
        xid,
        recover: Some((spanning.cluster.clone(), spanning.worker)),
    });
    Ok(Ok(()))
}

/// Before the client's `PREPARE TRANSACTION 'gid'` goes to the current server: every other
/// shard's part prepared with the same gid. `Ok(Ok(shards))`: every shard the transaction is
/// on (the gid's, once the current one prepares too); `Ok(Err(e))`: a shard refused,
/// everything is rolled back, and `e` is the client's error.
pub async fn before_prepare(
    spanning: &mut Spanning,
    gid: &str,
) -> Result<std::result::Result<Vec<usize>, BytesMut>> {
    if spanning.current.state.tx != TxStatus::InTransaction {
        rollback_others(spanning).await;
        return Ok(Ok(Vec::new()));
    }
    if let Err(e) = prepare_others(spanning, gid).await? {
        return Ok(Err(e));
    }
    spanning.client_gid = Some(gid.to_string());
    let mut shards: Vec<usize> = spanning.others.iter().map(|(n, _)| *n).collect();
    shards.push(spanning.shard);
    shards.sort_unstable();
    Ok(Ok(shards))
}

/// Phase one for the other shards' parts, with `gid` ([`twophase::prepare_all`]).
async fn prepare_others(
    spanning: &mut Spanning,
    gid: &str,
) -> Result<std::result::Result<(), BytesMut>> {
    let mut others: Vec<&mut Checkout> = spanning.others.iter_mut().map(|(_, s)| s).collect();
    let at = (&spanning.cluster, spanning.worker);
    twophase::prepare_all(&mut spanning.current, &mut others, gid, at).await
}

/// Before the client's ROLLBACK goes to the current server: the other shards' parts rolled back.
pub async fn rollback_others(spanning: &mut Spanning) {
    for (_, s) in spanning.others.iter_mut() {
        if exec::in_transaction(s, "ROLLBACK").await.is_err() {
            s.state.broken = true;
        }
    }
}

/// After the current server answered the end of the transaction (idle again): the prepared
/// parts committed or rolled back as its transaction went, and `link` back to the current
/// server alone (the others go back to their pools).
pub async fn finish(link: &mut Link) -> Result<()> {
    let Link::Spanning(mut spanning) = mem::take(link) else {
        return Ok(());
    };
    if let Some(mut prepared) = spanning.prepared.take() {
        let (gid, xid) = (prepared.gid.clone(), prepared.xid);
        twophase::test_stop("decided");
        let sql = format!("SELECT pg_catalog.pg_xact_status('{xid}'::pg_catalog.xid8)");
        let committed = match exec::query(&mut spanning.current, &sql).await {
            Ok(rows) => rows.first().and_then(|r| r.first()).cloned().flatten(),
            Err(e) => {
                tracing::warn!(error = %Esc(&e), "could not read the outcome of a commit across shards; it is finished in the background");
                None
            }
        };
        let finish = match committed.as_deref() {
            Some("committed") => "COMMIT PREPARED ",
            Some("aborted") => "ROLLBACK PREPARED ",
            // In doubt: the prepared parts' drop finishes them in the background.
            _ => "",
        };
        if !finish.is_empty() {
            let mut sql = String::from(finish);
            session::literal(&mut sql, &gid);
            let mut failed = false;
            for (_, s) in spanning.others.iter_mut() {
                failed |= exec::query(s, &sql).await.is_err();
            }
            if !failed {
                prepared.recover = None;
            }
        }
    }
    if let Some(gid) = spanning.client_gid.take() {
        // The client's PREPARE TRANSACTION failed on the current server (its gid taken
        // there, say): the others' parts are rolled back, as the transaction was.
        let mut sql = String::from("SELECT 1 FROM pg_catalog.pg_prepared_xacts WHERE gid = ");
        session::literal(&mut sql, &gid);
        if exec::query(&mut spanning.current, &sql)
            .await
            .is_ok_and(|r| r.is_empty())
        {
            let mut undo = String::from("ROLLBACK PREPARED ");
            session::literal(&mut undo, &gid);
            for (_, s) in spanning.others.iter_mut() {
                let _ = exec::query(s, &undo).await;
            }
        }
    }
    let spanning = *spanning;
    let Spanning {
        current, others, ..
    } = spanning;
    drop(others);
    *link = Link::Pooled(current);
    Ok(())
}
