//! Raw wire-protocol helpers for tests that must send or see exact bytes: a trust-only client, CancelRequests, SQLSTATE helpers and time bounds.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use bytes::BytesMut;
use pgwire::backend::{self, ErrorFields};
use pgwire::Header;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a raw read may wait before the test fails instead of hanging.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Awaits `fut`, failing the test if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer within {limit:?}"),
    }
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

/// A raw protocol connection.
pub struct Raw {
    pub stream: TcpStream,
    buf: BytesMut,
    /// BackendKeyData received at login.
    pub key: Option<(i32, i32)>,
}

impl Raw {
    pub async fn connect(port: u16) -> Raw {
        let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        Raw {
            stream,
            buf: BytesMut::new(),
            key: None,
        }
    }

    /// Connects and logs in (the pooler or server must not ask for a password).
    pub async fn login(port: u16, user: &str, db: &str) -> Result<Raw, ErrorFields> {
        let mut raw = Raw::connect(port).await;
        let mut out = BytesMut::new();
        pgwire::encode::startup(&mut out, &[("user", user), ("database", db)]);
        raw.send(&out).await;
        loop {
            let (tag, body) = raw.read().await.expect("connection closed during login");
            match tag {
                backend::AUTHENTICATION => {
                    let (code, _) = backend::authentication(&body).unwrap();
                    assert_eq!(code, 0, "raw client cannot answer authentication {code}");
                }
                backend::BACKEND_KEY_DATA => raw.key = backend::backend_key_data(&body),
                backend::ERROR_RESPONSE => return Err(ErrorFields::parse(&body).unwrap()),
                backend::READY_FOR_QUERY => return Ok(raw),
                _ => {}
            }
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Sends bytes, ignoring a peer that already closed.
    pub async fn send_lossy(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// Reads one tagged message; `None` when the peer closed (or reset) the connection.
    pub async fn read(&mut self) -> Option<(u8, BytesMut)> {
        within(READ_TIMEOUT, "raw read", async {
            loop {
                if let Some(h) = Header::parse(&self.buf, u32::MAX).expect("valid framing") {
                    if self.buf.len() >= h.total_len() {
                        let mut msg = self.buf.split_to(h.total_len());
                        let body = msg.split_off(5);
                        return Some((h.tag, body));
                    }
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
    }

    /// Runs a simple query; the rows (text values) or the error.
    pub async fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, ErrorFields> {
        let mut out = BytesMut::new();
        pgwire::encode::query(&mut out, sql);
        self.send(&out).await;
        let mut rows = Vec::new();
        let mut err = None;
        loop {
            let (tag, body) = self.read().await.expect("connection closed during query");
            match tag {
                backend::DATA_ROW => rows.push(data_row(&body)),
                backend::ERROR_RESPONSE => err = ErrorFields::parse(&body),
                backend::READY_FOR_QUERY => break,
                _ => {}
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(rows),
        }
    }

    /// Expects an ErrorResponse next (after any other messages), then the connection to close.
    pub async fn expect_error_and_close(&mut self) -> ErrorFields {
        let err = loop {
            match self.read().await {
                Some((backend::ERROR_RESPONSE, body)) => break ErrorFields::parse(&body).unwrap(),
                Some(_) => {}
                None => panic!("connection closed without an ErrorResponse"),
            }
        };
        assert!(
            self.read().await.is_none(),
            "connection still open after {err:?}"
        );
        err
    }
}

fn data_row(body: &[u8]) -> Vec<Option<String>> {
    let n = i16::from_be_bytes([body[0], body[1]]) as usize;
    let mut pos = 2;
    let mut row = Vec::with_capacity(n);
    for _ in 0..n {
        let len = i32::from_be_bytes(body[pos..pos + 4].try_into().unwrap());
        pos += 4;
        if len < 0 {
            row.push(None);
        } else {
            let len = len as usize;
            row.push(Some(
                String::from_utf8_lossy(&body[pos..pos + len]).into_owned(),
            ));
            pos += len;
        }
    }
    row
}

/// Sends a CancelRequest to `port` and waits for the peer to close the connection.
pub async fn cancel(port: u16, pid: i32, secret: i32) {
    let mut raw = Raw::connect(port).await;
    let mut out = BytesMut::new();
    pgwire::encode::cancel_request(&mut out, pid, secret);
    raw.send(&out).await;
    assert!(
        raw.read().await.is_none(),
        "a CancelRequest gets no answer, only a close"
    );
}

/// Counts server backends of `user` on `db`, seen from a direct superuser connection.
pub fn backends(pg: &crate::support::Postgres, user: &str, db: &str) -> usize {
    pg.sql(
        "postgres",
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = '{user}' AND datname = '{db}'"
        ),
    )
    .parse()
    .unwrap()
}

/// The first value of the first row of `sql`, run with the simple protocol (one round trip,
/// so it is safe in transaction mode, where a prepared statement may not outlive its transaction).
pub async fn one(
    c: &tokio_postgres::Client,
    sql: &str,
) -> Result<Option<String>, tokio_postgres::Error> {
    for m in c.simple_query(sql).await? {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            return Ok(r.get(0).map(str::to_string));
        }
    }
    panic!("{sql:?} returned no row");
}
