//! A raw protocol-3.0 client for protocol tests: encodes frontend messages by hand (independent of
//! the pgwire crate under test) and reads backend messages or raw bytes, always with a time bound.
#![allow(dead_code)]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any single read may wait before the test fails instead of hanging.
pub const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// One backend message.
#[derive(Clone, PartialEq, Eq)]
pub struct Msg {
    pub tag: u8,
    pub body: Vec<u8>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}({:?})",
            self.tag as char,
            String::from_utf8_lossy(&self.body)
        )
    }
}

impl Msg {
    /// A field of an ErrorResponse/NoticeResponse ('C' = SQLSTATE, 'M' = message, 'S' = severity).
    pub fn field(&self, code: u8) -> Option<String> {
        let mut rest = &self.body[..];
        while let Some((&c, tail)) = rest.split_first() {
            if c == 0 {
                break;
            }
            let end = tail.iter().position(|&b| b == 0)?;
            if c == code {
                return Some(String::from_utf8_lossy(&tail[..end]).into_owned());
            }
            rest = &tail[end + 1..];
        }
        None
    }

    /// The SQLSTATE of an ErrorResponse or NoticeResponse.
    pub fn code(&self) -> String {
        self.field(b'C').unwrap_or_default()
    }

    /// The columns of a DataRow as text (`None` for NULL).
    pub fn row(&self) -> Vec<Option<String>> {
        assert_eq!(self.tag, b'D', "not a DataRow: {self:?}");
        data_row(&self.body)
    }

    /// The NUL-terminated text of a CommandComplete.
    pub fn text(&self) -> String {
        let end = self
            .body
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.body.len());
        String::from_utf8_lossy(&self.body[..end]).into_owned()
    }

    /// (name, value) of a ParameterStatus.
    pub fn parameter(&self) -> (String, String) {
        assert_eq!(self.tag, b'S', "not a ParameterStatus: {self:?}");
        let mut parts = self.body.split(|&b| b == 0);
        let k = String::from_utf8_lossy(parts.next().unwrap()).into_owned();
        let v = String::from_utf8_lossy(parts.next().unwrap()).into_owned();
        (k, v)
    }
}

/// The column names of a RowDescription body.
pub fn column_names(body: &[u8]) -> Vec<String> {
    let n = i16::from_be_bytes([body[0], body[1]]) as usize;
    let mut pos = 2;
    (0..n)
        .map(|_| {
            let end = pos + body[pos..].iter().position(|&c| c == 0).unwrap();
            let name = String::from_utf8_lossy(&body[pos..end]).into_owned();
            // The name's NUL, then table oid, column number, type oid, size, modifier, format.
            pos = end + 19;
            name
        })
        .collect()
}

/// The columns of a DataRow body as text (`None` for NULL).
pub fn data_row(body: &[u8]) -> Vec<Option<String>> {
    let n = i16::from_be_bytes([body[0], body[1]]) as usize;
    let mut pos = 2;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = i32::from_be_bytes(body[pos..pos + 4].try_into().unwrap());
        pos += 4;
        if len < 0 {
            out.push(None);
        } else {
            let len = len as usize;
            out.push(Some(
                String::from_utf8_lossy(&body[pos..pos + len]).into_owned(),
            ));
            pos += len;
        }
    }
    out
}

/// The first column of a DataRow body as text (`None` for NULL or a row without columns).
pub fn first_column(body: &[u8]) -> Option<String> {
    data_row(body).into_iter().next().flatten()
}

/// The tags of `msgs`, as a string ("TDCZ").
pub fn tags(msgs: &[Msg]) -> String {
    msgs.iter().map(|m| m.tag as char).collect()
}

/// Splits raw backend bytes into messages (panics on a partial trailing message).
pub fn split(mut bytes: &[u8]) -> Vec<Msg> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        assert!(bytes.len() >= 5, "partial header");
        let len = i32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
        assert!(bytes.len() > len, "partial message");
        out.push(Msg {
            tag: bytes[0],
            body: bytes[5..1 + len].to_vec(),
        });
        bytes = &bytes[1 + len..];
    }
    out
}

// ---- frontend message encoders -------------------------------------------------------------

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(body.len() + 5);
    v.push(tag);
    v.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// Any frontend message: `tag`, a length and `body` as given (for deliberately malformed ones).
pub fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    msg(tag, body)
}

fn cstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

/// StartupMessage for protocol 3.0.
pub fn startup(params: &[(&str, &str)]) -> Vec<u8> {
    let mut body = 196608i32.to_be_bytes().to_vec();
    for (k, v) in params {
        cstr(&mut body, k);
        cstr(&mut body, v);
    }
    body.push(0);
    let mut v = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    v.extend(body);
    v
}

/// Query ('Q').
pub fn query(sql: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, sql);
    msg(b'Q', &b)
}

/// Parse ('P') with parameter type OIDs (0 = unspecified).
pub fn parse(name: &str, sql: &str, types: &[u32]) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, name);
    cstr(&mut b, sql);
    b.extend_from_slice(&(types.len() as i16).to_be_bytes());
    for t in types {
        b.extend_from_slice(&t.to_be_bytes());
    }
    msg(b'P', &b)
}

/// A Bind parameter: text, binary or NULL.
#[derive(Clone)]
pub enum Param<'a> {
    Text(&'a str),
    Binary(Vec<u8>),
    Null,
}

/// Bind ('B'): every parameter with its own format code; `binary_results` asks for binary columns.
pub fn bind(portal: &str, stmt: &str, params: &[Param], binary_results: bool) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, portal);
    cstr(&mut b, stmt);
    b.extend_from_slice(&(params.len() as i16).to_be_bytes());
    for p in params {
        let f: i16 = matches!(p, Param::Binary(_)).into();
        b.extend_from_slice(&f.to_be_bytes());
    }
    b.extend_from_slice(&(params.len() as i16).to_be_bytes());
    for p in params {
        match p {
            Param::Text(s) => {
                b.extend_from_slice(&(s.len() as i32).to_be_bytes());
                b.extend_from_slice(s.as_bytes());
            }
            Param::Binary(v) => {
                b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                b.extend_from_slice(v);
            }
            Param::Null => b.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    if binary_results {
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&1i16.to_be_bytes());
    } else {
        b.extend_from_slice(&0i16.to_be_bytes());
    }
    msg(b'B', &b)
}

/// Describe ('D') of a statement (`b'S'`) or portal (`b'P'`).
pub fn describe(kind: u8, name: &str) -> Vec<u8> {
    let mut b = vec![kind];
    cstr(&mut b, name);
    msg(b'D', &b)
}

/// Execute ('E'); `max_rows` 0 = all.
pub fn execute(portal: &str, max_rows: i32) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, portal);
    b.extend_from_slice(&max_rows.to_be_bytes());
    msg(b'E', &b)
}

/// Close ('C') of a statement (`b'S'`) or portal (`b'P'`).
pub fn close(kind: u8, name: &str) -> Vec<u8> {
    let mut b = vec![kind];
    cstr(&mut b, name);
    msg(b'C', &b)
}

pub fn sync() -> Vec<u8> {
    msg(b'S', &[])
}

pub fn flush() -> Vec<u8> {
    msg(b'H', &[])
}

pub fn terminate() -> Vec<u8> {
    msg(b'X', &[])
}

pub fn copy_data(data: &[u8]) -> Vec<u8> {
    msg(b'd', data)
}

pub fn copy_done() -> Vec<u8> {
    msg(b'c', &[])
}

pub fn copy_fail(reason: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, reason);
    msg(b'f', &b)
}

/// FunctionCall ('F') with binary arguments and a binary result.
pub fn function_call(oid: u32, args: &[Option<&[u8]>]) -> Vec<u8> {
    let mut b = oid.to_be_bytes().to_vec();
    b.extend_from_slice(&1i16.to_be_bytes());
    b.extend_from_slice(&1i16.to_be_bytes());
    b.extend_from_slice(&(args.len() as i16).to_be_bytes());
    for a in args {
        match a {
            Some(v) => {
                b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                b.extend_from_slice(v);
            }
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    b.extend_from_slice(&1i16.to_be_bytes());
    msg(b'F', &b)
}

// ---- the connection ------------------------------------------------------------------------

/// A raw connection after login.
pub struct Wire {
    pub stream: TcpStream,
    buf: Vec<u8>,
    /// BackendKeyData pid from login.
    pub pid: i32,
    /// ParameterStatus values from login.
    pub params: Vec<(String, String)>,
}

impl Wire {
    /// Connects to 127.0.0.1:`port` and logs in (trust only); returns after the first
    /// ReadyForQuery.
    pub async fn connect(port: u16, user: &str, db: &str) -> Wire {
        Wire::connect_with(port, &[("user", user), ("database", db)]).await
    }

    /// [`Wire::connect`] with the startup parameters `params`.
    pub async fn connect_with(port: u16, params: &[(&str, &str)]) -> Wire {
        let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let mut w = Wire {
            stream,
            buf: Vec::new(),
            pid: 0,
            params: Vec::new(),
        };
        w.send(&startup(params)).await;
        loop {
            let m = w.recv().await;
            match m.tag {
                b'R' => assert_eq!(&m.body[..4], &[0, 0, 0, 0], "only trust logins: {m:?}"),
                b'S' => w.params.push(m.parameter()),
                b'K' => w.pid = i32::from_be_bytes(m.body[..4].try_into().unwrap()),
                b'Z' => {
                    assert_eq!(m.body, b"I");
                    break;
                }
                b'E' => panic!("login failed: {m:?}"),
                _ => {}
            }
        }
        w
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Sends the concatenation of `parts` in one write.
    pub async fn send_all(&mut self, parts: &[Vec<u8>]) {
        let all: Vec<u8> = parts.concat();
        self.send(&all).await;
    }

    async fn fill(&mut self, want: usize) -> bool {
        self.fill_within(want, READ_TIMEOUT)
            .await
            .unwrap_or_else(|| panic!("no backend message within {READ_TIMEOUT:?}"))
    }

    /// Reads until `want` bytes are buffered: `Some(false)` if the peer closed first, `None`
    /// if a read waited longer than `wait`.
    async fn fill_within(&mut self, want: usize, wait: Duration) -> Option<bool> {
        while self.buf.len() < want {
            self.buf.reserve(64 * 1024);
            let n = tokio::time::timeout(wait, self.stream.read_buf(&mut self.buf))
                .await
                .ok()?
                .unwrap_or(0);
            if n == 0 {
                return Some(false);
            }
        }
        Some(true)
    }

    /// The next message within `wait` (`Err` on timeout), or `Ok(None)` if the peer closed the
    /// connection (also mid-message); never panics.
    pub async fn recv_within(&mut self, wait: Duration) -> Result<Option<Msg>, ()> {
        if !self.fill_within(5, wait).await.ok_or(())? {
            return Ok(None);
        }
        let len = i32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
        if len < 4 || !self.fill_within(1 + len, wait).await.ok_or(())? {
            return Ok(None);
        }
        let m = Msg {
            tag: self.buf[0],
            body: self.buf[5..1 + len].to_vec(),
        };
        self.buf.drain(..1 + len);
        Ok(Some(m))
    }

    /// The next message, or `None` if the peer closed the connection.
    pub async fn try_recv(&mut self) -> Option<Msg> {
        if !self.fill(5).await {
            assert!(self.buf.is_empty(), "connection closed mid-message");
            return None;
        }
        let len = i32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
        assert!(self.fill(1 + len).await, "connection closed mid-message");
        let m = Msg {
            tag: self.buf[0],
            body: self.buf[5..1 + len].to_vec(),
        };
        self.buf.drain(..1 + len);
        Some(m)
    }

    /// The next message; panics if the connection closed.
    pub async fn recv(&mut self) -> Msg {
        self.try_recv().await.expect("connection closed")
    }

    /// Messages up to and including the next ReadyForQuery.
    pub async fn until_ready(&mut self) -> Vec<Msg> {
        let mut out = Vec::new();
        loop {
            let m = self.recv().await;
            let done = m.tag == b'Z';
            out.push(m);
            if done {
                return out;
            }
        }
    }

    /// Messages up to and including the `n`th ReadyForQuery.
    pub async fn until_ready_n(&mut self, n: usize) -> Vec<Msg> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.extend(self.until_ready().await);
        }
        out
    }

    /// The raw bytes of every message up to and including the `n`th ReadyForQuery.
    pub async fn raw_until_ready_n(&mut self, n: usize) -> Vec<u8> {
        self.raw_until(b'Z', n).await
    }

    /// The raw bytes of every message up to and including the `n`th with tag `tag`.
    pub async fn raw_until(&mut self, tag: u8, n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut seen = 0;
        while seen < n {
            assert!(self.fill(5).await, "connection closed");
            let len = i32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
            assert!(self.fill(1 + len).await, "connection closed");
            if self.buf[0] == tag {
                seen += 1;
            }
            out.extend(self.buf.drain(..1 + len));
        }
        out
    }

    /// Sends a simple Query and returns its answer up to ReadyForQuery.
    pub async fn simple(&mut self, sql: &str) -> Vec<Msg> {
        self.send(&query(sql)).await;
        self.until_ready().await
    }

    /// The first column of the first row of a simple query.
    pub async fn scalar(&mut self, sql: &str) -> String {
        let msgs = self.simple(sql).await;
        let row = msgs
            .iter()
            .find(|m| m.tag == b'D')
            .unwrap_or_else(|| panic!("{sql}: no row in {msgs:?}"));
        row.row()[0].clone().expect("not NULL")
    }

    /// True if nothing arrives within `wait` (the connection stays open and silent).
    pub async fn silent_for(&mut self, wait: Duration) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        self.buf.reserve(1024);
        // Any byte read, or the peer closing, ends the silence.
        tokio::time::timeout(wait, self.stream.read_buf(&mut self.buf))
            .await
            .is_err()
    }

    /// Waits for the peer to close the connection, failing on any message.
    pub async fn expect_closed(&mut self) {
        if let Some(m) = self.try_recv().await {
            panic!("expected the connection to close, got {m:?}");
        }
    }
}
