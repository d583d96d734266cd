//! Answers pgcorral gives a client itself in the request loop: timeouts, statements refused by
//! `session_pinning = "refuse"`, and transactions refused in statement mode.

use bytes::{Buf, BytesMut};
use pgwire::backend::TxStatus;
use pgwire::{encode, sqlstate, Header};

use super::ClientConn;
use crate::error::{Error, Kind, Result};
use crate::pool;
use crate::pool::Checkout;
use crate::relay::{Phase, Timeouts};

/// The error a client gets when a timeout of the relay expired. The words carry PgBouncer's
/// names ("query timeout", "idle transaction timeout", "transaction timeout") besides the key's
/// (its log and its users' scripts look for them); the SQLSTATEs of the two transaction
/// timeouts are PostgreSQL's own for its timeouts of the same meaning (docs/pgbouncer.md).
pub(super) fn timed_out(phase: Phase, t: &Timeouts) -> Error {
    let ms = |d: Option<std::time::Duration>| d.map(|d| d.as_millis()).unwrap_or(0);
    match phase {
        Phase::Query => Error::new(
            Kind::QueryTimeout,
            format!(
                "query timeout: the query ran longer than query_timeout ({} ms); connection closed",
                ms(t.query)
            ),
        ),
        Phase::IdleInTransaction => Error::new(
            Kind::IdleInTransaction,
            format!(
                "terminating connection due to idle transaction timeout: idle in a transaction longer than idle_transaction_timeout ({} ms); the transaction was rolled back",
                ms(t.idle_in_transaction)
            ),
        ),
        Phase::Transaction => Error::new(
            Kind::TransactionTimeout,
            format!(
                "terminating connection due to transaction timeout: in a transaction longer than transaction_timeout ({} ms); the transaction was rolled back",
                ms(t.transaction)
            ),
        ),
        Phase::Idle => client_idle_error(ms(t.client_idle)),
    }
}

pub(super) fn client_idle_error(ms: u128) -> Error {
    Error::new(
        Kind::ClientIdle,
        format!("client_idle_timeout: idle for longer than {ms} ms; connection closed"),
    )
}

/// `session_pinning = "refuse"`: drops the Query at the head of the client's buffer and answers
/// it with an error, keeping the transaction status as it is.
pub(super) async fn refuse_statement(
    client: &mut ClientConn,
    tx: TxStatus,
    why: &str,
) -> Result<()> {
    if let Ok(Some(h)) = Header::parse(&client.buf, client.max_len) {
        client.buf.advance(h.total_len().min(client.buf.len()));
    }
    tracing::info!(
        worker = client.worker,
        why,
        "refused a statement that would pin the client to its server"
    );
    let mut out = BytesMut::new();
    encode::error_response(
        &mut out,
        "ERROR",
        sqlstate::FEATURE_NOT_SUPPORTED,
        &format!("{why} is not allowed here: it would tie the session to one server connection (session_pinning = \"refuse\")"),
    );
    encode::ready_for_query(&mut out, tx);
    client
        .stream
        .send(&out)
        .await
        .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))
}

/// Statement mode: a request opened a transaction. Roll it back, tell the client, and give it a
/// clean ReadyForQuery in place of the one held back.
pub(super) async fn refuse_transaction(
    client: &mut ClientConn,
    server: &mut Checkout,
) -> Result<()> {
    // Drop the held ReadyForQuery from the server's buffer.
    let z = Header::parse(&server.rbuf, u32::MAX)
        .ok()
        .flatten()
        .map(|h| h.total_len())
        .unwrap_or(0);
    let z = z.min(server.rbuf.len());
    server.rbuf.advance(z);
    let ok = pool::rollback(server).await;
    let mut out = BytesMut::new();
    encode::error_response(
        &mut out,
        "ERROR",
        sqlstate::FEATURE_NOT_SUPPORTED,
        "transaction blocks are not allowed in statement pooling mode; the transaction was rolled back",
    );
    encode::ready_for_query(&mut out, TxStatus::Idle);
    client
        .stream
        .send(&out)
        .await
        .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))?;
    if !ok {
        server.state.broken = true;
    }
    Ok(())
}

/// Waits for `checkout`; a client still waiting after `after` is sent PgBouncer's NOTICE that
/// it is queued (`query_wait_notify`), once. A checkout that completes at its first poll (the
/// common case) costs no timer. Its caller boxes it.
pub(super) async fn notify_while_waiting(
    client: &mut ClientConn,
    checkout: impl std::future::Future<Output = Result<Checkout>>,
    after: std::time::Duration,
) -> Result<Checkout> {
    let mut checkout = std::pin::pin!(checkout);
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(checkout.as_mut().poll(cx)));
    if let std::task::Poll::Ready(r) = first.await {
        return r;
    }
    async move {
        match corral_rt::timer::timeout(after, checkout.as_mut()).await {
            Ok(r) => r,
            Err(_) => {
                let mut out = BytesMut::new();
                // PgBouncer's words, "postgres backend" included, whatever the database.
                encode::notice_response(
                    &mut out,
                    "NOTICE",
                    "00000",
                    "No server connection available in postgres backend, client being queued",
                );
                client
                    .stream
                    .send(&out)
                    .await
                    .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))?;
                checkout.await
            }
        }
    }
    .await
}
