//! A server connection: the socket to PostgreSQL, its read buffer, its identity (cancel key,
//! reported parameters) and what is in flight on it, which decides when it is safe to reuse.

pub mod connect;
pub mod hooks;
pub mod hosts;
pub mod permit;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use corral_rt::stream::Stream;

use crate::clock;
use crate::conns;
use crate::prepared;
use crate::prepared::expect;

pub use crate::link_state::{CopyTrack, LinkState};
pub use crate::meter::Meter;
use crate::tls;
pub use hooks::{HookMap, Watch};
pub use permit::Permit;

/// The address a server connection went to: TCP, or a Unix socket's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerAddr {
    Tcp(SocketAddr),
    Unix(Arc<str>),
}

impl std::fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerAddr::Tcp(a) => a.fmt(f),
            ServerAddr::Unix(p) => f.write_str(p),
        }
    }
}

/// Where and how to cancel a query running on one server connection.
#[derive(Debug, Clone)]
pub struct CancelKey {
    pub addr: ServerAddr,
    pub pid: i32,
    pub secret: i32,
    /// The connection is TLS: its CancelRequest goes over TLS too, to the same name.
    pub tls: Option<Arc<CancelTls>>,
    /// Clients' cancel requests forwarded to this server and not yet answered, shared by every
    /// copy of its key ([`crate::cancel`] counts them): the server is not lent to another
    /// client before they have landed, or a late one could cancel that client's query.
    pub in_flight: Arc<CancelsInFlight>,
}

impl CancelKey {
    /// Whether a client's cancel request for this server is still on its way.
    pub fn cancel_in_flight(&self) -> bool {
        self.in_flight.any()
    }
}

/// How many cancel requests are on their way to one server; whoever waits for them to land is
/// woken by the last one.
#[derive(Debug, Default)]
pub struct CancelsInFlight {
    count: std::sync::atomic::AtomicU32,
    landed: tokio::sync::Notify,
}

impl CancelsInFlight {
    pub fn any(&self) -> bool {
        self.count.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    /// One more on its way; each is [`CancelsInFlight::land`]ed once.
    pub fn start(&self) {
        self.count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// One has been answered (or given up on).
    pub fn land(&self) {
        if self.count.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            self.landed.notify_waiters();
        }
    }

    /// Waits until none is on its way, up to `limit`; false if one still is then.
    pub async fn all_landed_within(&self, limit: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let woken = self.landed.notified();
            tokio::pin!(woken);
            // Registered before the count is read: a landing in between still wakes it.
            woken.as_mut().enable();
            if !self.any() {
                return true;
            }
            if corral_rt::timer::timeout_at(deadline, woken).await.is_err() {
                return !self.any();
            }
        }
    }
}

/// How a cancel reaches a server that pgcorral talks to over TLS.
pub struct CancelTls {
    pub host: String,
    pub port: u16,
    /// The TLS configuration the connection was opened with (its `server` side is set).
    pub tls: Arc<tls::Tls>,
}

impl std::fmt::Debug for CancelTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CancelTls({}:{})", self.host, self.port)
    }
}

/// ParameterStatus values a server reported at startup, in order.
pub type ServerParams = Arc<Vec<(String, String)>>;

/// Session-level settings, sorted by name, with canonical values as the server shows them;
/// `role` and `session_authorization` included when changed. Empty = the server's defaults
/// (see [`crate::session`]).
pub type Settings = Arc<Vec<(String, String)>>;

/// An open, authenticated connection to a PostgreSQL server.
pub struct ServerConn {
    pub stream: Stream,
    /// Bytes read from the server and not yet forwarded.
    pub rbuf: BytesMut,
    /// Bytes of a passing message body still to forward unparsed.
    pub pass: usize,
    /// Shared with the cancel slot of the client using the server (a pointer each, not a copy).
    pub key: Arc<CancelKey>,
    pub params: ServerParams,
    pub state: LinkState,
    pub created: clock::Tick,
    /// When it last went back to the pool.
    pub last_used: clock::Tick,
    /// The worker whose reactor the socket is registered with.
    pub home: usize,
    /// Its place under shared caps (max_db_connections, max_user_connections), if any.
    pub permit: Option<Permit>,
    /// Session settings applied on it (see [`crate::session`]); `None` when unknown.
    pub applied: Option<Settings>,
    /// Holds state a pinned client left on it (LISTEN, temporary tables, ...): reset before
    /// anyone else uses it.
    pub bound: bool,
    /// Prepared statements pgcorral made on it (transaction and statement mode).
    pub statements: prepared::ServerStatements,
    /// What it owes for the messages sent to it, when messages are rewritten.
    pub expect: expect::Expected,
    /// Rewritten or added client messages, sent before the client's next unchanged bytes.
    pub wout: BytesMut,
    /// Answers pgcorral gives the client itself, sent before the server's next bytes.
    pub fout: BytesMut,
    /// Notifications the server sent while pgcorral ran its own queries on it
    /// (session sync and capture): the client that holds it gets them next, in order (see
    /// [`crate::session::exec`]). Empty, with no allocation, almost always.
    pub held: BytesMut,
    /// Its entry in SHOW SERVERS (set by the pool that opened it).
    pub listed: Option<conns::Listed>,
    /// The pool generation it was opened in (see `Pool::reconnect`).
    pub generation: u64,
    /// What user code its database holds, shared by its pool (see [`hooks`]);
    /// `None` outside a pool, where nothing is trusted.
    pub hooks: Option<Arc<Watch>>,
    /// The catalog map its last transaction was judged by is due to be read again (see
    /// [`crate::session::apply::read_hooks`]).
    pub read_hooks: bool,
    /// The map its last transaction was judged by, and its [`Watch::version`]:
    /// kept until another is stored.
    pub map: Option<(u64, Arc<HookMap>)>,
    /// What the relay measures on this link (kept here rather than in each client's future).
    pub meter: Meter,
    /// The relay's last read found nothing and left its task registered for the socket's next
    /// bytes (see [`Stream::poll_read_armed`]); cleared as each relay starts, as the server may
    /// have served another client's task since.
    pub read_armed: bool,
}

impl ServerConn {
    /// A logged-in connection, registered with worker `home`'s reactor, with nothing
    /// outstanding and nothing known about it yet.
    pub fn new(
        stream: Stream,
        rbuf: BytesMut,
        key: CancelKey,
        params: ServerParams,
        home: usize,
    ) -> ServerConn {
        let now = clock::now();
        ServerConn {
            stream,
            rbuf,
            pass: 0,
            key: Arc::new(key),
            params,
            state: LinkState::default(),
            created: now,
            last_used: now,
            home,
            permit: None,
            applied: Some(Default::default()),
            bound: false,
            statements: Default::default(),
            expect: Default::default(),
            wout: BytesMut::new(),
            fout: BytesMut::new(),
            held: BytesMut::new(),
            listed: None,
            generation: 0,
            hooks: None,
            read_hooks: false,
            map: None,
            meter: Default::default(),
            read_armed: false,
        }
    }

    /// Re-registers the socket with the current worker's reactor (`worker`), so its events wake
    /// this thread directly. Costs two epoll_ctl calls; only done when a server changes worker.
    pub fn rehome(self, worker: usize) -> std::io::Result<ServerConn> {
        let detached = self.stream.detach()?;
        Ok(ServerConn {
            stream: detached.attach()?,
            home: worker,
            ..self
        })
    }

    /// True when the server has closed or sent something while idle in the pool (an idle server
    /// only speaks to say it is going away). Checks the socket's readiness first, so a healthy
    /// connection costs no system call.
    pub fn is_closed_while_idle(&mut self) -> bool {
        if self.state.broken || !self.rbuf.is_empty() {
            return true;
        }
        self.stream.closed_while_idle()
    }
}

#[cfg(test)]
mod tests {
    use super::CancelsInFlight;
    use std::sync::Arc;
    use std::time::Duration;

    /// The wait ends when the last cancel lands (woken, well before its limit), and says false
    /// when one is still on its way at the limit.
    #[tokio::test]
    async fn the_last_cancel_to_land_wakes_the_wait() {
        let c = Arc::new(CancelsInFlight::default());
        assert!(c.all_landed_within(Duration::ZERO).await);
        c.start();
        c.start();
        let waiting = tokio::spawn({
            let c = c.clone();
            async move {
                let start = std::time::Instant::now();
                (
                    c.all_landed_within(Duration::from_secs(30)).await,
                    start.elapsed(),
                )
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        c.land();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "one is still on its way");
        c.land();
        let (landed, took) = waiting.await.unwrap();
        assert!(landed && took < Duration::from_secs(5), "{took:?}");
        c.start();
        assert!(!c.all_landed_within(Duration::from_millis(10)).await);
    }
}
