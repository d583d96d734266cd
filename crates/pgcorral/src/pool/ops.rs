//! What the admin console does to a pool: count the servers lent out, close the idle ones, and
//! retire every server opened so far (RECONNECT: each is closed when it comes back); and the
//! closing of every idle server to one database before DROP DATABASE and the like.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::registry::Registry;
use super::Pool;
use crate::config::PoolMode;
use crate::conns;
use crate::server::connect;

impl Pool {
    /// Servers lent to clients or being opened now.
    pub fn active_servers(&self) -> usize {
        let i = self.0.inner.lock();
        i.open - i.idle.len()
    }

    /// Closes every idle server (their places are given back); returns how many.
    pub fn close_idle(&self) -> usize {
        let idle = std::mem::take(&mut self.0.inner.lock().idle);
        let n = idle.len();
        for server in idle {
            self.closing(&server, &"closed by the admin console");
            drop(server);
            self.release_slot();
        }
        n
    }

    /// Whether this pool's servers are connected to the server's database `db`.
    pub fn serves_database(&self, db: &str) -> bool {
        self.0.target.lock().database == db
    }

    /// Servers opened from now on belong to a new generation; older ones are closed when they
    /// come back, idle ones at once (returns how many). A login failure being replayed
    /// (server_login_retry) is forgotten: it was the old servers' (say, under TLS settings
    /// changed since).
    pub fn reconnect(&self) -> usize {
        let generation = self.0.generation.fetch_add(1, Relaxed) + 1;
        self.0.logins.clear();
        *self.0.login_failed.lock() = None;
        if self.0.settings.load().fast_close {
            self.close_sessions(generation);
        }
        self.close_idle()
    }

    /// `server_fast_close`: in session mode, the servers of an older generation that clients
    /// hold are closed now rather than when their clients leave: each such client is ended
    /// (told its server was closed) and its server closed as it comes back. In transaction and
    /// statement mode a server comes back at its transaction's end anyway.
    fn close_sessions(&self, generation: u64) {
        if self.settings().mode != PoolMode::Session {
            return;
        }
        let clients: HashMap<u64, Arc<conns::Entry>> = self
            .0
            .lists
            .all(conns::Kind::Client)
            .into_iter()
            .map(|e| (e.id, e))
            .collect();
        for server in self.0.lists.all(conns::Kind::Server) {
            let ours = Arc::ptr_eq(server.database(), &self.0.listed_names.0);
            if ours && server.generation() < generation && server.link() != 0 {
                if let Some(client) = clients.get(&server.link()) {
                    client.kill_for(conns::Killed::ConfigChanged);
                }
            }
        }
    }

    /// Replaces where new servers connect; true when it changed.
    pub fn set_target(&self, target: connect::Target) -> bool {
        let mut t = self.0.target.lock();
        let changed = (&t.host, t.port, &t.database, &t.user)
            != (&target.host, target.port, &target.database, &target.user)
            || !t.secret.same_password(&target.secret);
        // Keep a SCRAM ClientKey learnt from clients when the secret is the same.
        if changed {
            *t = target;
        } else {
            t.connect_timeout = target.connect_timeout;
            t.max_packet_size = target.max_packet_size;
        }
        changed
    }

    /// After the pool grew (reload): waiting clients get the new places to open servers in.
    pub fn grow(&self) {
        let size = self.settings().size;
        let mut inner = self.0.inner.lock();
        while inner.open < size {
            let Some(w) = inner.waiters.pop_front().map(|w| w.entry) else {
                break;
            };
            inner.grant_place(w, self);
        }
    }

    /// The current generation (see [`Pool::reconnect`]).
    pub fn generation(&self) -> u64 {
        self.0.generation.load(Relaxed)
    }
}

impl Registry {
    /// Closes the idle servers of every pool connected to the server's database `db`;
    /// returns how many.
    pub fn close_idle_to(&self, db: &str) -> usize {
        self.all()
            .iter()
            .filter(|p| p.serves_database(db))
            .map(Pool::close_idle)
            .sum()
    }
}
