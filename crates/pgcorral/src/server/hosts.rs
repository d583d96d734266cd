//! A database whose `host` is a list (`"a,b,c"`, PgBouncer's host lists): a new server
//! connection tries the hosts from a starting one on, each in turn, until one logs in.

use super::connect::{connect, Target};
use super::ServerConn;
use crate::error::{Error, Result};
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
        return connect(target, worker).await;
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
                let why = match e.to_string().contains("failed to lookup address") {
                    true => "server DNS lookup failed",
                    false => "connect failed",
                };
                tracing::info!(
                    db = %Esc(&target.database), user = %Esc(&target.user), host = %Esc(&one.host),
                    error = %Esc(&e), "closing because: {why}"
                );
                last = Some(e);
            }
        }
    }
    Err(last.expect("a list has hosts"))
}
