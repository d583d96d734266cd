//! Running auth_query on a server connection as PgBouncer does: Parse, Bind (`$1` = the login name, as text), Describe, Execute, Sync; the answer read as PgBouncer reads it.

use bytes::{BufMut, BytesMut};
use corral_rt::timer;
use pgwire::{backend, encode, frontend};

use crate::net::framed::read_message;
use crate::server::ServerConn;
use crate::session::exec::{data_row, EXEC_TIMEOUT};

/// Largest message accepted in the answer (a row holds a name and a password).
const MAX_ANSWER_MESSAGE: u32 = 1 << 20;

/// What the query answered.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// A row (the last, when several): the name (column 1) and password (column 2, `None`
    /// when NULL: no password login).
    Row {
        name: String,
        password: Option<String>,
    },
    /// No row, or a row whose name is NULL: no such role, or one that may not log in.
    /// (PgBouncer's documented `user_lookup` function answers an unknown name with one row of
    /// NULLs; PgBouncer then drops the lookup connection and fails the login with its own
    /// error. pgcorral reads it as no row: a wrong password, 28P01.)
    NoRow,
}

/// Why the query gave no answer.
#[derive(Debug, PartialEq)]
pub enum Failure {
    /// The server's ErrorResponse: its message and SQLSTATE. The connection is usable after.
    Server { message: String, code: String },
    /// Not exactly two columns (PgBouncer: `expected 2 columns from auth_query`).
    Columns(usize),
    /// The connection failed, broke the protocol or timed out: not to be reused.
    Broken(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Server { message, code } => write!(f, "server error {code}: {message}"),
            Failure::Columns(n) => write!(f, "expected 2 columns from auth_query, not {n}"),
            Failure::Broken(why) => f.write_str(why),
        }
    }
}

/// Appends the request: unnamed statement and portal, the parameter as text, results as text.
pub fn request(out: &mut BytesMut, query: &str, user: &str) {
    let mut rest = Vec::with_capacity(query.len() + 3);
    rest.extend_from_slice(query.as_bytes());
    rest.extend_from_slice(&[0, 0, 0]);
    encode::parse(out, b"", &rest);
    encode::message(out, frontend::BIND, |b| {
        b.put_u8(0); // portal
        b.put_u8(0); // statement
        b.put_i16(0); // parameter formats: all text
        b.put_i16(1);
        b.put_i32(user.len() as i32);
        b.put_slice(user.as_bytes());
        b.put_i16(0); // result formats: all text
    });
    encode::describe(out, b'P', b"");
    encode::message(out, frontend::EXECUTE, |b| {
        b.put_u8(0);
        b.put_i32(0);
    });
    encode::sync(out);
}

/// Reads the answer message by message (sans I/O): [`Reading::on_message`] returns the outcome
/// once ReadyForQuery has been read.
#[derive(Default)]
pub struct Reading {
    columns: Option<usize>,
    row: Option<Vec<Option<String>>>,
    failed: Option<Failure>,
}

impl Reading {
    /// One backend message; `Some` with the outcome at ReadyForQuery.
    pub fn on_message(&mut self, tag: u8, body: &[u8]) -> Option<Result<Answer, Failure>> {
        match tag {
            backend::ROW_DESCRIPTION => {
                let n = body
                    .get(..2)
                    .map_or(0, |b| i16::from_be_bytes([b[0], b[1]]));
                let n = n.max(0) as usize;
                self.columns = Some(n);
                if n != 2 {
                    self.failed.get_or_insert(Failure::Columns(n));
                }
            }
            // A statement that returns no rows (NoData) has no columns.
            backend::NO_DATA => {
                self.columns = Some(0);
                self.failed.get_or_insert(Failure::Columns(0));
            }
            backend::DATA_ROW => self.row = Some(data_row(body)),
            backend::ERROR_RESPONSE => {
                let fields = backend::ErrorFields::parse(body).unwrap_or_default();
                let failure = match fields.is_fatal() {
                    true => Failure::Broken(format!(
                        "server ended the connection: {} ({})",
                        fields.message, fields.code
                    )),
                    false => Failure::Server {
                        message: fields.message,
                        code: fields.code,
                    },
                };
                // The server's error says more than a column count noticed before it.
                self.failed = Some(failure);
            }
            backend::READY_FOR_QUERY => return Some(self.outcome()),
            _ => {}
        }
        None
    }

    fn outcome(&mut self) -> Result<Answer, Failure> {
        if let Some(f) = self.failed.take() {
            return Err(f);
        }
        match self.row.take() {
            None => Ok(Answer::NoRow),
            Some(row) if row.len() != 2 => Err(Failure::Columns(row.len())),
            Some(mut row) => {
                let password = row.pop().flatten();
                match row.pop().flatten() {
                    Some(name) => Ok(Answer::Row { name, password }),
                    None => Ok(Answer::NoRow),
                }
            }
        }
    }
}

/// Runs `query` for `user` on `server`, within [`EXEC_TIMEOUT`]. On [`Failure::Broken`] the
/// connection must be dropped.
pub async fn run(server: &mut ServerConn, query: &str, user: &str) -> Result<Answer, Failure> {
    match timer::timeout(EXEC_TIMEOUT, exchange(server, query, user)).await {
        Ok(r) => r,
        Err(_) => Err(Failure::Broken(format!(
            "no answer within {} s",
            EXEC_TIMEOUT.as_secs()
        ))),
    }
}

async fn exchange(server: &mut ServerConn, query: &str, user: &str) -> Result<Answer, Failure> {
    let mut out = BytesMut::with_capacity(query.len() + user.len() + 64);
    request(&mut out, query, user);
    server
        .stream
        .send(&out)
        .await
        .map_err(|e| Failure::Broken(format!("write to server failed: {e}")))?;
    let mut reading = Reading::default();
    loop {
        let (tag, body) = read_message(&mut server.stream, &mut server.rbuf, MAX_ANSWER_MESSAGE)
            .await
            .map_err(|e| Failure::Broken(format!("reading the answer: {e}")))?;
        if let Some(outcome) = reading.on_message(tag, &body) {
            return outcome;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(values: &[Option<&str>]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(values.len() as i16).to_be_bytes());
        for v in values {
            match v {
                None => b.extend_from_slice(&(-1i32).to_be_bytes()),
                Some(s) => {
                    b.extend_from_slice(&(s.len() as i32).to_be_bytes());
                    b.extend_from_slice(s.as_bytes());
                }
            }
        }
        b
    }

    fn columns(n: i16) -> Vec<u8> {
        n.to_be_bytes().to_vec()
    }

    fn read(messages: &[(u8, Vec<u8>)]) -> Result<Answer, Failure> {
        let mut r = Reading::default();
        for (tag, body) in messages {
            assert!(r.on_message(*tag, body).is_none());
        }
        r.on_message(backend::READY_FOR_QUERY, b"I").unwrap()
    }

    #[test]
    fn request_is_parse_bind_describe_execute_sync() {
        let mut out = BytesMut::new();
        request(&mut out, "SELECT $1", "bob");
        let tags: Vec<u8> = {
            let mut tags = Vec::new();
            let mut b = &out[..];
            while b.len() >= 5 {
                tags.push(b[0]);
                let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
                b = &b[1 + len..];
            }
            tags
        };
        assert_eq!(tags, b"PBDES");
        // The name travels as a parameter, never inside the query text.
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.contains("SELECT $1\0") && text.contains("\0\0\0\x03bob"),
            "{text:?}"
        );
    }

    #[test]
    fn answers_as_pgbouncer_reads_them() {
        let t = backend::ROW_DESCRIPTION;
        let d = backend::DATA_ROW;
        assert_eq!(
            read(&[(t, columns(2)), (d, row(&[Some("bob"), Some("md5x")]))]),
            Ok(Answer::Row {
                name: "bob".into(),
                password: Some("md5x".into())
            })
        );
        assert_eq!(
            read(&[(t, columns(2)), (d, row(&[Some("bob"), None]))]),
            Ok(Answer::Row {
                name: "bob".into(),
                password: None
            })
        );
        assert_eq!(read(&[(t, columns(2))]), Ok(Answer::NoRow));
        // The last row wins.
        assert_eq!(
            read(&[
                (t, columns(2)),
                (d, row(&[Some("a"), Some("1")])),
                (d, row(&[Some("b"), Some("2")]))
            ]),
            Ok(Answer::Row {
                name: "b".into(),
                password: Some("2".into())
            })
        );
        assert_eq!(read(&[(t, columns(1))]), Err(Failure::Columns(1)));
        assert_eq!(
            read(&[(backend::NO_DATA, vec![])]),
            Err(Failure::Columns(0))
        );
        assert_eq!(
            read(&[(t, columns(2)), (d, row(&[None, Some("x")]))]),
            Ok(Answer::NoRow)
        );
        let mut err = Vec::new();
        for (k, v) in [
            (b'S', "ERROR"),
            (b'V', "ERROR"),
            (b'C', "42P01"),
            (b'M', "no table"),
        ] {
            err.push(k);
            err.extend_from_slice(v.as_bytes());
            err.push(0);
        }
        err.push(0);
        assert_eq!(
            read(&[(backend::ERROR_RESPONSE, err)]),
            Err(Failure::Server {
                message: "no table".into(),
                code: "42P01".into()
            })
        );
        // Malformed bodies do not panic.
        assert!(read(&[(t, vec![]), (d, vec![1])]).is_err());
    }
}
