//! Server-connection shares granted from outside the process (a fleet's leases on a tenant
//! user's cap): a leased pool's size is its cluster's share, and a client that has to wait in
//! such a pool asks for more.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// The shares granted to a registry's clusters, by (database, user).
pub struct Shares {
    granted: Mutex<HashMap<(String, String), usize>>,
    /// Woken when a client waits (shared by the registries one granter serves).
    asked: Arc<Notify>,
}

impl Shares {
    /// Shares granted by whoever waits on `asked`.
    pub fn new(asked: Arc<Notify>) -> Shares {
        Shares {
            granted: Mutex::default(),
            asked,
        }
    }

    /// The servers the cluster of (`database`, `user`) may have open per server: 0 until a
    /// share is granted.
    pub fn of(&self, database: &str, user: &str) -> usize {
        let key = (database.to_string(), user.to_string());
        self.granted.lock().get(&key).copied().unwrap_or(0)
    }

    pub(super) fn set(&self, database: &str, user: &str, size: usize) {
        let key = (database.to_string(), user.to_string());
        self.granted.lock().insert(key, size);
    }

    pub(super) fn forget(&self, database: &str, user: &str) {
        let key = (database.to_string(), user.to_string());
        self.granted.lock().remove(&key);
    }

    /// A client waits for a server in a leased pool: whoever grants shares looks again now.
    pub fn ask(&self) {
        self.asked.notify_one();
    }
}

/// What a leased cluster needs, for its next lease.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Demand {
    /// Clients logged in to it.
    pub clients: usize,
    /// Servers open or being opened, on its busiest server.
    pub open: usize,
    /// Clients waiting for a server, on its busiest server.
    pub waiting: usize,
}

impl Demand {
    /// The servers it would use: what it has and what its waiting clients need, and one
    /// while it has clients (so that their next transaction need not wait for a lease).
    pub fn wants(&self) -> usize {
        (self.open + self.waiting).max(usize::from(self.clients > 0))
    }
}
