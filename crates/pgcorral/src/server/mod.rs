//! A server connection: the socket to PostgreSQL, its read buffer, its identity (cancel key,
//! reported parameters) and what is in flight on it, which decides when it is safe to reuse.

pub mod connect;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use pgwire::backend::TxStatus;
use tokio::net::TcpStream;

/// Where and how to cancel a query running on one server connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CancelKey {
    pub addr: SocketAddr,
    pub pid: i32,
    pub secret: i32,
}

/// ParameterStatus values a server reported at startup, in order.
pub type ServerParams = Arc<Vec<(String, String)>>;

/// What is outstanding on a server link; both relay directions update it.
#[derive(Debug, Clone, Copy)]
pub struct LinkState {
    /// ReadyForQuery messages still owed: one per Query, FunctionCall and Sync sent.
    pub pending: u32,
    /// Extended-protocol messages were sent after the last Sync.
    pub unsynced: bool,
    /// Transaction status from the last ReadyForQuery.
    pub tx: TxStatus,
    /// The connection must not be reused (I/O error, FATAL, protocol confusion).
    pub broken: bool,
}

impl LinkState {
    /// Nothing in flight and no transaction open: the server may serve another client.
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.pending == 0 && !self.unsynced && self.tx == TxStatus::Idle && !self.broken
    }
}

impl Default for LinkState {
    fn default() -> Self {
        LinkState {
            pending: 0,
            unsynced: false,
            tx: TxStatus::Idle,
            broken: false,
        }
    }
}

/// An open, authenticated connection to a PostgreSQL server.
pub struct ServerConn {
    pub stream: TcpStream,
    /// Bytes read from the server and not yet forwarded.
    pub rbuf: BytesMut,
    /// Bytes of a passing message body still to forward unparsed.
    pub pass: usize,
    pub key: CancelKey,
    pub params: ServerParams,
    pub state: LinkState,
    pub created: Instant,
}

impl ServerConn {
    /// True when the server has closed or sent something while idle in the pool (an idle server
    /// only speaks to say it is going away). Checks tokio's cached readiness first, so a healthy
    /// connection costs no system call.
    pub fn is_closed_while_idle(&mut self) -> bool {
        if self.state.broken || !self.rbuf.is_empty() {
            return true;
        }
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match self.stream.poll_read_ready(&mut cx) {
            std::task::Poll::Pending => false,
            std::task::Poll::Ready(Err(_)) => true,
            std::task::Poll::Ready(Ok(())) => {
                let mut probe = [0u8; 1];
                !matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            }
        }
    }
}
