//! The connection lines an operator's scripts read, in PgBouncer's words: a client's login,
//! a connection's close and why, a new server connection, and the errors pgcorral itself sends
//! a client (`log_connections`, `log_disconnections`, `log_pooler_errors`).

use std::fmt::{self, Display};
use std::time::SystemTime;

use crate::config::ConnLogging;
use crate::conns::Entry;
use crate::logsafe::Esc;

/// A connection as the lines name it: `C-<id>` or `S-<id>` (the id SHOW CLIENTS/SERVERS and
/// KILL_CLIENT use; `C-0` is a client not listed yet), its database, user and address.
pub struct Who<'a> {
    side: char,
    id: u64,
    db: &'a str,
    user: &'a str,
    addr: Addr<'a>,
    since: Option<SystemTime>,
}

/// Where the other end is: a client's peer as PgBouncer shows it, or a server's address.
enum Addr<'a> {
    Shown(&'a dyn Display),
    Entry(&'a Entry),
}

impl Display for Addr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Shown(a) => a.fmt(f),
            Addr::Entry(e) if e.unix() => write!(f, "unix:{}", e.addr().port()),
            Addr::Entry(e) => e.addr().fmt(f),
        }
    }
}

impl<'a> Who<'a> {
    /// A listed client; `peer` as PgBouncer shows it (`unix(pid):port` for the socket).
    pub fn client(e: &'a Entry, peer: &'a dyn Display) -> Who<'a> {
        Who {
            side: 'C',
            id: e.id,
            db: e.database(),
            user: e.user(),
            addr: Addr::Shown(peer),
            since: Some(e.connect_time()),
        }
    }

    /// A client before it is listed (logging in, refused).
    pub fn arriving(peer: &'a dyn Display, db: &'a str, user: &'a str) -> Who<'a> {
        Who {
            side: 'C',
            id: 0,
            db,
            user,
            addr: Addr::Shown(peer),
            since: None,
        }
    }

    /// A server connection whose login failed, before it is listed (id 0, as a client's).
    pub fn unlisted_server(addr: &'a dyn Display, db: &'a str, user: &'a str) -> Who<'a> {
        Who {
            side: 'S',
            id: 0,
            db,
            user,
            addr: Addr::Shown(addr),
            since: None,
        }
    }

    /// A listed server connection.
    pub fn server(e: &'a Entry) -> Who<'a> {
        Who {
            side: 'S',
            id: e.id,
            db: e.database(),
            user: e.user(),
            addr: Addr::Entry(e),
            since: Some(e.connect_time()),
        }
    }

    fn conn(&self) -> String {
        format!("{}-{}", self.side, self.id)
    }

    /// Whole seconds since the connection was made (0 before it is listed).
    fn age(&self) -> u64 {
        self.since
            .and_then(|t| t.elapsed().ok())
            .map_or(0, |d| d.as_secs())
    }
}

/// `login attempt: db=… user=… tls=…` (log_connections).
pub fn login(g: ConnLogging, who: &Who, tls: &str) {
    if !g.connections {
        return;
    }
    let tls = if tls.is_empty() { "no" } else { tls };
    tracing::info!(
        conn = %who.conn(), db = %Esc(who.db), user = %Esc(who.user), addr = %who.addr,
        "login attempt: db={} user={} tls={}", Esc(who.db), Esc(who.user), tls
    );
}

/// `closing because: <reason> (age=<s>s)` (log_disconnections); `reason` may quote a client.
pub fn closing(g: ConnLogging, who: &Who, reason: &dyn Display) {
    if !g.disconnections {
        return;
    }
    tracing::info!(
        conn = %who.conn(), db = %Esc(who.db), user = %Esc(who.user), addr = %who.addr,
        "closing because: {} (age={}s)", Esc(reason), who.age()
    );
}

/// `pooler error: <message>` (log_pooler_errors): an error pgcorral itself sends a client.
pub fn pooler_error(g: ConnLogging, who: &Who, message: &dyn Display) {
    if !g.pooler_errors {
        return;
    }
    tracing::warn!(
        conn = %who.conn(), db = %Esc(who.db), user = %Esc(who.user), addr = %who.addr,
        "pooler error: {}", Esc(message)
    );
}

/// `new connection to server (from <local address>)` (log_connections).
pub fn new_server(g: ConnLogging, who: &Who, from: &dyn Display) {
    if !g.connections {
        return;
    }
    tracing::info!(
        conn = %who.conn(), db = %Esc(who.db), user = %Esc(who.user), addr = %who.addr,
        "new connection to server (from {from})"
    );
}

/// Any other line about one connection, e.g. `taking connection from reserve_pool`.
pub fn note(who: &Who, what: &dyn Display) {
    tracing::info!(
        conn = %who.conn(), db = %Esc(who.db), user = %Esc(who.user), addr = %who.addr,
        "{what}"
    );
}
