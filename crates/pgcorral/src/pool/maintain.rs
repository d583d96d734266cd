//! Pool upkeep, run on every tick of the listener's upkeep task: closes idle servers that the
//! server closed, that outlived `server_lifetime` or sat unused past `server_idle_timeout`, and
//! says how many to open up to `min_pool_size`.

use std::time::Duration;

use super::Pool;
use crate::clock;

/// How often every pool is looked at (by the listener's upkeep task, `crate::listen`).
pub const TICK: Duration = Duration::from_millis(250);

impl Pool {
    /// Closes idle servers that are dead, too old or unused for too long (keeping
    /// `min_size`), and returns how many servers to open to get back to `min_size`.
    pub(crate) fn maintain(&self) -> usize {
        let s = self.0.settings.load();
        let now = clock::now();
        let mut closed = Vec::new();
        let warm = {
            let mut inner = self.0.inner.lock();
            let mut i = 0;
            while i < inner.idle.len() {
                let open = inner.open - closed.len();
                let srv = &mut inner.idle[i];
                let dead = srv.is_closed_while_idle();
                let old = s.lifetime.is_some_and(|l| now.since(srv.created) >= l);
                let unused = s
                    .idle_timeout
                    .is_some_and(|t| now.since(srv.last_used) >= t)
                    && open > s.min_size;
                // The pool was made smaller (reload): idle servers beyond its size go.
                let over = open > s.size;
                if dead || old || unused || over {
                    // PgBouncer's words for each.
                    let why = match (dead, old, unused) {
                        (true, _, _) => "server conn crashed?",
                        (_, true, _) => "server lifetime over",
                        (_, _, true) => "server idle timeout",
                        _ => "pool_size lowered",
                    };
                    closed.push((inner.idle.remove(i), why));
                } else {
                    i += 1;
                }
            }
            let open = inner.open - closed.len();
            let recently_failed = self
                .0
                .login_failed
                .lock()
                .as_ref()
                .is_some_and(|(t, _)| t.elapsed() < s.login_retry);
            if recently_failed {
                0
            } else {
                s.min_size.min(s.size).saturating_sub(open)
            }
        };
        for (server, why) in closed {
            self.closing(&server, &why);
            drop(server);
            self.release_slot();
        }
        warm
    }
}
