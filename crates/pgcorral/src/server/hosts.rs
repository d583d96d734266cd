//! A database whose `host` is a list (`"a,b,c"`, PgBouncer's host lists): a new server
//! connection tries the hosts from a starting one on, each in turn, until one logs in.

use super::connect::{connect, Target};
use super::ServerConn;
use crate::error::{Error, Kind, Result};
use crate::logsafe::Esc;

/// Whether `host` is a list of hosts.
pub fn is_list(host: &str) -> bool {
    host.contains(',')
}

/// Connects to the first host of `target.host`'s list that lets pgcorral log in, starting
/// with the one at `start` (modulo the list's length): each failure is logged, the last one
/// returned. A single host is tried alone.
pub async fn connect_any(target: &Target, worker: usize, start: usize) -> Result<ServerConn> {
    if !is_list(&target.host) {
        return connect(target, worker)
            .await
            .inspect_err(|e| log_failed(target, &target.host, e));
    }
    let hosts: Vec<&str> = target.host.split(',').collect();
    let mut last: Option<Error> = None;
    for i in 0..hosts.len() {
        let one = Target {
            host: hosts[(start + i) % hosts.len()].to_string(),
            ..target.clone()
        };
        match connect(&one, worker).await {
            Ok(s) => return Ok(s),
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
