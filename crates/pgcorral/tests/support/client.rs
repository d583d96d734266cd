//! Helpers for tokio-postgres clients in tests: a direct connection to the server, a client that
//! hears notices and notifications, the SQLSTATE and message of an error, and the answers tests
//! read most (one value, the backend pid, `SELECT 1`, rows as text), all over the simple protocol.

use std::time::Duration;

use tokio_postgres::{Client, SimpleQueryMessage};

use super::{connect, within, Postgres};

/// How long one of these helpers' queries or logins may take before the test fails instead of
/// hanging.
const ANSWER: Duration = Duration::from_secs(10);

/// A superuser connection straight to PostgreSQL (database postgres), bypassing pgcorral.
pub async fn direct(pg: &Postgres) -> Client {
    within(
        ANSWER,
        "direct connection",
        connect(pg.port, "postgres", None, "postgres"),
    )
    .await
    .expect("direct connection")
}

/// A tokio-postgres client through `port` (user and database postgres) whose notices and
/// notifications arrive on the returned channel.
pub async fn client_with_messages(
    port: u16,
) -> (
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<tokio_postgres::AsyncMessage>,
) {
    let (client, mut conn) = super::pg_config(port, "postgres", "postgres")
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(m)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
            let _ = tx.send(m);
        }
    });
    (client, rx)
}

/// The SQLSTATE of a tokio-postgres error ("" when it carries none).
pub fn sqlstate(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_default()
}

/// The server message of a tokio-postgres error ("" when it carries none).
pub fn db_message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_default()
}

/// The first value of the first row of `sql` (`None` for NULL), run with the simple protocol:
/// one round trip, so it is safe in transaction mode, where a prepared statement may not outlive
/// its transaction. Fails the test when `sql` returns no row.
pub async fn scalar(c: &Client, sql: &str) -> Result<Option<String>, tokio_postgres::Error> {
    for m in c.simple_query(sql).await? {
        if let SimpleQueryMessage::Row(r) = m {
            return Ok(r.get(0).map(str::to_string));
        }
    }
    panic!("{sql:?} returned no row");
}

/// The first value of the first row of `sql` (simple protocol); fails the test on an error, on
/// no row, on NULL and after 10 s.
pub async fn value(c: &Client, sql: &str) -> String {
    within(ANSWER, sql, scalar(c, sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .unwrap_or_else(|| panic!("{sql}: NULL"))
}

/// The pid of the server backend `c`'s query runs on (`SELECT pg_backend_pid()`, simple
/// protocol, within 10 s).
pub async fn backend_pid(c: &Client) -> i32 {
    let sql = "SELECT pg_backend_pid()";
    within(ANSWER, sql, scalar(c, sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .expect("a pid")
        .parse()
        .expect("a pid")
}

/// The value of `SELECT 1` through `c` (simple protocol, within 10 s): a client that still
/// works gets 1.
pub async fn select_one(c: &Client) -> i32 {
    within(ANSWER, "SELECT 1", scalar(c, "SELECT 1"))
        .await
        .unwrap_or_else(|e| panic!("SELECT 1: {e}"))
        .expect("a value")
        .parse()
        .expect("a number")
}

/// The rows of a simple query's answer as text ("NULL" for NULL).
pub fn simple_rows(msgs: &[SimpleQueryMessage]) -> Vec<Vec<String>> {
    msgs.iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}
