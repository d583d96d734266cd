//! Helpers for the timeout tests (timeouts_*.rs): a TCP proxy in front of PostgreSQL that can
//! forward, stall or refuse new connections, a config for a database behind it, a poll with a
//! bound, and the backends running a marked query.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

use super::*;

/// The most any single step may take before the test calls it a hang.
pub const HANG: Duration = Duration::from_secs(10);

/// What a [`Proxy`] does with a connection it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ProxyMode {
    /// Pass bytes both ways to the upstream server.
    Forward = 0,
    /// Accept and hold the connection: never read from it, never write, never close.
    Stall = 1,
    /// Accept and close at once.
    Reject = 2,
}

/// A TCP proxy in front of a PostgreSQL server whose behaviour for *new* connections can be
/// switched while the test runs; connections already forwarded keep working.
pub struct Proxy {
    pub port: u16,
    mode: Arc<AtomicU8>,
    accepted: Arc<AtomicUsize>,
    stalled: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to 127.0.0.1:`upstream` (unused unless some connection is forwarded).
    pub async fn start(upstream: u16, mode: ProxyMode) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode_flag = Arc::new(AtomicU8::new(mode as u8));
        let accepted = Arc::new(AtomicUsize::new(0));
        let stalled = Arc::new(AtomicUsize::new(0));
        let (m, a, s) = (mode_flag.clone(), accepted.clone(), stalled.clone());
        let task = tokio::spawn(async move {
            let mut held: Vec<TcpStream> = Vec::new();
            while let Ok((mut conn, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                match m.load(Ordering::SeqCst) {
                    0 => {
                        tokio::spawn(async move {
                            if let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)).await {
                                let _ = up.set_nodelay(true);
                                let _ = conn.set_nodelay(true);
                                let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
                            }
                        });
                    }
                    1 => {
                        s.fetch_add(1, Ordering::SeqCst);
                        held.push(conn);
                    }
                    _ => drop(conn),
                }
            }
        });
        Proxy {
            port,
            mode: mode_flag,
            accepted,
            stalled,
            task,
        }
    }

    /// A listener that accepts every connection and never answers.
    pub async fn silent() -> Proxy {
        Proxy::start(1, ProxyMode::Stall).await
    }

    /// What the proxy does with connections it accepts from now on.
    pub fn set(&self, mode: ProxyMode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Connections accepted and held without a word so far.
    pub fn stalled(&self) -> usize {
        self.stalled.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A config for database `db` served at 127.0.0.1:`port` (a server or a [`Proxy`]).
pub fn config_at(port: u16, db: &str, general: &str) -> String {
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\n{general}\n\n\
         [databases.{db}]\nhost = \"127.0.0.1\"\nport = {port}\n"
    )
}

/// Polls `cond` every 50 ms until it holds; fails the test after `limit`.
pub async fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Backends currently running a query containing `marker`.
pub fn running(pg: &Postgres, marker: &str) -> usize {
    pg.sql(
        "postgres",
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%{marker}%' \
             AND state = 'active' AND pid <> pg_backend_pid()"
        ),
    )
    .parse()
    .unwrap()
}
