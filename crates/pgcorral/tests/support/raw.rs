//! Raw wire-protocol helpers for tests that must send or see exact bytes (built with the pgwire
//! crate): a trust-only client, CancelRequests, and a count of server backends.
#![allow(dead_code)]

use std::time::Duration;

use bytes::BytesMut;
use pgwire::backend::{self, ErrorFields};
use pgwire::Header;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::wire::data_row;
use super::{within, Postgres};

/// How long a raw read may wait before the test fails instead of hanging.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

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
        Raw::login_with(port, &[("user", user), ("database", db)], None).await
    }

    /// Connects with these startup parameters (`user` among them) and logs in, answering a
    /// cleartext or md5 password request with `password`.
    pub async fn login_with(
        port: u16,
        params: &[(&str, &str)],
        password: Option<&str>,
    ) -> Result<Raw, ErrorFields> {
        let mut raw = Raw::connect(port).await;
        let mut out = BytesMut::new();
        pgwire::encode::startup(&mut out, params);
        raw.send(&out).await;
        let user = params
            .iter()
            .find(|(k, _)| *k == "user")
            .map_or("", |p| p.1);
        loop {
            let (tag, body) = raw.read().await.expect("connection closed during login");
            match tag {
                backend::AUTHENTICATION => {
                    let (code, data) = backend::authentication(&body).unwrap();
                    let mut out = BytesMut::new();
                    match (code, password) {
                        (0, _) => continue,
                        (3, Some(p)) => pgwire::encode::password(&mut out, p),
                        (5, Some(p)) => {
                            let salt: [u8; 4] = data[..4].try_into().unwrap();
                            let stored = pgwire::auth::md5::stored_hash(user, p);
                            let answer = pgwire::auth::md5::salted_response(&stored, salt);
                            pgwire::encode::password(&mut out, &answer);
                        }
                        _ => panic!("raw client cannot answer authentication {code}"),
                    }
                    raw.send(&out).await;
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
pub fn backends(pg: &Postgres, user: &str, db: &str) -> usize {
    pg.sql(
        "postgres",
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = '{user}' AND datname = '{db}'"
        ),
    )
    .parse()
    .unwrap()
}
