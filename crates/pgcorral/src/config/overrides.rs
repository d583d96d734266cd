//! The timeouts a `[users]` or `[databases]` entry sets for itself, resolved against `[general]`.
//!
//! Resolved once per pool (its settings are rebuilt on reload) and once per client login (and
//! again after a reload), never per request.

use super::{Config, Database, User};

/// A client's timeouts in milliseconds, 0 = off: the user's own where it has one, else
/// `[general]`'s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientTimeouts {
    pub query: u64,
    pub idle_transaction: u64,
    pub transaction: u64,
    pub client_idle: u64,
}

impl Config {
    /// The timeouts of a client of `user` (the name it logged in with; PgBouncer sets these
    /// per user only, not per database).
    pub fn client_timeouts(&self, user: &str) -> ClientTimeouts {
        let g = &self.general;
        let u = self.users.get(user);
        let own = |f: fn(&User) -> Option<u64>, global: u64| u.and_then(f).unwrap_or(global);
        ClientTimeouts {
            query: own(|u| u.query_timeout, g.query_timeout),
            idle_transaction: own(|u| u.idle_transaction_timeout, g.idle_transaction_timeout),
            transaction: own(|u| u.transaction_timeout, g.transaction_timeout),
            client_idle: own(|u| u.client_idle_timeout, g.client_idle_timeout),
        }
    }
}

impl Config {
    /// `user`'s own `query_wait_timeout` (ms, 0 = wait forever), when its `[users]` entry has
    /// one: under a forced user, what its clients wait rather than the pool's.
    pub fn own_query_wait_timeout(&self, user: &str) -> Option<u64> {
        self.users.get(user).and_then(|u| u.query_wait_timeout)
    }
}

/// `query_wait_timeout` (ms, 0 = wait forever) of a pool of database `db` and `user`: the
/// user's, else the database's, else `general`'s (PgBouncer's order).
pub fn query_wait_timeout(general: u64, db: &Database, user: Option<&User>) -> u64 {
    user.and_then(|u| u.query_wait_timeout)
        .or(db.query_wait_timeout)
        .unwrap_or(general)
}

/// `server_lifetime` (ms) of the servers of database `db`: its own, else `general`'s.
pub fn server_lifetime(general: u64, db: &Database) -> u64 {
    db.server_lifetime.unwrap_or(general)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(users: &[(&str, User)]) -> Config {
        let mut c = Config {
            general: Default::default(),
            users: Default::default(),
            databases: Default::default(),
            peers: Default::default(),
        };
        c.general.query_timeout = 100;
        c.general.idle_transaction_timeout = 200;
        c.general.transaction_timeout = 300;
        c.general.client_idle_timeout = 400;
        for (name, u) in users {
            c.users.insert(name.to_string(), u.clone());
        }
        c
    }

    #[test]
    fn a_users_own_timeout_wins_and_the_rest_are_generals() {
        let u = User {
            query_timeout: Some(1),
            transaction_timeout: Some(0),
            ..User::default()
        };
        let c = config(&[("u", u)]);
        let t = c.client_timeouts("u");
        assert_eq!(
            t,
            ClientTimeouts {
                query: 1,
                idle_transaction: 200,
                transaction: 0,
                client_idle: 400,
            }
        );
        let other = c.client_timeouts("other");
        assert_eq!((other.query, other.transaction), (100, 300));
    }

    #[test]
    fn query_wait_timeout_is_the_users_then_the_databases_then_generals() {
        let db = Database {
            query_wait_timeout: Some(2000),
            ..Database::default()
        };
        let user = User {
            query_wait_timeout: Some(3000),
            ..User::default()
        };
        assert_eq!(query_wait_timeout(120_000, &db, Some(&user)), 3000);
        assert_eq!(query_wait_timeout(120_000, &db, None), 2000);
        assert_eq!(
            query_wait_timeout(120_000, &db, Some(&User::default())),
            2000
        );
        assert_eq!(
            query_wait_timeout(120_000, &Database::default(), None),
            120_000
        );
        let off = User {
            query_wait_timeout: Some(0),
            ..User::default()
        };
        assert_eq!(query_wait_timeout(120_000, &db, Some(&off)), 0);
    }

    #[test]
    fn server_lifetime_is_the_databases_else_generals() {
        let db = Database {
            server_lifetime: Some(2000),
            ..Database::default()
        };
        assert_eq!(server_lifetime(3_600_000, &db), 2000);
        assert_eq!(server_lifetime(3_600_000, &Database::default()), 3_600_000);
    }
}
