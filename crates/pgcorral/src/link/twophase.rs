//! Atomic commit of pgcorral's own transaction on several shards: the other shards' parts are
//! prepared (two-phase commit), the first shard's COMMIT is the decision, recorded durably by
//! PostgreSQL itself, and what a crash leaves prepared is finished from it ([`recover`]).
//!
//! The decision is the coordinator's (the first shard's) transaction: its full transaction id
//! is in every prepared part's gid, and `pg_xact_status` on the coordinator says, for as long
//! as a prepared part can wait, whether it committed. No table of pgcorral's is written.

use std::time::Duration;

use bytes::BytesMut;
use corral_rt::{exec::spawn_here, timer};
use pgwire::backend::TxStatus;

use super::Attach;
use crate::client_conn::ClientConn;
use crate::cluster::{Cluster, Shards, Target, Want};
use crate::error::{Error, Kind, Result};
use crate::logsafe::Esc;
use crate::pool::{Checkout, ClientWait};
use crate::session::{self, exec};

/// Every gid pgcorral gives its own prepared transactions starts so.
pub const PREFIX: &str = "pgcorral:";

/// How a commit across shards ended.
#[derive(Debug)]
pub enum Outcome {
    /// Committed on every shard (a shard whose COMMIT PREPARED failed is finished by
    /// [`recover`], which runs at once).
    Committed,
    /// Rolled back on every shard: the error for the client (a whole ErrorResponse).
    RolledBack(BytesMut),
}

/// `pgcorral:<coordinator shard>:<coordinator's xid8>:<nonce>`: unique on every server (the
/// nonce tells apart two databases' coordinators that share a participant server).
pub fn gid(coordinator: usize, xid: u64, nonce: u64) -> String {
    format!("{PREFIX}{coordinator}:{xid}:{nonce:016x}")
}

/// The coordinator shard and transaction id of one of pgcorral's gids.
pub fn parse_gid(gid: &str) -> Option<(usize, u64)> {
    let mut parts = gid.strip_prefix(PREFIX)?.split(':');
    let shard = parts.next()?.parse().ok()?;
    let xid = parts.next()?.parse().ok()?;
    let nonce = parts.next()?;
    (nonce.len() == 16 && nonce.bytes().all(|b| b.is_ascii_hexdigit()) && parts.next().is_none())
        .then_some((shard, xid))
}

/// Where a test may stop pgcorral dead between the phases (`PGCORRAL_TEST_STOP_2PC` =
/// `prepared`: every other shard prepared, the decision not taken; `decided`: the
/// coordinator committed, no part finished). Debug builds only.
pub(super) fn test_stop(at: &str) {
    if cfg!(debug_assertions) && std::env::var("PGCORRAL_TEST_STOP_2PC").is_ok_and(|v| v == at) {
        std::process::abort();
    }
}

/// Commits pgcorral's transaction on `servers` (of shards `shards`, in that order; two or
/// more), atomically. `Err`: a server failed where the outcome is known to the shards only;
/// [`recover`] finishes it.
pub async fn commit(
    servers: &mut [Checkout],
    shards: &[usize],
    cluster: &Cluster,
    worker: usize,
) -> Result<Outcome> {
    let (coordinator, others) = match servers.split_first_mut() {
        Some((c, o)) if c.state.tx == TxStatus::InTransaction => (c, o),
        _ => {
            return Err(Error::new(
                Kind::ServerIo,
                "commit across shards without a transaction",
            ))
        }
    };
    let xid = xact_id(coordinator).await?;
    let gid = gid(shards[0], xid, rand::random());
    let mut others: Vec<&mut Checkout> = others.iter_mut().collect();
    if let Err(e) = prepare_all(coordinator, &mut others, &gid, (cluster, worker)).await? {
        return Ok(Outcome::RolledBack(e));
    }
    test_stop("prepared");
    // The decision: the coordinator's own commit.
    if let Err(e) = exec::in_transaction(coordinator, "COMMIT").await {
        if e.kind() != Kind::ServerError {
            spawn_recovery(cluster.clone(), worker);
            return Err(Error::as_postgres(
                Kind::ServerIo,
                "08007",
                format!("the commit across shards may or may not have happened: {e}"),
                &[],
            ));
        }
        finish(&mut others, &gid, false, cluster, worker).await;
        return Ok(Outcome::RolledBack(client_error(&e, "COMMIT")));
    }
    test_stop("decided");
    finish(&mut others, &gid, true, cluster, worker).await;
    Ok(Outcome::Committed)
}

/// COMMIT PREPARED (or ROLLBACK PREPARED) of `gid` on each server; one that fails is left to
/// [`recover`], started at once.
async fn finish(
    servers: &mut [&mut Checkout],
    gid: &str,
    commit: bool,
    cluster: &Cluster,
    worker: usize,
) {
    let mut sql = String::from(if commit {
        "COMMIT PREPARED "
    } else {
        "ROLLBACK PREPARED "
    });
    session::literal(&mut sql, gid);
    let mut failed = false;
    for s in servers.iter_mut() {
        if let Err(e) = exec::query(s, &sql).await {
            tracing::warn!(gid = %Esc(gid), error = %Esc(&e), "could not finish a prepared transaction; it is finished in the background");
            failed = true;
        }
    }
    if failed {
        spawn_recovery(cluster.clone(), worker);
    }
}

/// The transaction id of `server`'s transaction (one is assigned if it had none yet).
pub(super) async fn xact_id(server: &mut Checkout) -> Result<u64> {
    let rows = exec::query_in_transaction(server, "SELECT pg_catalog.pg_current_xact_id()").await?;
    rows.first()
        .and_then(|r| r.first())
        .cloned()
        .flatten()
        .and_then(|x| x.parse().ok())
        .ok_or_else(bad_answer)
}

/// Phase one: `PREPARE TRANSACTION 'gid'` on each of `others`. On the first refusal the
/// transaction is rolled back everywhere — `coordinator` first (its rollback is the decision),
/// then the parts already prepared and the rest — and `Ok(Err(e))` is the client's error.
pub(super) async fn prepare_all(
    coordinator: &mut Checkout,
    others: &mut [&mut Checkout],
    gid: &str,
    (cluster, worker): (&Cluster, usize),
) -> Result<std::result::Result<(), BytesMut>> {
    let mut prepare = String::from("PREPARE TRANSACTION ");
    session::literal(&mut prepare, gid);
    for i in 0..others.len() {
        let Err(e) = exec::in_transaction(others[i], &prepare).await else {
            continue;
        };
        let _ = exec::in_transaction(coordinator, "ROLLBACK").await;
        finish(&mut others[..i], gid, false, cluster, worker).await;
        for s in others[i..].iter_mut() {
            if exec::in_transaction(s, "ROLLBACK").await.is_err() {
                s.state.broken = true;
            }
        }
        if e.kind() != Kind::ServerError {
            // The failed shard may have prepared: the coordinator's rollback decides it.
            spawn_recovery(cluster.clone(), worker);
        }
        return Ok(Err(client_error(&e, "PREPARE TRANSACTION")));
    }
    Ok(Ok(()))
}

fn bad_answer() -> Error {
    Error::new(
        Kind::ServerIo,
        "a shard did not answer pg_current_xact_id()",
    )
}

/// The client's error for a commit across shards that was rolled back: the shard's own error
/// when it sent one.
fn client_error(e: &Error, what: &str) -> BytesMut {
    let mut out = BytesMut::new();
    if e.kind() == Kind::ServerError {
        e.write_response(&mut out, "ERROR");
    } else {
        pgwire::encode::error_response(
            &mut out,
            "ERROR",
            "08006",
            &format!("a shard's server failed at {what} of a commit across shards; the transaction was rolled back: {e}"),
        );
    }
    out
}

/// Finishes pgcorral's prepared transactions left on `cluster`'s shards (of its database and
/// user): committed where the coordinator's transaction committed, rolled back where it
/// rolled back. Returns how many are still in doubt (the coordinator's transaction still in
/// progress, or a shard not reachable).
pub async fn recover(cluster: &Cluster, worker: usize) -> Result<usize> {
    let shards = cluster.shards().len();
    let mut doubt = 0;
    let mut status: Vec<(usize, u64, Option<bool>)> = Vec::new();
    for shard in 0..shards {
        let mut s = match primary(cluster, shard, worker).await {
            Ok(s) => s,
            Err(_) => {
                doubt += 1;
                continue;
            }
        };
        let rows = exec::query(
            &mut s,
            "SELECT gid FROM pg_catalog.pg_prepared_xacts WHERE database = pg_catalog.current_database() \
             AND owner = CURRENT_USER AND gid LIKE 'pgcorral:%'",
        )
        .await?;
        for gid in rows
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
        {
            let Some((c, xid)) = parse_gid(&gid) else {
                continue;
            };
            let known = status.iter().find(|k| k.0 == c && k.1 == xid).map(|k| k.2);
            let decided = match known {
                Some(d) => d,
                None => {
                    let d = decision(cluster, c, xid, worker).await;
                    status.push((c, xid, d));
                    d
                }
            };
            let Some(commit) = decided else {
                doubt += 1;
                continue;
            };
            let mut sql = String::from(if commit {
                "COMMIT PREPARED "
            } else {
                "ROLLBACK PREPARED "
            });
            session::literal(&mut sql, &gid);
            match exec::query(&mut s, &sql).await {
                Ok(_) => {
                    tracing::info!(gid = %Esc(&gid), shard, committed = commit, "finished a prepared transaction left by a commit across shards")
                }
                // Finished meanwhile by another pgcorral (42704: no such gid).
                Err(e) if e.sqlstate() == "42704" => {}
                Err(e) => {
                    tracing::warn!(gid = %Esc(&gid), shard, error = %Esc(&e), "could not finish a prepared transaction");
                    doubt += 1;
                }
            }
        }
    }
    Ok(doubt)
}

/// Whether coordinator shard `c`'s transaction `xid` committed (`None`: in progress, unknown,
/// or the shard not reachable).
async fn decision(cluster: &Cluster, c: usize, xid: u64, worker: usize) -> Option<bool> {
    let mut s = primary(cluster, c, worker).await.ok()?;
    let sql = format!("SELECT pg_catalog.pg_xact_status('{xid}'::pg_catalog.xid8)");
    let rows = match exec::query(&mut s, &sql).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(shard = c, xid, error = %Esc(&e), "could not read the outcome of a commit across shards");
            return None;
        }
    };
    match rows
        .first()
        .and_then(|r| r.first())
        .cloned()
        .flatten()
        .as_deref()
    {
        Some("committed") => Some(true),
        Some("aborted") => Some(false),
        Some(_) => None,
        None => {
            tracing::warn!(shard = c, xid, "the outcome of a commit across shards is no longer known to its coordinator shard; its prepared parts are left for an operator");
            None
        }
    }
}

async fn primary(cluster: &Cluster, shard: usize, worker: usize) -> Result<Checkout> {
    let target = Target {
        shards: Shards::One(shard),
        want: Want::Primary,
        writes: true,
    };
    cluster
        .checkout(target, worker, 0, ClientWait::default())
        .await
}

/// [`recover`] in the background on the current worker, again every second while something is
/// in doubt (for at most ten minutes).
pub fn spawn_recovery(cluster: Cluster, worker: usize) {
    let task = async move {
        for _ in 0..600 {
            match recover(&cluster, worker).await {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %Esc(&e), "could not look for prepared transactions left by a commit across shards")
                }
            }
            timer::sleep(Duration::from_secs(1)).await;
        }
        tracing::warn!("prepared transactions of commits across shards are still in doubt after ten minutes; see pg_prepared_xacts on the shards");
    };
    let _ = spawn_here(task);
}

/// The client's `COMMIT PREPARED` or `ROLLBACK PREPARED` (its simple Query, `len` bytes at
/// the front of its buffer) of a transaction prepared on `shards` together: run on each
/// shard's primary, answered as one server does (the first error, if any; a shard that
/// failed is asked again by the next one).
pub async fn finish_client(
    client: &mut ClientConn,
    at: &Attach<'_>,
    shards: &[usize],
    len: usize,
) -> Result<()> {
    let request = client.buf.split_to(len);
    client.statements.drop_unnamed();
    let text = request
        .get(pgwire::header::HEADER_LEN..)
        .and_then(pgwire::frontend::query_text)
        .unwrap_or_default();
    let tag = match text.trim_start().get(..6) {
        Some(w) if w.eq_ignore_ascii_case("commit") => "COMMIT PREPARED",
        _ => "ROLLBACK PREPARED",
    };
    let mut out = BytesMut::new();
    let mut failed = false;
    for &shard in shards {
        let mut s = at.checkout(shard, Want::Primary, true).await?;
        match exec::query(&mut s, text).await {
            Ok(_) => {}
            Err(e) if e.kind() == Kind::ServerError => {
                if !failed {
                    e.write_response(&mut out, "ERROR");
                }
                failed = true;
            }
            Err(e) => return Err(e),
        }
    }
    if !failed {
        pgwire::encode::command_complete(&mut out, tag);
    }
    pgwire::encode::ready_for_query(&mut out, TxStatus::Idle);
    client.reply(&out).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_name_their_coordinator_and_transaction() {
        let g = gid(2, 123456789012, 0xabc);
        assert_eq!(g, "pgcorral:2:123456789012:0000000000000abc");
        assert!(g.len() < 200);
        assert_eq!(parse_gid(&g), Some((2, 123456789012)));
        for other in [
            "pgcorral:2:12",
            "pgcorral:x:12:0000000000000abc",
            "pgcorral:2:12:0000000000000abc:9",
            "pgcorral:2:12:zz",
            "app:1:2:0000000000000abc",
        ] {
            assert_eq!(parse_gid(other), None, "{other}");
        }
    }
}
