//! A database whose `host` is a list (`"a,b,c"`, PgBouncer's host lists): a new server
//! connection tries the hosts from a starting one on, each in turn, until one logs in; where a
//! pool's connections start is its [`HostCursor`] (`load_balance_hosts`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::connect::{connect, Target};
use super::ServerConn;
use crate::error::{Error, Kind, Result};
use crate::logsafe::Esc;

/// Where one pool's connections to a list of hosts start, as PgBouncer's `load_balance_hosts`:
/// `round-robin`, each from the host after the last one's start; `disable`, from the host that
/// last let pgcorral in, moving on only when it fails. Under `disable`, until a host has let
/// pgcorral in, one connection tries at a time (PgBouncer opens one at a time), so that a dead
/// first host costs one try (and one log line), not one per client arriving meanwhile.
#[derive(Default)]
pub struct HostCursor {
    next: AtomicUsize,
    /// `disable`: the host at `next` let the last connection in.
    settled: AtomicBool,
    /// `disable`, not settled: held by the connection trying the list; the others queue on
    /// it (woken in turn, not polling).
    trying: tokio::sync::Mutex<()>,
}

impl HostCursor {
    /// Connects to `target` (one host, or a list: see [`connect_any`]), starting where
    /// `round_robin` (else `disable`) says.
    pub async fn connect(
        &self,
        target: &Target,
        worker: usize,
        round_robin: bool,
    ) -> Result<ServerConn> {
        if !is_list(&target.host) {
            return connect_any(target, worker, 0).await.map(|(s, _)| s);
        }
        if round_robin {
            let start = self.next.fetch_add(1, Ordering::Relaxed);
            return connect_any(target, worker, start).await.map(|(s, _)| s);
        }
        let _turn = self.turn().await;
        match connect_any(target, worker, self.next.load(Ordering::Acquire)).await {
            Ok((s, at)) => {
                self.next.store(at, Ordering::Release);
                self.settled.store(true, Ordering::Release);
                Ok(s)
            }
            Err(e) => {
                self.settled.store(false, Ordering::Release);
                Err(e)
            }
        }
    }

    /// Under `disable`: nothing once settled; else this connection's turn to try the list,
    /// after any other's (which may settle it meanwhile).
    async fn turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        if self.settled.load(Ordering::Acquire) {
            return None;
        }
        let turn = self.trying.lock().await;
        (!self.settled.load(Ordering::Acquire)).then_some(turn)
    }
}

/// Whether `host` is a list of hosts.
pub fn is_list(host: &str) -> bool {
    host.contains(',')
}

/// Connects to the first host of `target.host`'s list that lets pgcorral log in, starting
/// with the one at `start` (modulo the list's length), and says which one (its place in the
/// list): each failure is logged, the last one returned. A single host is tried alone.
async fn connect_any(target: &Target, worker: usize, start: usize) -> Result<(ServerConn, usize)> {
    if !is_list(&target.host) {
        return connect(target, worker)
            .await
            .map(|s| (s, 0))
            .inspect_err(|e| log_failed(target, &target.host, e));
    }
    let hosts: Vec<&str> = target.host.split(',').collect();
    let mut last: Option<Error> = None;
    for i in 0..hosts.len() {
        let at = (start + i) % hosts.len();
        let one = Target {
            host: hosts[at].to_string(),
            ..target.clone()
        };
        match connect(&one, worker).await {
            Ok(s) => return Ok((s, at)),
            Err(e) => {
                log_failed(target, &one.host, &e);
                last = Some(e);
            }
        }
    }
    Err(last.expect("a list has hosts"))
}

/// Logs a connection that failed before the server answered, in PgBouncer's words (`connect
/// failed`, `connect timeout`, `server DNS lookup failed`); a server's own refusal is logged
/// by the pool (`server login failed`).
fn log_failed(target: &Target, host: &str, e: &Error) {
    if e.kind() == Kind::ServerError {
        return;
    }
    let text = e.to_string();
    let why = if text.contains("failed to lookup address") {
        "server DNS lookup failed"
    } else if text.contains("timed out") {
        "connect timeout"
    } else {
        "connect failed"
    };
    tracing::info!(
        db = %Esc(&target.database), user = %Esc(&target.user), host = %Esc(host),
        error = %Esc(e), "closing because: {why}"
    );
}
