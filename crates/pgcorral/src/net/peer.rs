//! Where a client connected from: a TCP address, or the pooler's Unix socket (with the client's
//! process id, from the socket's peer credentials), for logs and SHOW CLIENTS.

use std::fmt;
use std::net::SocketAddr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Tcp(SocketAddr),
    /// Over the Unix socket `.s.PGSQL.<port>`; `pid` is the connecting process (0 if unknown),
    /// `uid` its user (for `peer` authentication), from the socket's peer credentials.
    Unix {
        port: u16,
        pid: i32,
        uid: Option<u32>,
    },
}

impl Peer {
    /// The address a TCP peer connected from; `None` over the Unix socket.
    pub fn ip(&self) -> Option<std::net::IpAddr> {
        match self {
            Peer::Tcp(a) => Some(a.ip()),
            Peer::Unix { .. } => None,
        }
    }

    /// The `addr` of a SHOW CLIENTS entry over a Unix socket: only its port is shown.
    pub fn unix_addr(port: u16) -> SocketAddr {
        SocketAddr::from(([0, 0, 0, 0], port))
    }
}

impl fmt::Display for Peer {
    /// As PgBouncer logs them: `127.0.0.1:50312`, `unix(4711):6432`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Tcp(a) => write!(f, "{a}"),
            Peer::Unix { port, pid, .. } => write!(f, "unix({pid}):{port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_like_pgbouncer() {
        let tcp = Peer::Tcp("127.0.0.1:50312".parse().unwrap());
        assert_eq!(tcp.to_string(), "127.0.0.1:50312");
        let unix = Peer::Unix {
            port: 6432,
            pid: 4711,
            uid: Some(0),
        };
        assert_eq!(unix.to_string(), "unix(4711):6432");
    }
}
