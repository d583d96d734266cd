//! Finding the pool for a (database, user): resolves the database entry (or the `"*"` template),
//! the user entry and the server login, and builds the pool on first use.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::limits::{CapKey, Limits};
use super::shares::{Demand, Shares};
use super::{Pool, PoolSettings};
use crate::cluster::topology::{RouteSettings, Topology};
use crate::cluster::{Cluster, ShardPools};
use crate::config::{
    check_query, millis_opt, overrides, Config, Database, LoadBalanceHosts, ServerEntry, ServerRole,
};
use crate::conns;
use crate::error::{Error, Kind, Result};
use crate::logsafe::Esc;
use crate::server::connect::{Secret, Target};
use crate::session::hooks::Watch;
use crate::shard::{Sharding, Table};
use crate::tls;

#[derive(Default)]
pub struct Registry {
    clusters: Mutex<HashMap<(String, String), Cluster>>,
    /// What is known of each database's servers, shared by its users' clusters.
    topologies: Mutex<HashMap<(String, usize), Arc<Topology>>>,
    /// max_db_connections / max_user_connections, shared by every pool.
    limits: Arc<Limits>,
    /// Client and server connections, for the admin console.
    pub lists: Arc<conns::Lists>,
    /// TLS to the servers (and to clients), replaced on reload; every target shares it.
    pub tls: tls::Shared,
    /// Passwords auth_query found for (database, user)s that have none in the configuration:
    /// what their pools log in to the server with.
    looked_up: Mutex<HashMap<(String, String), String>>,
    /// A leased registry: each cluster's configured pool size (its share's cap).
    configured: Mutex<HashMap<(String, String), usize>>,
    /// Since when each cluster has had no client and no server (pool_idle_timeout).
    empty_since: Mutex<HashMap<(String, String), std::time::Instant>>,
    /// What user code each server database holds, by (host, port, database): shared by the
    /// pools of all its users, so that a catalog change through one reaches them all.
    hooks: Mutex<HashMap<(String, u16, String), Arc<Watch>>>,
    /// Added to the user of every pool's name (a tenant's `.EXTERNAL_ID`), so that the pools
    /// of registries that share the lists stay apart in the console and the logs.
    suffix: String,
    /// Leased: each cluster's pools are as large as its share (see [`Registry::set_share`]),
    /// never larger than configured, with no reserve.
    shares: Option<Arc<Shares>>,
}

impl Registry {
    /// A registry of its own pools, caps and auth_query passwords that lists its connections
    /// with `self`'s and uses its TLS (a tenant's, beside the file's); its pools' user names
    /// end with `suffix`.
    pub fn sharing(&self, suffix: &str) -> Registry {
        Registry {
            lists: self.lists.clone(),
            tls: self.tls.clone(),
            suffix: suffix.to_string(),
            ..Registry::default()
        }
    }

    /// Makes the registry a leased one (see [`Shares`]).
    pub fn leased(mut self, shares: Arc<Shares>) -> Registry {
        self.shares = Some(shares);
        self
    }

    /// A leased registry: the cluster of (`database`, `user`) may have `size` servers open on
    /// each of its servers from now on (at most as configured). Its pools shrink as their
    /// servers come back, or grow and let waiting clients in. True when a pool's size changed.
    pub fn set_share(&self, database: &str, user: &str, size: usize) -> bool {
        let Some(shares) = &self.shares else {
            return false;
        };
        shares.set(database, user, size);
        let key = (database.to_string(), user.to_string());
        let Some(cluster) = self.clusters.lock().get(&key).cloned() else {
            return false;
        };
        let mut changed = false;
        for pool in cluster.pools() {
            let mut s = PoolSettings::clone(&pool.settings());
            if s.size != size {
                s.size = size;
                s.min_size = s.min_size.min(size);
                pool.set_settings(s);
                pool.grow();
                changed = true;
            }
        }
        changed
    }

    /// A leased registry: what each cluster needs.
    pub fn demands(&self) -> Vec<Need> {
        let clusters: Vec<_> = self
            .clusters
            .lock()
            .iter()
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        clusters
            .into_iter()
            .map(|(key, cluster)| {
                let (mut demand, mut size) = (Demand::default(), 0);
                for pool in cluster.pools() {
                    let s = pool.snapshot();
                    demand.clients += s.clients;
                    demand.open = demand.open.max(s.open);
                    demand.waiting = demand.waiting.max(s.waiting);
                    size = size.max(pool.settings().size);
                }
                let cap = self.configured_size(&key);
                Need {
                    database: key.0,
                    user: key.1,
                    demand,
                    size,
                    cap,
                }
            })
            .collect()
    }

    /// The pool size the configuration gave the cluster of `key` (before any share).
    fn configured_size(&self, key: &(String, String)) -> usize {
        self.configured.lock().get(key).copied().unwrap_or(0)
    }

    /// Settings for the cluster of (`database`, `user`) in a leased registry: its share, no
    /// reserve (the configured size is remembered as the share's cap).
    fn lease_settings(&self, database: &str, user: &str, settings: &mut PoolSettings) {
        let Some(shares) = &self.shares else { return };
        let key = (database.to_string(), user.to_string());
        self.configured.lock().insert(key, settings.size);
        settings.size = settings.size.min(shares.of(database, user));
        settings.min_size = settings.min_size.min(settings.size);
        settings.reserve_size = 0;
    }

    /// A leased registry: the cluster of `key` left it (idle, or retired by a reconfigure).
    /// Its share is forgotten, so that a cluster made again for the same key starts at 0 and
    /// asks for a lease, rather than at a share its node may have given back since.
    fn forget_share(&self, database: &str, user: &str) {
        if let Some(shares) = &self.shares {
            shares.forget(database, user);
            let key = (database.to_string(), user.to_string());
            self.configured.lock().remove(&key);
        }
    }

    /// The pools serving `database` for `user`, created on first use.
    pub fn get(&self, config: &Config, database: &str, user: &str) -> Result<Cluster> {
        // A database with a forced user has one pool, the forced user's, whoever logs in (as
        // PgBouncer): its settings and caps are that user's.
        let user = forced_user(config, database).unwrap_or(user);
        let key = (database.to_string(), user.to_string());
        if let Some(c) = self.clusters.lock().get(&key) {
            return Ok(c.clone());
        }
        let cluster = self.build(config, database, user)?;
        Ok(self.clusters.lock().entry(key).or_insert(cluster).clone())
    }

    /// Opens the pools of databases with a forced user and a `min_pool_size`, so that upkeep
    /// fills them before any client comes (as PgBouncer, which knows those pools from its
    /// file); other pools open with their first client. Run at start and after each reload.
    pub fn open_forced(&self, config: &Config) {
        for (name, db) in &config.databases {
            let Some(user) = db.user.as_deref().filter(|_| name != "*") else {
                continue;
            };
            if db.min_pool_size.unwrap_or(config.general.min_pool_size) == 0 {
                continue;
            }
            if let Err(e) = self.get(config, name, user) {
                tracing::warn!(database = %Esc(name), error = %Esc(&e), "could not open the pool for min_pool_size");
            }
        }
    }

    /// Every pool, for statistics and shutdown.
    pub fn all(&self) -> Vec<Pool> {
        self.clusters
            .lock()
            .values()
            .flat_map(|c| c.pools().iter().cloned())
            .collect()
    }

    /// pool_idle_timeout (PgBouncer's): frees the pools of a (database, user) that have had no
    /// client, no server and no waiting client for `idle` (their statistics go with them), unless
    /// they keep `min_pool_size` servers. Run on every upkeep tick; `None` = off.
    pub fn drop_idle(&self, idle: Option<Duration>) {
        let mut since = self.empty_since.lock();
        let Some(idle) = idle else {
            since.clear();
            return;
        };
        let now = std::time::Instant::now();
        let mut clusters = self.clusters.lock();
        clusters.retain(|key, cluster| {
            // Held elsewhere: a client, or a login between `get` and its first checkout.
            let empty = cluster.unshared()
                && cluster.pools().iter().all(|p| {
                    let s = p.snapshot();
                    s.clients == 0 && s.open == 0 && s.waiting == 0 && p.settings().min_size == 0
                });
            if !empty {
                since.remove(key);
                return true;
            }
            let first = *since.entry(key.clone()).or_insert(now);
            if now.duration_since(first) < idle {
                return true;
            }
            since.remove(key);
            self.forget_share(&key.0, &key.1);
            tracing::info!(
                database = %Esc(&key.0),
                user = %Esc(&key.1),
                "cleaning up idle pool (pool_idle_timeout)"
            );
            false
        });
        since.retain(|k, _| clusters.contains_key(k));
    }

    /// Every database's servers as routing knows them.
    pub fn topologies(&self) -> Vec<Arc<Topology>> {
        self.topologies.lock().values().cloned().collect()
    }

    /// The password auth_query last found for (`database`, `user`).
    fn looked_up(&self, database: &str, user: &str) -> Option<String> {
        let key = (database.to_string(), user.to_string());
        self.looked_up.lock().get(&key).cloned()
    }

    /// Records the password auth_query found for (`database`, `user`) (`None`: none), for
    /// their pools' server logins; a pool that exists with another password reconnects.
    pub fn set_looked_up(
        &self,
        config: &Config,
        database: &str,
        user: &str,
        password: Option<&str>,
    ) {
        let key = (database.to_string(), user.to_string());
        {
            let mut map = self.looked_up.lock();
            if map.get(&key).map(String::as_str) == password {
                return;
            }
            match password {
                Some(p) => map.insert(key.clone(), p.to_string()),
                None => map.remove(&key),
            };
        }
        let Some(cluster) = self.clusters.lock().get(&key).cloned() else {
            return;
        };
        let Ok(r) = resolve(config, database, user, &self.tls, password) else {
            return;
        };
        for (shard, (_, targets)) in cluster.shards().iter().zip(r.shards) {
            for (pool, target) in shard.pools.iter().zip(targets) {
                if pool.set_target(target) {
                    pool.reconnect();
                }
            }
        }
    }

    fn build(&self, config: &Config, database: &str, user: &str) -> Result<Cluster> {
        let looked_up = self.looked_up(database, user);
        let mut r = resolve(config, database, user, &self.tls, looked_up.as_deref())?;
        self.lease_settings(database, user, &mut r.settings);
        if !config.databases.contains_key(database) {
            // Served by the `*` template (PgBouncer's words).
            tracing::info!("registered new auto-database: db={}", Esc(database));
        }
        let shards = r
            .shards
            .into_iter()
            .enumerate()
            .map(|(i, (servers, targets))| {
                let topology = {
                    let mut t = self.topologies.lock();
                    let new = || Arc::new(Topology::new(database, i, &servers, r.route.clone()));
                    let entry = t.entry((database.to_string(), i)).or_insert_with(new);
                    if !entry.same_servers(&servers) {
                        *entry = new();
                    }
                    entry.clone()
                };
                topology.offer_login(targets.first());
                let pools = targets
                    .into_iter()
                    .map(|target| {
                        let hooks = self
                            .hooks
                            .lock()
                            .entry((target.host.clone(), target.port, target.database.clone()))
                            .or_default()
                            .clone();
                        let pool = Pool::new(
                            (database.to_string(), format!("{user}{}", self.suffix)),
                            target,
                            r.settings.clone(),
                            &self.limits,
                            &self.lists,
                            hooks,
                        );
                        if let Some(shares) = &self.shares {
                            pool.set_shares(shares.clone());
                        }
                        pool
                    })
                    .collect();
                ShardPools::new(pools, topology)
            })
            .collect();
        Ok(Cluster::new(shards, r.sharding))
    }

    /// Brings every pool in line with a new `config` (reload): new settings in place, servers
    /// replaced when where they connect changed. A cluster whose database or user is gone, or
    /// whose shared caps or server list changed, leaves the registry: its clients go on with
    /// it, new logins get a new one. Returns (updated, removed) pools.
    pub fn reconfigure(&self, config: &Config) -> (usize, usize) {
        let looked_up = self.looked_up.lock().clone();
        let mut clusters = self.clusters.lock();
        let (mut updated, mut removed) = (0, 0);
        clusters.retain(|(database, user), cluster| {
            let n = cluster.pools().len();
            // The database's forced user changed: new logins go to another pool.
            if forced_user(config, database).is_some_and(|f| f != user) {
                for pool in cluster.pools() {
                    pool.reconnect();
                }
                self.forget_share(database, user);
                removed += n;
                return false;
            }
            let found = looked_up.get(&(database.clone(), user.clone()));
            let resolved = resolve(config, database, user, &self.tls, found.map(String::as_str));
            match resolved.map(|mut r| {
                self.lease_settings(database, user, &mut r.settings);
                r
            }) {
                Ok(r)
                    if r.settings.caps == cluster.home().settings().caps
                        && r.sharding.as_deref() == cluster.configured_sharding()
                        && same_shards(cluster, &r.shards) =>
                {
                    for (shard, (_, targets)) in cluster.shards().iter().zip(r.shards) {
                        for (pool, target) in shard.pools.iter().zip(targets) {
                            if pool.set_target(target) {
                                pool.reconnect();
                            }
                            pool.set_settings(r.settings.clone());
                            pool.grow();
                        }
                        shard.topology.set_settings(r.route.clone());
                    }
                    updated += n;
                    true
                }
                _ => {
                    for pool in cluster.pools() {
                        pool.reconnect();
                    }
                    self.forget_share(database, user);
                    removed += n;
                    false
                }
            }
        });
        let mut topologies = self.topologies.lock();
        topologies.retain(|(database, shard), t| {
            let db = config
                .databases
                .get(database)
                .or_else(|| config.databases.get("*"));
            db.and_then(|db| db.shard_list().into_iter().nth(*shard))
                .is_some_and(|s| t.same_servers(&s.servers))
        });
        (updated, removed)
    }
}

/// What one cluster of a leased registry needs (see [`Registry::demands`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub database: String,
    pub user: String,
    pub demand: Demand,
    /// Its pools' size now, on its largest.
    pub size: usize,
    /// The size its configuration gives it: its share's cap.
    pub cap: usize,
}

/// The cluster has the shards and servers of `shards`.
fn same_shards(cluster: &Cluster, shards: &[(Vec<ServerEntry>, Vec<Target>)]) -> bool {
    cluster.shards().len() == shards.len()
        && cluster
            .shards()
            .iter()
            .zip(shards)
            .all(|(have, (servers, _))| have.topology.same_servers(servers))
}

/// Where a (database, user)'s pools connect and how they behave.
pub(crate) struct Resolved {
    /// One per shard (one for a database that is not sharded): its servers, and where the
    /// pool of each connects, in the same order.
    pub shards: Vec<(Vec<ServerEntry>, Vec<Target>)>,
    pub settings: PoolSettings,
    pub route: RouteSettings,
    pub sharding: Option<Arc<Sharding>>,
}

/// How a sharded database's keys map to its shards, from its configuration.
pub(crate) fn sharding_of(db: &Database) -> Sharding {
    let tables = db
        .sharded_tables
        .iter()
        .map(|t| Table::new(&t.name, t.columns.clone(), t.types.clone()))
        .collect();
    let mut sharding = Sharding::new(
        db.shards.len(),
        db.function(),
        tables,
        &db.omnisharded_tables,
        db.default_shard,
        db.key_types(),
    );
    sharding.from_catalog = db.sharded_tables_from_catalog.unwrap_or(false);
    if let Some(n) = db.max_gather_groups {
        sharding.max_gather_groups = n.max(1);
    }
    sharding
}

/// The error for a database pgcorral's configuration does not name.
pub(crate) fn unknown_database(database: &str) -> Error {
    Error::new(
        Kind::UnknownDatabase,
        // PostgreSQL's words: a client cannot tell a database pgcorral does not serve from
        // one its server lacks.
        format!("database \"{database}\" does not exist"),
    )
}

/// Where the pools for (`database`, `user`) connect and how they behave under `config`;
/// `looked_up`: the password auth_query found for the user, when the configuration has none.
/// The user every client of `database` is logged in to the server as (`user=` of the
/// database), if it has one.
fn forced_user<'a>(config: &'a Config, database: &str) -> Option<&'a str> {
    config
        .databases
        .get(database)
        .or_else(|| config.databases.get("*"))
        .and_then(|d| d.user.as_deref())
}

pub(crate) fn resolve(
    config: &Config,
    database: &str,
    user: &str,
    tls: &tls::Shared,
    looked_up: Option<&str>,
) -> Result<Resolved> {
    let db = config
        .databases
        .get(database)
        .or_else(|| config.databases.get("*"))
        .ok_or_else(|| unknown_database(database))?;
    let user_cfg = config.users.get(user);
    // A forced user without a password here takes its own (auth_file's, as PgBouncer), unless
    // it is a SCRAM verifier: the keys a client's proof reveals are the client's, not the
    // forced user's (PgBouncer passes SCRAM through only without a forced user).
    let own = |u: &str| config.users.get(u).and_then(|u| u.password.clone());
    let forced = |u: &str| own(u).filter(|p| pgwire::auth::scram::ScramSecret::parse(p).is_none());
    let (server_user, password) = match &db.user {
        Some(u) => (u.clone(), db.password.clone().or_else(|| forced(u))),
        None => (
            user.to_string(),
            db.password
                .clone()
                .or_else(|| own(user))
                .or_else(|| looked_up.map(String::from)),
        ),
    };
    let g = &config.general;
    let shards: Vec<(Vec<ServerEntry>, Vec<Target>)> = db
        .shard_list()
        .into_iter()
        .map(|shard| {
            let targets = shard
                .servers
                .iter()
                .map(|s| Target {
                    host: s.host.clone(),
                    port: s.port,
                    database: shard.dbname.clone().unwrap_or_else(|| database.to_string()),
                    user: server_user.clone(),
                    secret: Secret::from_config(password.as_deref()),
                    connect_timeout: g.server_connect_timeout(),
                    max_packet_size: g.max_packet_size,
                    tls: tls.clone(),
                    startup: db.startup_params(),
                })
                .collect();
            (shard.servers, targets)
        })
        .collect();
    let sharding = db.sharded().then(|| Arc::new(sharding_of(db)));
    let route = RouteSettings::of(config, db);
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
    // A user's own setting wins over the database's, which wins over the default; with a
    // forced server user the pool is that user's (see `Registry::get`), so its settings apply
    // and the connecting user's do not, as PgBouncer.
    let own_size = user_cfg.and_then(|u| u.pool_size);
    let mut settings = PoolSettings {
        size: own_size.or(db.pool_size).unwrap_or(g.default_pool_size),
        min_size: db.min_pool_size.unwrap_or(g.min_pool_size),
        reserve_size: user_cfg
            .and_then(|u| u.reserve_pool_size)
            .or(db.reserve_pool_size)
            .unwrap_or(g.reserve_pool_size),
        reserve_timeout: Duration::from_millis(g.reserve_pool_timeout),
        mode: user_cfg
            .and_then(|u| u.pool_mode)
            .or(db.pool_mode)
            .unwrap_or(g.pool_mode),
        reset_query: g.server_reset_query.clone(),
        // Except how long a client waits: the login user's own, else the database's, else the
        // default (PgBouncer's rule); a client of a forced user's pool brings its own
        // (`ClientWait`), so the pool's is the one for clients without one.
        wait_timeout: millis_opt(overrides::query_wait_timeout(
            g.query_wait_timeout,
            db,
            user_cfg.filter(|_| db.user.is_none()),
        )),
        query_timeout: millis_opt(g.query_timeout),
        login_retry: Duration::from_millis(g.server_login_retry),
        idle_timeout: millis_opt(g.server_idle_timeout),
        lifetime: millis_opt(overrides::server_lifetime(g.server_lifetime, db)),
        check_delay: Duration::from_millis(g.server_check_delay),
        check_query: check_query(&g.server_check_query),
        unavailable_wait: Duration::from_millis(g.server_unavailable_wait),
        caps,
        check_timeout: super::checkout::CLEANUP_TIMEOUT,
        fail_on_check: false,
        log: g.conn_logging(),
        connect_query: db.connect_query.clone().unwrap_or_default(),
        round_robin_hosts: db.load_balance_hosts != Some(LoadBalanceHosts::Disable),
        fast_close: g.server_fast_close,
    };
    let several = |servers: &[ServerEntry]| {
        servers.len() > 1 || servers.iter().any(|s| s.role == ServerRole::Auto)
    };
    if shards.iter().any(|(servers, _)| several(servers)) {
        // Several servers: a server that fails its check is banned and the request moves on
        // (the cluster retries, and waits for a primary, itself).
        settings.check_delay = settings.check_delay.min(route.healthcheck_delay);
        settings.check_timeout = route.healthcheck_timeout;
        settings.fail_on_check = true;
        if settings.check_query.is_none() {
            settings.check_query = Some("SELECT 1".into());
        }
        settings.unavailable_wait = Duration::ZERO;
        // A failed login is not replayed: the ban keeps the server out of rotation, and a
        // server back up (ban lifted or expired) must be usable at once.
        settings.login_retry = Duration::ZERO;
    }
    Ok(Resolved {
        shards,
        settings,
        route,
        sharding,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::embedded_default;

    fn size(r: &Registry, config: &Config) -> usize {
        r.get(config, "db", "u").unwrap().home().settings().size
    }

    /// A leased cluster starts at no server, takes the share it is given, and one made again
    /// after the first left the registry starts at none again (its node may have given the
    /// share back meanwhile), never at the share its predecessor had.
    #[test]
    fn a_leased_cluster_made_again_starts_without_a_share() {
        let config = embedded_default(|_| None).unwrap();
        let r = Registry::default().leased(Arc::new(Shares::new(Arc::default())));
        assert_eq!(size(&r, &config), 0);
        assert!(r.set_share("db", "u", 2));
        assert_eq!(size(&r, &config), 2);
        assert_eq!(r.demands()[0].size, 2);
        r.drop_idle(Some(Duration::ZERO));
        assert!(r.demands().is_empty(), "the idle cluster left");
        assert_eq!(size(&r, &config), 0);
    }
}
