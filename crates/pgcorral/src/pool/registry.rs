//! Finding the pool for a (database, user): resolves the database entry (or the `"*"` template),
//! the user entry and the server login, and builds the pool on first use.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::limits::{CapKey, Limits};
use super::{Pool, PoolSettings};
use crate::config::{millis_opt, Config};
use crate::error::{Error, Kind, Result};
use crate::server::connect::{Secret, Target};

#[derive(Default)]
pub struct Registry {
    pools: Mutex<HashMap<(String, String), Pool>>,
    /// max_db_connections / max_user_connections, shared by every pool.
    limits: Arc<Limits>,
    /// Client and server connections, for the admin console.
    pub lists: Arc<crate::conns::Lists>,
}

impl Registry {
    /// The pool serving `database` for `user`, created on first use.
    pub fn get(&self, config: &Config, database: &str, user: &str) -> Result<Pool> {
        let key = (database.to_string(), user.to_string());
        if let Some(p) = self.pools.lock().get(&key) {
            return Ok(p.clone());
        }
        let pool = build(config, database, user, &self.limits, &self.lists)?;
        Ok(self.pools.lock().entry(key).or_insert(pool).clone())
    }

    /// Every pool, for statistics and shutdown.
    pub fn all(&self) -> Vec<Pool> {
        self.pools.lock().values().cloned().collect()
    }

    /// Brings every pool in line with a new `config` (reload): new settings in place, servers
    /// replaced when where they connect changed. A pool whose database or user is gone, or
    /// whose shared caps changed, leaves the registry: its clients go on with it, new logins
    /// get a new pool. Returns (updated, removed).
    pub fn reconfigure(&self, config: &Config) -> (usize, usize) {
        let mut pools = self.pools.lock();
        let (mut updated, mut removed) = (0, 0);
        pools.retain(
            |(database, user), pool| match resolve(config, database, user) {
                Ok((target, settings)) if settings.caps == pool.settings().caps => {
                    if pool.set_target(target) {
                        pool.reconnect();
                    }
                    pool.set_settings(settings);
                    pool.grow();
                    updated += 1;
                    true
                }
                _ => {
                    pool.reconnect();
                    removed += 1;
                    false
                }
            },
        );
        (updated, removed)
    }
}

fn build(
    config: &Config,
    database: &str,
    user: &str,
    limits: &Arc<Limits>,
    lists: &Arc<crate::conns::Lists>,
) -> Result<Pool> {
    let (target, settings) = resolve(config, database, user)?;
    Ok(Pool::new(
        (database.to_string(), user.to_string()),
        target,
        settings,
        limits,
        lists,
    ))
}

/// Where a pool for (`database`, `user`) connects and how it behaves under `config`.
pub(crate) fn resolve(
    config: &Config,
    database: &str,
    user: &str,
) -> Result<(Target, PoolSettings)> {
    let db = config
        .databases
        .get(database)
        .or_else(|| config.databases.get("*"))
        .ok_or_else(|| {
            Error::new(
                Kind::UnknownDatabase,
                format!("database \"{database}\" does not exist in pgcorral's configuration"),
            )
        })?;
    let user_cfg = config.users.get(user);
    let (server_user, password) = match &db.user {
        Some(u) => (u.clone(), db.password.clone()),
        None => (
            user.to_string(),
            db.password
                .clone()
                .or_else(|| user_cfg.and_then(|u| u.password.clone())),
        ),
    };
    let g = &config.general;
    let target = Target {
        host: db.host.clone(),
        port: db.port,
        database: db.dbname.clone().unwrap_or_else(|| database.to_string()),
        user: server_user,
        secret: Secret::from_config(password.as_deref()),
        connect_timeout: g.server_connect_timeout(),
        max_packet_size: g.max_packet_size,
    };
    let max_db = db.max_db_connections.unwrap_or(g.max_db_connections);
    let max_user = user_cfg
        .and_then(|u| u.max_user_connections)
        .unwrap_or(g.max_user_connections);
    let caps = (max_db > 0 || max_user > 0).then(|| CapKey {
        database: database.to_string(),
        user: user.to_string(),
        max_db,
        max_user,
    });
    // A user's own setting wins over the database's, which wins over the default.
    let settings = PoolSettings {
        size: user_cfg
            .and_then(|u| u.pool_size)
            .or(db.pool_size)
            .unwrap_or(g.default_pool_size),
        min_size: db.min_pool_size.unwrap_or(g.min_pool_size),
        reserve_size: db.reserve_pool_size.unwrap_or(g.reserve_pool_size),
        reserve_timeout: Duration::from_millis(g.reserve_pool_timeout),
        mode: user_cfg
            .and_then(|u| u.pool_mode)
            .or(db.pool_mode)
            .unwrap_or(g.pool_mode),
        reset_query: g.server_reset_query.clone(),
        wait_timeout: g.query_wait_timeout(),
        login_retry: Duration::from_millis(g.server_login_retry),
        idle_timeout: millis_opt(g.server_idle_timeout),
        lifetime: millis_opt(g.server_lifetime),
        check_delay: Duration::from_millis(g.server_check_delay),
        check_query: g.server_check_query.clone(),
        unavailable_wait: Duration::from_millis(g.server_unavailable_wait),
        caps,
    };
    Ok((target, settings))
}
