//! Helpers for the session-state tests (session_startup.rs, session_settings.rs,
//! session_pinning.rs): rows as text over the simple protocol, a tokio-postgres client built
//! with its own startup parameters (and the ParameterStatus values it got), and a raw client
//! for exact ParameterStatus and ErrorResponse messages.

use std::collections::BTreeMap;

use pgwire::backend;
use tokio_postgres::Client;

use super::raw::Raw;
use super::wire::Msg;
use super::*;

/// A config for database "postgres" on `pg` with `general` lines (transaction mode unless they
/// say not).
pub fn cfg(pg: &Postgres, general: &str) -> String {
    config(pg, "postgres", general)
}

/// Rows of `sql` as text (simple protocol), or its error.
pub async fn try_rows(c: &Client, sql: &str) -> Result<Vec<Vec<String>>, tokio_postgres::Error> {
    Ok(simple_rows(&c.simple_query(sql).await?))
}

/// Rows of `sql` (simple protocol: one round trip, safe in transaction mode).
pub async fn rows(c: &Client, sql: &str) -> Vec<Vec<String>> {
    try_rows(c, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql:?} failed: {e}"))
}

/// The first row of `sql`.
pub async fn row(c: &Client, sql: &str) -> Vec<String> {
    rows(c, sql)
        .await
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{sql:?} returned no row"))
}

/// The first value of the first row of `sql`.
pub async fn one(c: &Client, sql: &str) -> String {
    row(c, sql).await.swap_remove(0)
}

/// Runs `sql` (simple protocol); fails the test on an error.
pub async fn exec(c: &Client, sql: &str) {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql:?} failed: {e}"));
}

/// `v` as owned strings, to compare with rows.
pub fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A tokio-postgres client through `port` built from `cfg`; also returns the ParameterStatus
/// values it was sent at login.
pub async fn connect_with(
    port: u16,
    build: impl FnOnce(&mut tokio_postgres::Config),
) -> Result<(Client, BTreeMap<String, String>), tokio_postgres::Error> {
    let mut cfg = pg_config(port, "postgres", "postgres");
    build(&mut cfg);
    let (client, conn) = cfg.connect(tokio_postgres::NoTls).await?;
    let mut params = BTreeMap::new();
    for name in [
        "application_name",
        "client_encoding",
        "TimeZone",
        "DateStyle",
    ] {
        if let Some(v) = conn.parameter(name) {
            params.insert(name.to_string(), v.to_string());
        }
    }
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((client, params))
}

/// A raw protocol client logged in with startup parameters of its choosing.
pub struct RawClient {
    raw: Raw,
    /// ParameterStatus values sent at login.
    pub params: BTreeMap<String, String>,
}

/// What one simple Query got back.
#[derive(Debug, Default)]
pub struct Reply {
    pub rows: Vec<Vec<Option<String>>>,
    /// ParameterStatus messages, in order.
    pub params: Vec<(String, String)>,
    pub error: Option<Msg>,
    /// The ReadyForQuery status.
    pub status: u8,
}

impl RawClient {
    /// Logs in with `params` (user and database included); `Err` is the ErrorResponse, after
    /// which the connection must close.
    pub async fn login(port: u16, params: &[(&str, &str)]) -> Result<RawClient, Msg> {
        let mut raw = Raw::connect(port).await;
        raw.send(&wire::startup(params)).await;
        let mut got = BTreeMap::new();
        loop {
            let (tag, body) = raw.read().await.expect("connection closed during login");
            let m = Msg {
                tag,
                body: body.to_vec(),
            };
            match tag {
                backend::AUTHENTICATION => {
                    assert_eq!(&m.body[..4], &[0, 0, 0, 0], "only trust logins: {m:?}")
                }
                backend::PARAMETER_STATUS => {
                    let (k, v) = m.parameter();
                    got.insert(k, v);
                }
                backend::ERROR_RESPONSE => {
                    assert!(
                        raw.read().await.is_none(),
                        "connection still open after a failed login: {m:?}"
                    );
                    return Err(m);
                }
                backend::READY_FOR_QUERY => {
                    return Ok(RawClient { raw, params: got });
                }
                _ => {}
            }
        }
    }

    /// Runs a simple query: its rows, ParameterStatus messages and error.
    pub async fn query(&mut self, sql: &str) -> Reply {
        self.raw.send(&wire::query(sql)).await;
        let mut reply = Reply::default();
        loop {
            let (tag, body) = self
                .raw
                .read()
                .await
                .expect("connection closed during query");
            let m = Msg {
                tag,
                body: body.to_vec(),
            };
            match tag {
                backend::DATA_ROW => reply.rows.push(m.row()),
                backend::PARAMETER_STATUS => reply.params.push(m.parameter()),
                backend::ERROR_RESPONSE => reply.error = Some(m),
                backend::READY_FOR_QUERY => {
                    reply.status = m.body[0];
                    return reply;
                }
                _ => {}
            }
        }
    }

    /// The first row of a query that must succeed and leave the session idle.
    pub async fn row(&mut self, sql: &str) -> (Vec<String>, Vec<(String, String)>) {
        let r = self.query(sql).await;
        assert!(r.error.is_none(), "{sql:?} failed: {:?}", r.error);
        assert_eq!(r.status, b'I', "{sql:?}");
        let row = r
            .rows
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{sql:?} returned no row"));
        (
            row.into_iter()
                .map(|v| v.unwrap_or_else(|| "NULL".into()))
                .collect(),
            r.params,
        )
    }
}
