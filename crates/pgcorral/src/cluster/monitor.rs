//! The background check of a database's servers, every `healthcheck_interval`, over a
//! connection of its own to each: reachability (a query within `healthcheck_timeout`; a replica
//! that fails is banned), role (`pg_is_in_recovery()`, which is how `role = "auto"` follows a
//! promotion), and each replica's replay position and lag behind the primary (out of rotation
//! beyond `max_replica_lag`, back once caught up).

use std::sync::atomic::Ordering::{AcqRel, Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_rt::exec::spawn_here;
use corral_rt::timer;

use super::topology::{Node, Role, Topology};
use crate::logsafe::Esc;
use crate::server::connect;
use crate::server::ServerConn;
use crate::session::exec;

/// One row: in recovery?, WAL position (replay position on a replica), seconds of replay lag.
const STATUS: &str = "SELECT pg_is_in_recovery(), \
     CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, \
     CASE WHEN NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 \
     ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0) END";

/// What one check found.
struct Status {
    in_recovery: bool,
    lsn: u64,
    lag_time: Duration,
}

impl Topology {
    /// Claims the next round if one is due (and none is running); the caller then runs
    /// [`Topology::round`].
    pub fn round_due(&self) -> bool {
        if !self.monitored() || self.login.lock().is_none() {
            return false;
        }
        let now = self.born.elapsed().as_millis() as u64;
        let every = self.settings().healthcheck_interval.as_millis() as u64;
        let last = self.last_round.load(Relaxed);
        if last != 0 && now < last + every {
            return false;
        }
        if self.round_running.swap(true, AcqRel) {
            return false;
        }
        self.last_round.store(now.max(1), Relaxed);
        true
    }

    /// Checks every server at once, then works out lag against the primary. Must run on the
    /// same worker every time (its connections are registered there).
    pub async fn round(self: Arc<Self>, worker: usize) {
        // Each check is a task of this worker's; their results come back over a channel.
        let (done, mut results) = tokio::sync::mpsc::unbounded_channel();
        for node in &self.nodes {
            let (t, node, done) = (self.clone(), node.clone(), done.clone());
            let _ = spawn_here(async move {
                let status = t.check(&node, worker).await;
                let _ = done.send((node, status));
            });
        }
        drop(done);
        let mut found = Vec::new();
        while let Some(x) = results.recv().await {
            found.push(x);
        }
        self.settle(found);
        self.round_running.store(false, Relaxed);
    }

    /// One server's check over the monitor's own connection (opened when missing).
    async fn check(&self, node: &Node, worker: usize) -> Result<Status, String> {
        let timeout = self.settings().healthcheck_timeout;
        let link = self.links.lock()[node.index].take();
        let mut conn = match link {
            Some(c) => c,
            None => {
                let mut target = self.login.lock().clone().ok_or("no login yet")?;
                target.host = node.host.clone();
                target.port = node.port;
                target.connect_timeout = target
                    .connect_timeout
                    .min(timeout.max(Duration::from_millis(500)));
                connect::connect(&target, worker)
                    .await
                    .map_err(|e| e.to_string())?
            }
        };
        let rows = timer::timeout(timeout, exec::query(&mut conn, STATUS)).await;
        let status = match rows {
            Err(_) => {
                return Err(format!(
                    "health check took longer than {} ms",
                    timeout.as_millis()
                ))
            }
            Ok(Err(e)) => return Err(e.to_string()),
            Ok(Ok(rows)) => parse(&rows).ok_or("unexpected health check answer")?,
        };
        self.keep(node.index, conn);
        Ok(status)
    }

    fn keep(&self, index: usize, conn: ServerConn) {
        if !conn.state.broken {
            self.links.lock()[index] = Some(conn);
        }
    }

    /// Records what a round found: roles, reachability, bans, positions and lag.
    fn settle(&self, found: Vec<(Arc<Node>, Result<Status, String>)>) {
        let settings = self.settings();
        let now = Instant::now();
        for (node, status) in &found {
            match status {
                Ok(st) => node.update(|s| {
                    if s.down || s.in_recovery != Some(st.in_recovery) {
                        tracing::info!(database = %Esc(&self.database), server = %node.addr(), in_recovery = st.in_recovery, "server checked: up");
                    }
                    s.down = false;
                    s.in_recovery = Some(st.in_recovery);
                    s.lsn = st.lsn;
                    s.lag_time = st.in_recovery.then_some(st.lag_time);
                    s.checked_at = Some(now);
                }),
                Err(e) => {
                    let was_up = !node.state().down;
                    node.update(|s| {
                        s.down = true;
                        s.checked_at = Some(now);
                    });
                    if was_up {
                        tracing::warn!(database = %Esc(&self.database), server = %node.addr(), error = %Esc(&e), "health check failed");
                    }
                    node.ban(settings.ban_time, &format!("health check failed: {e}"));
                }
            }
        }
        let primaries: Vec<_> = self
            .nodes
            .iter()
            .filter(|n| n.role() == Role::Primary)
            .collect();
        if primaries.len() > 1 {
            tracing::warn!(database = %Esc(&self.database), "more than one server is a primary; writes go to the first listed");
        }
        let primary_lsn = primaries
            .first()
            .map(|p| p.state())
            .filter(|s| !s.down)
            .map(|s| s.lsn);
        for node in &self.nodes {
            if node.role() != Role::Replica {
                node.update(|s| {
                    s.lag_bytes = None;
                    s.lagging = false;
                });
                continue;
            }
            node.update(|s| {
                s.lag_bytes = primary_lsn.map(|p| p.saturating_sub(s.lsn));
                let over_bytes = settings.max_lag.bytes.zip(s.lag_bytes).is_some_and(|(m, l)| l > m);
                let over_time = settings.max_lag.time.zip(s.lag_time).is_some_and(|(m, l)| l > m);
                let lagging = !s.down && (over_bytes || over_time);
                if lagging != s.lagging {
                    tracing::info!(database = %Esc(&self.database), server = %node.addr(), lag_bytes = ?s.lag_bytes, lag_time = ?s.lag_time, lagging, "replica lag");
                }
                s.lagging = lagging;
            });
        }
    }
}

fn parse(rows: &exec::Rows) -> Option<Status> {
    let row = rows.first()?;
    let in_recovery = row.first()?.as_deref()? == "t";
    let lsn = row.get(1)?.as_deref().and_then(parse_lsn).unwrap_or(0);
    let secs: f64 = row.get(2)?.as_deref().unwrap_or("0").parse().ok()?;
    Some(Status {
        in_recovery,
        lsn,
        lag_time: Duration::from_secs_f64(secs.max(0.0)),
    })
}

/// `16/B374D848` → its 64-bit position.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (hi, lo) = text.trim().split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_text() {
        assert_eq!(parse_lsn("0/3000148"), Some(0x3000148));
        assert_eq!(parse_lsn("16/B374D848"), Some((0x16 << 32) | 0xB374D848));
        assert_eq!(parse_lsn("nope"), None);
    }

    #[test]
    fn status_rows() {
        let row =
            |r: &str, l: &str, t: &str| vec![vec![Some(r.into()), Some(l.into()), Some(t.into())]];
        let s = parse(&row("t", "0/10", "1.5")).unwrap();
        assert!(s.in_recovery);
        assert_eq!((s.lsn, s.lag_time), (16, Duration::from_millis(1500)));
        assert!(!parse(&row("f", "0/20", "0")).unwrap().in_recovery);
        assert!(parse(&vec![]).is_none());
    }
}
