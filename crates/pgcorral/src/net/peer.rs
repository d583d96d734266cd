//! Where a client connected from: a TCP address, or the pooler's Unix socket (with the client's
//! process id, from the socket's peer credentials), for logs and SHOW CLIENTS.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Tcp(TcpAddr),
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
            Peer::Tcp(a) => Some(a.ip),
            Peer::Unix { .. } => None,
        }
    }

    /// The `addr` of a SHOW CLIENTS entry over a Unix socket: only its port is shown.
    pub fn unix_addr(port: u16) -> SocketAddr {
        SocketAddr::from(([0, 0, 0, 0], port))
    }
}

/// A TCP client's address: its IP and port. An IPv6 address's flow label and scope id are not
/// kept (as in SHOW CLIENTS): 20 bytes rather than `SocketAddr`'s 32, in every client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpAddr {
    pub ip: IpAddr,
    pub port: u16,
}

impl TcpAddr {
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }
}

impl From<SocketAddr> for TcpAddr {
    fn from(a: SocketAddr) -> TcpAddr {
        TcpAddr {
            ip: a.ip(),
            port: a.port(),
        }
    }
}

impl fmt::Display for TcpAddr {
    /// As a `SocketAddr`: `127.0.0.1:50312`, `[::1]:50312`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.socket_addr().fmt(f)
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
        let tcp = Peer::Tcp("127.0.0.1:50312".parse::<SocketAddr>().unwrap().into());
        assert_eq!(tcp.to_string(), "127.0.0.1:50312");
        let v6 = Peer::Tcp("[fe80::1%2]:50312".parse::<SocketAddr>().unwrap().into());
        assert_eq!(v6.to_string(), "[fe80::1]:50312", "no scope id kept");
        assert!(size_of::<Peer>() <= 20);
        let unix = Peer::Unix {
            port: 6432,
            pid: 4711,
            uid: Some(0),
        };
        assert_eq!(unix.to_string(), "unix(4711):6432");
    }
}
